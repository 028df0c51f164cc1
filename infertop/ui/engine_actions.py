"""Local vLLM engine actions for the app: new from profile, stop, restart, change max_num_seqs.

Each is an :class:`EngineAction` (a kind of the one action pipeline,
:mod:`infertop.control.pipeline`): planned, checked, confirmed with ``y`` in
the one :class:`~infertop.ui.screens.confirm.ConfirmScreen`, executed in the
background by the blocking control code (``control/engines/``, shared
with the headless ``infertop engine`` commands), which writes the audit log.
"""

from __future__ import annotations

import asyncio
import time

from rich.markup import escape
from rich.text import Text

from ..config import ProfileConfig, default_state_dir
from ..control.audit import AuditLog
from ..control.engines import EngineError, EngineManager, EngineRecord, StopResult
from ..control.engines.kind import EngineAction, owner_of
from ..control.gateway_drain import UndrainLeft, drains_left, gateway_refs
from ..control.pipeline import Outcome
from ..domain.engine import EngineStats
from ..sources.vllm import EngineEndpoint
from .action_runner import ActionRunner, _pid_alive
from .screens.engine_dialogs import ArgsDialog, ProfilePicker

ENGINE_ACTIONS = {"engine_new", "engine_stop", "engine_restart", "engine_set_seqs"}
DISCOVER_EVERY_S = 5.0  # how often the managed engines are listed for ones started elsewhere


