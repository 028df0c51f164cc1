"""Local vLLM engines: start, stop, restart, change arguments — safely.

Shared by the TUI (which runs these blocking calls in thread workers) and
the headless ``infertop engine`` command.  No UI imports.

An engine is ``python -m vllm.entrypoints.openai.api_server ...`` built
from a launch profile (:func:`build_command`), spawned in its own process
group with its output in ``<state_dir>/engines/<name>.log``.  For each
running engine a state file ``<state_dir>/engines/<name>.json`` records its
PID, process group, start time (``/proc/<pid>/stat`` field 22), boot id and
exact command line.  Before any signal the live process must match all of
them; otherwise the action is refused ("PID 1234 is no longer the engine
infertop started"): infertop never signals a process it did not start.

A new :class:`EngineManager` re-adopts engines started earlier (by another
infertop, or before a restart of this one) that still run, drops state
files whose processes are all gone, and keeps aside (``<name>.stale-<time>.json``)
those whose PID now runs another program: acting on such an engine is
refused with the reason.

Every process of an engine (vLLM's EngineCore and workers appear after the
API server, and vLLM retitles them) is recorded with its start time, so
``status`` and ``stop`` find them even after the main process died.

Stopping sends SIGTERM to the main (API-server) process only — vLLM then
drains in-flight requests for ``--shutdown-timeout`` seconds (derived from
the profile's ``stop_grace_s`` when the profile sets none) and stops its
own workers — reports "draining (n in flight)" from the engine's live
``/metrics``, and only after the grace period sends SIGKILL to the whole
engine; it returns once no process of it remains.

Every action writes an audit *intent* before its first signal or spawn and
an *outcome* once known; when the audit log cannot be written the action
is refused (:class:`AuditRefusedError`) unless ``unaudited=True``.

Engine names are free text (``local:28400``, ``my engine``); they are
encoded only where they become file names.

Progress callbacks receive :class:`EngineProgress` from the calling
(worker) thread, throttled to a few per second; keep them cheap (a TUI
posts them to its event loop with ``call_from_thread``).  Exceptions in a
callback are ignored.

The code is split by responsibility; every public name stays importable
from here:

- :mod:`.engine_command` — building and reading back command lines, overrides;
- :mod:`.engine_errors` — the exceptions;
- :mod:`.engine_progress` — progress events and /metrics observation;
- :mod:`.engine_state` — records, results, state-file and log helpers;
- :mod:`.procfs` — reading ``/proc`` (stat, command line, process groups, ports);
- :mod:`.engine_store` / :mod:`.engine_lifecycle` — :class:`EngineManager`'s
  identity/state-file and start/stop internals.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from ..config import ProfileConfig, default_state_dir
from ..domain.engine import EngineStats
from .audit import AuditLog
from .engine_command import (
    ARG_TYPES,
    DEFAULT_MODULE,
    FLAG_FIELDS,
    NOT_ARGS,
    _kv,
    _safe_args,
    build_command,
    child_env,
    cmdline_value,
    connect_host,
    effective_args,
    entry_argv,
    expected_value,
    normalize_overrides,
    parse_assignments,
    parse_value,
)
from .engine_errors import (
    AuditRefusedError,
    EngineAborted,
    EngineBusyError,
    EngineError,
    EngineNotFound,
    EngineStartError,
    EngineStopError,
    InvalidArgsError,
    NotOurProcessError,
    PortInUseError,
    SetArgsError,
    VerifyError,
)
from .engine_gateway import GatewayStep, append_note
from .engine_lifecycle import _LifecycleMixin
from .gateway_drain import GatewayDrain
from .engine_progress import (
    EngineProgress,
    Progress,
    _Emitter,
    observe_once,
)
from .engine_state import (
    ENGINE_ID_ENV,
    LOG_ROTATE_BYTES,
    LOG_TAIL_ON_FAILURE,
    STATE_VERSION,
    EngineRecord,
    SetResult,
    StopResult,
    _profile_from_dict,
    classify_failure,
    clean_line,
    last_error_line,
)
from .engine_store import _file_stem
from .procfs import (
    ProcStat,
    boot_id,
    group_members,
    port_is_free,
    port_listeners,
    read_cmdline,
    read_stat,
)

__all__ = [
    "DEFAULT_MODULE",
    "FLAG_FIELDS",
    "ARG_TYPES",
    "NOT_ARGS",
    "entry_argv",
    "effective_args",
    "build_command",
    "cmdline_value",
    "expected_value",
    "parse_value",
    "parse_assignments",
    "normalize_overrides",
    "child_env",
    "connect_host",
    "EngineError",
    "EngineNotFound",
    "EngineBusyError",
    "AuditRefusedError",
    "InvalidArgsError",
    "PortInUseError",
    "NotOurProcessError",
    "EngineStartError",
    "EngineStopError",
    "VerifyError",
    "SetArgsError",
    "Progress",
    "EngineProgress",
    "observe_once",
    "ENGINE_ID_ENV",
    "STATE_VERSION",
    "LOG_ROTATE_BYTES",
    "LOG_TAIL_ON_FAILURE",
    "EngineRecord",
    "StopResult",
    "SetResult",
    "clean_line",
    "classify_failure",
    "last_error_line",
    "ProcStat",
    "read_stat",
    "read_cmdline",
    "boot_id",
    "group_members",
    "port_listeners",
    "port_is_free",
    "tail_file",
    "EngineManager",
]


# ----------------------------------------------------------------- logs


def tail_file(path: str | os.PathLike, n: int = 50, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
    """The last ``n`` lines of a file, reading backwards from its end.

    Reads blocks from the end until ``n`` line breaks are found (at most
    ``max_bytes``), so a multi-gigabyte log costs a few reads.  A carriage
    return inside a line (progress bars) keeps only what follows it.
    """
    if n <= 0:
        return []
    try:
        f = open(path, "rb")  # noqa: SIM115
    except OSError:
        return []
    with f:
        f.seek(0, os.SEEK_END)
        end = pos = f.tell()
        data = b""
        block = 8192
        while pos > 0 and data.count(b"\n") <= n and end - pos < max_bytes:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
            block = min(block * 2, 1024 * 1024)
    lines = data.split(b"\n")
    if pos > 0:
        lines = lines[1:]  # partial first line
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for raw in lines[-n:]:
        if b"\r" in raw:
            parts = [p for p in raw.split(b"\r") if p.strip()]
            raw = parts[-1] if parts else b""
        out.append(raw.decode("utf-8", "replace"))
    return out


# ----------------------------------------------------------------- manager


class EngineManager(_LifecycleMixin):
    """Starts, stops, restarts and re-configures local engines.

    Blocking; thread-safe (one action per engine at a time, also across
    infertop processes, through a lock file).  ``module`` replaces vLLM's
    api_server module (tests use a fake engine); ``poll_interval_s`` paces
    health and group polling.  ``http_close_s``: once vLLM logs that its
    engine has drained and stopped, how long its HTTP server may keep
    waiting for clients' connections to close before SIGKILL (vLLM 0.32's
    server otherwise waits for them without limit while clients stay
    connected).
    """

    def __init__(
        self,
        state_dir: str | os.PathLike | None = None,
        audit: AuditLog | None = None,
        *,
        module: str = DEFAULT_MODULE,
        poll_interval_s: float = 0.5,
        kill_wait_s: float = 10.0,
        failure_grace_s: float = 5.0,
        metrics_interval_s: float = 1.0,
        http_close_s: float = 2.0,
        observe_timeout_s: float = 5.0,
        orphan_grace_s: float = 3.0,
        profiles: Mapping[str, ProfileConfig] | None = None,
        adopt: bool = True,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.engines_dir = self.state_dir / "engines"
        self.audit = audit if audit is not None else AuditLog()
        self.module = module
        self.poll_interval_s = poll_interval_s
        self.kill_wait_s = kill_wait_s
        self.failure_grace_s = failure_grace_s
        self.metrics_interval_s = metrics_interval_s
        self.http_close_s = http_close_s
        self.observe_timeout_s = observe_timeout_s
        self.orphan_grace_s = orphan_grace_s
        self.profiles: Mapping[str, ProfileConfig] = profiles if profiles is not None else {}
        self._lock = threading.RLock()
        self._op_locks: dict[str, threading.Lock] = {}
        self._children: dict[int, subprocess.Popen] = {}  # pid → our child
        self._exited: dict[str, EngineRecord] = {}  # exited this session, for display
        self._adopted: set[str] = set()
        self._stale: dict[str, tuple[dict, str, str | None]] = {}  # name → (state, refusal, kept-aside path)
        self._tracked_at: dict[str, float] = {}
        self._boot_id = boot_id()
        if adopt:
            self.adopt()

    # -- paths

    def state_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.json"

    def log_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.log"

    def history_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.history.jsonl"

    def lock_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.lock"

    def managed(self, name: str | None) -> EngineRecord | None:
        """The live engine infertop manages under ``name``, or None — for any name, never raising
        on what a name contains or on an unreadable state directory (key-availability checks)."""
        if not isinstance(name, str) or not name:
            return None
        try:
            rec = self.status(name)
        except (OSError, EngineError, ValueError):
            return None
        return rec if rec is not None and rec.alive else None

    # -- public: queries

    def adopt(self) -> list[str]:
        """Re-adopt engines whose state file matches a live process; drop stale state files.

        Returns the names adopted.  Called on construction.
        """
        adopted = []
        try:
            names = self._state_names()
        except OSError:
            return adopted
        for name in names:
            st = self._read_state(name)
            if st is None:
                continue
            kind, why = self._identity(st)
            if kind == "mismatch":
                if not self._busy(name):
                    self._set_stale(st, why)
                continue
            if kind == "alive" or (kind == "gone" and self._live_group(st)):
                with self._lock:
                    self._adopted.add(name)
                adopted.append(name)
                if st.get("phase") == "starting" and kind == "alive" and not self._busy(name):
                    # Its starter is gone: settle the phase with one /health probe.
                    with contextlib.suppress(httpx.HTTPError, OSError), \
                            httpx.Client(timeout=1.0, trust_env=False) as c:
                        if c.get(st["url"] + "/health").status_code == 200:
                            st.update(phase="running", healthy_at=st.get("healthy_at") or time.time())
                            self._write_state(name, st)
            elif not self._busy(name):
                self._drop_state(name)
                self._history(name, "dropped", "stale", reason=why, pid=st.get("pid"))
        return adopted

    def status(self, name: str) -> EngineRecord | None:
        """The engine's record (cheap: /proc only), or None if infertop knows none."""
        st = self._read_state(name)
        if st is None:
            with self._lock:
                stale = self._stale.get(name)
                if stale is not None:
                    return self._build_record(stale[0], "stale", stale[1])
                return self._exited.get(name)
        rec = self._record(st)
        if rec is None:
            with self._lock:
                return self._exited.get(name)
        return rec

    def list(self) -> list[EngineRecord]:  # noqa: A003 — the manager's natural verb
        """Every known engine: running ones, then those that exited this session."""
        out: dict[str, EngineRecord] = {}
        for name in self._state_names():
            rec = self.status(name)
            if rec is not None:
                out[rec.name] = rec
        with self._lock:
            stale = list(self._stale)
            for name, rec in self._exited.items():
                out.setdefault(name, rec)
        for name in stale:
            if name not in out and (rec := self.status(name)) is not None:
                out[name] = rec
        return sorted(out.values(), key=lambda r: (not r.alive, r.name))

    def tail_log(self, name: str, n: int = 50) -> list[str]:
        """The last ``n`` lines of the engine's log (read from the end of the file)."""
        return [clean_line(line, 1000) for line in tail_file(self.log_path(name), n)]

    def history(self, name: str, n: int = 50) -> list[dict]:
        """The last ``n`` lifecycle events (start, stop, restart, set, exited…), oldest first."""
        out = []
        for line in tail_file(self.history_path(name), n):
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def health(self, name: str, timeout_s: float = 1.0) -> bool:
        """True when the engine answers GET /health with 200."""
        rec = self.status(name)
        if rec is None or not rec.alive:
            return False
        try:
            with httpx.Client(timeout=timeout_s, trust_env=False) as c:
                return c.get(rec.url + "/health").status_code == 200
        except httpx.HTTPError:
            return False

    def verify(self, name: str) -> EngineRecord:
        """The record, after checking the PID is still the engine; raises NotOurProcessError."""
        st = self._require_state(name)
        kind, why = self._identity(st)
        if kind == "mismatch":
            raise NotOurProcessError(self._set_stale(st, why))
        rec = self._record(st)
        if rec is None:
            raise EngineNotFound(f"engine {name!r} has just stopped")
        return rec

    # -- public: actions

    def start(
        self,
        name: str,
        profile: ProfileConfig,
        progress: Progress | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        profile_name: str | None = None,
        timeout_s: float | None = None,
        unaudited: bool = False,
    ) -> EngineRecord:
        """Spawn the engine and wait for /health 200.

        Raises PortInUseError (nothing spawned), EngineStartError (exit,
        timeout, out of memory; the engine is killed and nothing is left),
        EngineBusyError, InvalidArgsError, AuditRefusedError, or EngineError
        ("already running").
        """
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgsError("engine name: must not be empty")
        emit = _Emitter(progress, name, "start")
        audit = _Audit(self, "engine.start", name, unaudited)
        try:
            with self._operation(name):
                over = normalize_overrides(profile, overrides)
                new = effective_args(profile, over)
                rec = self._do_start(
                    name, profile, over, profile_name or name, emit, timeout_s, restarts=0,
                    before_spawn=lambda cmd: audit.intent(new=new, check={"port": "free"}, cmdline=cmd,
                                                          env_names=sorted(profile.env)))
        except EngineError as e:
            audit.failed(e, new=_safe_args(profile, overrides))
            if not isinstance(e, (EngineBusyError, AuditRefusedError)):
                self._history(name, "start", "failed", reason=e.reason)
            raise
        except OSError as e:
            raise audit.fs_error(e) from None
        audit.ok(new=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s))
        self._history(name, "start", "ok", args=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s))
        return rec

    def stop(self, name: str, grace_s: float | None = None, progress: Progress | None = None, *,
             unaudited: bool = False, abort: threading.Event | None = None,
             gateway: GatewayDrain | None = None) -> StopResult:
        """SIGTERM the main process (vLLM drains), SIGKILL the engine after ``grace_s``; nothing is left.

        ``grace_s`` defaults to the profile's ``stop_grace_s``, at least
        ``shutdown_timeout`` + 10 s.  With ``gateway`` (the infertop gateway in
        front of the engine) the engine is drained there first and undrained
        after (:class:`~infertop.control.engine_gateway.GatewayStep`).
        ``abort`` stops the waiting (EngineAborted says in what state).  Raises
        NotOurProcessError (refused, nothing signalled), EngineNotFound,
        EngineBusyError, EngineStopError, AuditRefusedError, EngineAborted.
        """
        emit = _Emitter(progress, name, "stop")
        audit = _Audit(self, "engine.stop", name, unaudited)
        old = None
        try:
            with self._operation(name):
                st = self._require_state(name)
                old = st.get("args")
                step = self._gateway_step(gateway, st, emit, abort, unaudited)
                try:
                    if step is not None:
                        step.begin(self._grace_for(st, grace_s), int(st["pid"]))
                    res = self._do_stop(st, grace_s, emit, abort=abort,
                                        before_signal=lambda info: audit.intent(old=old, check=info,
                                                                                grace_s=grace_s))
                except EngineError as e:
                    if step is not None:
                        append_note(e, step.end(failed=True))
                    raise
                if step is not None:
                    note = step.end(failed=False)
                    res = replace(res, reason=f"{step.summary()}; {res.reason}; {note}",
                                  gateway=f"{step.summary()}; {note}")
        except EngineError as e:
            audit.failed(e, old=old)
            raise
        except OSError as e:
            raise audit.fs_error(e) from None
        audit.ok(old=old, reason=res.reason, sigkill=res.sigkill, seconds=_r(res.seconds), pid=res.pid,
                 in_flight_before=res.in_flight_before, in_flight_after=res.in_flight_after, failed=res.failed)
        self._history(name, "stop", "ok", reason=res.reason, pid=res.pid, sigkill=res.sigkill,
                      stop_s=_r(res.seconds), exit_code=res.exit_code)
        return res

    def _grace_for(self, st: Mapping[str, Any], grace_s: float | None) -> float:
        return float(grace_s) if grace_s is not None else self._default_grace(st)

    def _gateway_step(self, gateway: GatewayDrain | None, st: Mapping[str, Any], emit: _Emitter,
                      abort: threading.Event | None, unaudited: bool) -> GatewayStep | None:
        """The gateway step for a running engine (nothing to drain for one already gone, or not ours)."""
        if gateway is None or self._identity(st)[0] != "alive":
            return None
        audit = self.audit
        if unaudited:
            try:
                audit.check_writable()
            except OSError:
                audit = None
        return GatewayStep(gateway, str(st["name"]), audit, emit, abort, min(self.poll_interval_s, 0.25))

    def restart(
        self,
        name: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        profile: ProfileConfig | None = None,
        progress: Progress | None = None,
        grace_s: float | None = None,
        timeout_s: float | None = None,
        unaudited: bool = False,
        abort: threading.Event | None = None,
        gateway: GatewayDrain | None = None,
    ) -> EngineRecord:
        """Stop (drain) and start again with the recorded profile (or ``profile``),
        the overrides set before, and ``overrides`` on top.  ``gateway``: drained there
        first, undrained once healthy (or on failure); ``abort`` as for :meth:`stop`,
        and while waiting for /health the new engine is left as it is."""
        emit = _Emitter(progress, name, "restart")
        audit = _Audit(self, "engine.restart", name, unaudited)
        old = new = None
        try:
            with self._operation(name):
                st = self._require_state(name)
                old = st.get("args")
                prof = self._profile_for(st, profile)
                over = normalize_overrides(prof, {**(st.get("overrides") or {}), **dict(overrides or {})})
                new = effective_args(prof, over)
                step = self._gateway_step(gateway, st, emit, abort, unaudited)
                try:
                    if step is not None:
                        step.begin(self._grace_for(st, grace_s), int(st["pid"]))
                    self._do_stop(st, grace_s, emit, abort=abort,
                                  before_signal=lambda info: audit.intent(old=old, new=new, check=info))
                    rec = self._do_start(name, prof, over, st.get("profile_name") or name, emit, timeout_s,
                                         restarts=int(st.get("restarts", 0)) + 1, abort=abort,
                                         leave_on_abort=True)
                except EngineError as e:
                    if step is not None:
                        append_note(e, step.end(failed=True))
                    raise
                if step is not None:
                    emit("done", f"{step.summary()}; {step.end(failed=False)}", pid=rec.pid, force=True)
        except EngineError as e:
            audit.failed(e, old=old, new=new)
            if not isinstance(e, (EngineBusyError, NotOurProcessError, AuditRefusedError)):
                self._history(name, "restart", "failed", reason=e.reason, args=new)
            raise
        except OSError as e:
            raise audit.fs_error(e) from None
        audit.ok(old=old, new=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s))
        self._history(name, "restart", "ok", args=rec.args, old=old, pid=rec.pid, startup_s=_r(rec.startup_s))
        return rec

    def set_args(
        self,
        name: str,
        changes: Mapping[str, Any],
        progress: Progress | None = None,
        *,
        check: Callable[[EngineRecord], str | None] | None = None,
        grace_s: float | None = None,
        timeout_s: float | None = None,
        rollback: bool = True,
        stats: Callable[[EngineRecord], EngineStats | None] | None = None,
        profile: ProfileConfig | None = None,
        unaudited: bool = False,
        abort: threading.Event | None = None,
        gateway: GatewayDrain | None = None,
    ) -> SetResult:
        """Change launch arguments: drain → restart with them → wait healthy → verify.

        Verification reads ``/proc/<pid>/cmdline`` of the new engine and
        compares the last value of each changed flag; ``check(record)`` may
        add a behaviour check (return an error message, or None when fine).
        If the new engine fails to start and ``rollback`` is set, the old
        arguments are started again and SetArgsError(rolled_back=True) is
        raised.  Unchanged values return ``changed=False`` without a restart.

        ``before``/``after`` come from ``stats(record)`` when given (the TUI
        passes its collector's latest stats: instant), else from one scrape
        of /metrics bounded by ``observe_timeout_s`` (None if it fails).

        ``gateway`` (an infertop gateway in front): drained there first, its
        in-flight followed to 0, undrained once the new engine is verified (or
        on any failure).  ``abort``: as for :meth:`restart`.
        """
        emit = _Emitter(progress, name, "set")
        audit = _Audit(self, "engine.set", name, unaudited)
        t0 = time.monotonic()
        old_vals: dict[str, Any] = {}
        new_vals: dict[str, Any] = {}
        try:
            with self._operation(name):
                st = self._require_state(name)
                prof = self._profile_for(st, profile)
                changes = normalize_overrides(prof, changes)
                if not changes:
                    raise InvalidArgsError("nothing to change")
                cur_args = dict(st.get("args") or {})
                old_vals = {k: cur_args.get(k) for k in changes}
                new_vals = dict(changes)
                kind, why = self._identity(st)
                if kind == "mismatch":
                    raise NotOurProcessError(self._set_stale(st, why))
                if old_vals == new_vals and kind == "alive":
                    rec = self._record(st)
                    self._audit("engine.set", name, "ok", old=old_vals, new=new_vals, reason="unchanged")
                    return SetResult(name, False, old_vals, new_vals, rec, {}, None, None, None, None,
                                     time.monotonic() - t0)
                old_over = dict(st.get("overrides") or {})
                new_over = normalize_overrides(prof, {**old_over, **changes})
                before = self._stats(self._record(st), stats) if kind == "alive" else None
                step = self._gateway_step(gateway, st, emit, abort, unaudited)
                try:
                    if step is not None:
                        step.begin(self._grace_for(st, grace_s), int(st["pid"]))
                    stop_res = self._do_stop(
                        st, grace_s, emit, abort=abort,
                        before_signal=lambda info: audit.intent(old=old_vals, new=new_vals, check=info,
                                                                diff=f"{_kv(old_vals)} → {_kv(new_vals)}"))
                    restarts = int(st.get("restarts", 0)) + 1
                    try:
                        rec = self._do_start(name, prof, new_over, st.get("profile_name") or name, emit,
                                             timeout_s, restarts=restarts, abort=abort, leave_on_abort=True)
                    except EngineStartError as e:
                        if not rollback:
                            raise SetArgsError(f"engine did not start with {_kv(new_vals)}: {e.reason}; "
                                               "it is stopped", log_tail=e.log_tail) from None
                        emit("rollback", f"new arguments failed ({e.reason}); starting again with {_kv(old_vals)}",
                             force=True)
                        try:
                            self._do_start(name, prof, old_over, st.get("profile_name") or name, emit, timeout_s,
                                           restarts=restarts, abort=abort, leave_on_abort=True)
                        except EngineError as e2:
                            raise SetArgsError(
                                f"engine did not start with {_kv(new_vals)}: {e.reason}; rollback to "
                                f"{_kv(old_vals)} failed too: {e2.reason}; it is stopped",
                                log_tail=e.log_tail) from None
                        raise SetArgsError(f"engine did not start with {_kv(new_vals)}: {e.reason}; "
                                           f"rolled back to {_kv(old_vals)}", log_tail=e.log_tail,
                                           rolled_back=True) from None
                    emit("verifying", "verifying the new arguments took effect", pid=rec.pid, force=True)
                    verified = self._verify_args(rec, changes)
                    if check is not None:
                        msg = check(rec)
                        if msg:
                            raise VerifyError(f"behaviour check failed: {msg}")
                    if step is not None and "max_num_seqs" in changes:
                        step.retune_cap(old_vals.get("max_num_seqs"), changes["max_num_seqs"])
                    after = self._stats(rec, stats)
                except EngineError as e:
                    if step is not None:
                        append_note(e, step.end(failed=True))
                    raise
                if step is not None:
                    note = step.end(failed=False)
                    stop_res = replace(stop_res, gateway=f"{step.summary()}; {note}")
                total = time.monotonic() - t0
                emit("done", f"{_kv(old_vals)} → {_kv(new_vals)} in {total:.1f} s", pid=rec.pid, force=True)
        except EngineError as e:
            audit.failed(e, old=old_vals or None, new=new_vals or None)
            if not isinstance(e, (EngineBusyError, NotOurProcessError, AuditRefusedError)):
                self._history(name, "set", "failed", old=old_vals, new=new_vals, reason=e.reason)
            raise
        except OSError as e:
            raise audit.fs_error(e) from None
        audit.ok(old=old_vals, new=new_vals, pid=rec.pid, startup_s=_r(rec.startup_s), total_s=_r(total),
                 verified=verified, in_flight_before=stop_res.in_flight_before,
                 in_flight_after=stop_res.in_flight_after, failed=stop_res.failed, gateway=stop_res.gateway or None)
        self._history(name, "set", "ok", old=old_vals, new=new_vals, pid=rec.pid, args=rec.args,
                      startup_s=_r(rec.startup_s), total_s=_r(total), stop_s=_r(stop_res.seconds))
        return SetResult(name, True, old_vals, new_vals, rec, verified, before, after, stop_res,
                         rec.startup_s, total)

    def _profile_for(self, st: Mapping[str, Any], given: ProfileConfig | None) -> ProfileConfig:
        """The profile to start again from: ``given``, else the recorded one with its ``env``
        values read from the config's profile (only their names are stored)."""
        if given is not None:
            return given
        prof = _profile_from_dict(st.get("profile") or {})
        names = [n for n in st.get("env_names") or [] if isinstance(n, str)]
        if not names:
            return prof
        pname = st.get("profile_name") or st.get("name")
        cfg = self.profiles.get(pname)
        missing = [n for n in names if cfg is None or n not in cfg.env]
        if missing:
            raise EngineError(f"profile {pname!r}: the value of {', '.join(missing)} is not in the config "
                              "(environment values are not stored with the engine's state); "
                              "add the profile back to the config")
        return replace(prof, env={n: cfg.env[n] for n in names})

    def _stats(self, rec: EngineRecord, fn: Callable[[EngineRecord], EngineStats | None] | None) -> EngineStats | None:
        if fn is not None:
            try:
                return fn(rec)
            except Exception:  # noqa: BLE001 — informative only
                return None
        return observe_once(rec.endpoint(self.observe_timeout_s))

    def forget(self, name: str) -> bool:
        """Drop a stale state file without signalling anything; True if one was dropped."""
        st = self._read_state(name)
        if st is None:
            with self._lock:
                stale = self._stale.pop(name, None)
                exited = self._exited.pop(name, None)
            if stale is not None:
                self._history(name, "forget", "ok", reason="stale", pid=stale[0].get("pid"))
                self._audit("engine.forget", name, "ok", old={"pid": stale[0].get("pid")}, reason=stale[1])
            return stale is not None or exited is not None
        kind, why = self._identity(st)
        if kind == "alive" or (kind == "gone" and self._live_group(st)):
            raise EngineError(f"engine {name!r} is running (pid {st['pid']}); stop it instead")
        self._drop_state(name)
        with self._lock:
            self._exited.pop(name, None)
        self._history(name, "forget", "ok", reason=why, pid=st.get("pid"))
        self._audit("engine.forget", name, "ok", old={"pid": st.get("pid")}, reason=why)
        return True


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


