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
infertop, or before a restart of this one) that still run, and drops state
files whose process is gone.

Stopping sends SIGTERM to the process group — vLLM then drains in-flight
requests for ``--shutdown-timeout`` seconds — reports "draining (n in
flight)" from the engine's live ``/metrics``, and only after the grace
period sends SIGKILL to what is left of the group; it returns once no
process of the group remains.

Progress callbacks receive :class:`EngineProgress` from the calling
(worker) thread, throttled to a few per second; keep them cheap (a TUI
posts them to its event loop with ``call_from_thread``).  Exceptions in a
callback are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import math
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import httpx

from ..config import ProfileConfig, default_state_dir
from ..domain.engine import EngineStats
from ..sources.vllm import EngineEndpoint, FleetCollector
from .audit import AuditLog

DEFAULT_MODULE = "vllm.entrypoints.openai.api_server"
#: Set in every engine's environment (inherited by its children): proof of ownership.
ENGINE_ID_ENV = "INFERTOP_ENGINE_ID"
STATE_VERSION = 1
LOG_ROTATE_BYTES = 64 * 1024 * 1024
LOG_TAIL_ON_FAILURE = 25

#: ProfileConfig fields that become api_server flags, in command-line order
#: (after ``--model``).
FLAG_FIELDS: tuple[str, ...] = (
    "served_model_name",
    "host",
    "port",
    "max_num_seqs",
    "max_model_len",
    "gpu_memory_utilization",
    "scheduling_policy",
    "enable_prefix_caching",
    "shutdown_timeout",
    "tensor_parallel_size",
    "dtype",
    "enforce_eager",
)
#: Keys :meth:`EngineManager.set_args` / overrides accept with a known type.
ARG_TYPES: dict[str, type] = {
    "model": str,
    "served_model_name": str,
    "host": str,
    "port": int,
    "max_num_seqs": int,
    "max_model_len": int,
    "gpu_memory_utilization": float,
    "scheduling_policy": str,
    "enable_prefix_caching": bool,
    "shutdown_timeout": float,
    "tensor_parallel_size": int,
    "dtype": str,
    "enforce_eager": bool,
}
#: Profile fields that are not launch arguments (cannot be overridden).
NOT_ARGS = ("extra_args", "env", "python", "start_timeout_s", "stop_grace_s")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")

Progress = Callable[["EngineProgress"], None]

# ----------------------------------------------------------------- errors


