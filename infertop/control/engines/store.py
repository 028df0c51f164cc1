"""Engine identity, state files, history and per-engine locks: :class:`EngineStore`, the part of
:class:`~infertop.control.engines.EngineManager` the others are given.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from glob import escape as glob_escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ...sources.vllm import EngineEndpoint
from .command import cmdline_value, expected_value
from .errors import EngineBusyError, EngineError, EngineNotFound, NotOurProcessError, VerifyError
from .state import ENGINE_ID_ENV, EngineRecord, _atomic_write_json, _rc_text, private_dir
from ..procfs import (
    ProcStat,
    _cmd_summary,
    boot_id,
    group_members,
    kernel_argv,
    process_title,
    read_cmdline,
    read_stat,
    session_members,
)

#: At most this many processes are recorded per engine (vLLM: API server,
#: EngineCore, workers, resource tracker — a handful).
MAX_TRACKED = 256


class EngineStore:
    """What infertop knows of its local engines: identity checks, state files, history, locks.

    ``state_dir/engines`` holds one state file, log, history and lock file per engine; the
    in-memory part is this process's children, the engines it re-adopted, those that exited
    this session and the state files kept aside as stale. Thread-safe (``_lock``).
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.engines_dir = state_dir / "engines"
        self.lock = threading.RLock()
        self.op_locks: dict[str, threading.Lock] = {}
        self.children: dict[int, subprocess.Popen] = {}  # pid → our child
        self.exited: dict[str, EngineRecord] = {}  # exited this session, for display
        self.adopted: set[str] = set()
        self.stale: dict[str, tuple[dict, str, str | None]] = {}  # name → (state, refusal, kept-aside path)
        self.tracked_at: dict[str, float] = {}
        self.boot_id = boot_id()

    # -- paths

    def state_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.json"

    def log_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.log"

    def history_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.history.jsonl"

    def lock_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.lock"

    def owned_rc(self, pid: int) -> int | None:
        """The exit status of our own child ``pid`` (waiting up to a second for it to be reaped), else None."""
        with self.lock:
            proc = self.children.get(pid)
        if proc is None:
            return None
        for _ in range(50):
            if proc.returncode is not None:
                return proc.returncode
            time.sleep(0.02)
        return proc.returncode

    # -- internals: identity

    def identity(self, st: Mapping[str, Any]) -> tuple[str, str]:
        """("alive", ""), ("gone", why) or ("mismatch", why) for the recorded leader."""
        pid = int(st.get("pid") or 0)
        if pid <= 1:
            return "mismatch", "no valid PID recorded"
        if st.get("boot_id") and self.boot_id and st["boot_id"] != self.boot_id:
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
        if not _same_command(cmd, st):
            return "mismatch", f"command line is now {_cmd_summary(cmd, 60)!r}"
        if ps.pgrp != int(st.get("pgid", -1)):
            return "mismatch", f"process group {ps.pgrp} ≠ recorded {st.get('pgid')}"
        return "alive", ""

    @staticmethod
    def refusal(st: Mapping[str, Any], why: str) -> str:
        pid = st.get("pid")
        now = process_title(int(pid)) if isinstance(pid, int) and pid > 1 else "?"
        return (f"recorded PID {pid} now runs {now!r} — refusing to signal "
                f"(it is no longer the engine infertop started: {why})")

    def live_group(self, st: Mapping[str, Any]) -> list[ProcStat]:
        """Live processes that are verifiably the engine's own, leader first.

        Candidates share the engine's session (or, for old state files, its
        process group) and started no earlier than it.  Of those, a process
        counts when its (PID, start time) was recorded by :meth:`_track`, when
        it carries the engine's ``INFERTOP_ENGINE_ID`` in its environment
        (vLLM overwrites that when it retitles a process — hence the
        recording), when it is the verified leader, or when its parent
        counts.  Anything else — a reused PID above all — is never included.
        """
        pgid, sid, t0 = st.get("pgid"), st.get("sid"), st.get("starttime")
        if not (sid or pgid) or t0 is None:
            return []
        if st.get("boot_id") and self.boot_id and st["boot_id"] != self.boot_id:
            return []
        t0 = int(t0)
        if sid:
            cands = [m for m in session_members(int(sid)) if m.starttime >= t0]
        elif pgid:
            cands = [m for m in group_members(int(pgid)) if m.starttime >= t0]
        else:
            return []
        if not cands:
            return []
        recorded = {(int(p["pid"]), int(p["starttime"])) for p in st.get("procs") or []
                    if isinstance(p, dict) and "pid" in p and "starttime" in p}
        leader = int(st.get("pid") or 0)
        token = st.get("engine_id")
        ok: dict[int, ProcStat] = {}
        for m in cands:
            if (m.pid, m.starttime) in recorded or (token is not None and _has_token(m.pid, token)):
                ok[m.pid] = m
            elif m.pid == leader and m.starttime == t0 and self.identity(st)[0] == "alive":
                ok[m.pid] = m
        grew = True
        while grew:  # children of accepted processes (spawned since the last recording)
            grew = False
            for m in cands:
                if m.pid not in ok and m.ppid in ok and m.starttime >= ok[m.ppid].starttime:
                    ok[m.pid] = m
                    grew = True
        return sorted(ok.values(), key=lambda m: (m.pid != leader, m.starttime, m.pid))

    def track(self, st: dict, members: list[ProcStat] | None = None) -> bool:
        """Record the engine's live processes (PID + start time) in ``st``; True when that changed.

        Called at spawn, while starting, once healthy and whenever status is
        read: vLLM's EngineCore and workers appear after the API server.
        """
        members = self.live_group(st) if members is None else members
        procs = [{"pid": m.pid, "starttime": m.starttime, "ppid": m.ppid, "comm": _comm(m.pid)}
                 for m in members[:MAX_TRACKED]]
        old = {(p.get("pid"), p.get("starttime")) for p in st.get("procs") or [] if isinstance(p, dict)}
        if not procs or {(p["pid"], p["starttime"]) for p in procs} <= old:
            return False
        # Keep what was recorded (a worker may be between two polls) plus what is new.
        keep = [p for p in st.get("procs") or [] if isinstance(p, dict)]
        seen = {(p.get("pid"), p.get("starttime")) for p in keep}
        keep += [p for p in procs if (p["pid"], p["starttime"]) not in seen]
        st["procs"] = keep[-MAX_TRACKED:]
        return True

    def tracking_due(self, name: str, every_s: float = 5.0) -> bool:
        """Throttles the /proc scan of status() for a healthy engine."""
        now = time.monotonic()
        with self.lock:
            due = now - self.tracked_at.get(name, -every_s) >= every_s
            if due:
                self.tracked_at[name] = now
        return due

    def track_and_save(self, st: dict) -> None:
        """:meth:`_track`, writing the state file when something new appeared (skipped while busy)."""
        if not self.track(st):
            return
        try:
            with _OperationLock(self, st["name"], attempts=1):
                cur = self.read_state(st["name"])
                if cur is not None and cur.get("pid") == st.get("pid") \
                        and cur.get("starttime") == st.get("starttime"):
                    cur["procs"] = st["procs"]
                    self.write_state(st["name"], cur)
        except (EngineBusyError, OSError):
            pass  # the action in progress records them itself; a read-only dir only loses the record

    def verify_args(self, rec: EngineRecord, changes: Mapping[str, Any]) -> dict[str, str]:
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

    def operation(self, name: str):
        return _OperationLock(self, name)

    def busy(self, name: str) -> bool:
        """True while a start/stop/restart/set of ``name`` runs (here or in another infertop)."""
        with self.lock:
            tlock = self.op_locks.get(name)
        if tlock is not None and tlock.locked():
            return True
        try:
            fd = os.open(self.lock_path(name), os.O_RDWR)
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

    def read_state(self, name: str) -> dict | None:
        path = self.state_path(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            # Unreadable: keep it aside for a human, never act on it.
            with contextlib.suppress(OSError):
                os.replace(path, path.with_suffix(".json.bad"))
            return None
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
            return None
        data.setdefault("name", name)
        if data["name"] != name:
            return None
        return data

    def set_stale(self, st: dict, why: str) -> str:
        """Keep a PID-mismatched state file aside (never deleted, never acted on); the refusal text."""
        name = st["name"]
        refusal = self.refusal(st, why)
        with self.lock:
            known = self.stale.get(name)
        if known is not None and self.read_state(name) is None:
            return known[1]
        aside = self.keep_aside(name)
        if aside is not None:
            refusal += f"; its state file is kept aside as {aside}"
        with self.lock:
            self.stale[name] = (st, refusal, str(aside) if aside else None)
        self.add_history(name, "kept-aside", "stale", reason=why, pid=st.get("pid"),
                         path=str(aside) if aside else None)
        return refusal

    def require_state(self, name: str) -> dict:
        st = self.read_state(name)
        if st is None:
            with self.lock:
                stale = self.stale.get(name)
            if stale is not None:
                raise NotOurProcessError(stale[1])
            msg = f"no engine named {name!r} is running under infertop (no state in {self.engines_dir})"
            aside = self.stale_files(name)
            if aside:
                msg += f"; a stale state was kept aside as {aside[-1]}"
            raise EngineNotFound(msg)
        return st

    def state_names(self) -> list[str]:
        """Names of the engines with a state file (read from the files: names need not be file-safe)."""
        if not self.engines_dir.is_dir():
            return []
        names = []
        for p in sorted(self.engines_dir.glob("*.json")):
            if ".stale-" in p.name:
                continue
            try:
                name = json.loads(p.read_text(encoding="utf-8")).get("name")
            except (OSError, ValueError, AttributeError):
                name = None
            if not isinstance(name, str):
                name = p.stem  # unreadable: _read_state keeps it aside
            if _file_stem(name) == p.stem:
                names.append(name)
        return names

    def all_states(self) -> list[dict]:
        return [s for n in self.state_names() if (s := self.read_state(n))]

    def write_state(self, name: str, st: dict) -> None:
        private_dir(self.engines_dir)
        _atomic_write_json(self.state_path(name), st)

    def drop_state(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.state_path(name).unlink()

    def keep_aside(self, name: str) -> Path | None:
        """Rename the state file to ``<stem>.stale-<time>.json`` (for a human); its new path."""
        src = self.state_path(name)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for n in range(100):
            dst = src.with_name(f"{src.stem}.stale-{stamp}{f'-{n}' if n else ''}.json")
            try:
                os.link(src, dst)  # never replaces an earlier one
            except FileExistsError:
                continue
            except OSError:
                return None
            with contextlib.suppress(OSError):
                os.unlink(src)
            return dst
        return None

    def stale_files(self, name: str) -> list[Path]:
        if not self.engines_dir.is_dir():
            return []
        return sorted(self.engines_dir.glob(f"{glob_escape(_file_stem(name))}.stale-*.json"))

    def endpoint(self, st: Mapping[str, Any], timeout_s: float = 5.0) -> EngineEndpoint:
        # /metrics of a CPU engine with saturated cores can take seconds
        mns = (st.get("args") or {}).get("max_num_seqs")
        return EngineEndpoint(st["name"], st["url"], int(mns) if mns is not None else None, timeout_s)

    def record(self, st: dict) -> EngineRecord | None:
        """The record for a state; settles one whose process ended on its own.

        None when the state vanished meanwhile (an action stopped the engine).
        """
        kind, why = self.identity(st)
        phase = st.get("phase", "running")
        detail = None
        exit_code = None
        left: list[ProcStat] = []
        if kind == "gone":
            left = self.live_group(st)
        elif kind == "alive" and phase != "stopping" and self.tracking_due(st["name"]):
            self.track_and_save(st)
        if kind == "gone":
            left = [m for m in left if m.pid != int(st["pid"])]
        if kind == "mismatch":
            phase, detail = "stale", self.refusal(st, why)
        elif kind == "gone" and left:
            if phase != "stopping":
                phase = "orphaned"
            detail = (f"main process exited; {len(left)} worker{'s' if len(left) != 1 else ''} still alive: "
                      f"pids {', '.join(str(m.pid) for m in left)} (stop cleans them up)")
        elif kind == "gone" and not self.busy(st["name"]):
            phase, detail = "exited", why
            with self.lock:
                owned = int(st["pid"]) in self.children
            exit_code = self.owned_rc(int(st["pid"])) if owned else None
            if exit_code is not None:
                detail = f"exited with status {_rc_text(exit_code)}"
        rec = self.build_record(st, phase, detail, exit_code,
                                 tuple(m.pid for m in left) if phase != "exited" else ())
        if phase == "exited":
            # It ended on its own: forget the state file, remember it for display —
            # under the operation lock, so an action that just stopped it is not
            # mistaken for a crash.
            try:
                with _OperationLock(self, st["name"], attempts=1):
                    cur = self.read_state(st["name"])
                    if cur is None or cur.get("pid") != st["pid"] or cur.get("starttime") != st.get("starttime"):
                        return self.record(cur) if cur is not None else None
                    self.drop_state(st["name"])
                    with self.lock:
                        self.exited[st["name"]] = rec
                    self.add_history(st["name"], "exited", "failed", reason=detail, pid=rec.pid)
            except EngineBusyError:
                return replace(rec, phase=st.get("phase", "running"), detail=None, exit_code=None)
        return rec

    def record_or_raise(self, st: dict) -> EngineRecord:
        """The record of an engine that must still be there; EngineNotFound when it has just stopped."""
        rec = self.record(st)
        if rec is None:
            raise EngineNotFound(f"engine {st['name']!r} has just stopped")
        return rec

    def build_record(self, st: Mapping[str, Any], phase: str, detail: str | None,
                      exit_code: int | None = None, pids: tuple[int, ...] = ()) -> EngineRecord:
        with self.lock:
            adopted = st["name"] in self.adopted
        return EngineRecord(
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
            owner=st.get("owner") if isinstance(st.get("owner"), dict) else None,
            pids=pids,
        )

    def add_history(self, name: str, action: str, result: str, **data: Any) -> None:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ts": time.time(), "action": action,
                 "result": result, **{k: v for k, v in data.items() if v is not None}}
        try:
            private_dir(self.engines_dir)
            line = (json.dumps(entry, default=str) + "\n").encode()
            fd = os.open(self.history_path(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except (OSError, EngineError):
            pass


class _OperationLock:
    """One action per engine: a thread lock plus an flock shared with other processes.

    The lock file exists only while an action holds it: the holder removes
    it before unlocking, and a waiter that then gets the lock on the removed
    file notices (its inode is no longer the path's) and tries again.
    """

    def __init__(self, store: EngineStore, name: str, attempts: int = 10) -> None:
        self.store, self.name, self.attempts = store, name, attempts
        self._fd: int | None = None
        self.path = store.lock_path(name)
        with store.lock:
            self._tlock = store.op_locks.setdefault(name, threading.Lock())

    def __enter__(self) -> None:
        if not self._tlock.acquire(blocking=False):
            raise EngineBusyError(f"engine {self.name!r} is busy: another action on it is in progress")
        try:
            private_dir(self.store.engines_dir)
            for attempt in range(self.attempts):  # a status() probe holds it for microseconds
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    if attempt == self.attempts - 1:
                        raise EngineBusyError(
                            f"engine {self.name!r} is busy: another infertop is acting on it") from None
                    time.sleep(0.01)
                    continue
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except OSError:
                    same = False
                if same:
                    self._fd = fd
                    return
                os.close(fd)  # locked a file its holder has just removed: take the new one
            raise EngineBusyError(f"engine {self.name!r} is busy: another infertop is acting on it")
        except BaseException:
            self._tlock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
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


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _same_command(cmd: list[str], st: Mapping[str, Any]) -> bool:
    """The live command line is the one infertop ran, as given or as the kernel ran it (``#!``)."""
    want = [str(a) for a in st.get("cmdline") or []]
    if not want:
        return False
    if cmd == want or cmd == st.get("kernel_cmdline") or cmd == kernel_argv(want):
        return True
    # A wrapper script (``exec /venv/bin/python "$@"``) ends up running the same
    # arguments under another interpreter path; start time and group are checked too.
    return len(want) > 1 and len(cmd) >= len(want) and cmd[len(cmd) - len(want) + 1:] == want[1:]


_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _file_stem(name: str) -> str:
    """The file-name stem for an engine name: the name itself when file-safe, else encoded.

    Any name is valid (``local:28400``, ``my engine``, ``a/b``); only here does it
    become a file name: percent-encoded after a ``%`` (never a safe name's
    first character, so no clash), or a hash when that is too long.
    """
    name = str(name)
    if _SAFE_NAME.match(name):
        return name
    enc = "%" + quote(name, safe="-_")
    if len(enc) <= 100:
        return enc
    return "%sha256-" + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:32]
