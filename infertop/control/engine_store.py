"""Engine identity, state files, history and per-engine locks: internals of :class:`EngineManager`.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..sources.vllm import EngineEndpoint
from .audit import AuditLog
from .engine_command import cmdline_value, expected_value
from .engine_errors import EngineBusyError, EngineError, EngineNotFound, InvalidArgsError, VerifyError
from .engine_state import ENGINE_ID_ENV, EngineRecord, _atomic_write_json, _rc_text
from .procfs import ProcStat, _cmd_summary, group_members, read_cmdline, read_stat


class _StoreMixin:
    """Identity checks, state files and history of :class:`~infertop.control.engines.EngineManager`."""

    # Set by EngineManager.__init__.
    state_dir: Path
    engines_dir: Path
    audit: AuditLog
    _lock: threading.RLock
    _op_locks: dict[str, threading.Lock]
    _children: dict[int, subprocess.Popen]
    _exited: dict[str, EngineRecord]
    _adopted: set[str]
    _boot_id: str

    # -- internals: identity

    def _identity(self, st: Mapping[str, Any]) -> tuple[str, str]:
        """("alive", ""), ("gone", why) or ("mismatch", why) for the recorded leader."""
        pid = int(st.get("pid") or 0)
        if pid <= 1:
            return "mismatch", "no valid PID recorded"
        if st.get("boot_id") and self._boot_id and st["boot_id"] != self._boot_id:
            return "gone", "the host has rebooted since"
        ps = read_stat(pid)
        if ps is None:
            return "gone", f"PID {pid} has exited"
        if st.get("starttime") is None or ps.starttime != int(st["starttime"]):
            return "mismatch", f"start time {ps.starttime} ≠ recorded {st.get('starttime')}"
        if ps.state in ("Z", "X"):
            return "gone", f"PID {pid} has exited"
        cmd = read_cmdline(pid)
        if cmd is None:
            return "gone", f"PID {pid} has exited"
        if cmd != list(st.get("cmdline") or []):
            return "mismatch", f"command line is now {_cmd_summary(cmd, 60)!r}"
        if ps.pgrp != int(st.get("pgid", -1)):
            return "mismatch", f"process group {ps.pgrp} ≠ recorded {st.get('pgid')}"
        return "alive", ""

    @staticmethod
    def _refusal(st: Mapping[str, Any], why: str) -> str:
        return (f"PID {st.get('pid')} is no longer the engine infertop started ({why}); "
                "refusing to signal it")

    def _live_group(self, st: Mapping[str, Any]) -> list[ProcStat]:
        """Live members of the engine's process group that are verifiably its own.

        Same process group and session, started no earlier than the engine,
        and carrying the engine's ``INFERTOP_ENGINE_ID`` in their initial
        environment (inherited by everything the engine spawned).
        """
        pgid, sid, t0 = st.get("pgid"), st.get("sid"), st.get("starttime")
        if not pgid or t0 is None:
            return []
        if st.get("boot_id") and self._boot_id and st["boot_id"] != self._boot_id:
            return []
        token = st.get("engine_id")
        members = [m for m in group_members(int(pgid))
                   if (sid is None or m.session == int(sid)) and m.starttime >= int(t0)]
        if token is None:  # no ownership token recorded: only a verified leader counts
            if self._identity(st)[0] != "alive":
                return []
            return [m for m in members if m.pid == int(st.get("pid", -1))]
        return [m for m in members if _has_token(m.pid, token)]

    def _verify_args(self, rec: EngineRecord, changes: Mapping[str, Any]) -> dict[str, str]:
        cmd = read_cmdline(rec.pid)
        if cmd is None:
            raise VerifyError(f"engine {rec.name!r} (pid {rec.pid}) is gone")
        seen: dict[str, str] = {}
        for key, value in changes.items():
            want = expected_value(key, value)
            got = cmdline_value(cmd, key)
            if got != want:
                raise VerifyError(f"{key}: the running engine has {got!r}, expected {want!r} "
                                  f"(/proc/{rec.pid}/cmdline)")
            seen[key] = got if got is not None else "(default)"
        return seen

    # -- internals: state files

    def _operation(self, name: str):
        return _OperationLock(self, _check_name(name))

    def _busy(self, name: str) -> bool:
        """True while a start/stop/restart/set of ``name`` runs (here or in another infertop)."""
        with self._lock:
            tlock = self._op_locks.get(name)
        if tlock is not None and tlock.locked():
            return True
        try:
            fd = os.open(self.engines_dir / f"{name}.lock", os.O_RDWR)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def _read_state(self, name: str) -> dict | None:
        path = self.state_path(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            # Unreadable: keep it aside for a human, never act on it.
            with contextlib.suppress(OSError):
                os.replace(path, path.with_suffix(".json.bad"))
            return None
        if not isinstance(data, dict) or "pid" not in data:
            return None
        data.setdefault("name", name)
        return data

    def _require_state(self, name: str) -> dict:
        st = self._read_state(name)
        if st is None:
            raise EngineNotFound(f"no engine named {name!r} is running under infertop "
                                 f"(no state in {self.engines_dir})")
        return st

    def _all_states(self) -> list[dict]:
        if not self.engines_dir.is_dir():
            return []
        return [s for p in sorted(self.engines_dir.glob("*.json")) if (s := self._read_state(p.stem))]

    def _write_state(self, name: str, st: dict) -> None:
        self.engines_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write_json(self.state_path(name), st)

    def _drop_state(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.state_path(name).unlink()

    def _endpoint(self, st: Mapping[str, Any], timeout_s: float = 5.0) -> EngineEndpoint:
        # /metrics of a CPU engine with saturated cores can take seconds
        mns = (st.get("args") or {}).get("max_num_seqs")
        return EngineEndpoint(st["name"], st["url"], int(mns) if mns is not None else None, timeout_s)

    def _record(self, st: dict) -> EngineRecord | None:
        """The record for a state; settles one whose process ended on its own.

        None when the state vanished meanwhile (an action stopped the engine).
        """
        kind, why = self._identity(st)
        phase = st.get("phase", "running")
        detail = None
        exit_code = None
        left = self._live_group(st) if kind == "gone" else []
        if kind == "mismatch":
            phase, detail = "stale", self._refusal(st, why)
        elif left:
            detail = f"main process exited; {len(left)} process(es) of its group remain (stop cleans them up)"
        elif kind == "gone" and not self._busy(st["name"]):
            phase, detail = "exited", why
            with self._lock:
                owned = int(st["pid"]) in self._children
            exit_code = self._owned_rc(int(st["pid"])) if owned else None
            if exit_code is not None:
                detail = f"exited with status {_rc_text(exit_code)}"
        with self._lock:
            adopted = st["name"] in self._adopted
        rec = EngineRecord(
            name=st["name"],
            profile_name=st.get("profile_name") or st["name"],
            phase=phase,
            pid=int(st["pid"]),
            pgid=int(st.get("pgid") or st["pid"]),
            host=st.get("host", ""),
            port=int(st.get("port", 0)),
            url=st.get("url", ""),
            cmdline=tuple(st.get("cmdline") or ()),
            args=dict(st.get("args") or {}),
            overrides=dict(st.get("overrides") or {}),
            started_at=float(st.get("started_at") or 0.0),
            healthy_at=st.get("healthy_at"),
            startup_s=st.get("startup_s"),
            restarts=int(st.get("restarts", 0)),
            log_path=st.get("log_path") or str(self.log_path(st["name"])),
            adopted=adopted,
            detail=detail,
            exit_code=exit_code,
        )
        if phase == "exited":
            # It ended on its own: forget the state file, remember it for display —
            # under the operation lock, so an action that just stopped it is not
            # mistaken for a crash.
            try:
                with _OperationLock(self, st["name"], attempts=1):
                    cur = self._read_state(st["name"])
                    if cur is None or cur.get("pid") != st["pid"] or cur.get("starttime") != st.get("starttime"):
                        return self._record(cur) if cur is not None else None
                    self._drop_state(st["name"])
                    with self._lock:
                        self._exited[st["name"]] = rec
                    self._history(st["name"], "exited", "failed", reason=detail, pid=rec.pid)
            except EngineBusyError:
                return replace(rec, phase=st.get("phase", "running"), detail=None, exit_code=None)
        return rec

    def _history(self, name: str, action: str, result: str, **data: Any) -> None:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ts": time.time(), "action": action,
                 "result": result, **{k: v for k, v in data.items() if v is not None}}
        try:
            self.engines_dir.mkdir(parents=True, exist_ok=True)
            line = (json.dumps(entry, default=str) + "\n").encode()
            fd = os.open(self.history_path(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except (OSError, EngineError):
            pass

    def _audit(self, action: str, target: str, result: str, **kw: Any) -> None:
        try:
            self.audit.record(action, target, result, **kw)
        except OSError:
            pass  # the action happened; an unwritable audit log must not hide that


class _OperationLock:
    """One action per engine: a thread lock plus an flock shared with other processes."""

    def __init__(self, mgr: _StoreMixin, name: str, attempts: int = 10) -> None:
        self.mgr, self.name, self.attempts = mgr, name, attempts
        self._fd: int | None = None
        with mgr._lock:
            self._tlock = mgr._op_locks.setdefault(name, threading.Lock())

    def __enter__(self) -> None:
        if not self._tlock.acquire(blocking=False):
            raise EngineBusyError(f"engine {self.name!r} is busy: another action on it is in progress")
        try:
            self.mgr.engines_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.mgr.engines_dir / f"{self.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            for attempt in range(self.attempts):  # a status() probe holds it for microseconds
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if attempt == self.attempts - 1:
                        os.close(fd)
                        raise EngineBusyError(
                            f"engine {self.name!r} is busy: another infertop is acting on it") from None
                    time.sleep(0.01)
            self._fd = fd
        except BaseException:
            self._tlock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        self._tlock.release()


def _has_token(pid: int, token: str) -> bool:
    """True when ``pid`` was started with ``INFERTOP_ENGINE_ID=token`` in its environment."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{ENGINE_ID_ENV}={token}".encode() in data.split(b"\0")


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name or ""):
        raise InvalidArgsError(f"engine name {name!r}: use letters, digits, '.', '_' or '-' (max 64)")
    return name
