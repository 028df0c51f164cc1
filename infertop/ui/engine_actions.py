"""Local vLLM engine actions for the app: new from profile, stop, restart, change max_num_seqs.

Each is an :class:`EngineAction` (a kind of the one action pipeline,
:mod:`infertop.control.pipeline`): planned, checked, confirmed with ``y`` in
the one :class:`~infertop.ui.screens.confirm.ConfirmScreen`, executed in the
background by the blocking control code (``control/engines/``, shared
with the headless ``infertop engine`` commands), which writes the audit log.
"""

from __future__ import annotations

import asyncio
import difflib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.markup import escape
from rich.text import Text

from ..config import ProfileConfig, default_state_dir
from ..control.audit import AuditLog
from ..control.engines import EngineError, EngineManager, EngineRecord, SetResult, StopResult
from ..control.gateway_drain import GatewayDrain, UndrainLeft, drains_left, find_gateway, gateway_refs
from ..control.pipeline import ActionRefused, Outcome, Preflight, Progress, ProgressFn, Review
from ..domain.engine import EngineStats
from ..format import count_human, seconds_human
from ..sources.vllm import EngineEndpoint
from .action_runner import ActionRunner, _pid_alive
from .screens.engine_dialogs import ArgsDialog, ProfilePicker

ENGINE_ACTIONS = {"engine_new", "engine_stop", "engine_restart", "engine_set_seqs"}
DISCOVER_EVERY_S = 5.0  # how often the managed engines are listed for ones started elsewhere


def describe_result(result: object) -> str:
    if isinstance(result, EngineError):
        tail = "\n".join(getattr(result, "log_tail", None) or [])
        return result.reason + (f"\nlast log lines:\n{tail}" if tail else "")
    if isinstance(result, Exception):
        return f"{type(result).__name__}: {result}"
    if isinstance(result, SetResult):
        changes = ", ".join(f"{k} {result.old.get(k)} → {v}" for k, v in result.new.items())
        verified = ", ".join(f"{k}={v}" for k, v in result.verified.items())
        line = f"{changes}; verified in the running process ({verified}); took {result.total_s:.1f} s"
        b, a = result.before, result.after
        if b is not None or a is not None:
            def st(s):
                return "—" if s is None else f"running {count_human(s.running)}, waiting {count_human(s.waiting)}"
            line += f"\nbefore: {st(b)}\nafter:  {st(a)}"
        if result.stop is not None and result.stop.gateway:
            line += f"\ngateway: {result.stop.gateway}"
        return line
    if isinstance(result, StopResult):
        return result.reason
    if isinstance(result, EngineRecord):
        return f"{result.name} healthy at {result.url} (pid {result.pid}, {seconds_human(result.startup_s)} to start)"
    return str(result)


def owner_of(rec: EngineRecord | None) -> str | None:
    """"started by alice on pts/3 (infertop pid 4242)" for an engine this infertop did not start
    (what the engine record says: ``owner_text`` where the manager records owners), else None."""
    if rec is None:
        return None
    text = getattr(rec, "owner_text", None)
    if getattr(rec, "foreign", False) or rec.adopted:
        return text or "started by an earlier infertop"
    return None


def _stats_text(s: EngineStats | None) -> str:
    if s is None:
        return "unreadable"
    return f"running {count_human(s.running)}, waiting {count_human(s.waiting)}"


