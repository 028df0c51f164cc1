"""The local engines' controller: new from profile, stop, restart, change max_num_seqs; re-adoption,
discovery and the watch of the engines infertop started.

Each is an :class:`EngineAction` (a kind of the one action pipeline,
:mod:`infertop.control.pipeline`): planned, checked, confirmed with ``y`` in
the one :class:`~infertop.ui.screens.confirm.ConfirmScreen`, executed in the
background by the blocking control code (``control/engines/``, shared
with the headless ``infertop engine`` commands), which writes the audit log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from rich.markup import escape
from rich.text import Text

from ...config import ProfileConfig
from ...private_fs import default_state_dir
from ...control.audit import AuditLog
from ...control.engines import EngineError, EngineManager, EngineRecord, StopResult
from ...control.engines.kind import EngineAction, owner_of
from ...control.gateway.drain import UndrainLeft, drains_left, gateway_refs
from ...control.pipeline import ActionBoard, Outcome
from ...domain.engine import EngineStats
from ...sources.vllm import EngineEndpoint
from .actions import _pid_alive
from ..screens.engine_dialogs import ArgsDialog, ProfilePicker
from .host import ConsoleHost

ENGINE_ACTIONS = {"engine_new", "engine_stop", "engine_restart", "engine_set_seqs"}
DISCOVER_EVERY_S = 5.0  # how often the managed engines are listed for ones started elsewhere
DETAIL_FILES_EVERY_S = 2.0  # how often an open engine detail re-reads its restart history and log tail


class EngineController:
    """The engines infertop started, for one console.

    ``collector`` is the Fleet's engine collector (the controller adds and removes the endpoints of the
    engines it watches); ``local`` the fleet joiner's per-engine notes (an orphan's word); ``selected``
    the engine selected on the Engines pane; ``snapshot`` the fresh engines on screen;
    ``unfinished`` / ``report_unfinished`` the audit's intents an earlier run left without an outcome."""

    def __init__(self, host: ConsoleHost, settings: Any, collector: Any, *, local: dict, board: ActionBoard,
                 selected: Callable[[], str | None], snapshot: Callable[[], Any],
                 unfinished: Callable[[], list[dict]], report_unfinished: Callable[[list[dict]], None],
                 replay: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.host, self.settings, self.collector, self.local, self.board = host, settings, collector, local, board
        self._selected, self._snapshot, self.replay = selected, snapshot, replay
        self._read_unfinished, self._report_unfinished = unfinished, report_unfinished
        self.manager: EngineManager | None = None
        self._unfinished: list[dict] = []
        self._drains_left: list[dict] = []
        self.watched_pids: dict[str, int] = {}  # engine → the pid watched (a new one: restarted elsewhere)
        self._discovered_at = -DISCOVER_EVERY_S
        # an open detail's restart history and log tail: engine → (read at, history, log lines)
        self._detail_files: dict[str, tuple[float, list[dict], list[str]]] = {}
        self._detail_reading: set[str] = set()
        self._clock = clock

    def detail_files(self, name: str) -> tuple[list[dict], list[str]]:
        """An engine detail's restart history and log tail as last read, for a paint; a read (two files)
        starts in a thread worker when that one is older than DETAIL_FILES_EVERY_S — a slow disk or a FIFO
        where the log was never holds up a paint."""
        got = self._detail_files.get(name)
        if (got is None or self._clock() - got[0] >= DETAIL_FILES_EVERY_S) and name not in self._detail_reading:
            mgr = self.manager
            if mgr is not None:
                self._detail_reading.add(name)
                self.host.run_worker(lambda: self._read_detail_files(mgr, name), thread=True,
                                     group=f"detail-files-{name}", exit_on_error=False)
        return (got[1], got[2]) if got is not None else ([], [])

    def _read_detail_files(self, mgr: EngineManager, name: str) -> None:
        try:
            history, log = mgr.history(name, 5), mgr.tail_log(name, 10)
        except Exception:  # noqa: BLE001 — an unreadable file is shown as none; read again next time
            history, log = [], []
        self.host.call_from_thread(self._detail_files_read, name, history, log)

    def _detail_files_read(self, name: str, history: list[dict], log: list[str]) -> None:
        self._detail_reading.discard(name)
        old = self._detail_files.get(name)
        self._detail_files[name] = (self._clock(), history, log)
        if old is None or (old[1], old[2]) != (history, log):
            self.host.render_snapshot()  # the detail shows them now, not at the next tick

    def drains_left_behind(self) -> list[dict]:
        """Gateway drains an earlier infertop's engine action made and never undid (blocking: reads the
        audit log). Each gets a ``gateway.undrain`` outcome ``unknown`` now, so it is reported once."""
        audit = self.host.audit_log()
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
            self.host.log_event(
                f"[yellow]gateway: {escape(target)} may still be drained[/yellow] — an engine action drained it "
                f"({escape(str(e.get('time', '?')))}, infertop pid {e.get('pid', '?')}) and ended before undraining "
                f"it: requests for it wait there. Undrain it with d on the Queue pane, or POST "
                f"/admin/engines/{escape(engine)}/undrain")
        s = self.settings
        offer = [e for e in entries if any(str(e.get("target")).endswith(f" at {r.label}")
                                           for r in gateway_refs(s.config))]  # a gateway the config reaches
        if offer and not s.read_only and not self.replay:
            # offer the undrain of the first (one confirmation at a time; the Log names the others)
            e = offer[0]
            target = str(e.get("target"))
            self.host.start_action(UndrainLeft(target, target.split(" at ")[0].removeprefix("engine "),
                                               s.config, str(e.get("time", "?"))), preflight_name="check")

    def init(self) -> list[EngineRecord]:
        """Create the manager (blocking: re-adopts engines an earlier infertop
        started, reading state files and /proc); returns the live ones. Also
        reads the audit log for actions an earlier run left without an outcome."""
        s = self.settings
        self._unfinished = self._read_unfinished()
        self._drains_left = self.drains_left_behind()
        state_dir = s.state_dir or default_state_dir()
        audit = AuditLog(self.host.audit_log().path)
        kwargs = {"module": s.engine_module} if s.engine_module else {}
        self.manager = EngineManager(state_dir, audit, profiles=s.config.profiles, **kwargs)
        return [rec for rec in self.manager.list() if rec.alive]

    def adopt(self, records: list[EngineRecord]) -> None:
        """On the UI thread: watch engines found by :meth:`init`; report unfinished actions."""
        self._report_unfinished(self._unfinished)
        self.report_drains_left(self._drains_left)
        for rec in records:
            self.watch(rec)
            owner = owner_of(rec) or "started by infertop earlier"
            self.host.log_event(escape(f"{rec.name}: re-adopted engine {owner} (pid {rec.pid})"))

    def discover(self) -> None:
        """Now and then (each tick asks; at most every :data:`DISCOVER_EVERY_S`): engines infertop started
        that this console does not watch yet — ``infertop engine start`` or another console after this one
        started — are watched from then on (the manager's list reads state files and /proc: a thread)."""
        if self.manager is None or self.replay:
            return
        now = time.monotonic()
        if now - self._discovered_at < DISCOVER_EVERY_S:
            return
        self._discovered_at = now
        mgr = self.manager

        async def work() -> None:
            try:
                records = await asyncio.to_thread(lambda: [r for r in mgr.list() if r.alive])
            except Exception:  # noqa: BLE001 — unreadable state files: tried again next time
                return
            watched = self.watched_pids
            for rec in records:
                if rec.name not in watched:
                    self.watch(rec)
                    owner = owner_of(rec)
                    if owner:  # not this console's own start (its action watches it as it ends)
                        self.host.log_event(escape(f"{rec.name}: engine {owner} (pid {rec.pid}): watching it"))
                else:  # the same list tells a restart elsewhere between two polls (no down seen)
                    self._follow(rec.name, rec)

        self.host.run_worker(work(), group="engine-discover", exclusive=True, exit_on_error=False)

    def _configured(self) -> dict[str, EngineEndpoint]:
        return {e.name: e for e in self.settings.endpoints}

    def watch(self, rec: EngineRecord) -> None:
        """Watch a managed engine with the timeout configured for it (``engines[].timeout_s``), if any."""
        known = {c.endpoint.name: c.endpoint for c in self.collector.collectors}
        base = known.get(rec.name) or self._configured().get(rec.name)
        timeout_s = base.timeout_s if base is not None else EngineEndpoint(rec.name, rec.url).timeout_s
        ep = EngineEndpoint(rec.name, rec.url, rec.max_num_seqs, timeout_s)
        self.watched_pids[rec.name] = rec.pid
        if known.get(rec.name) != ep:
            self.collector.add_endpoint(ep)

    def state_changed(self, name: str) -> None:
        """A watched engine went down or came back: an engine infertop started may have been restarted by
        another infertop or by ``infertop engine set`` with other arguments (max_num_seqs, port), so its
        record is read again (in a thread) and the engine watched as it now runs."""
        if self.manager is not None:
            self.host.run_worker(self._reread(name), group=f"engine-reread:{name}",
                                 exclusive=True, exit_on_error=False)

    async def _reread(self, name: str) -> None:
        rec = await asyncio.to_thread(self.managed, name)
        self._follow(name, rec)
        self._note_orphan(name, rec)

    def _follow(self, name: str, rec: EngineRecord | None) -> None:
        """Watch ``name`` as its record says it runs now; a new pid is a restart elsewhere (engine set,
        another console), said with the max_num_seqs it now runs with."""
        pids = self.watched_pids
        was = pids.get(name)
        if rec is not None:
            if was is not None and was != rec.pid:  # restarted elsewhere (engine set, another console)
                known = {c.endpoint.name: c.endpoint for c in self.collector.collectors}
                seqs = known[name].max_num_seqs if name in known else None
                what = f", max_num_seqs {seqs} → {rec.max_num_seqs}" if seqs != rec.max_num_seqs else ""
                self.host.log_event(Text(f"{name}: restarted (pid {was} → {rec.pid}{what})"))
            self.watch(rec)
        else:
            pids.pop(name, None)  # stopped (here or elsewhere): nothing of ours to read again

    def _note_orphan(self, name: str, rec: EngineRecord | None) -> None:
        """An engine whose main process died while its workers live on (holding GPU memory) is
        "orphaned" in its row and alert — as ``engine status`` says — not just "connection refused";
        the Log says once that ``x`` stops what is left."""
        local = self.local
        was = (local.get(name) or {}).get("phase")
        if rec is not None and rec.phase == "orphaned":
            local[name] = {"phase": "orphaned", "detail": rec.detail, "pids": list(rec.pids)}
            if was != "orphaned":
                self.host.log_event(Text(f"{name}: orphaned — {rec.detail or 'main process exited'}; "
                                         "x stops what is left", style="bold red"))
        elif was is not None:
            local.pop(name, None)

    def managed(self, name: str | None) -> EngineRecord | None:
        """The live record of an engine infertop started, or None (never raises: any name is shown)."""
        if name is None or self.manager is None:
            return None
        try:
            rec = self.manager.status(name)
        except Exception:  # noqa: BLE001 — a name that is no state file name (URL, spaces) is simply not ours
            return None
        return rec if rec is not None and rec.alive else None

    def denied_reason(self, action: str) -> str | None:
        """Why a local-engine key cannot act now (shown when it is pressed)."""
        if action not in ENGINE_ACTIONS:
            return None
        if self.settings.read_only:
            return "read-only mode: nothing can be changed"
        if self.manager is None:
            return "local engine control is not ready"
        if action == "engine_new":
            if not self.settings.config.profiles:
                return "no launch profiles in the config: add a 'profiles:' section (see README)"
            return None
        name = self._selected()
        if name is None:
            return "select an engine in the Engines pane first"
        if self.managed(name) is None:
            return f"{name} was not started by infertop: it can be watched, not stopped or changed"
        return None

    def action_state(self, action: str) -> bool | None:
        """For check_action: None hides (read-only), False greys out (not applicable here)."""
        if self.settings.read_only:
            return None
        return self.denied_reason(action) is None

    # ----- actions -------------------------------------------------------
    def new(self) -> None:
        profiles = self.settings.config.profiles
        if not profiles:
            self.host.notify(self.denied_reason("engine_new") or "", severity="warning", markup=False)
            return
        self.host.push_screen(ProfilePicker(profiles), self._start_profile)

    def _start_profile(self, name: str | None) -> None:
        if not name or self.manager is None:
            return
        profile = self.settings.config.profiles[name]
        self._engine_flow(EngineAction(self.manager, "start", name, profile=profile, profile_name=name))

    def _profile_of(self, rec: EngineRecord) -> ProfileConfig | None:
        return self.settings.config.profiles.get(rec.profile_name)

    def stop(self) -> None:
        rec = self.managed(self._selected())
        if rec is not None and self.manager is not None:
            self._engine_flow(EngineAction(self.manager, "stop", rec.name, profile=self._profile_of(rec),
                                           stats=lambda r: self._latest_stats(r.name),
                                           config=self.settings.config))

    def restart(self, name: str | None) -> None:
        """Restart engine ``name`` (the selected one, or a triage remedy's) through the one pipeline."""
        rec = self.managed(name)
        if rec is not None and self.manager is not None:
            self._engine_flow(EngineAction(self.manager, "restart", rec.name, profile=self._profile_of(rec),
                                           stats=lambda r: self._latest_stats(r.name),
                                           config=self.settings.config))

    def set_seqs(self, name: str | None, value: int | None = None) -> None:
        """The max_num_seqs dialog of engine ``name``, ``value`` filled in (a triage remedy's proposal)."""
        rec = self.managed(name)
        if rec is None:
            return
        busy = next((r for r in self.board.runs() if r.kind.object_key == f"engine:{rec.name}"), None)
        if busy is not None:
            self.host.notify(f"{busy.title} is still running: one action at a time on it", severity="warning",
                             markup=False)
            return

        def chosen(changes: dict | None, rec: EngineRecord = rec) -> None:
            if changes and self.manager is not None:
                self._engine_flow(EngineAction(self.manager, "set", rec.name, profile=self._profile_of(rec),
                                               changes=changes, stats=lambda r: self._latest_stats(r.name),
                                               config=self.settings.config))

        self.host.push_screen(ArgsDialog(rec.name, "max_num_seqs", rec.max_num_seqs, value=value), chosen)

    def _latest_stats(self, name: str) -> EngineStats | None:
        """The collector's view when it is current; None makes the manager scrape
        the engine itself (right after a restart the snapshot still says down)."""
        snap = self._snapshot()
        s = None if snap is None else snap.by_name().get(name)
        return s if s is not None and s.state == "up" and s.running is not None else None

    def _engine_flow(self, kind: EngineAction) -> None:
        def done(_outcome: Outcome) -> None:
            result = kind.result
            rec = getattr(result, "record", result)
            if isinstance(result, EngineError):  # aborted or failed half-way: watch what runs now, if anything
                rec = self.managed(kind.name)
            if isinstance(rec, EngineRecord) and rec.alive:
                self.watch(rec)
            if isinstance(result, StopResult) and result.name not in self._configured():
                self.collector.remove_endpoint(result.name)
            self.host.refresh_bindings()

        self.host.start_action(kind, on_done=done)