class EngineError(Exception):
    """An engine action failed or was refused; ``str(e)`` is the reason."""

    def __init__(self, reason: str, *, log_tail: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_tail: list[str] = list(log_tail or [])


class EngineNotFound(EngineError):
    """No engine of that name is known (no state file)."""


class EngineBusyError(EngineError):
    """Another start/stop/restart/set of the same engine is in progress."""


class InvalidArgsError(EngineError, ValueError):
    """An override key or value is not acceptable."""


class PortInUseError(EngineError):
    """The profile's port is taken; nothing was started."""


class NotOurProcessError(EngineError):
    """The recorded PID now belongs to another process: refused, nothing signalled."""


class EngineStartError(EngineError):
    """The engine did not become healthy; nothing of it is left running."""

    def __init__(self, reason: str, *, log_tail: list[str] | None = None, log_path: str | None = None,
                 pid: int | None = None, elapsed_s: float | None = None) -> None:
        super().__init__(reason, log_tail=log_tail)
        self.log_path = log_path
        self.pid = pid
        self.elapsed_s = elapsed_s


class EngineStopError(EngineError):
    """Processes of the engine's group survived SIGKILL."""


class VerifyError(EngineError):
    """The engine restarted but the new argument is not in effect."""


class SetArgsError(EngineError):
    """``set_args`` failed; ``rolled_back`` says whether the old args run again."""

    def __init__(self, reason: str, *, log_tail: list[str] | None = None, rolled_back: bool = False) -> None:
        super().__init__(reason, log_tail=log_tail)
        self.rolled_back = rolled_back


# ----------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class EngineProgress:
    """One progress event of a long action."""

    name: str
    action: str  # start | stop | restart | set
    phase: str  # spawned | waiting | healthy | draining | killing | stopped | verifying | rollback | failed | done
    elapsed_s: float  # since the action began
    message: str
    log_line: str | None = None  # the engine's latest log line (start)
    in_flight: int | None = None  # running + waiting from /metrics (stop), None when unknown
    pid: int | None = None

    def line(self) -> str:
        """One printable line, as the headless CLI shows it."""
        text = f"[{self.elapsed_s:6.1f}s] {self.name}: {self.message}"
        if self.log_line:
            text += f"  | {self.log_line}"
        return text


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """What infertop knows about one engine it started."""

    name: str
    profile_name: str
    phase: str  # starting | running | stopping | exited | stale
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
    detail: str | None = None  # why exited / stale
    exit_code: int | None = None

    @property
    def uptime_s(self) -> float:
        return max(0.0, time.time() - self.started_at)

    @property
    def max_num_seqs(self) -> int | None:
        v = self.args.get("max_num_seqs")
        return int(v) if v is not None else None

    @property
    def alive(self) -> bool:
        return self.phase in ("starting", "running", "stopping")

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


# ----------------------------------------------------------------- command


def entry_argv(module: str) -> list[str]:
    """``-m module``, or a script path when ``module`` ends with ``.py``."""
    if module.endswith(".py") or "/" in module:
        return [module]
    return ["-m", module]


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _fmt(key: str, value: Any) -> str:
    if key == "shutdown_timeout":  # vLLM parses it as int
        return str(int(math.ceil(float(value))))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def effective_args(profile: ProfileConfig, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The launch arguments after overrides (``model``, flag fields, extra keys); unset ones left out."""
    args: dict[str, Any] = {"model": profile.model}
    for key in FLAG_FIELDS:
        args[key] = getattr(profile, key)
    args.update(overrides or {})
    return {k: v for k, v in args.items() if v is not None}


def build_command(
    profile: ProfileConfig,
    overrides: Mapping[str, Any] | None = None,
    *,
    module: str = DEFAULT_MODULE,
) -> list[str]:
    """``<python> -m vllm.entrypoints.openai.api_server --model … …``.

    Profile fields set to ``None`` are left to vLLM's defaults; booleans
    become ``--flag`` / ``--no-flag``.  ``profile.extra_args`` follow the
    profile's flags; overridden keys (and override keys that are not
    profile fields, e.g. ``max_num_batched_tokens``) come last, so they win
    over anything in ``extra_args``.
    """
    overrides = dict(overrides or {})
    args = effective_args(profile, overrides)
    cmd = [profile.python, *entry_argv(module)]

    def add(key: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bool):
            cmd.append(_flag(key) if value else "--no-" + key.replace("_", "-"))
        else:
            cmd.extend((_flag(key), _fmt(key, value)))

    for key in ("model", *FLAG_FIELDS):
        if key not in overrides:
            add(key, args.get(key))
    cmd.extend(str(a) for a in profile.extra_args)
    for key, value in overrides.items():
        add(key, value)
    return cmd


def cmdline_value(cmd: list[str] | tuple[str, ...], key: str) -> str | None:
    """The value the last ``--key`` on ``cmd`` sets (as argparse sees it).

    Booleans read back as ``"true"``/``"false"``; ``None`` when absent.
    """
    flag, neg = _flag(key), "--no-" + key.replace("_", "-")
    value = None
    for i, tok in enumerate(cmd):
        if tok == flag:
            nxt = cmd[i + 1] if i + 1 < len(cmd) else None
            value = nxt if nxt is not None and not nxt.startswith("--") else "true"
        elif tok.startswith(flag + "="):
            value = tok[len(flag) + 1:]
        elif tok == neg:
            value = "false"
    return value


def expected_value(key: str, value: Any) -> str | None:
    """How ``value`` for ``key`` appears on the command line (see :func:`cmdline_value`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return _fmt(key, value)


def parse_value(text: str) -> Any:
    """``"8"`` → 8, ``"0.9"`` → 0.9, ``"true"`` → True, ``"none"`` → None, else the text."""
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null", "default"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``["max_num_seqs=8", "dtype=float32"]`` → ``{"max_num_seqs": 8, "dtype": "float32"}``."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgsError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip().lstrip("-").replace("-", "_")] = parse_value(value)
    return out


def _coerce(key: str, value: Any) -> Any:
    typ = ARG_TYPES.get(key)
    if value is None or typ is None:
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        raise InvalidArgsError(f"{key}: unsupported value {value!r}")
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and isinstance(parse_value(value), bool):
            return parse_value(value)
        if value in (0, 1):
            return bool(value)
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return int(value)
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return float(value)
    elif typ is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    kind = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[typ]
    raise InvalidArgsError(f"{key}: expected {kind}, got {value!r}")


def normalize_overrides(profile: ProfileConfig, changes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check and coerce override keys/values; validates the resulting profile."""
    out: dict[str, Any] = {}
    for raw_key, value in (changes or {}).items():
        key = str(raw_key).strip().lstrip("-").replace("-", "_")
        if key in NOT_ARGS:
            raise InvalidArgsError(f"{key}: not a launch argument (edit the profile instead)")
        if not _KEY_RE.match(key):
            raise InvalidArgsError(f"{raw_key!r}: not an argument name")
        out[key] = _coerce(key, value)
    known = {k: v for k, v in out.items() if k in ARG_TYPES}
    if "port" in known and known["port"] is None:
        raise InvalidArgsError("port: required")
    if "model" in known and not known["model"]:
        raise InvalidArgsError("model: required")
    for fname, msg in replace(profile, **known).validate():
        raise InvalidArgsError(f"{fname}: {msg}")
    return out


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: ours without Python path settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def connect_host(host: str) -> str:
    """Where to reach a server bound to ``host`` (wildcards → loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def _shell_quote(arg: str) -> str:
    if arg and re.fullmatch(r"[A-Za-z0-9_./:=@%+,-]+", arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


# ----------------------------------------------------------------- /proc


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    starttime: int  # field 22, clock ticks since boot


def read_stat(pid: int) -> ProcStat | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    try:
        return ProcStat(pid, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]))
    except (IndexError, ValueError):
        return None


def read_cmdline(pid: int) -> list[str] | None:
    try:
        data = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "surrogateescape") for p in parts]


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def group_members(pgid: int) -> list[ProcStat]:
    """Live (not zombie) processes whose process group is ``pgid``."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        st = read_stat(int(entry))
        if st is not None and st.pgrp == pgid and st.state not in ("Z", "X"):
            out.append(st)
    return out


def _cmd_summary(cmd: list[str] | None, width: int = 80) -> str:
    text = " ".join(cmd or []) or "?"
    return text if len(text) <= width else text[: width - 1] + "…"


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


def port_listeners(port: int) -> list[int]:
    """PIDs with a socket listening on TCP ``port`` (those this user can see)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return []
    wanted = {f"socket:[{i}]" for i in inodes}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in wanted:
                    pids.append(int(entry))
                    break
            except OSError:
                continue
    return sorted(pids)