class _Audit:
    """One action's audit trail: an intent before execution, then its outcome.

    Failures before the intent (refusals, checks) become one-shot entries;
    an unwritable log refuses the action before anything is done, unless
    ``unaudited`` (then the outcome says so).
    """

    def __init__(self, mgr: EngineManager, action: str, target: str, unaudited: bool) -> None:
        self.mgr, self.action, self.target, self.unaudited = mgr, action, target, unaudited
        self.op: str | None = None
        self.intended = False

    def intent(self, **details: Any) -> None:
        self.intended = True
        try:
            self.op = self.mgr.audit.intent(self.action, self.target, **_clean(details))
        except OSError as e:
            if not self.unaudited:
                self.intended = False
                raise AuditRefusedError(f"refused: {e}; nothing was done (run it with --unaudited "
                                        "to act without an audit record)") from None

    def _outcome(self, result: str, **details: Any) -> None:
        details = _clean(details)
        try:
            if self.op is not None:
                self.mgr.audit.outcome(self.op, self.action, self.target, result, **details)
            else:
                if self.intended:
                    details["unaudited"] = True
                self.mgr.audit.record(self.action, self.target, result, **details)
        except OSError:
            pass  # the action is done; its result is still returned (and logged by the caller)

    def ok(self, **details: Any) -> None:
        self._outcome("ok", **details)

    def failed(self, e: EngineError, **details: Any) -> None:
        if isinstance(e, AuditRefusedError):
            return  # nothing could be written, nothing was done
        result = ("refused" if isinstance(e, NotOurProcessError)
                  else "aborted" if isinstance(e, EngineAborted) else "failed")
        self._outcome(result, reason=e.reason, **details)

    def fs_error(self, e: OSError) -> EngineError:
        """A filesystem error (state directory, log) as one line; recorded as the outcome."""
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        err = EngineError(f"{self.action.split('.')[-1]} {self.target!r}: {e.strerror or e}{where}")
        self._outcome("failed", reason=err.reason)
        return err


def _clean(details: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if v is not None}
