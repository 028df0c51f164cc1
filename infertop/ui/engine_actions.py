"""Local vLLM engine actions for the app: new from profile, stop, restart, change max_num_seqs.

The blocking control code (``control/engines.py``, shared with the headless
``infertop engine`` commands) runs in thread workers; its progress is shown
in an :class:`OperationScreen`. Every action is confirmed first, and the
manager writes the audit log.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..config import default_state_dir
from ..control.audit import AuditLog
from ..control.engines import EngineError, EngineManager, EngineRecord, SetResult, StopResult
from ..format import count_human, seconds_human
from .screens.engine_dialogs import ArgsDialog, ConfirmDialog, OperationScreen, ProfilePicker

ENGINE_ACTIONS = {"engine_new", "engine_stop", "engine_restart", "engine_set_seqs"}


def follow(progress):
    """An EngineProgress callback for an OperationScreen: a log line when the
    phase or the engine's last log line changes, the live status otherwise."""
    last = {"phase": None, "log": None}

    def cb(ev) -> None:
        if ev.phase != last["phase"]:
            last["phase"] = ev.phase
            progress.line(f"[{ev.elapsed_s:5.1f}s] {ev.message}")
        if ev.log_line and ev.log_line != last["log"]:
            last["log"] = ev.log_line
            progress.line(f"         {ev.log_line}")
        progress.status(f"{ev.message}  ({ev.elapsed_s:.0f} s)")

    return cb


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
        return line
    if isinstance(result, StopResult):
        return result.reason
    if isinstance(result, EngineRecord):
        return f"{result.name} healthy at {result.url} (pid {result.pid}, {seconds_human(result.startup_s)} to start)"
    return str(result)