def port_is_free(host: str, port: int) -> bool:
    """True when a server could bind ``host:port`` now (SO_REUSEADDR, like uvicorn)."""
    bind_host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind_host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            if e.errno == errno.EADDRNOTAVAIL:
                raise PortInUseError(f"cannot bind {bind_host}:{port}: not an address of this host") from None
            if e.errno == errno.EACCES:
                raise PortInUseError(f"cannot bind port {port}: permission denied") from None
            raise PortInUseError(f"cannot bind {bind_host}:{port}: {e.strerror}") from None
    return True


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


# ----------------------------------------------------------------- helpers


class _Emitter:
    """Calls a progress callback: phase changes at once, otherwise ≤ 4/s, ≥ 1/s."""

    def __init__(self, cb: Progress | None, name: str, action: str) -> None:
        self.cb, self.name, self.action = cb, name, action
        self.t0 = time.monotonic()
        self._last: tuple | None = None
        self._last_t = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, phase: str, message: str, *, log_line: str | None = None,
                 in_flight: int | None = None, pid: int | None = None, force: bool = False) -> None:
        if self.cb is None:
            return
        now = time.monotonic()
        key = (phase, message, log_line, in_flight)
        phase_changed = self._last is None or self._last[0] != phase
        if not (force or phase_changed or now - self._last_t >= 1.0
                or (key != self._last and now - self._last_t >= 0.25)):
            return
        self._last, self._last_t = key, now
        event = EngineProgress(self.name, self.action, phase, now - self.t0, message, log_line, in_flight, pid)
        try:
            self.cb(event)
        except Exception:  # noqa: BLE001 — a broken callback never breaks an action
            pass


def _in_thread(fn: Callable[[], Any], timeout: float) -> Any:
    """Run ``fn`` in a fresh thread (own event loop possible) and wait for it."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["v"] = fn()
        except Exception as e:  # noqa: BLE001
            box["e"] = e

    t = threading.Thread(target=run, daemon=True, name="infertop-engine-observe")
    t.start()
    t.join(timeout)
    return box.get("v")


def observe_once(endpoint: EngineEndpoint) -> EngineStats | None:
    """One scrape of an engine's /metrics through :class:`FleetCollector`; None on failure."""

    def run() -> EngineStats | None:
        loop = asyncio.new_event_loop()
        col = FleetCollector([endpoint], interval_s=1.0, window_s=60.0)
        try:
            snap = loop.run_until_complete(col.poll_once())
        finally:
            loop.run_until_complete(col.aclose())
            loop.close()
        s = snap.engines[0] if snap.engines else None
        return s if s is not None and s.running is not None else None

    return _in_thread(run, endpoint.timeout_s + 5.0)


