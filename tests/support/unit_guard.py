"""The unit tier's guard: an audit hook that refuses (and records) sockets and processes while a unit
test runs — tests/unit/conftest.py installs it."""

from __future__ import annotations

import socket
import threading

_NET_EVENTS = frozenset({
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo",
})
_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork"})
#: asyncio's event loop makes an AF_UNIX socketpair to wake itself; only internet sockets count.
_INET = (socket.AF_INET, socket.AF_INET6)


class UnitGuard:
    """What the running unit test tried that the tier forbids (events from its own threads only)."""

    def __init__(self) -> None:
        self.active = False
        self.violations: list[str] = []
        # Threads alive before the test (another tier's leftovers in a full run) are not its doing.
        self._foreign: set[int] = set()

    def start(self) -> None:
        self.violations = []
        self._foreign = {t.ident for t in threading.enumerate() if t is not threading.main_thread()}
        self.active = True

    def stop(self) -> list[str]:
        self.active = False
        return self.violations

    def hook(self, event: str, args: tuple) -> None:
        if not self.active or threading.get_ident() in self._foreign:
            return
        if event == "socket.__new__":
            if args[1] in _INET:
                self._record(f"opened an internet socket ({socket.AddressFamily(args[1]).name})")
        elif event in _NET_EVENTS:
            self._record(f"{event}{args[1:] if event in ('socket.connect', 'socket.bind') else args[:2]}")
        elif event in _PROCESS_EVENTS:
            self._record(f"{event} {args[:2]}")

    def _record(self, what: str) -> None:
        self.violations.append(what)
        raise PermissionError(f"unit tests open no sockets and start no processes: {what}")