class EngineActions:
    """Mixin for InfertopApp. Needs ``settings``, ``collector``, ``log_event``."""

    engine_manager: EngineManager | None = None

    def init_engines(self) -> list[EngineRecord]:
        """Create the manager (blocking: re-adopts engines an earlier infertop
        started, reading state files and /proc); returns the live ones."""
        s = self.settings  # type: ignore[attr-defined]
        state_dir = s.state_dir or default_state_dir()
        audit = AuditLog(s.config.audit_log or (Path(state_dir) / "audit.jsonl"))
        kwargs = {"module": s.engine_module} if s.engine_module else {}
        self.engine_manager = EngineManager(state_dir, audit, profiles=s.config.profiles, **kwargs)
        return [rec for rec in self.engine_manager.list() if rec.alive]

    def adopt_engines(self, records: list[EngineRecord]) -> None:
        """On the UI thread: watch engines found by :meth:`init_engines`."""
        for rec in records:
            self._watch(rec)
            self.log_event(f"{rec.name}: re-adopted engine infertop started earlier (pid {rec.pid})")  # type: ignore[attr-defined]

    def _watch(self, rec: EngineRecord) -> None:
        known = {c.endpoint.name: c.endpoint for c in self.collector.collectors}  # type: ignore[attr-defined]
        ep = rec.endpoint()
        if known.get(rec.name) != ep:
            self.collector.add_endpoint(ep)  # type: ignore[attr-defined]

    def managed(self, name: str | None) -> EngineRecord | None:
        if name is None or self.engine_manager is None:
            return None
        rec = self.engine_manager.status(name)
        return rec if rec is not None and rec.alive else None

    def engine_action_state(self, action: str) -> bool | None:
        """For check_action: None hides (read-only), False greys out (not applicable)."""
        if self.settings.read_only:  # type: ignore[attr-defined]
            return None
        if action == "engine_new":
            return bool(self.settings.config.profiles)  # type: ignore[attr-defined]
        return self.managed(self.selected_engine_name()) is not None  # type: ignore[attr-defined]

    # ----- actions -------------------------------------------------------
    def action_engine_new(self) -> None:
        profiles = self.settings.config.profiles  # type: ignore[attr-defined]
        if not profiles:
            self.notify("no launch profiles: add a 'profiles:' section to the config (see README)", severity="warning")  # type: ignore[attr-defined]
            return
        self.push_screen(ProfilePicker(profiles), self._confirm_start)  # type: ignore[attr-defined]

    def _confirm_start(self, name: str | None) -> None:
        if not name:
            return
        from ..control.engines import build_command

        profile = self.settings.config.profiles[name]  # type: ignore[attr-defined]
        cmd = " ".join(build_command(profile, module=self.engine_manager.module))
        body = f"Start engine [b]{name}[/b] on {profile.host}:{profile.port}:\n\n{cmd}"
        self.push_screen(ConfirmDialog("Start a local vLLM engine?", body),  # type: ignore[attr-defined]
                         partial(self._run_start, name) )

    def _run_start(self, name: str, ok: bool) -> None:
        if not ok:
            return
        profile = self.settings.config.profiles[name]  # type: ignore[attr-defined]
        mgr = self.engine_manager

        def run(progress):
            return mgr.start(name, profile, progress=follow(progress), profile_name=name)

        self._operation(f"Starting {name}", run)

    def action_engine_stop(self) -> None:
        rec = self.managed(self.selected_engine_name())  # type: ignore[attr-defined]
        if rec is None:
            return
        grace = self.settings.config.profiles.get(rec.profile_name)  # type: ignore[attr-defined]
        body = (f"Stop [b]{rec.name}[/b] (pid {rec.pid}, {rec.url}): SIGTERM — vLLM drains in-flight requests — "
                f"then SIGKILL of its process group after {grace.stop_grace_s if grace else 30:.0f} s.")
        self.push_screen(ConfirmDialog("Stop engine?", body), partial(self._run_simple, "stop", rec.name))  # type: ignore[attr-defined]

    def action_engine_restart(self) -> None:
        rec = self.managed(self.selected_engine_name())  # type: ignore[attr-defined]
        if rec is None:
            return
        body = f"Restart [b]{rec.name}[/b] with the same arguments: drain, stop, start, wait for /health.\n\n{rec.command()}"
        self.push_screen(ConfirmDialog("Restart engine?", body), partial(self._run_simple, "restart", rec.name))  # type: ignore[attr-defined]

    def _run_simple(self, what: str, name: str, ok: bool) -> None:
        if not ok:
            return
        mgr = self.engine_manager

        def run(progress):
            cb = follow(progress)
            return mgr.stop(name, progress=cb) if what == "stop" else mgr.restart(name, progress=cb)

        self._operation(f"{what.capitalize()} {name}", run)

    def action_engine_set_seqs(self) -> None:
        rec = self.managed(self.selected_engine_name())  # type: ignore[attr-defined]
        if rec is None:
            return
        self.push_screen(ArgsDialog(rec.name, "max_num_seqs", rec.max_num_seqs), partial(self._confirm_set, rec))  # type: ignore[attr-defined]

    def _confirm_set(self, rec: EngineRecord, changes: dict | None) -> None:
        if not changes:
            return
        lines = "\n".join(f"  {k}: {rec.args.get(k)} → {v}" for k, v in changes.items())
        body = (f"Change [b]{rec.name}[/b]:\n{lines}\n\nThen: drain (SIGTERM, in-flight requests finish), restart "
                "with the new value, wait for /health, verify the running process took it. If the new "
                "value fails to start, the old one is restored.")
        self.push_screen(ConfirmDialog("Change engine arguments?", body), partial(self._run_set, rec.name, changes))  # type: ignore[attr-defined]

    def _run_set(self, name: str, changes: dict, ok: bool) -> None:
        if not ok:
            return
        mgr = self.engine_manager
        latest = self._latest_stats

        def run(progress):
            return mgr.set_args(name, changes, progress=follow(progress), stats=lambda rec: latest(rec.name))

        self._operation(f"Change {name}", run)

    def _latest_stats(self, name: str):
        """The collector's view when it is current; None makes the manager scrape
        the engine itself (right after a restart the snapshot still says down)."""
        snap = self.snapshot  # type: ignore[attr-defined]
        s = None if snap is None else snap.by_name().get(name)
        return s if s is not None and s.state == "up" and s.running is not None else None

    def _operation(self, title: str, run) -> None:
        def done(result: object) -> None:
            self.log_event(f"{title}: {describe_result(result).splitlines()[0]}")  # type: ignore[attr-defined]
            rec = getattr(result, "record", result)
            if isinstance(rec, EngineRecord) and rec.alive:
                self._watch(rec)
            if isinstance(result, StopResult):
                self.collector.remove_endpoint(result.name)  # type: ignore[attr-defined]
            self.refresh_bindings()  # type: ignore[attr-defined]

        self.push_screen(OperationScreen(title, run, describe_result, on_done=done))  # type: ignore[attr-defined]
