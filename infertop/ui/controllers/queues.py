"""The Queue pane's controller: a class's weight / max wait and an engine's drain at
an infertop gateway, and an InferenceObjective's priority on Kubernetes.

Each is a kind of the one action pipeline (:mod:`infertop.control.gateway.actions`,
:mod:`infertop.control.objective`) handed to the console's
:meth:`~infertop.ui.controllers.host.ConsoleHost.start_action`: fresh read →
diff → dry run → ``y`` → execute → follow → audit. A key that cannot act says
why; the objective key is absent unless the cluster serves InferenceObjectives
and this user may patch them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ...control.gateway.actions import ClassEdit, EngineDrain, GatewayAdmin
from ...control.objective import ObjectiveApi, ObjectivePriority, find_objectives, list_objectives
from ...control.pipeline import ActionRefused
from ...sources.queues.collector import QueueEndpoint
from ..screens.kube_dialogs import ChoiceDialog, FormDialog, FormField
from ..widgets.queue import QueuePane
from .host import ConsoleHost

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


class QueueController:
    """The Queue pane's keys. ``queue_fleet`` is the Fleet's queue sources; ``session`` gives the
    Kubernetes session as it is now (it comes and goes); ``pane_on_view`` the main screen's pane,
    None while a dialog is on top; ``replay`` whether this console replays a recording."""

    def __init__(self, host: ConsoleHost, settings: Any, queue_fleet: Any, *, pane: Callable[[], QueuePane],
                 session: Callable[[], Any], pane_on_view: Callable[[], str | None], replay: bool) -> None:
        self.host, self.settings, self.queue_fleet = host, settings, queue_fleet
        self._pane, self._session, self._pane_on_view, self.replay = pane, session, pane_on_view, replay
        self.objective_api: ObjectiveApi | None = None
        self.objective_why = "Kubernetes is not connected"
        self._objective_probed: Any = None  # the session last probed

    # ----- lookups ----------------------------------------------------------------
    def endpoint(self, source: str) -> QueueEndpoint | None:
        fleet = self.queue_fleet
        for c in fleet.collectors if fleet is not None else ():
            if c.name == source and c.via == "direct":
                return c.endpoint
        return None

    def _gateway_admin(self, source: str) -> GatewayAdmin:
        ep = self.endpoint(source)
        if ep is None or ep.kind != "gateway":
            raise ActionRefused(f"{source} is not an infertop gateway watched directly: nothing to change there")
        return GatewayAdmin(ep)

    def _objective_namespace(self) -> str:
        session = self._session()
        return session.namespaces[0] if session is not None and session.namespaces else "default"

    # ----- availability -------------------------------------------------------------
    def denied_reason(self, action: str) -> str | None:
        if action not in QUEUE_MUTATING:
            return None
        if self.settings.read_only:
            return "read-only mode: nothing can be changed"
        if self.replay:
            return "a replay changes nothing"
        if action == "queue_objective":
            return None if self.objective_api is not None else f"InferenceObjective priority: {self.objective_why}"
        if self._pane_on_view() != "queues":
            return "open the Queue pane (6) and select a row first"
        pane = self._pane()
        sel = pane.selected_class if action == "queue_edit" else pane.selected_engine
        if sel is None:
            return f"select {'a class' if action == 'queue_edit' else 'an engine'} in the Queue pane first"
        ep = self.endpoint(sel[0])
        if ep is None or ep.kind != "gateway":
            return f"{sel[0]} is an endpoint picker: its bands follow InferenceObjective priorities (i), not weights"
        if not ep.admin_url or not ep.has_token:
            return f"gateway {sel[0]}: no admin_url and token configured (queues.gateways[].admin_url, token_env)"
        return None

    def action_state(self, action: str) -> bool | None:
        """For check_action: the objective key is absent (False) unless available; others grey out."""
        if action == "queue_switch":
            return self._pane_on_view() == "queues"
        if self.settings.read_only:
            return None
        if action == "queue_objective":  # absent unless served and permitted; only on its pane
            return self.objective_api is not None and self._pane_on_view() == "queues"
        return self.denied_reason(action) is None

    def probe_objectives(self) -> None:
        """Ask the cluster (thread) whether InferenceObjectives are served and patchable; once per session."""
        session = self._session()
        if session is None or session is self._objective_probed:
            return
        self._objective_probed = session
        ns = self._objective_namespace()

        def work() -> None:
            api, why = find_objectives(session, ns)
            self.host.call_from_thread(self._objectives_found, session, api, why)

        self.host.run_worker(work, thread=True, group="objective-probe", exclusive=True,
                             exit_on_error=False)

    def _objectives_found(self, session: Any, api: ObjectiveApi | None, why: str) -> None:
        if session is not self._session():
            return
        self.objective_api, self.objective_why = api, why or ""
        hint = self._pane().key_hint.split(" · i ")[0]
        if api is not None:
            hint += " · i InferenceObjective priority"
        self._pane().set_keys(hint)
        self.host.refresh_bindings()

    # ----- actions ------------------------------------------------------------------
    def switch(self) -> None:
        self._pane().switch_table()

    def edit(self) -> None:
        sel = self._pane().selected_class
        if sel is None or self.denied_reason("queue_edit"):
            return
        source, cls = sel
        q = self._pane().source(source)
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
            given = {k: _positive(values.get(k, ""), k)[0] for k in ("weight", "max_wait_s")}
            changes = {k: v for k, v in given.items() if v is not None
                       and (c is None or getattr(c, k) is None or not math.isclose(getattr(c, k), v))}
            if not changes:
                self.host.notify("nothing to change", timeout=3)
                return
            try:
                kind = ClassEdit(self._gateway_admin(source), cls, changes)
            except ActionRefused as e:
                self.host.notify(str(e), severity="warning", markup=False)
                return
            self.host.start_action(kind)

        fields = [FormField("weight", "Weight (share of dispatch slots while backlogged)",
                            fmt(c.weight if c else None)),
                  FormField("max_wait_s", "Max wait, seconds (then promoted)", fmt(c.max_wait_s if c else None))]
        self.host.push_screen(FormDialog(f"Class {cls} on gateway {source}", fields, validate=validate,
                                         hint="Enter: review the change (diff, dry run) · Esc: cancel"), chosen)

    def drain(self) -> None:
        pane = self._pane()
        sel = pane.selected_engine
        if sel is None or self.denied_reason("queue_drain"):
            return
        source, engine = sel
        q = pane.source(source)
        e = q.engine(engine) if q is not None else None
        draining = not (e is not None and e.draining)
        try:
            kind = EngineDrain(self._gateway_admin(source), engine, draining,
                               follow_timeout_s=self.settings.config.queues.drain_timeout_s)
        except ActionRefused as e:
            self.host.notify(str(e), severity="warning", markup=False)
            return
        self.host.start_action(kind)

    def objective(self) -> None:
        session, api = self._session(), self.objective_api
        if session is None or api is None:
            return
        ns = self._objective_namespace()

        async def pick() -> None:
            import asyncio

            try:
                objectives = await asyncio.to_thread(list_objectives, session, api, ns)
            except Exception as e:  # noqa: BLE001 — one line, never a traceback
                self.host.notify(f"cannot list InferenceObjectives: {e}", severity="error", markup=False)
                return
            if not objectives:
                self.host.notify(f"no InferenceObjective in namespace {ns}", timeout=4, markup=False)
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
                        self.host.notify(str(e), severity="warning", markup=False)
                        return
                    self.host.start_action(kind)

                self.host.push_screen(FormDialog(
                    f"InferenceObjective {ns}/{name}",
                    [FormField("priority", "spec.priority (higher is served first)",
                               "" if cur is None else str(cur), type="integer")],
                    validate=validate, hint="Enter: review (diff, server dry run) · Esc: cancel"), chosen)

            self.host.push_screen(ChoiceDialog(f"InferenceObjectives in {ns}", options), picked)

        self.host.run_worker(pick(), group="objective-pick", exclusive=True, exit_on_error=False)