class _InFlightWatcher:
    """Polls an engine's running + waiting in a background thread while it drains."""

    def __init__(self, endpoint: EngineEndpoint, interval_s: float = 1.0) -> None:
        self.endpoint = endpoint
        self.interval_s = interval_s
        self.value: int | None = None
        self.max_seen: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"infertop-drain-{endpoint.name}")
        self._thread.start()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        col = FleetCollector([self.endpoint], interval_s=self.interval_s, window_s=60.0)
        try:
            while not self._stop.is_set():
                try:
                    snap = loop.run_until_complete(col.poll_once())
                    s = snap.engines[0] if snap.engines else None
                except Exception:  # noqa: BLE001
                    s = None
                if s is not None and s.running is not None:
                    n = int(round(s.running + (s.waiting or 0)))
                    self.value = n
                    self.max_seen = n if self.max_seen is None else max(self.max_seen, n)
                else:
                    self.value = None
                self._stop.wait(self.interval_s)
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(col.aclose())
            loop.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=0.5)  # a scrape in flight finishes on its own (daemon thread)


def _atomic_write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


def _profile_from_dict(d: Mapping[str, Any]) -> ProfileConfig:
    known = {f.name for f in fields(ProfileConfig)}
    return ProfileConfig(**{k: v for k, v in d.items() if k in known})


# ----------------------------------------------------------------- manager


