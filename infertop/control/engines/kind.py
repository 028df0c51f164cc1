"""A local engine action as the one pipeline runs it (:class:`EngineAction`: start, stop, restart, change
arguments), with the words the console and ``infertop engine`` use for its outcome and owner."""

from __future__ import annotations

import difflib
import socket
import threading
from collections.abc import Callable
from typing import Any

from ...config import ProfileConfig
from ...domain.engine import EngineStats
from ...format import count_human, seconds_human
from ..gateway.drain import GatewayDrain, find_gateway
from ..pipeline import ActionRefused, IntentFn, Outcome, Preflight, Progress, ProgressFn, Review
from .audit import AuditNotes
from .errors import EngineError
from .manager import EngineManager
from .command import build_command
from .state import EngineRecord, SetResult, StopResult


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

    The pipeline writes the audit: the intent just before the first signal or spawn, with the process
    the manager verified then (``intent_at_send``: the manager calls the pipeline's intent writer), the
    outcome in the manager's words. Every one can be aborted: a start while it waits for
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

    intent_at_send = True

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
        self.audit_target = name  # the engine lines' target: the engine's name
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

    def execute(self, progress: ProgressFn, abort: threading.Event, intent: IntentFn | None = None) -> Outcome:
        """``intent``: the pipeline's intent writer (``intent_at_send``); None outside the pipeline: unaudited."""
        started = self.verb == "start"
        notes = AuditNotes(intent)

        cut_note: list[str] = []

        def cb(ev: Any) -> None:
            # an abort goes to the manager as abort=: an exception raised here is swallowed by its emitter
            if ev.phase == "undrained":
                self.gateway_note = ev.message
            if ev.phase == "done" and "cut by the" in ev.message:
                cut_note.append(ev.message)  # requests the engine aborted: part of the result, never "ok" alone
            text = ev.message + (f" — {ev.log_line}" if getattr(ev, "log_line", None) else "")
            progress(Progress(text, countdown_s=getattr(ev, "countdown_s", None)))

        try:
            result = self._run(cb, abort, notes)
        except EngineError as e:
            self.result = e
            if started and abort.is_set():
                return notes.outcome("aborted", f"start of {self.name} aborted: what was spawned is stopped, "
                                                "nothing is left running")
            if type(e).__name__ == "EngineAborted":
                return notes.outcome("aborted", describe_result(e))
            refused = type(e).__name__ in ("NotOurProcessError", "EngineBusyError")
            return notes.outcome("refused" if refused else "failed", describe_result(e))
        self.result = result
        text = "; ".join(describe_result(result).splitlines())
        if self.gateway_note and self.gateway_note not in text:
            text += f"; {self.gateway_note}"
        if cut_note:
            text += f"; {cut_note[-1]}"
        return notes.outcome("ok", text)

    def _run(self, cb: Callable[[Any], None], abort: threading.Event, notes: AuditNotes) -> object:
        """The manager's action for this verb (its parts: the pipeline audits it, through ``notes``)."""
        gw, mgr = self.gateway, self.mgr
        if self.verb == "start":
            assert self.profile is not None
            return mgr.actions.start(self.name, self.profile, progress=cb, profile_name=self.profile_name,
                                     abort=abort, notes=notes)
        if self.verb == "stop":
            return mgr.actions.stop(self.name, progress=cb, abort=abort, gateway=gw, notes=notes)
        if self.verb == "restart":
            return mgr.actions.restart(self.name, progress=cb, abort=abort, gateway=gw, notes=notes)
        return mgr.reconfigure.set_args(self.name, self.changes, progress=cb, stats=self.stats, abort=abort,
                                        gateway=gw, notes=notes)
