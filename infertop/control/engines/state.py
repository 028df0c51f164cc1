"""Engine records and results, state-file and log helpers.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ...config import ProfileConfig
from ...domain.engine import EngineStats
from ...private_fs import private_dir as _private_dir
from ...sources.vllm import EngineEndpoint
from .command import _shell_quote

#: Set in every engine's environment (inherited by its children): proof of ownership.
ENGINE_ID_ENV = "INFERTOP_ENGINE_ID"
STATE_VERSION = 1
LOG_ROTATE_BYTES = 64 * 1024 * 1024
LOG_TAIL_ON_FAILURE = 25


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """What infertop knows about one engine it started."""

    name: str
    profile_name: str
    phase: str  # starting | running | stopping | orphaned (main exited, workers left) | exited | stale
    pid: int
    pgid: int
    host: str
    port: int
    url: str
    cmdline: tuple[str, ...]
    args: dict[str, Any]  # effective launch arguments (profile + overrides)
    overrides: dict[str, Any]  # what was set on top of the profile
    started_at: float  # wall clock
    healthy_at: float | None
    startup_s: float | None  # spawn → /health 200
    restarts: int
    log_path: str
    adopted: bool = False  # started by an earlier infertop process
    detail: str | None = None  # why exited / stale / orphaned
    exit_code: int | None = None
    owner: dict[str, Any] | None = None  # the infertop that started it: pid, user, tty, starttime
    pids: tuple[int, ...] = ()  # orphaned: the engine's processes still alive

    @property
    def foreign(self) -> bool:
        """Started by another infertop process that still runs (on this host)."""
        o = self.owner or {}
        pid, t0 = o.get("pid"), o.get("starttime")
        if not isinstance(pid, int) or pid == os.getpid():
            return False
        try:
            rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(rest[19]) == t0
        except (OSError, IndexError, ValueError):
            return False

    @property
    def owner_text(self) -> str | None:
        """"started by alice on pts/3 (infertop pid 4242)", or None when unknown."""
        o = self.owner or {}
        if not o.get("pid"):
            return None
        where = f" on {o['tty']}" if o.get("tty") else ""
        return f"started by {o.get('user') or '?'}{where} (infertop pid {o['pid']})"

    @property
    def uptime_s(self) -> float:
        return max(0.0, time.time() - self.started_at)

    @property
    def max_num_seqs(self) -> int | None:
        v = self.args.get("max_num_seqs")
        return int(v) if v is not None else None

    @property
    def alive(self) -> bool:
        return self.phase in ("starting", "running", "stopping", "orphaned")

    def endpoint(self, timeout_s: float = 2.0) -> EngineEndpoint:
        """For a :class:`FleetCollector` watching this engine."""
        return EngineEndpoint(self.name, self.url, self.max_num_seqs, timeout_s)

    def command(self) -> str:
        return " ".join(_shell_quote(a) for a in self.cmdline)


@dataclass(frozen=True, slots=True)
class StopResult:
    name: str
    pid: int
    seconds: float
    sigkill: bool  # the grace period ran out
    exit_code: int | None  # when this process was the engine's parent
    reason: str  # "drained and exited in 3.1 s", "SIGKILL after 30 s grace", ...
    max_in_flight: int | None = None  # most in-flight requests seen while draining
    already_exited: bool = False
    in_flight_before: int | None = None  # running + waiting just before SIGTERM (None: unknown)
    in_flight_after: int | None = None  # at the last scrape before the server went away
    failed: int | None = None  # requests aborted during the stop (vLLM's abort counter), if known
    signalled: str = ""  # what got SIGTERM first: "main process 1234"
    gateway: str = ""  # the drain at a gateway in front, and its undrain (empty: no gateway)


@dataclass(frozen=True, slots=True)
class SetResult:
    name: str
    changed: bool
    old: dict[str, Any]  # the changed keys' previous values
    new: dict[str, Any]
    record: EngineRecord  # the engine now running
    verified: dict[str, str]  # key → value read back from /proc/<pid>/cmdline
    before: EngineStats | None  # one /metrics scrape before the drain
    after: EngineStats | None  # one scrape once healthy again
    stop: StopResult | None
    startup_s: float | None
    total_s: float


# ----------------------------------------------------------------- logs

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_OOM = re.compile(
    r"out of memory|OutOfMemoryError|Cannot allocate memory|No available memory for the cache blocks"
    r"|insufficient memory for the KV cache",
    re.I,
)
_PORT_TAKEN = re.compile(r"address already in use|\[Errno 98\]|port \d+ is used by process", re.I)
#: vLLM logs this once the engine has drained and stopped; after it, only the
#: HTTP server is left, waiting (without limit) for client connections to close.
_ENGINE_STOPPED = re.compile(r"\[shutdown\] API server: (engine client stopped|shutting down FastAPI HTTP server)")
_ERRORISH = re.compile(r"Error|Exception|error:|FATAL|Killed", re.I)


def clean_line(line: str, width: int = 200) -> str:
    line = _ANSI.sub("", line).rstrip()
    return line if len(line) <= width else line[: width - 1] + "…"


def classify_failure(lines: list[str]) -> str | None:
    """Out of memory or port in use, from the engine's output; else None."""
    for line in reversed(lines):
        if _OOM.search(line):
            return f"out of memory: {clean_line(line).strip()}"
    for line in reversed(lines):
        if _PORT_TAKEN.search(line):
            return f"port in use: {clean_line(line).strip()}"
    return None


def last_error_line(lines: list[str]) -> str | None:
    for line in reversed(lines):
        if line.strip() and _ERRORISH.search(line):
            return clean_line(line).strip()
    for line in reversed(lines):
        if line.strip():
            return clean_line(line).strip()
    return None


class _LogFollower:
    """Reads what an engine appends to its log from an offset on."""

    def __init__(self, path: Path, offset: int, keep: int = 200) -> None:
        self.path = path
        self.offset = offset
        self.lines: deque[str] = deque(maxlen=keep)
        self._partial = b""

    def poll(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(1024 * 1024)
        except OSError:
            return []
        if not data:
            return []
        self.offset += len(data)
        data = self._partial + data
        parts = data.split(b"\n")
        self._partial = parts.pop()
        new = []
        for raw in parts:
            if b"\r" in raw:
                segs = [p for p in raw.split(b"\r") if p.strip()]
                raw = segs[-1] if segs else b""
            new.append(raw.decode("utf-8", "replace"))
        self.lines.extend(new)
        return new

    def all_lines(self) -> list[str]:
        out = list(self.lines)
        if self._partial.strip():
            out.append(self._partial.decode("utf-8", "replace"))
        return out

    def last_line(self) -> str | None:
        for line in reversed(self.all_lines()):
            if line.strip():
                return clean_line(line).strip()
        return None


# ----------------------------------------------------------------- state files


def private_dir(path: Path) -> Path:
    """Create ``path`` (and every missing parent) owner-only (0700); tighten it when it exists looser."""
    return _private_dir(path)


def _atomic_write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON, owner-only (0600), replacing ``path`` at once."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _profile_from_dict(d: Mapping[str, Any]) -> ProfileConfig:
    known = {f.name for f in fields(ProfileConfig)}
    return ProfileConfig(**{k: v for k, v in d.items() if k in known})


def _rc_text(rc: int) -> str:
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"{rc} ({signal.Signals(-rc).name})"
    return str(rc)
