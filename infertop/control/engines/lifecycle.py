"""Spawning and stopping engine processes: :class:`Lifecycle`, given the :class:`~.store.EngineStore`.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from ...config import ProfileConfig
from ...sources.http_client import HttpError, blocking_get
from ..audit import owner_info
from .command import (
    _shell_quote,
    build_command,
    child_env,
    connect_host,
    drain_timeout_for,
    effective_args,
)
from .errors import (
    EngineAborted,
    EngineError,
    EngineStartError,
    NotOurProcessError,
    PortInUseError,
)
from .progress import _Emitter, drain_counts
from .state import (
    ENGINE_ID_ENV,
    LOG_ROTATE_BYTES,
    LOG_TAIL_ON_FAILURE,
    STATE_VERSION,
    EngineRecord,
    StopResult,
    _LogFollower,
    _rc_text,
    classify_failure,
    clean_line,
    last_error_line,
    private_dir,
)
from .stopping import StopRun
from .store import EngineStore
from ..procfs import (
    _cmd_summary,
    _send_verified,
    kernel_argv,
    port_is_free,
    port_listeners,
    read_cgroup,
    read_cmdline,
    read_stat,
)


@dataclass(frozen=True)
class Timings:
    """How the lifecycle paces itself (see :class:`~infertop.control.engines.EngineManager`)."""

    poll_interval_s: float = 0.5  # health and group polls
    kill_wait_s: float = 10.0  # after SIGKILL, for the processes to go
    failure_grace_s: float = 5.0  # SIGTERM → SIGKILL when a start fails
    metrics_interval_s: float = 1.0  # in-flight scrapes while draining
    http_close_s: float = 2.0  # after vLLM logs its engine stopped, before SIGKILL of its HTTP server
    observe_timeout_s: float = 5.0  # one /metrics scrape
    orphan_grace_s: float = 3.0  # processes left once the main one exited: SIGTERM after this


class Lifecycle:
    """Spawn an engine and wait for /health; stop it (SIGTERM, drain, SIGKILL after the grace).

    No audit and no history of its own: the actions around it (:mod:`.actions`) record those.
    ``module`` replaces vLLM's api_server module (tests use a fake engine)."""

    def __init__(self, store: EngineStore, timings: Timings, module: str) -> None:
        self.store, self.timings, self.module = store, timings, module

    # -- start

    def start(self, name: str, profile: ProfileConfig, overrides: dict[str, Any], profile_name: str,
              emit: _Emitter, timeout_s: float | None, *, restarts: int,
              before_spawn: Callable[[list[str]], None] | None = None,
              abort: threading.Event | None = None, leave_on_abort: bool = False) -> EngineRecord:
        """Spawn and wait healthy.  ``before_spawn(cmd)`` runs after every check, right before
        the spawn (the audit intent); an exception from it cancels the start.  ``abort`` stops
        the wait for /health: the engine is then stopped again, or — ``leave_on_abort`` (a
        restart) — left as it is, still starting, and :class:`EngineAborted` says so."""
        drain = drain_timeout_for(profile, overrides, self.module)
        run_profile = replace(profile, shutdown_timeout=drain) if drain is not None else profile
        args = effective_args(run_profile, overrides)
        host, port = str(args.get("host") or "127.0.0.1"), int(args["port"])
        self._clear_the_way(name, host, port)
        cmd = build_command(run_profile, overrides, module=self.module)
        engine_id = uuid.uuid4().hex
        env = child_env(profile.env)
        env[ENGINE_ID_ENV] = engine_id
        private_dir(self.store.engines_dir)
        log_path = self.store.log_path(name)
        self._rotate_log(log_path)
        if before_spawn is not None:
            before_spawn(cmd)
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as logf:
            logf.write(f"==== infertop {time.strftime('%Y-%m-%d %H:%M:%S')}: starting engine {name}: "
                       f"{' '.join(_shell_quote(a) for a in cmd)}\n".encode())
            logf.flush()
            offset = logf.tell()
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # own session and process group: sid == pgid == pid
                    close_fds=True,
                )
            except OSError as e:
                raise EngineStartError(f"cannot run {cmd[0]}: {e.strerror or e}", log_path=str(log_path)) from None
        t_spawn = time.monotonic()
        pst = read_stat(proc.pid)
        stored_profile = asdict(profile)
        stored_profile["env"] = {}  # values may be secrets: only their names are kept (env_names)
        st = {
            "version": STATE_VERSION,
            "name": name,
            "profile_name": profile_name,
            "profile": stored_profile,
            "env_names": sorted(profile.env),
            "overrides": overrides,
            "args": args,
            "pid": proc.pid,
            "pgid": pst.pgrp if pst else proc.pid,
            "sid": pst.session if pst else proc.pid,
            "starttime": pst.starttime if pst else None,
            "cgroup": read_cgroup(proc.pid),
            "procs": [],
            "boot_id": self.store.boot_id,
            "engine_id": engine_id,
            "cmdline": cmd,
            "kernel_cmdline": kernel_argv(cmd),
            "host": host,
            "port": port,
            "url": f"http://{connect_host(host)}:{port}",
            "log_path": str(log_path),
            "started_at": time.time(),
            "healthy_at": None,
            "startup_s": None,
            "phase": "starting",
            "restarts": restarts,
            "infertop_pid": os.getpid(),
            "owner": owner_info(),
        }
        self._watch_child(proc)
        self.store.track(st)
        self._write_state_or_stop(name, st, log_path)
        with self.store.lock:
            self.store.exited.pop(name, None)
            self.store.adopted.discard(name)
        emit("spawned", f"spawned pid {proc.pid}: {_cmd_summary(cmd, 120)}", pid=proc.pid, force=True)

        timeout = float(timeout_s if timeout_s is not None else profile.start_timeout_s)
        follower = _LogFollower(log_path, offset)
        try:
            reason = self._wait_healthy(proc, st, follower, emit, timeout, t_spawn, abort)
        except EngineAborted:
            if not leave_on_abort:
                self.kill_now(st, self.timings.failure_grace_s)
                self.store.drop_state(name)
                raise
            self.store.track(st)
            with contextlib.suppress(OSError):
                self.store.write_state(name, st)
            raise EngineAborted(
                f"aborted while waiting for /health ({time.monotonic() - t_spawn:.0f} s of {timeout:g} s): "
                f"the engine (pid {proc.pid}, {_kv_args(overrides)}) is left as it is, still starting; "
                f"`infertop engine status {name}` shows whether it comes up") from None
        except BaseException:  # interrupted (Ctrl-C, worker cancelled): leave nothing running
            self.kill_now(st, self.timings.failure_grace_s)
            self.store.drop_state(name)
            raise
        if reason is not None:
            emit("failed", reason, pid=proc.pid, force=True)
            self.kill_now(st, self.timings.failure_grace_s)
            follower.poll()
            tail = [clean_line(x, 500) for x in follower.all_lines()[-LOG_TAIL_ON_FAILURE:]]
            self.store.drop_state(name)
            raise EngineStartError(reason, log_tail=tail, log_path=str(log_path), pid=proc.pid,
                                   elapsed_s=time.monotonic() - t_spawn)
        startup = time.monotonic() - t_spawn
        self.store.track(st)
        st.update(phase="running", healthy_at=time.time(), startup_s=startup)
        self._write_state_or_stop(name, st, log_path)
        emit("healthy", f"healthy after {startup:.1f} s (pid {proc.pid}, port {port})", pid=proc.pid, force=True)
        return self.store.record_or_raise(st)

    def _clear_the_way(self, name: str, host: str, port: int) -> None:
        """Before a spawn: no engine of that name runs (a state left by one that is gone is dropped, one whose
        PID now runs another program kept aside), and the port is free (EngineError, PortInUseError)."""
        existing = self.store.read_state(name)
        if existing is not None:
            kind, why = self.store.identity(existing)
            if kind == "alive" or (kind == "gone" and self.store.live_group(existing)):
                raise EngineError(f"engine {name!r} is already running (pid {existing['pid']}); "
                                  "stop or restart it")
            if kind == "mismatch":
                aside = self.store.keep_aside(name)
                self.store.add_history(name, "kept-aside", "stale", reason=why, pid=existing.get("pid"),
                                       path=str(aside) if aside else None)
            else:
                self.store.drop_state(name)
        for other in self.store.all_states():
            if other.get("name") != name and int(other.get("port", -1)) == port:
                if self.store.identity(other)[0] == "alive":
                    raise PortInUseError(f"port {port} in use by engine {other['name']!r} (pid {other['pid']})")
        if not port_is_free(host, port):
            raise PortInUseError(f"port {port} in use by {self._describe_port_owner(port)}")

    def _write_state_or_stop(self, name: str, st: dict, log_path) -> None:
        """Write the engine's state file; an engine that cannot be tracked would be an
        orphan nobody can stop, so when the write fails it is stopped again."""
        try:
            self.store.write_state(name, st)
        except OSError as e:
            self.kill_now(st, self.timings.failure_grace_s)
            raise EngineStartError(f"engine state cannot be written ({self.store.state_path(name)}: "
                                   f"{e.strerror or e}); the engine was stopped again",
                                   log_path=str(log_path), pid=st.get("pid")) from None

    def _wait_healthy(self, proc: subprocess.Popen, st: dict, follower: _LogFollower, emit: _Emitter,
                      timeout: float, t_spawn: float, abort: threading.Event | None = None) -> str | None:
        """Poll until /health is 200 (None) or a failure reason; EngineAborted once ``abort`` is set."""
        health_url = st["url"] + "/health"
        last_err = "no answer yet"
        last_track = time.monotonic()
        problem_since: float | None = None
        reason: str | None = None
        with httpx.Client(timeout=httpx.Timeout(2.0, connect=1.0), trust_env=False) as client:
            while True:
                if abort is not None and abort.is_set():
                    raise EngineAborted("aborted while waiting for /health")
                follower.poll()
                lines = follower.all_lines()
                rc = proc.returncode
                if rc is None:
                    rc = self._child_rc(proc)
                if rc is not None:
                    follower.poll()
                    lines = follower.all_lines()
                    why = classify_failure(lines) or last_error_line(lines) or "no output"
                    reason = f"engine exited with status {_rc_text(rc)} before /health answered: {why}"
                    reason += _hint(lines)
                    break
                problem = classify_failure(lines)
                if problem is not None:
                    # vLLM usually exits right after; give it a moment to do so.
                    problem_since = problem_since or time.monotonic()
                    if time.monotonic() - problem_since > 3.0:
                        reason = problem
                        break
                try:
                    status, _ = blocking_get(health_url, 64 * 1024, timeout_s=2.0, connect_timeout_s=1.0,
                                             client=client, error_body=False)
                    if status == 200:
                        break
                    last_err = f"HTTP {status}"
                except HttpError as e:  # a body past its bound
                    last_err = str(e)
                except httpx.HTTPError as e:
                    last_err = _http_error(e)
                elapsed = time.monotonic() - t_spawn
                if elapsed >= timeout:
                    reason = f"not healthy after {timeout:g} s (/health: {last_err})"
                    break
                emit("waiting", f"waiting for /health ({elapsed:.0f} s of {timeout:g} s)",
                     log_line=follower.last_line(), pid=proc.pid, countdown_s=timeout - elapsed)
                if time.monotonic() - last_track >= 2.0:  # EngineCore, workers: record them as they appear
                    last_track = time.monotonic()
                    if self.store.track(st):
                        with contextlib.suppress(OSError):
                            self.store.write_state(st["name"], st)
                if abort is not None:
                    abort.wait(self.timings.poll_interval_s)
                else:
                    time.sleep(self.timings.poll_interval_s)
        return reason

    def _describe_port_owner(self, port: int) -> str:
        pids = port_listeners(port)
        if not pids:
            return "another process (not visible to this user)"
        pid = pids[0]
        for other in self.store.all_states():
            if other.get("pgid") and (st := read_stat(pid)) and st.pgrp == other["pgid"]:
                return f"engine {other['name']!r} (pid {pid})"
        return f"pid {pid} ({_cmd_summary(read_cmdline(pid), 60)})"

    def _rotate_log(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            if path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(path, path.with_suffix(".log.1"))

    def _watch_child(self, proc: subprocess.Popen) -> None:
        with self.store.lock:
            self.store.children[proc.pid] = proc

        def reap() -> None:
            proc.wait()

        threading.Thread(target=reap, daemon=True, name=f"infertop-reap-{proc.pid}").start()

    def _child_rc(self, proc: subprocess.Popen) -> int | None:
        """Exit status of our child even while the reaper thread holds its lock."""
        if proc.returncode is not None:
            return proc.returncode
        st = read_stat(proc.pid)
        if st is None or st.state in ("Z", "X"):
            # Exited; the reaper is collecting it — wait briefly for the status.
            for _ in range(50):
                if proc.returncode is not None:
                    return proc.returncode
                time.sleep(0.02)
            return proc.returncode if proc.returncode is not None else -1
        return None

    # -- stop

    def default_grace(self, st: Mapping[str, Any]) -> float:
        prof = st.get("profile") or {}
        grace = float(prof.get("stop_grace_s", 30.0))
        drain = (st.get("args") or {}).get("shutdown_timeout")
        if drain:
            grace = max(grace, float(drain) + 10.0)
        return grace

    def stop(self, st: dict, grace_s: float | None, emit: _Emitter,
             before_signal: Callable[[dict], None] | None = None,
             abort: threading.Event | None = None) -> StopResult:
        """SIGTERM the main (API-server) process: vLLM drains its in-flight requests for
        ``--shutdown-timeout`` and stops its EngineCore and workers itself.  Only after
        ``grace_s`` does the whole engine get SIGKILL.  Processes left once the main one
        has exited get SIGTERM after ``orphan_grace_s``, SIGKILL soon after (:class:`~.stopping.StopRun`).

        ``before_signal(info)`` runs after every check, right before the first signal
        (the audit intent: ``info`` holds the pids and the in-flight count); an
        exception from it cancels the stop with nothing signalled.

        ``abort`` stops the waiting (never the signal already sent): :class:`EngineAborted`
        says what the engine is doing then (vLLM drains on and exits by itself; no SIGKILL).
        """
        name, pid = st["name"], int(st["pid"])
        kind, why = self.store.identity(st)
        if kind == "mismatch":
            refusal = self.store.set_stale(st, why)
            emit("failed", refusal, force=True)
            raise NotOurProcessError(refusal)
        grace = float(grace_s) if grace_s is not None else self.default_grace(st)
        members = self.store.live_group(st)
        if kind == "gone" and not members:
            return self._already_exited(st, why, emit, before_signal)
        before_n = aborted0 = None
        if kind == "alive":
            before_n, aborted0 = drain_counts(st["url"], min(self.timings.observe_timeout_s, 3.0))
        if abort is not None and abort.is_set():
            raise EngineAborted(f"aborted before anything was signalled: engine {name!r} runs on (pid {pid})")
        if before_signal is not None:
            before_signal({"pids": [m.pid for m in members], "in_flight": before_n,
                           "main": "alive" if kind == "alive" else why})
        self.store.track(st, members)
        st["phase"] = "stopping"
        with contextlib.suppress(OSError):  # the signal matters more than the record of it
            self.store.write_state(name, st)
        return StopRun(self.store, self.timings, st, grace, emit, abort, alive=kind == "alive", members=members,
                       before_n=before_n, aborted0=aborted0, signal_members=self._signal_members).run()

    def _already_exited(self, st: dict, why: str, emit: _Emitter,
                        before_signal: Callable[[dict], None] | None) -> StopResult:
        """Nothing of the engine is left: record that (the intent says so) and drop its state."""
        name, pid = st["name"], int(st["pid"])
        if before_signal is not None:
            before_signal({"pids": [], "in_flight": None, "note": f"already exited ({why})"})
        self.store.drop_state(name)
        rc = self.store.owned_rc(pid)
        reason = f"had already exited ({why})"
        emit("stopped", reason, pid=pid, force=True)
        return StopResult(name, pid, 0.0, False, rc, reason, None, already_exited=True)

    def _signal_members(self, st: Mapping[str, Any], sig: int) -> None:
        """``sig`` to the whole engine: its process group (leader verified) and every verified member."""
        with contextlib.suppress(NotOurProcessError):
            self._signal(st, sig)
        for m in self.store.live_group(st):
            _send_verified(m.pid, m.starttime, sig)

    def kill_now(self, st: dict, grace: float) -> None:
        """Failure cleanup: SIGTERM, short grace, SIGKILL; wait until the engine is gone."""
        self._signal_members(st, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.store.live_group(st) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.store.live_group(st):
            self._signal_members(st, signal.SIGKILL)
            deadline = time.monotonic() + self.timings.kill_wait_s
            while self.store.live_group(st) and time.monotonic() < deadline:
                time.sleep(0.05)

    def _signal(self, st: Mapping[str, Any], sig: int) -> None:
        """Signal the engine's group — only after checking it is still ours."""
        kind, why = self.store.identity(st)
        if kind == "mismatch":
            raise NotOurProcessError(self.store.refusal(st, why))
        if kind == "alive":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(st["pgid"]), sig)
            return
        # The leader is gone: signal the group members that are verifiably its own.
        for m in self.store.live_group(st):
            _send_verified(m.pid, m.starttime, sig)


def _http_error(e: httpx.HTTPError) -> str:
    if isinstance(e, httpx.ConnectError):
        return "connection refused" if "refused" in str(e).lower() else "cannot connect"
    if isinstance(e, httpx.TimeoutException):
        return "timeout"
    return type(e).__name__


def _hint(lines: list[str]) -> str:
    text = "\n".join(lines[-50:])
    if "No module named 'vllm'" in text or 'No module named "vllm"' in text:
        return (" — the profile's python has no vLLM; set `python:` to the vLLM virtualenv's "
                "python (`python -m infertop.control.vllm_env --check` prints it)")
    return ""


def _kv_args(d: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items()) or "its recorded arguments"


