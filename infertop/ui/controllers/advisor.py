"""The scaling advisor's controller: the Autoscaler pane, its keys, and auto mode's applies.

The advisor (state/advisor/core.py) runs inside the fleet state's build, so every
tick's ``autoscalers`` slot carries its decisions. Keys:

* ``p`` — apply the selected workload's recommendation: the Kubernetes scale
  action through the one pipeline (plan, dry run, ``y`` to confirm, audited);
* ``o`` — the advisor's mode (off / recommend / auto); auto is not offered
  with ``--no-auto`` or ``--read-only``;
* ``X`` — the kill switch (any pane): auto decisions are only recommended
  until pressed again;
* ``T`` — the targets (queue depth, p99) and the bounds of workloads no HPA
  targets (an HPA's bounds are its own: ``H`` edits them).

In auto mode each change the advisor decides goes through the pipeline
(:func:`infertop.control.runner.run`) under auto mode's standing grant (one
action per workload at a time, on the same action board as the keys).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from rich.markup import escape
from rich.text import Text

from ...analysis.scaling import AUTO, MODES, OFF, RECOMMEND, check_targets
from ...control import runner
from ...control.advisor.actions import AdvisorKillSwitch, AdvisorModeChange, AdvisorTargetsChange
from ...control.advisor.scale import AdvisorScale
from ...control.pipeline import ActionBoard, ActionBusy, run_audited
from ...state.advisor.core import Advisor, Apply
from ..screens.kube_dialogs import ChoiceDialog, FormDialog, FormField, ReviewDialog
from ..widgets.autoscaler import AutoscalerPane
from .host import ConsoleHost

ADVISOR_ACTIONS = {"advisor_apply", "advisor_mode", "advisor_kill", "advisor_targets"}
MODE_TEXT = {OFF: "off: no decisions", RECOMMEND: "recommend: decisions shown, p applies one (confirmed)",
             AUTO: "auto: changes applied within bounds through the scale action, audited"}


class AdvisorController:
    """The advisor's keys and auto mode's applies, for one console.

    ``advisor`` is the Fleet's (None in a replay: the recorded decisions are shown, nothing acts);
    ``kube``/``perms`` give the Kubernetes control and permissions as they are now (they come and go
    with the connection); ``pane_on_view`` the main screen's pane, None while a dialog is on top."""

    def __init__(self, host: ConsoleHost, advisor: Advisor | None, settings: Any, *,
                 pane: Callable[[], AutoscalerPane], kube: Callable[[], Any], perms: Callable[[], Any],
                 board: ActionBoard, actions_changed: Callable[[], None], refresh_kube: Callable[[], object],
                 pane_on_view: Callable[[], str | None]) -> None:
        self.host, self.advisor, self.settings = host, advisor, settings
        self._pane, self._kube, self._perms = pane, kube, perms
        self.board, self._actions_changed, self._refresh_kube = board, actions_changed, refresh_kube
        self._pane_on_view = pane_on_view
        if advisor is not None and settings.config.advisor.mode == AUTO and not advisor.allow_auto:
            settings.notes.append("Advisor: auto mode is off (" + ("--no-auto" if settings.no_auto else "read-only")
                                  + "): decisions are recommended only.")

    # ----- each tick -------------------------------------------------------------
    def after_tick(self) -> None:
        """Start auto mode's applies of this tick."""
        adv = self.advisor
        if adv is None:
            return
        for change in adv.take_applies():
            self.host.run_worker(self._auto_apply(change), group=f"advisor {change.workload}",
                                 exit_on_error=False)

    async def _auto_apply(self, change: Apply) -> None:
        adv = self.advisor
        control = self._kube()
        wall = self.settings.wall_clock
        if adv is None:
            return
        if control is None or self.settings.read_only:
            adv.note_applied(change.workload, wall(), "not applied: Kubernetes is not connected")
            return
        kind = AdvisorScale(control, change, by="advisor auto")
        try:
            run = self.board.begin(kind, kind.target)
        except ActionBusy as e:
            runner.record_refusal(control.audit, kind, f"not applied: {e}")
            adv.note_applied(change.workload, wall(), f"not applied: {e}")
            self.host.log_event(Text(f"advisor auto {change.workload}: not applied: {e}"))
            return
        run.title = f"advisor auto: scale {kind.target} {change.current} → {change.desired}"
        self._actions_changed()
        try:
            outcome = await runner.run(run, runner.StandingGrant(), audit=control.audit, preflight_name="dry run")
        finally:
            self.board.end(run)
            self._actions_changed()
        adv.note_applied(change.workload, wall(), f"{outcome.result}: {outcome.message}")
        style = "green" if outcome.ok else "red"
        self.host.log_event(f"[{style}]advisor auto: {escape(kind.target)} {change.current} → {change.desired}: "
                            f"{outcome.result}[/{style}] — {escape(change.reason)}; {escape(outcome.message)}")
        self._refresh_kube()

    # ----- painting --------------------------------------------------------------
    def render(self, state: Any) -> None:
        pane = self._pane()
        adv = self.advisor
        header = Text()
        header.append("Advisor", style="bold")
        if adv is None:
            header.append(" · recorded decisions" if state.autoscalers else " · not part of this recording")
        else:
            p = adv.policy.policy
            header.append(f" · mode {adv.mode}", style="bold yellow" if adv.mode == AUTO else "")
            if adv.mode == AUTO and adv.paused:
                header.append(" · KILL SWITCH ON (X): recommending only", style="bold red")
            header.append(f" · targets: queue depth {p.target_queue_depth:g}, "
                          f"{adv.p99_metric.removesuffix('_s').replace('_', ' ')} {p.target_p99_s * 1000:.0f} ms")
            header.append(f" · formula ceil(current × max(q/q*, p99/p99*)), ±{p.tolerance * 100:g} %", style="dim")
            if state.cluster is None:
                header.append("\nKubernetes is not configured: the advisor needs the Deployments (--context NAME, "
                              "or press K).", style="yellow")
        if adv is None:  # a replay: nothing here can act
            keys = "replay: the recorded decisions, read only"
        elif self.settings.read_only:
            keys = "o mode · X kill switch · T targets"
        else:
            keys = "p apply · o mode · X kill switch · T targets · H HPA min/max (Cluster pane)"
        header.append(f"\n{keys}", style="dim")
        pane.show(state.autoscalers, header, adv.series if adv is not None else None)

    # ----- capabilities ----------------------------------------------------------
    def action_state(self, action: str) -> bool | None:
        if self.advisor is None:
            return None  # replay
        if action == "advisor_kill":
            return True
        on_view = self._pane_on_view()
        if on_view is None:  # a dialog is on top
            return False
        on_pane = on_view == "autoscaler"
        if action == "advisor_apply":
            return None if self.settings.read_only or self._apply_denied() else on_pane
        return on_pane

    def _apply_denied(self) -> str | None:
        """Why ``p`` cannot scale the selected workload (RBAC: patch deployments/scale), else None."""
        perms = self._perms()
        try:
            v = self._pane().selected
        except Exception:  # noqa: BLE001 — the pane is not mounted yet
            return None
        if perms is None or v is None:
            return None
        return perms.denied("scale", v.get("namespace"), v.get("kind"))

    # ----- the keys ----------------------------------------------------------------
    def apply(self) -> None:
        adv = self.advisor
        v = self._pane().selected
        latest = (v or {}).get("latest") or {}
        if adv is None or v is None:
            return
        if latest.get("action") != "recommended" or latest.get("desired") is None:
            self.host.notify(f"No recommendation to apply for {v['name']}: {latest.get('reason') or 'advisor off'}",
                             timeout=5, markup=False)
            return
        control = self._kube()
        if control is None:
            self.host.notify("Kubernetes is not connected: nothing can be applied", severity="warning")
            return
        denied = self._apply_denied()
        if denied:
            self.host.notify(f"Cannot apply to {v['name']}: {denied}", severity="warning", markup=False)
            return
        change = Apply(v["workload"], v["kind"], v["namespace"], v["name"], int(latest["current"]),
                       int(latest["desired"]), str(latest.get("reason") or ""))
        kind = AdvisorScale(control, change, by="advisor, confirmed")
        wall = self.settings.wall_clock

        def done(outcome: Any) -> None:
            adv.note_applied(change.workload, wall(), f"{outcome.result}: {outcome.message}")
            self._refresh_kube()

        self.host.start_action(kind, on_done=done, preflight_name="dry run")

    def mode(self) -> None:
        self.host.run_worker(self._mode_flow(), group="advisor-mode", exclusive=True, exit_on_error=False)

    async def _mode_flow(self) -> None:
        adv = self.advisor
        if adv is None:
            return
        options = [(m, MODE_TEXT[m]) for m in MODES if m != AUTO or adv.allow_auto]
        hint = "Enter switches. Esc cancels." + ("" if adv.allow_auto else " auto is disabled (--no-auto / read-only).")
        choice = await self.host.push_screen_wait(ChoiceDialog("Advisor mode", options, current=adv.mode, hint=hint))
        if not choice or choice == adv.mode:
            return
        # through the one pipeline: auto is a standing grant to scale unconfirmed — reviewed, y, audited
        self.host.start_action(AdvisorModeChange(adv, choice),
                               on_done=lambda _o: self.host.render_snapshot(), preflight_name="check")

    def kill(self) -> None:
        """The global kill switch of auto mode."""
        adv = self.advisor
        if adv is None:
            return
        kind = AdvisorKillSwitch(adv, not adv.paused)
        if not kind.on:  # resuming lets auto apply again: reviewed like any action
            self.host.start_action(kind, on_done=lambda _o: self.host.render_snapshot())
            return
        # the brake acts at once, never held up by a review; audited all the same
        outcome = run_audited(self.host.audit_log(), kind.action, kind.target, kind.audit_details(),
                              lambda: kind.execute(lambda _p: None, threading.Event()))
        if not outcome.ok:  # the audit log cannot be written: the switch still acts (it only stops things)
            adv.paused = True
            self.host.log_event(Text(f"advisor kill switch ON (not audited: {outcome.message})", style="bold red"))
        else:
            self.host.log_event("[bold red]advisor kill switch ON[/bold red]: auto decisions are only recommended")
        self.host.notify("Advisor kill switch ON: nothing is applied automatically (X again resumes)",
                         severity="warning", timeout=6)
        self.host.render_snapshot()

    def targets(self) -> None:
        self.host.run_worker(self._targets_flow(), group="advisor-targets", exclusive=True, exit_on_error=False)

    async def _targets_flow(self) -> None:
        adv = self.advisor
        if adv is None:
            return
        p = adv.policy.policy

        def number(text: object) -> float | None:
            try:
                v = float(str(text))
            except ValueError:
                return None
            return v if math.isfinite(v) else None

        def validate(values: dict) -> str | None:
            return check_targets(number(values["queue"]), number(values["p99"]), values["min"], values["max"])

        values = await self.host.push_screen_wait(FormDialog(
            "Advisor targets",
            [FormField("queue", "Target queue depth", f"{p.target_queue_depth:g}", "e.g. 5"),
             FormField("p99", f"Target {adv.p99_metric.removesuffix('_s')} (ms)", f"{p.target_p99_s * 1000:g}",
                       "e.g. 2000"),
             FormField("min", "Min replicas (workloads without an HPA)", str(p.min_replicas), "", "integer"),
             FormField("max", "Max replicas (workloads without an HPA)", str(p.max_replicas), "", "integer")],
            hint="Enter in the last field: review (y applies, from the next tick, this session; the advisor: "
                 "config section keeps it). An HPA's or ScaledObject's bounds are its own: H edits them. "
                 "Esc discards.",
            validate=validate))
        if not values:
            return
        q, ms = number(values["queue"]), number(values["p99"])
        assert q is not None and ms is not None  # validated
        metric = adv.p99_metric.removesuffix("_s").replace("_", " ")
        changes = [line for line, old, new in (
            (f"queue depth target {p.target_queue_depth:g} → {q:g}", p.target_queue_depth, q),
            (f"{metric} target {p.target_p99_s * 1000:g} ms → {ms:g} ms", p.target_p99_s * 1000, ms),
            (f"bounds without an HPA {p.min_replicas}-{p.max_replicas} → {values['min']}-{values['max']}",
             (p.min_replicas, p.max_replicas), (values["min"], values["max"]))) if old != new]
        if not changes:
            self.host.notify("Advisor targets: nothing changed", timeout=3)
            return
        if not await self.host.push_screen_wait(ReviewDialog("Apply these advisor targets?", changes)):
            self.host.notify("Advisor targets: discarded, nothing changed", timeout=3)
            return
        kind = AdvisorTargetsChange(adv, changes, queue_depth=q, p99_s=ms / 1000 if ms else None,
                                    min_replicas=values["min"], max_replicas=values["max"])
        # reviewed above (y): audited as it applies, through the pipeline's audit
        outcome = run_audited(self.host.audit_log(), kind.action, kind.target, kind.audit_details(),
                              lambda: kind.execute(lambda _p: None, threading.Event()))
        if not outcome.ok:
            self.host.notify(f"Advisor targets: {outcome.message}", severity="error", markup=False)
            return
        self.host.log_event(f"advisor targets → queue depth {q:g}, p99 {ms:g} ms; bounds without an HPA "
                            f"{values['min']}-{values['max']}")
        self.host.render_snapshot()
