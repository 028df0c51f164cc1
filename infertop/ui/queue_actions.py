"""Queue actions in the app: a class's weight / max wait and an engine's drain at
an infertop gateway, and an InferenceObjective's priority on Kubernetes.

Each is a kind of the one action pipeline (:mod:`infertop.control.gateway_actions`,
:mod:`infertop.control.objective`) started with
:meth:`~infertop.ui.action_runner.ActionRunner.start_action`: fresh read →
diff → dry run → ``y`` → execute → follow → audit. A key that cannot act says
why; the objective key is absent unless the cluster serves InferenceObjectives
and this user may patch them.
"""

from __future__ import annotations

import math
from typing import Any

from ..control.gateway_actions import ClassEdit, EngineDrain, GatewayAdmin
from ..control.objective import ObjectiveApi, ObjectivePriority, find_objectives, list_objectives
from ..control.pipeline import ActionRefused
from ..sources.queues import QueueEndpoint
from .action_runner import ActionRunner
from .screens.kube_dialogs import ChoiceDialog, FormDialog, FormField
from .widgets.queue import QueuePane

QUEUE_ACTIONS = {"queue_edit", "queue_drain", "queue_objective", "queue_switch"}
QUEUE_MUTATING = {"queue_edit", "queue_drain", "queue_objective"}


def _positive(text: str, name: str) -> tuple[float | None, str | None]:
    if text == "":
        return None, None
    try:
        v = float(text)
    except ValueError:
        return None, f"{name}: expected a number, got {text!r}"
    if not math.isfinite(v) or v <= 0:
        return None, f"{name}: must be a number > 0"
    return v, None