class EngineActions(ActionRunner):
    """Mixin for InfertopApp. Needs ``settings``, ``collector``, ``log_event``."""

    engine_manager: EngineManager | None = None
    _unfinished: list[dict] = []

    def drains_left_behind(self) -> list[dict]:
        """Gateway drains an earlier infertop's engine action made and never undid (blocking: reads the
        audit log). Each gets a ``gateway.undrain`` outcome ``unknown`` now, so it is reported once."""
        audit = self.audit_log()  # type: ignore[attr-defined]
        try:
            found = [e for e in drains_left(audit.entries())
                     if not (isinstance(e.get("pid"), int) and e["pid"] > 0 and _pid_alive(e["pid"]))]
        except Exception:  # noqa: BLE001 — an unreadable log is reported when an action writes
            return []
        for e in found:
            try:
                audit.outcome(str(e.get("op")), "gateway.undrain", str(e.get("target")), "unknown",
                              reason=f"infertop (pid {e.get('pid', '?')}) ended before undraining it")
            except Exception:  # noqa: BLE001 — reported again next time
                break
        return found

    def report_drains_left(self, entries: list[dict]) -> None:
        for e in entries:
            target = str(e.get("target"))
            engine = target.split(" at ")[0].removeprefix("engine ")  # its name at the gateway
            self.log_event(  # type: ignore[attr-defined]
                f"[yellow]gateway: {escape(target)} may still be drained[/yellow] — an engine action drained it "
                f"({escape(str(e.get('time', '?')))}, infertop pid {e.get('pid', '?')}) and ended before undraining "
                f"it: requests for it wait there. Undrain it with d on the Queue pane, or POST "
                f"/admin/engines/{escape(engine)}/undrain")
        s = self.settings  # type: ignore[attr-defined]
        offer = [e for e in entries if any(str(e.get("target")).endswith(f" at {r.label}")
                                           for r in gateway_refs(s.config))]  # a gateway the config reaches
        if offer and not s.read_only and getattr(self, "player", None) is None:
            # offer the undrain of the first (one confirmation at a time; the Log names the others)
            e = offer[0]
            target = str(e.get("target"))
            self.start_action(UndrainLeft(target, target.split(" at ")[0].removeprefix("engine "),  # type: ignore[attr-defined]
                                          s.config, str(e.get("time", "?"))), preflight_name="check")

    def init_engines(self) -> list[EngineRecord]:
        """Create the manager (blocking: re-adopts engines an earlier infertop
        started, reading state files and /proc); returns the live ones. Also
        reads the audit log for actions an earlier run left without an outcome."""
        s = self.settings  # type: ignore[attr-defined]
        self._unfinished = self.unfinished_actions()
        self._drains_left = self.drains_left_behind()
        state_dir = s.state_dir or default_state_dir()
        audit = AuditLog(self.audit_log().path)
        kwargs = {"module": s.engine_module} if s.engine_module else {}
        self.engine_manager = EngineManager(state_dir, audit, profiles=s.config.profiles, **kwargs)
        return [rec for rec in self.engine_manager.list() if rec.alive]

    def adopt_engines(self, records: list[EngineRecord]) -> None:
        """On the UI thread: watch engines found by :meth:`init_engines`; report unfinished actions."""
        self.report_unfinished(self._unfinished)
        self.report_drains_left(self._drains_left)
        for rec in records:
            self._watch(rec)
            owner = owner_of(rec) or "started by infertop earlier"
            self.log_event(escape(f"{rec.name}: re-adopted engine {owner} (pid {rec.pid})"))  # type: ignore[attr-defined]

    def discover_engines(self) -> None:
        """Now and then (each tick asks; at most every :data:`DISCOVER_EVERY_S`): engines infertop started
        that this console does not watch yet — ``infertop engine start`` or another console after this one
        started — are watched from then on (the manager's list reads state files and /proc: a thread)."""
        if self.engine_manager is None or getattr(self, "player", None) is not None:
            return
        now = time.monotonic()
        if now - self.__dict__.get("_discovered_at", -DISCOVER_EVERY_S) < DISCOVER_EVERY_S:
            return
        self._discovered_at = now
        mgr = self.engine_manager

        async def work() -> None:
            try:
                records = await asyncio.to_thread(lambda: [r for r in mgr.list() if r.alive])
            except Exception:  # noqa: BLE001 — unreadable state files: tried again next time
                return
            watched = self.__dict__.setdefault("_watched_pids", {})
            for rec in records:
                if rec.name not in watched:
                    self._watch(rec)
                    owner = owner_of(rec)
                    if owner:  # not this console's own start (its action watches it as it ends)
                        self.log_event(escape(f"{rec.name}: engine {owner} (pid {rec.pid}): watching it"))  # type: ignore[attr-defined]

        self.run_worker(work(), group="engine-discover", exclusive=True, exit_on_error=False)  # type: ignore[attr-defined]

    def _configured(self) -> dict[str, EngineEndpoint]:
        return {e.name: e for e in self.settings.endpoints}  # type: ignore[attr-defined]

    def _watch(self, rec: EngineRecord) -> None:
        """Watch a managed engine with the timeout configured for it (``engines[].timeout_s``), if any."""
        known = {c.endpoint.name: c.endpoint for c in self.collector.collectors}  # type: ignore[attr-defined]
        base = known.get(rec.name) or self._configured().get(rec.name)
        timeout_s = base.timeout_s if base is not None else EngineEndpoint(rec.name, rec.url).timeout_s
        ep = EngineEndpoint(rec.name, rec.url, rec.max_num_seqs, timeout_s)
        self.__dict__.setdefault("_watched_pids", {})[rec.name] = rec.pid
        if known.get(rec.name) != ep:
            self.collector.add_endpoint(ep)  # type: ignore[attr-defined]

    def engine_state_changed(self, name: str) -> None:
        """A watched engine went down or came back: an engine infertop started may have been restarted by
        another infertop or by ``infertop engine set`` with other arguments (max_num_seqs, port), so its
        record is read again (in a thread) and the engine watched as it now runs."""
        if self.engine_manager is not None:
            self.run_worker(self._reread_engine(name), group=f"engine-reread:{name}",  # type: ignore[attr-defined]
                            exclusive=True, exit_on_error=False)

    async def _reread_engine(self, name: str) -> None:
        rec = await asyncio.to_thread(self.managed, name)
        pids: dict[str, int] = self.__dict__.setdefault("_watched_pids", {})
        was = pids.get(name)
        if rec is not None:
            if was is not None and was != rec.pid:  # restarted elsewhere (engine set, another console)
                known = {c.endpoint.name: c.endpoint for c in self.collector.collectors}  # type: ignore[attr-defined]
                seqs = known[name].max_num_seqs if name in known else None
                what = f", max_num_seqs {seqs} → {rec.max_num_seqs}" if seqs != rec.max_num_seqs else ""
                self.log_event(Text(f"{name}: restarted (pid {was} → {rec.pid}{what})"))  # type: ignore[attr-defined]
            self._watch(rec)
        else:
            pids.pop(name, None)  # stopped (here or elsewhere): nothing of ours to read again
        self._note_orphan(name, rec)

    def _note_orphan(self, name: str, rec: EngineRecord | None) -> None:
        """An engine whose main process died while its workers live on (holding GPU memory) is
        "orphaned" in its row and alert — as ``engine status`` says — not just "connection refused";
        the Log says once that ``x`` stops what is left."""
        local = self.joiner.local  # type: ignore[attr-defined]
        was = (local.get(name) or {}).get("phase")
        if rec is not None and rec.phase == "orphaned":
            local[name] = {"phase": "orphaned", "detail": rec.detail, "pids": list(rec.pids)}
            if was != "orphaned":
                self.log_event(Text(f"{name}: orphaned — {rec.detail or 'main process exited'}; "  # type: ignore[attr-defined]
                                    "x stops what is left", style="bold red"))
        elif was is not None:
            local.pop(name, None)

    def managed(self, name: str | None) -> EngineRecord | None:
        """The live record of an engine infertop started, or None (never raises: any name is shown)."""
        if name is None or self.engine_manager is None:
            return None
        try:
            rec = self.engine_manager.status(name)
        except Exception:  # noqa: BLE001 — a name that is no state file name (URL, spaces) is simply not ours
            return None
        return rec if rec is not None and rec.alive else None

    def engine_denied_reason(self, action: str) -> str | None:
        """Why a local-engine key cannot act now (shown when it is pressed)."""
        if action not in ENGINE_ACTIONS:
            return None
        if self.settings.read_only:  # type: ignore[attr-defined]
            return "read-only mode: nothing can be changed"
        if self.engine_manager is None:
            return "local engine control is not ready"
        if action == "engine_new":
            if not self.settings.config.profiles:  # type: ignore[attr-defined]
                return "no launch profiles in the config: add a 'profiles:' section (see README)"
            return None
        name = self.selected_engine_name()  # type: ignore[attr-defined]
        if name is None:
            return "select an engine in the Engines pane first"
        if self.managed(name) is None:
            return f"{name} was not started by infertop: it can be watched, not stopped or changed"
        return None

    def engine_action_state(self, action: str) -> bool | None:
        """For check_action: None hides (read-only), False greys out (not applicable here)."""
        if self.settings.read_only:  # type: ignore[attr-defined]
            return None
        return self.engine_denied_reason(action) is None

    # ----- actions -------------------------------------------------------
    def action_engine_new(self) -> None:
        profiles = self.settings.config.profiles  # type: ignore[attr-defined]
        if not profiles:
            self.notify(self.engine_denied_reason("engine_new") or "", severity="warning", markup=False)  # type: ignore[attr-defined]
            return
        self.push_screen(ProfilePicker(profiles), self._start_profile)  # type: ignore[attr-defined]

    def _start_profile(self, name: str | None) -> None:
        if not name or self.engine_manager is None:
            return
        profile = self.settings.config.profiles[name]  # type: ignore[attr-defined]
        self._engine_flow(EngineAction(self.engine_manager, "start", name, profile=profile, profile_name=name))

    def _profile_of(self, rec: EngineRecord) -> ProfileConfig | None:
        return self.settings.config.profiles.get(rec.profile_name)  # type: ignore[attr-defined]

    def action_engine_stop(self) -> None:
        rec = self.managed(self.selected_engine_name())  # type: ignore[attr-defined]
        if rec is not None and self.engine_manager is not None:
            self._engine_flow(EngineAction(self.engine_manager, "stop", rec.name, profile=self._profile_of(rec),
                                           stats=lambda r: self._latest_stats(r.name),
                                           config=self.settings.config))  # type: ignore[attr-defined]

    def action_engine_restart(self) -> None:
        self.engine_restart_of(self.selected_engine_name())  # type: ignore[attr-defined]

    def engine_restart_of(self, name: str | None) -> None:
        """Restart engine ``name`` (the selected one, or a triage remedy's) through the one pipeline."""
        rec = self.managed(name)
        if rec is not None and self.engine_manager is not None:
            self._engine_flow(EngineAction(self.engine_manager, "restart", rec.name, profile=self._profile_of(rec),
                                           stats=lambda r: self._latest_stats(r.name),
                                           config=self.settings.config))  # type: ignore[attr-defined]

    def action_engine_set_seqs(self) -> None:
        self.engine_set_seqs_of(self.selected_engine_name())  # type: ignore[attr-defined]

    def engine_set_seqs_of(self, name: str | None, value: int | None = None) -> None:
        """The max_num_seqs dialog of engine ``name``, ``value`` filled in (a triage remedy's proposal)."""
        rec = self.managed(name)
        if rec is None:
            return
        busy = next((r for r in self.action_board.runs() if r.kind.object_key == f"engine:{rec.name}"), None)
        if busy is not None:
            self.notify(f"{busy.title} is still running: one action at a time on it", severity="warning",  # type: ignore[attr-defined]
                        markup=False)
            return

        def chosen(changes: dict | None, rec: EngineRecord = rec) -> None:
            if changes and self.engine_manager is not None:
                self._engine_flow(EngineAction(self.engine_manager, "set", rec.name, profile=self._profile_of(rec),
                                               changes=changes, stats=lambda r: self._latest_stats(r.name),
                                               config=self.settings.config))  # type: ignore[attr-defined]

        self.push_screen(ArgsDialog(rec.name, "max_num_seqs", rec.max_num_seqs, value=value), chosen)  # type: ignore[attr-defined]

    def _latest_stats(self, name: str) -> EngineStats | None:
        """The collector's view when it is current; None makes the manager scrape
        the engine itself (right after a restart the snapshot still says down)."""
        snap = self.snapshot  # type: ignore[attr-defined]
        s = None if snap is None else snap.by_name().get(name)
        return s if s is not None and s.state == "up" and s.running is not None else None

    def _engine_flow(self, kind: EngineAction) -> None:
        def done(_outcome: Outcome) -> None:
            result = kind.result
            rec = getattr(result, "record", result)
            if isinstance(result, EngineError):  # aborted or failed half-way: watch what runs now, if anything
                rec = self.managed(kind.name)
            if isinstance(rec, EngineRecord) and rec.alive:
                self._watch(rec)
            if isinstance(result, StopResult) and result.name not in self._configured():
                self.collector.remove_endpoint(result.name)  # type: ignore[attr-defined]
            self.refresh_bindings()  # type: ignore[attr-defined]

        self.start_action(kind, on_done=done)
