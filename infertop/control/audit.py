"""Append-only audit log of every action, as JSON lines.

One line per attempt: time, user, action, target, old/new (or a diff),
result and, for failures, the reason. Secrets never go in here: callers
pass values, not tokens.
"""

from __future__ import annotations

import getpass
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..config import default_state_dir

_lock = threading.Lock()


def default_audit_path() -> Path:
    return default_state_dir() / "audit.jsonl"


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 — no passwd entry in some containers
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


class AuditLog:
    """Appends JSON lines; each write is one ``write()`` of a whole line, under a lock."""

    def __init__(self, path: str | os.PathLike | None = None, user: str | None = None) -> None:
        self.path = Path(path) if path else default_audit_path()
        self.user = user or current_user()

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
        line = json.dumps(entry, default=str, sort_keys=False) + "\n"
        with _lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        return entry

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