class QueueActions(ActionRunner):
    """Mixin for InfertopApp. Needs ``settings``, ``queue_fleet``, ``state``, ``kube_session``, ``notify``."""

    objective_api: ObjectiveApi | None = None
    objective_why: str = "Kubernetes is not connected"
    _objective_probed: Any = None  # the session last probed

    # ----- lookups ----------------------------------------------------------------
    def _queue_pane(self) -> QueuePane:
        return self.screen_stack[0].query_one(QueuePane)  # type: ignore[attr-defined]

    def queue_endpoint(self, source: str) -> QueueEndpoint | None:
        fleet = getattr(self, "queue_fleet", None)
        for c in fleet.collectors if fleet is not None else ():
            if c.name == source and c.via == "direct":
                return c.endpoint
        return None

    def _gateway_admin(self, source: str) -> GatewayAdmin:
        ep = self.queue_endpoint(source)
        if ep is None or ep.kind != "gateway":
            raise ActionRefused(f"{source} is not an infertop gateway watched directly: nothing to change there")
        return GatewayAdmin(ep)

    def _objective_namespace(self) -> str:
        session = getattr(self, "kube_session", None)
        return session.namespaces[0] if session is not None and session.namespaces else "default"

    # ----- availability -------------------------------------------------------------
    def queue_denied_reason(self, action: str) -> str | None:
        if action not in QUEUE_MUTATING:
            return None
        if self.settings.read_only:  # type: ignore[attr-defined]
            return "read-only mode: nothing can be changed"
        if getattr(self, "player", None) is not None:
            return "a replay changes nothing"
        if action == "queue_objective":
            return None if self.objective_api is not None else f"InferenceObjective priority: {self.objective_why}"
        if self.current_pane != "queues":  # type: ignore[attr-defined]
            return "open the Queue pane (6) and select a row first"
        pane = self._queue_pane()
        sel = pane.selected_class if action == "queue_edit" else pane.selected_engine
        if sel is None:
            return f"select {'a class' if action == 'queue_edit' else 'an engine'} in the Queue pane first"
        ep = self.queue_endpoint(sel[0])
        if ep is None or ep.kind != "gateway":
            return f"{sel[0]} is an endpoint picker: its bands follow InferenceObjective priorities (i), not weights"
        if not ep.admin_url or not ep.has_token:
            return f"gateway {sel[0]}: no admin_url and token configured (queues.gateways[].admin_url, token_env)"
        return None

    def queue_action_state(self, action: str) -> bool | None:
        """For check_action: the objective key is absent (False) unless available; others grey out."""
        if action == "queue_switch":
            return self.screen is self.main and self.current_pane == "queues"  # type: ignore[attr-defined]
        if self.settings.read_only:  # type: ignore[attr-defined]
            return None
        if action == "queue_objective":  # absent unless served and permitted; only on its pane
            return (self.objective_api is not None and self.screen is self.main  # type: ignore[attr-defined]
                    and self.current_pane == "queues")  # type: ignore[attr-defined]
        return self.queue_denied_reason(action) is None

    def action_denied_reason(self, action: str) -> str | None:
        return self.queue_denied_reason(action) or super().action_denied_reason(action)

    def probe_objectives(self) -> None:
        """Ask the cluster (thread) whether InferenceObjectives are served and patchable; once per session."""
        session = getattr(self, "kube_session", None)
        if session is None or session is self._objective_probed:
            return
        self._objective_probed = session
        ns = self._objective_namespace()

        def work() -> None:
            api, why = find_objectives(session, ns)
            self.call_from_thread(self._objectives_found, session, api, why)  # type: ignore[attr-defined]

        self.run_worker(work, thread=True, group="objective-probe", exclusive=True,  # type: ignore[attr-defined]
                        exit_on_error=False)

    def _objectives_found(self, session: Any, api: ObjectiveApi | None, why: str) -> None:
        if session is not getattr(self, "kube_session", None):
            return
        self.objective_api, self.objective_why = api, why or ""
        hint = self._queue_pane().key_hint.split(" · i ")[0]
        if api is not None:
            hint += " · i InferenceObjective priority"
        self._queue_pane().set_keys(hint)
        self.refresh_bindings()  # type: ignore[attr-defined]

    # ----- actions ------------------------------------------------------------------
    def action_queue_switch(self) -> None:
        self._queue_pane().switch_table()

    def action_queue_edit(self) -> None:
        sel = self._queue_pane().selected_class
        if sel is None or self.queue_denied_reason("queue_edit"):
            return
        source, cls = sel
        q = self._queue_pane().source(source)
        c = q.klass(cls) if q is not None else None

        def fmt(v: float | None) -> str:
            return "" if v is None else f"{v:g}"

        def validate(v: dict) -> str | None:
            got = {k: _positive(v.get(k, ""), k) for k in ("weight", "max_wait_s")}
            problems = [why for _, why in got.values() if why]
            if problems:
                return problems[0]
            if all(val is None for val, _ in got.values()):
                return "enter a weight or a max wait"
            return None

        def chosen(values: dict | None) -> None:
            if not values:
                return
            changes = {k: _positive(values.get(k, ""), k)[0] for k in ("weight", "max_wait_s")}
            changes = {k: v for k, v in changes.items() if v is not None
                       and (c is None or getattr(c, k) is None or not math.isclose(getattr(c, k), v))}
            if not changes:
                self.notify("nothing to change", timeout=3)  # type: ignore[attr-defined]
                return
            try:
                kind = ClassEdit(self._gateway_admin(source), cls, changes)
            except ActionRefused as e:
                self.notify(str(e), severity="warning", markup=False)  # type: ignore[attr-defined]
                return
            self.start_action(kind)

        fields = [FormField("weight", "Weight (share of dispatch slots while backlogged)",
                            fmt(c.weight if c else None)),
                  FormField("max_wait_s", "Max wait, seconds (then promoted)", fmt(c.max_wait_s if c else None))]
        self.push_screen(FormDialog(f"Class {cls} on gateway {source}", fields, validate=validate,  # type: ignore[attr-defined]
                                    hint="Enter: review the change (diff, dry run) · Esc: cancel"), chosen)

    def action_queue_drain(self) -> None:
        pane = self._queue_pane()
        sel = pane.selected_engine
        if sel is None or self.queue_denied_reason("queue_drain"):
            return
        source, engine = sel
        q = pane.source(source)
        e = q.engine(engine) if q is not None else None
        draining = not (e is not None and e.draining)
        try:
            kind = EngineDrain(self._gateway_admin(source), engine, draining,
                               follow_timeout_s=self.settings.config.queues.drain_timeout_s)  # type: ignore[attr-defined]
        except ActionRefused as e:
            self.notify(str(e), severity="warning", markup=False)  # type: ignore[attr-defined]
            return
        self.start_action(kind)

    def action_queue_objective(self) -> None:
        session, api = getattr(self, "kube_session", None), self.objective_api
        if session is None or api is None:
            return
        ns = self._objective_namespace()

        async def pick() -> None:
            import asyncio

            try:
                objectives = await asyncio.to_thread(list_objectives, session, api, ns)
            except Exception as e:  # noqa: BLE001 — one line, never a traceback
                self.notify(f"cannot list InferenceObjectives: {e}", severity="error", markup=False)  # type: ignore[attr-defined]
                return
            if not objectives:
                self.notify(f"no InferenceObjective in namespace {ns}", timeout=4, markup=False)  # type: ignore[attr-defined]
                return
            by_name = {o.name: o for o in objectives}
            options = [(o.name, f"{o.name}  priority {o.priority if o.priority is not None else 'unset'}"
                                f"  pool {o.pool or '—'}") for o in objectives]

            def picked(name: str | None) -> None:
                if not name:
                    return
                cur = by_name[name].priority

                def validate(v: dict) -> str | None:
                    p = v.get("priority")
                    return None if isinstance(p, int) else "priority: an integer (higher is more urgent)"

                def chosen(values: dict | None) -> None:
                    if not values:
                        return
                    try:
                        kind = ObjectivePriority(session, api, ns, name, int(values["priority"]))
                    except ActionRefused as e:
                        self.notify(str(e), severity="warning", markup=False)  # type: ignore[attr-defined]
                        return
                    self.start_action(kind)

                self.push_screen(FormDialog(  # type: ignore[attr-defined]
                    f"InferenceObjective {ns}/{name}",
                    [FormField("priority", "spec.priority (higher is served first)",
                               "" if cur is None else str(cur), type="integer")],
                    validate=validate, hint="Enter: review (diff, server dry run) · Esc: cancel"), chosen)

            self.push_screen(ChoiceDialog(f"InferenceObjectives in {ns}", options), picked)  # type: ignore[attr-defined]

        self.run_worker(pick(), group="objective-pick", exclusive=True, exit_on_error=False)  # type: ignore[attr-defined]
