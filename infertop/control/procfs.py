"""Reading ``/proc``: process stat, start time, command line, process groups, ports.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from .engines.errors import PortInUseError


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


def live_processes(keep) -> list[ProcStat]:
    """Live (not zombie) processes whose stat ``keep`` accepts."""
    out: list[ProcStat] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        st = read_stat(int(entry))
        if st is not None and st.state not in ("Z", "X") and keep(st):
            out.append(st)
    return out


def group_members(pgid: int) -> list[ProcStat]:
    """Live (not zombie) processes whose process group is ``pgid``."""
    return live_processes(lambda st: st.pgrp == pgid)


def session_members(sid: int) -> list[ProcStat]:
    """Live (not zombie) processes whose session is ``sid``.

    A session id is the PID of its leader and the kernel never reuses a PID
    while a session or group still carries it, so with a start-time check
    this names one engine's processes even after its leader died.
    """
    return live_processes(lambda st: st.session == sid)


def read_cgroup(pid: int) -> str | None:
    """The unified (v2) cgroup path of ``pid``, or None when there is none (or only the root)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hier, _, rest = line.partition(":")
        ctrl, _, path = rest.partition(":")
        if hier == "0" and ctrl == "" and path and path != "/":
            return path
    return None


def process_title(pid: int) -> str:
    """What ``pid`` runs, for messages: its command line, else its name."""
    cmd = read_cmdline(pid)
    if cmd:
        # the program's name, not its directory: a long virtualenv path would hide what it runs
        return _cmd_summary([Path(cmd[0]).name, *cmd[1:]], 80)
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or "?"
    except OSError:
        return "?"


def kernel_argv(cmd: list[str], depth: int = 4) -> list[str]:
    """``cmd`` as ``/proc/<pid>/cmdline`` will show it once the kernel has run it.

    A program that is a ``#!`` script runs as ``interpreter [arg] script
    args…``; ``#!/usr/bin/env NAME`` then runs ``NAME script args…``.
    Followed up to ``depth`` levels; anything unreadable stays as given.
    """
    if not cmd or depth <= 0:
        return list(cmd)
    prog = cmd[0]
    path = prog if "/" in prog else _which(prog)
    if path is None:
        return list(cmd)
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return list(cmd)
    if not head.startswith(b"#!"):
        return list(cmd)
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    interp, _, arg = line.partition(" ")
    arg = arg.strip()
    if not interp:
        return list(cmd)
    # The kernel passes the script as the file name execve() got: the PATH lookup's result.
    argv = [interp, *([arg] if arg else []), path, *cmd[1:]]
    if os.path.basename(interp) == "env" and arg and not arg.startswith("-"):
        argv = [arg, path, *cmd[1:]]  # env execs NAME with the rest
    return kernel_argv(argv, depth - 1) if argv[0] != path else argv


def _which(prog: str) -> str | None:
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        cand = os.path.join(d or ".", prog)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


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