class EngineAction:
    """A local engine action as the pipeline runs it (:class:`~infertop.control.pipeline.ActionKind`).

    The manager writes the audit (intent before the signal, outcome after), so
    ``audits_itself``. Every one can be aborted: a start while it waits for
    /health (the manager then stops what it spawned: nothing is left running);
    a stop / restart / change while it drains (at the gateway: nothing is
    signalled and the gateway takes the engine back; after SIGTERM: vLLM
    drains on and exits by itself) or waits for the new engine's /health (it
    is left as it is) — the outcome says which state the engine is in.

    When an infertop gateway fronts the engine (``config`` names it), the
    engine is drained there first and undrained once healthy again; without
    one the confirmation warns that requests arriving while vLLM drains get
    HTTP 500.
    """

    audits_itself = True

    def __init__(self, mgr: EngineManager, verb: str, name: str, *, profile: ProfileConfig | None = None,
                 profile_name: str | None = None, changes: dict | None = None,
                 stats: Callable[[EngineRecord], EngineStats | None] | None = None,
                 config: Any = None) -> None:
        self.mgr, self.verb, self.name = mgr, verb, name
        self.profile, self.profile_name, self.changes = profile, profile_name, dict(changes or {})
        self.stats = stats or (lambda rec: None)
        self.config = config
        self.gateway: GatewayDrain | None = None
        self.gateway_warnings: list[str] = []
        self.abortable = True
        self.action = f"engine.{verb}"
        self.target = f"engine {name}"
        self.object_key = f"engine:{name}"
        self.result: object = None
        self.gateway_note = ""
        grace = profile.stop_grace_s if profile is not None else 30.0
        self.grace_s = grace
        self.start_s = profile.start_timeout_s if profile is not None else 300.0
        self.timeout_s: float | None = {"start": self.start_s, "stop": grace + 10.0}.get(
            verb, grace + 10.0 + self.start_s)

    def _find_gateway(self, rec: EngineRecord) -> None:
        """Ask the gateways the config names which one fronts this engine (blocking, short timeouts)."""
        self.gateway, self.gateway_warnings = None, []
        if self.config is None:
            return
        try:
            self.gateway, self.gateway_warnings = find_gateway(self.config, rec.name, rec.url)
        except Exception as e:  # noqa: BLE001 — a gateway that cannot be asked is a warning, never a crash
            self.gateway_warnings = [f"the gateway cannot be asked: {type(e).__name__}"]
        if self.gateway is not None:
            self.timeout_s = (self.timeout_s or 0.0) + self.grace_s  # the drain there comes first

    def _drain_notes(self, grace: float) -> list[str]:
        gw = self.gateway
        if gw is not None:
            return [f"drain at {gw.label} first: it sends {self.name} nothing new (requests wait in its queue or "
                    f"go to its other engines); wait up to {grace:g} s for its in-flight there to reach 0",
                    f"then SIGTERM: vLLM finishes what it still has; killed if still there after {grace:g} s",
                    f"undrain at {gw.label} once done (also if anything fails or is aborted)"]
        notes = [f"drain: SIGTERM, vLLM finishes in-flight requests; killed if still there after {grace:g} s",
                 "! no infertop gateway in front of this engine: requests arriving while vLLM drains get HTTP 500 "
                 "from vLLM 0.32 (it stops taking new ones on SIGTERM) — run `infertop gateway` in front of it "
                 "(config `gateway:` lists it) and they wait in the gateway's queue instead"]
        return notes + [f"! {w}" for w in self.gateway_warnings]

    def _drain_size_notes(self, rec: EngineRecord, grace: float) -> list[str]:
        """The drain sized against the work in flight: vLLM drains for its shutdown_timeout, then aborts
        what still runs. Requests that take longer (E2E p99 over the window) than that are cut."""
        if self.gateway is not None:
            return []  # drained at the gateway first: what is in flight there is waited for
        try:
            stats = self.stats(rec)
        except Exception:  # noqa: BLE001 — the sizing is advice: no stats, no note
            stats = None
        e2e = getattr(stats, "e2e_p99_s", None)
        drain_s = rec.args.get("shutdown_timeout")
        drain_s = float(drain_s) if isinstance(drain_s, (int, float)) else max(1.0, grace - 10.0)
        if e2e is None or e2e <= drain_s:
            return []
        return [f"! requests here take up to {seconds_human(e2e)} (E2E p99) and vLLM drains for "
                f"{drain_s:g} s: those still running then are cut — drain it at a gateway first, or set the "
                f"profile's shutdown_timeout ≥ {int(e2e) + 1} s and stop_grace_s ≥ {int(e2e) + 11} s"]

    def audit_details(self) -> dict[str, Any]:
        return {}

    def _live(self) -> EngineRecord:
        try:
            rec = self.mgr.status(self.name)
        except EngineError as e:
            raise ActionRefused(str(e)) from None
        if rec is None or not rec.alive:
            raise ActionRefused(f"{self.name} is not running under infertop (any more)")
        return rec

    def plan(self) -> Review:
        if self.verb == "start":
            from ..control.engines import build_command

            assert self.profile is not None
            cmd = " ".join(build_command(self.profile, module=self.mgr.module))
            return Review(f"Start engine {self.name}", f"start {self.name} on {self.profile.host}:{self.profile.port}",
                          "", (cmd, f"then wait up to {self.profile.start_timeout_s:g} s for /health"))
        rec = self._live()
        owner = owner_of(rec)
        by = f" — {owner}" if owner else ""
        notes = [f"pid {rec.pid}, {rec.url}, up {seconds_human(rec.uptime_s)}"]
        if owner:
            notes.append(f"! {self.name} was {owner}: acting on it here affects whoever uses it")
        grace = self.profile.stop_grace_s if self.profile is not None else 30.0
        self._find_gateway(rec)
        drain = self._drain_notes(grace) + self._drain_size_notes(rec, grace)
        if self.verb == "stop":
            return Review(f"Stop engine {self.name}{by}", f"stop {self.name}", "", tuple(drain + notes))
        if self.verb == "restart":
            return Review(f"Restart engine {self.name}{by}", f"restart {self.name} with the same arguments", "",
                          tuple(drain + ["start again, wait for /health", rec.command()] + notes))
        old = {k: rec.args.get(k) for k in self.changes}
        if all(old[k] == v for k, v in self.changes.items()):
            raise ActionRefused(f"{self.name} already runs with {self.changes}: nothing to change")
        summary = ", ".join(f"{k} {old[k]} → {v}" for k, v in self.changes.items())
        diff = "\n".join(difflib.unified_diff([f"{k}: {old[k]}" for k in self.changes],
                                              [f"{k}: {v}" for k, v in self.changes.items()],
                                              f"{self.name} (now)", f"{self.name} (after)", lineterm=""))
        return Review(f"Change engine {self.name}{by}", summary, diff,
                      tuple(drain + ["restart with the new value, wait for /health, verify the running process "
                                     "took it; if it fails to start, the old value is restored"] + notes))

    def preflight(self) -> Preflight:
        if self.verb == "start":
            assert self.profile is not None
            with socket.socket() as sock:
                sock.settimeout(0.5)
                busy = sock.connect_ex((self.profile.host if self.profile.host not in ("0.0.0.0", "")
                                        else "127.0.0.1", self.profile.port)) == 0
            if busy:
                return Preflight(False, f"{self.profile.host}:{self.profile.port} is in use already")
            return Preflight(True, f"port {self.profile.port} is free")
        try:
            rec = self._live()
        except ActionRefused as e:
            return Preflight(False, str(e))
        try:
            s = self.stats(rec)
        except Exception:  # noqa: BLE001 — unreadable is an answer
            s = None
        if s is None or s.running is None:
            return Preflight(True, f"{self.name} is running (pid {rec.pid}); in flight: unreadable",
                             warnings=("the engine's in-flight count cannot be read now: the drain waits for "
                                       "vLLM to finish what it has, up to the grace period",))
        return Preflight(True, f"{self.name} is running (pid {rec.pid}); in flight now: {_stats_text(s)}")

    def quit_note(self) -> str:
        """What quitting does to this action while it runs: it is aborted (and its abort undrains)."""
        gw = self.gateway
        undrain = f" and undrains {self.name} at {gw.label}" if gw is not None and self.verb != "start" else ""
        return f"quitting aborts it{undrain}"

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        started = self.verb == "start"

        cut_note: list[str] = []

        def cb(ev: Any) -> None:
            # an abort goes to the manager as abort=: an exception raised here is swallowed by its emitter
            if ev.phase == "undrained":
                self.gateway_note = ev.message
            if ev.phase == "done" and "cut by the" in ev.message:
                cut_note.append(ev.message)  # requests the engine aborted: part of the result, never "ok" alone
            text = ev.message + (f" — {ev.log_line}" if getattr(ev, "log_line", None) else "")
            progress(Progress(text, countdown_s=getattr(ev, "countdown_s", None)))

        gw = self.gateway
        try:
            if self.verb == "start":
                assert self.profile is not None
                result: object = self.mgr.start(self.name, self.profile, progress=cb, profile_name=self.profile_name,
                                         abort=abort)
            elif self.verb == "stop":
                result = self.mgr.stop(self.name, progress=cb, abort=abort, gateway=gw)
            elif self.verb == "restart":
                result = self.mgr.restart(self.name, progress=cb, abort=abort, gateway=gw)
            else:
                result = self.mgr.set_args(self.name, self.changes, progress=cb, stats=self.stats, abort=abort,
                                           gateway=gw)
        except EngineError as e:
            self.result = e
            if started and abort.is_set():
                return Outcome("aborted", f"start of {self.name} aborted: what was spawned is stopped, "
                                          "nothing is left running")
            if type(e).__name__ == "EngineAborted":
                return Outcome("aborted", describe_result(e))
            refused = type(e).__name__ in ("NotOurProcessError", "EngineBusyError")
            return Outcome("refused" if refused else "failed", describe_result(e))
        self.result = result
        text = "; ".join(describe_result(result).splitlines())
        if self.gateway_note and self.gateway_note not in text:
            text += f"; {self.gateway_note}"
        if cut_note:
            text += f"; {cut_note[-1]}"
        return Outcome("ok", text)


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