class EngineManager:
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
        http_close_s: float = 5.0,
        observe_timeout_s: float = 5.0,
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
        self._lock = threading.RLock()
        self._op_locks: dict[str, threading.Lock] = {}
        self._children: dict[int, subprocess.Popen] = {}  # pid → our child
        self._exited: dict[str, EngineRecord] = {}  # exited this session, for display
        self._adopted: set[str] = set()
        self._boot_id = boot_id()
        if adopt:
            self.adopt()

    # -- paths

    def state_path(self, name: str) -> Path:
        return self.engines_dir / f"{_check_name(name)}.json"

    def log_path(self, name: str) -> Path:
        return self.engines_dir / f"{_check_name(name)}.log"

    def history_path(self, name: str) -> Path:
        return self.engines_dir / f"{_check_name(name)}.history.jsonl"

    # -- public: queries

    def adopt(self) -> list[str]:
        """Re-adopt engines whose state file matches a live process; drop stale state files.

        Returns the names adopted.  Called on construction.
        """
        adopted = []
        if not self.engines_dir.is_dir():
            return adopted
        for path in sorted(self.engines_dir.glob("*.json")):
            name = path.stem
            st = self._read_state(name)
            if st is None:
                continue
            kind, why = self._identity(st)
            if kind == "alive" or (kind == "gone" and self._live_group(st)):
                with self._lock:
                    self._adopted.add(name)
                adopted.append(name)
                if st.get("phase") == "starting" and kind == "alive" and not self._busy(name):
                    # Its starter is gone: settle the phase with one /health probe.
                    with contextlib.suppress(httpx.HTTPError), \
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
                return self._exited.get(name)
        rec = self._record(st)
        if rec is None:
            with self._lock:
                return self._exited.get(name)
        return rec

    def list(self) -> list[EngineRecord]:  # noqa: A003 — the manager's natural verb
        """Every known engine: running ones, then those that exited this session."""
        out: dict[str, EngineRecord] = {}
        if self.engines_dir.is_dir():
            for path in sorted(self.engines_dir.glob("*.json")):
                rec = self.status(path.stem)
                if rec is not None:
                    out[rec.name] = rec
        with self._lock:
            for name, rec in self._exited.items():
                out.setdefault(name, rec)
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
            raise NotOurProcessError(self._refusal(st, why))
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
    ) -> EngineRecord:
        """Spawn the engine and wait for /health 200.

        Raises PortInUseError (nothing spawned), EngineStartError (exit,
        timeout, out of memory; the group is killed and nothing is left),
        EngineBusyError, InvalidArgsError, or EngineError ("already running").
        """
        emit = _Emitter(progress, name, "start")
        try:
            with self._operation(name):
                over = normalize_overrides(profile, overrides)
                rec = self._do_start(name, profile, over, profile_name or name, emit, timeout_s, restarts=0)
        except EngineError as e:
            self._audit("engine.start", name, "failed", new=_safe_args(profile, overrides), reason=e.reason)
            if not isinstance(e, EngineBusyError):
                self._history(name, "start", "failed", reason=e.reason)
            raise
        self._audit("engine.start", name, "ok", new=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s))
        self._history(name, "start", "ok", args=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s))
        return rec

    def stop(self, name: str, grace_s: float | None = None, progress: Progress | None = None) -> StopResult:
        """SIGTERM the group (vLLM drains), SIGKILL after ``grace_s``; nothing of it is left.

        ``grace_s`` defaults to the profile's ``stop_grace_s``, at least
        ``shutdown_timeout`` + 10 s.  Raises NotOurProcessError (refused,
        nothing signalled), EngineNotFound, EngineBusyError, EngineStopError.
        """
        emit = _Emitter(progress, name, "stop")
        old = None
        try:
            with self._operation(name):
                st = self._require_state(name)
                old = st.get("args")
                res = self._do_stop(st, grace_s, emit)
        except NotOurProcessError as e:
            self._audit("engine.stop", name, "refused", old=old, reason=e.reason)
            raise
        except EngineError as e:
            self._audit("engine.stop", name, "failed", old=old, reason=e.reason)
            raise
        self._audit("engine.stop", name, "ok", old=old, reason=res.reason, sigkill=res.sigkill,
                    seconds=_r(res.seconds), pid=res.pid)
        self._history(name, "stop", "ok", reason=res.reason, pid=res.pid, sigkill=res.sigkill,
                      stop_s=_r(res.seconds), exit_code=res.exit_code)
        return res

    def restart(
        self,
        name: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        profile: ProfileConfig | None = None,
        progress: Progress | None = None,
        grace_s: float | None = None,
        timeout_s: float | None = None,
    ) -> EngineRecord:
        """Stop (drain) and start again with the recorded profile (or ``profile``),
        the overrides set before, and ``overrides`` on top."""
        emit = _Emitter(progress, name, "restart")
        old = new = None
        try:
            with self._operation(name):
                st = self._require_state(name)
                old = st.get("args")
                prof = profile or _profile_from_dict(st.get("profile") or {})
                over = normalize_overrides(prof, {**(st.get("overrides") or {}), **dict(overrides or {})})
                new = effective_args(prof, over)
                self._do_stop(st, grace_s, emit)
                rec = self._do_start(name, prof, over, st.get("profile_name") or name, emit, timeout_s,
                                     restarts=int(st.get("restarts", 0)) + 1)
        except NotOurProcessError as e:
            self._audit("engine.restart", name, "refused", old=old, new=new, reason=e.reason)
            raise
        except EngineError as e:
            self._audit("engine.restart", name, "failed", old=old, new=new, reason=e.reason)
            if not isinstance(e, EngineBusyError):
                self._history(name, "restart", "failed", reason=e.reason, args=new)
            raise
        self._audit("engine.restart", name, "ok", old=old, new=rec.args, pid=rec.pid,
                    startup_s=_r(rec.startup_s))
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
        """
        emit = _Emitter(progress, name, "set")
        t0 = time.monotonic()
        old_vals: dict[str, Any] = {}
        new_vals: dict[str, Any] = {}
        try:
            with self._operation(name):
                st = self._require_state(name)
                prof = _profile_from_dict(st.get("profile") or {})
                changes = normalize_overrides(prof, changes)
                if not changes:
                    raise InvalidArgsError("nothing to change")
                cur_args = dict(st.get("args") or {})
                old_vals = {k: cur_args.get(k) for k in changes}
                new_vals = dict(changes)
                kind, why = self._identity(st)
                if kind == "mismatch":
                    raise NotOurProcessError(self._refusal(st, why))
                if old_vals == new_vals and kind == "alive":
                    rec = self._record(st)
                    self._audit("engine.set", name, "ok", old=old_vals, new=new_vals, reason="unchanged")
                    return SetResult(name, False, old_vals, new_vals, rec, {}, None, None, None, None,
                                     time.monotonic() - t0)
                old_over = dict(st.get("overrides") or {})
                new_over = normalize_overrides(prof, {**old_over, **changes})
                before = self._stats(self._record(st), stats) if kind == "alive" else None
                stop_res = self._do_stop(st, grace_s, emit)
                restarts = int(st.get("restarts", 0)) + 1
                try:
                    rec = self._do_start(name, prof, new_over, st.get("profile_name") or name, emit,
                                         timeout_s, restarts=restarts)
                except EngineStartError as e:
                    if not rollback:
                        raise SetArgsError(f"engine did not start with {_kv(new_vals)}: {e.reason}; "
                                           "it is stopped", log_tail=e.log_tail) from None
                    emit("rollback", f"new arguments failed ({e.reason}); starting again with {_kv(old_vals)}",
                         force=True)
                    try:
                        self._do_start(name, prof, old_over, st.get("profile_name") or name, emit, timeout_s,
                                       restarts=restarts)
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
                after = self._stats(rec, stats)
                total = time.monotonic() - t0
                emit("done", f"{_kv(old_vals)} → {_kv(new_vals)} in {total:.1f} s", pid=rec.pid, force=True)
        except NotOurProcessError as e:
            self._audit("engine.set", name, "refused", old=old_vals or None, new=new_vals or None, reason=e.reason)
            raise
        except EngineError as e:
            self._audit("engine.set", name, "failed", old=old_vals or None, new=new_vals or None, reason=e.reason)
            if not isinstance(e, EngineBusyError):
                self._history(name, "set", "failed", old=old_vals, new=new_vals, reason=e.reason)
            raise
        self._audit("engine.set", name, "ok", old=old_vals, new=new_vals, pid=rec.pid,
                    startup_s=_r(rec.startup_s), total_s=_r(total), verified=verified)
        self._history(name, "set", "ok", old=old_vals, new=new_vals, pid=rec.pid, args=rec.args,
                      startup_s=_r(rec.startup_s), total_s=_r(total), stop_s=_r(stop_res.seconds))
        return SetResult(name, True, old_vals, new_vals, rec, verified, before, after, stop_res,
                         rec.startup_s, total)

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
                return self._exited.pop(name, None) is not None
        kind, why = self._identity(st)
        if kind == "alive" or (kind == "gone" and self._live_group(st)):
            raise EngineError(f"engine {name!r} is running (pid {st['pid']}); stop it instead")
        self._drop_state(name)
        with self._lock:
            self._exited.pop(name, None)
        self._history(name, "forget", "ok", reason=why, pid=st.get("pid"))
        self._audit("engine.forget", name, "ok", old={"pid": st.get("pid")}, reason=why)
        return True

    # -- internals: start

    def _do_start(self, name: str, profile: ProfileConfig, overrides: dict[str, Any], profile_name: str,
                  emit: _Emitter, timeout_s: float | None, *, restarts: int) -> EngineRecord:
        args = effective_args(profile, overrides)
        host, port = str(args.get("host") or "127.0.0.1"), int(args["port"])
        existing = self._read_state(name)
        if existing is not None:
            kind, why = self._identity(existing)
            if kind == "alive" or (kind == "gone" and self._live_group(existing)):
                raise EngineError(f"engine {name!r} is already running (pid {existing['pid']}); "
                                  "stop or restart it")
            self._drop_state(name)
        for other in self._all_states():
            if other.get("name") != name and int(other.get("port", -1)) == port:
                if self._identity(other)[0] == "alive":
                    raise PortInUseError(f"port {port} in use by engine {other['name']!r} (pid {other['pid']})")
        if not port_is_free(host, port):
            raise PortInUseError(f"port {port} in use by {self._describe_port_owner(port)}")

        cmd = build_command(profile, overrides, module=self.module)
        engine_id = uuid.uuid4().hex
        env = child_env(profile.env)
        env[ENGINE_ID_ENV] = engine_id
        self.engines_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path(name)
        self._rotate_log(log_path)
        with open(log_path, "ab") as logf:
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
                    start_new_session=True,  # own session and process group: pgid == pid
                    close_fds=True,
                )
            except OSError as e:
                raise EngineStartError(f"cannot run {cmd[0]}: {e.strerror or e}", log_path=str(log_path)) from None
        t_spawn = time.monotonic()
        pst = read_stat(proc.pid)
        st = {
            "version": STATE_VERSION,
            "name": name,
            "profile_name": profile_name,
            "profile": asdict(profile),
            "overrides": overrides,
            "args": args,
            "pid": proc.pid,
            "pgid": pst.pgrp if pst else proc.pid,
            "sid": pst.session if pst else proc.pid,
            "starttime": pst.starttime if pst else None,
            "boot_id": self._boot_id,
            "engine_id": engine_id,
            "cmdline": cmd,
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
        }
        self._watch_child(proc)
        self._write_state(name, st)
        with self._lock:
            self._exited.pop(name, None)
            self._adopted.discard(name)
        emit("spawned", f"spawned pid {proc.pid}: {_cmd_summary(cmd, 120)}", pid=proc.pid, force=True)

        timeout = float(timeout_s if timeout_s is not None else profile.start_timeout_s)
        follower = _LogFollower(log_path, offset)
        try:
            reason = self._wait_healthy(proc, st, follower, emit, timeout, t_spawn)
        except BaseException:  # interrupted (Ctrl-C, worker cancelled): leave nothing running
            self._kill_now(st, self.failure_grace_s)
            self._drop_state(name)
            raise
        if reason is not None:
            emit("failed", reason, pid=proc.pid, force=True)
            self._kill_now(st, self.failure_grace_s)
            follower.poll()
            tail = [clean_line(x, 500) for x in follower.all_lines()[-LOG_TAIL_ON_FAILURE:]]
            self._drop_state(name)
            raise EngineStartError(reason, log_tail=tail, log_path=str(log_path), pid=proc.pid,
                                   elapsed_s=time.monotonic() - t_spawn)
        startup = time.monotonic() - t_spawn
        st.update(phase="running", healthy_at=time.time(), startup_s=startup)
        self._write_state(name, st)
        emit("healthy", f"healthy after {startup:.1f} s (pid {proc.pid}, port {port})", pid=proc.pid, force=True)
        return self._record(st)

    def _wait_healthy(self, proc: subprocess.Popen, st: dict, follower: _LogFollower, emit: _Emitter,
                      timeout: float, t_spawn: float) -> str | None:
        """Poll until /health is 200 (None) or a failure reason."""
        health_url = st["url"] + "/health"
        last_err = "no answer yet"
        problem_since: float | None = None
        reason: str | None = None
        with httpx.Client(timeout=httpx.Timeout(2.0, connect=1.0), trust_env=False) as client:
            while True:
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
                    resp = client.get(health_url)
                    if resp.status_code == 200:
                        break
                    last_err = f"HTTP {resp.status_code}"
                except httpx.HTTPError as e:
                    last_err = _http_error(e)
                elapsed = time.monotonic() - t_spawn
                if elapsed >= timeout:
                    reason = f"not healthy after {timeout:g} s (/health: {last_err})"
                    break
                emit("waiting", f"waiting for /health ({elapsed:.0f} s of {timeout:g} s)",
                     log_line=follower.last_line(), pid=proc.pid)
                time.sleep(self.poll_interval_s)
        return reason

    def _describe_port_owner(self, port: int) -> str:
        pids = port_listeners(port)
        if not pids:
            return "another process (not visible to this user)"
        pid = pids[0]
        for other in self._all_states():
            if other.get("pgid") and (st := read_stat(pid)) and st.pgrp == other["pgid"]:
                return f"engine {other['name']!r} (pid {pid})"
        return f"pid {pid} ({_cmd_summary(read_cmdline(pid), 60)})"

    def _rotate_log(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            if path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(path, path.with_suffix(".log.1"))

    def _watch_child(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._children[proc.pid] = proc

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

    # -- internals: stop

    def _default_grace(self, st: Mapping[str, Any]) -> float:
        prof = st.get("profile") or {}
        grace = float(prof.get("stop_grace_s", 30.0))
        drain = (st.get("args") or {}).get("shutdown_timeout")
        if drain:
            grace = max(grace, float(drain) + 10.0)
        return grace

    def _do_stop(self, st: dict, grace_s: float | None, emit: _Emitter) -> StopResult:
        name, pid = st["name"], int(st["pid"])
        kind, why = self._identity(st)
        if kind == "mismatch":
            emit("failed", self._refusal(st, why), force=True)
            raise NotOurProcessError(self._refusal(st, why))
        grace = float(grace_s) if grace_s is not None else self._default_grace(st)
        t0 = time.monotonic()
        if kind == "gone" and not self._live_group(st):
            self._drop_state(name)
            rc = self._owned_rc(pid)
            reason = f"had already exited ({why})"
            emit("stopped", reason, pid=pid, force=True)
            return StopResult(name, pid, 0.0, False, rc, reason, None, already_exited=True)
        st["phase"] = "stopping"
        self._write_state(name, st)
        watcher = _InFlightWatcher(self._endpoint(st), self.metrics_interval_s) \
            if kind == "alive" else None
        sigkill = False
        kill_why = f"SIGKILL after {grace:g} s grace"
        log_path = Path(st.get("log_path") or self.log_path(name))
        try:
            follower = _LogFollower(log_path, log_path.stat().st_size)
        except OSError:
            follower = None
        engine_stopped_at: float | None = None
        try:
            self._signal(st, signal.SIGTERM)
            emit("draining", f"SIGTERM sent to process group {st['pgid']}; draining "
                 f"(SIGKILL after {grace:g} s)", pid=pid, force=True)
            while self._live_group(st):
                now = time.monotonic()
                elapsed = now - t0
                if engine_stopped_at is None and follower is not None \
                        and any(_ENGINE_STOPPED.search(x) for x in follower.poll()):
                    engine_stopped_at = now
                waited_http = engine_stopped_at is not None and now - engine_stopped_at >= self.http_close_s
                if elapsed >= grace or waited_http:
                    sigkill = True
                    if waited_http and elapsed < grace:
                        kill_why = (f"engine drained and stopped, but its HTTP server still waited for client "
                                    f"connections after {self.http_close_s:g} s: SIGKILL")
                    emit("killing", f"{kill_why} (process group {st['pgid']})", pid=pid, force=True)
                    self._signal(st, signal.SIGKILL)
                    deadline = time.monotonic() + self.kill_wait_s
                    while self._live_group(st) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    break
                if engine_stopped_at is not None:
                    emit("draining", "engine stopped; waiting for the HTTP server to close its connections",
                         pid=pid)
                else:
                    n = watcher.value if watcher is not None else None
                    msg = f"draining ({n} in flight)" if n is not None else "draining"
                    emit("draining", f"{msg}, {elapsed:.0f} s of {grace:g} s grace", in_flight=n, pid=pid)
                time.sleep(min(self.poll_interval_s, 0.2))
        finally:
            if watcher is not None:
                watcher.close()
        left = self._live_group(st)
        if left:
            desc = ", ".join(f"{m.pid} ({m.state})" for m in left)
            st["phase"] = "stopping"
            self._write_state(name, st)
            raise EngineStopError(f"processes of engine {name!r} left after SIGKILL: {desc}")
        seconds = time.monotonic() - t0
        rc = self._owned_rc(pid)
        if sigkill:
            reason = kill_why
        else:
            reason = f"exited {seconds:.1f} s after SIGTERM"
            if watcher is not None and watcher.max_seen:
                reason += f" (drained up to {watcher.max_seen} in flight)"
        self._drop_state(name)
        emit("stopped", reason, pid=pid, force=True)
        return StopResult(name, pid, seconds, sigkill, rc, reason,
                          watcher.max_seen if watcher is not None else None)

    def _kill_now(self, st: dict, grace: float) -> None:
        """Failure cleanup: SIGTERM, short grace, SIGKILL; wait until the group is gone."""
        with contextlib.suppress(EngineError):
            self._signal(st, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self._live_group(st) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._live_group(st):
                self._signal(st, signal.SIGKILL)
                deadline = time.monotonic() + self.kill_wait_s
                while self._live_group(st) and time.monotonic() < deadline:
                    time.sleep(0.05)

    def _owned_rc(self, pid: int) -> int | None:
        with self._lock:
            proc = self._children.get(pid)
        if proc is None:
            return None
        for _ in range(50):
            if proc.returncode is not None:
                return proc.returncode
            time.sleep(0.02)
        return proc.returncode

    def _signal(self, st: Mapping[str, Any], sig: int) -> None:
        """Signal the engine's group — only after checking it is still ours."""
        kind, why = self._identity(st)
        if kind == "mismatch":
            raise NotOurProcessError(self._refusal(st, why))
        if kind == "alive":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(st["pgid"]), sig)
            return
        # The leader is gone: signal the group members that are verifiably its own.
        for m in self._live_group(st):
            _send_verified(m.pid, m.starttime, sig)

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

    def __init__(self, mgr: EngineManager, name: str, attempts: int = 10) -> None:
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


def _send_verified(pid: int, starttime: int, sig: int) -> None:
    """Signal ``pid`` only if it still has ``starttime`` (pidfd: no reuse race)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (OSError, AttributeError):
        st = read_stat(pid)
        if st is not None and st.starttime == starttime:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return
    try:
        st = read_stat(pid)
        if st is not None and st.starttime == starttime:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, sig)
    finally:
        os.close(fd)


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name or ""):
        raise InvalidArgsError(f"engine name {name!r}: use letters, digits, '.', '_' or '-' (max 64)")
    return name


def _kv(d: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _rc_text(rc: int) -> str:
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"{rc} ({signal.Signals(-rc).name})"
    return str(rc)


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


def _safe_args(profile: ProfileConfig, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        return effective_args(profile, overrides)
    except Exception:  # noqa: BLE001
        return {}
