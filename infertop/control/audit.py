"""Append-only audit log of every action, as JSON lines.

An action writes an *intent* line before anything is sent (who, what, the
diff, the dry-run result) and an *outcome* line, with the same ``op`` id,
once the result is known. An intent with no outcome (infertop died or was
quit mid-action) is reported by :meth:`AuditLog.unfinished` as ``unknown``.
One-shot entries (:meth:`AuditLog.record`) remain for events that have no
separate intent. Secrets never go in here: callers pass values, not tokens.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ..private_fs import default_state_dir
from ..private_fs import private_dir

_lock = threading.Lock()


class AuditUnavailable(OSError):
    """The audit log cannot be written; the action must be refused (unless run unaudited)."""


def default_audit_path() -> Path:
    return default_state_dir() / "audit.jsonl"


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 — no passwd entry in some containers
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def owner_info() -> dict[str, Any]:
    """Who is acting, for state files and audit lines: this process's pid, user, tty, start time, host."""
    tty = None
    for fd in (0, 1, 2):
        try:
            tty = os.ttyname(fd)
            break
        except OSError:
            continue
    try:
        starttime = int(Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        starttime = None
    return {"pid": os.getpid(), "user": current_user(), "tty": tty.removeprefix("/dev/") if tty else None,
            "starttime": starttime, "host": socket.gethostname()}


class AuditLog:
    """Appends JSON lines; each write is one ``write()`` of a whole line, under a lock."""

    def __init__(self, path: str | os.PathLike | None = None, user: str | None = None) -> None:
        self.path = Path(path) if path else default_audit_path()
        self.user = user or current_user()
        # outcomes that could not be written after the action ran ("engine.restart ok: [Errno 28] …"):
        # the action is not undone, but whoever ran it must hear that the log lacks it
        self.unwritten: list[str] = []

    def record(
        self,
        action: str,
        target: str,
        result: str,
        *,
        old: Any = None,
        new: Any = None,
        diff: str | None = None,
        reason: str | None = None,
        dry_run: bool = False,
        **extra: Any,
    ) -> dict:
        """Append one entry and return it. ``result``: ok, failed, aborted, dry-run."""
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "ts": time.time(),
            "user": self.user,
            "action": action,
            "target": target,
            "old": old,
            "new": new,
            "result": result,
        }
        if diff is not None:
            entry["diff"] = diff
        if reason is not None:
            entry["reason"] = reason
        if dry_run:
            entry["dry_run"] = True
        entry.update(extra)
        self._append(entry)
        return entry

    def _append(self, entry: dict) -> None:
        line = json.dumps(entry, default=str, sort_keys=False) + "\n"
        try:
            with _lock:
                private_dir(self.path.parent, tighten=False)  # the user may have chosen it
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
        except OSError as e:
            raise AuditUnavailable(f"audit log {self.path} cannot be written: {e.strerror or e}") from None

    def check_writable(self) -> None:
        """Raise :class:`AuditUnavailable` when an entry could not be appended now."""
        try:
            private_dir(self.path.parent, tighten=False)  # the user may have chosen it
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.close(fd)
        except OSError as e:
            raise AuditUnavailable(f"audit log {self.path} cannot be written: {e.strerror or e}") from None

    def intent(self, action: str, target: str, **details: Any) -> str:
        """Write the intent of an action before it is executed; returns its ``op`` id."""
        op = uuid.uuid4().hex[:12]
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ts": time.time(), "user": self.user,
                 "pid": os.getpid(), "phase": "intent", "op": op, "action": action, "target": target}
        entry.update(details)
        self._append(entry)
        return op

    def outcome(self, op: str, action: str, target: str, result: str, **details: Any) -> dict:
        """Write the outcome (ok, failed, aborted, cancelled …) of the intent ``op``."""
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ts": time.time(), "user": self.user,
                 "phase": "outcome", "op": op, "action": action, "target": target, "result": result}
        entry.update(details)
        self._append(entry)
        return entry

    def unfinished(self, *, alive: Any = None) -> list[dict]:
        """Intents with no outcome, oldest first, each with ``result: "unknown"``.

        ``alive(pid) -> bool`` excludes intents of an infertop still running
        (its action may still be in flight); by default only this process is excluded.
        """
        done = set()
        intents: dict[str, dict] = {}
        for e in self.entries():
            op = e.get("op")
            if not op:
                continue
            if e.get("phase") == "intent":
                intents[op] = e
            elif e.get("phase") == "outcome":
                done.add(op)
        me = os.getpid()
        out = []
        for op, e in intents.items():
            if op in done:
                continue
            pid = e.get("pid")
            if pid == me or (alive is not None and pid is not None and alive(pid)):
                continue
            out.append(dict(e, result="unknown"))
        return out

    def entries(self) -> list[dict]:
        """Every entry, oldest first (for the Log pane and tests)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out
