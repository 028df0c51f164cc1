"""Free TCP ports on 127.0.0.1 for a child or server that binds them later.

Why not bind port 0 and close: the kernel takes that port from its ephemeral
range, the same range every other bind to port 0 (servers in this and any other
test process) and every outgoing connection (httpx, the engines' own clients)
draw from. Between choosing the port and the child binding it (seconds later,
after a restart) one of them can take it, and the engine start fails with
"port … in use". So ports here come from outside that range: below its low end
(from 20000), or above its high end when there is no room below; at random;
never one this process has already handed out; and each is confirmed by a bind
before it is returned.

The suite runs in one process (no pytest-xdist in the Makefile or pyproject).
Should several test processes run at once, the random choice over the ~12000
ports below the range plus the bind check is what keeps them apart.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

EPHEMERAL_RANGE_PATH = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default, used when the file cannot be read
LOW_START = 20000  # above the usual service ports a test machine may run (8000, 9090…)
MIN_POOL = 1000  # fewer candidates than this on one side: use the other side
TRIES = 100

_handed_out: set[int] = set()
# Not the module-level random: tests may seed it, and two processes seeded alike
# would walk the same sequence of ports.
_rng = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (low, high), or Linux's default."""
    try:
        with open(EPHEMERAL_RANGE_PATH) as f:
            low, high = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= 65535 else DEFAULT_EPHEMERAL


def candidate_ports(low: int, high: int) -> range:
    """Ports outside the ephemeral range [low, high]: below it, else above it, else none."""
    below = range(LOW_START, low)
    if len(below) >= MIN_POOL:
        return below
    above = range(max(high + 1, LOW_START), 65536)
    if len(above) >= MIN_POOL:
        return above
    return range(0)


def bindable(port: int) -> bool:
    """True when 127.0.0.1:port can be bound now.

    SO_REUSEADDR stays off so that a port with connections still in TIME_WAIT
    also counts as taken: stricter than the server that will bind it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that is free now, outside the ephemeral range when possible."""
    pool = candidate_ports(*ephemeral_range())
    for _ in range(TRIES if pool else 0):
        port = _rng.choice(pool)
        if port not in _handed_out and bindable(port):
            _handed_out.add(port)
            return port
    # Last resort (no room outside the range, or all tries taken): the kernel's choice.
    for _ in range(TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 after {2 * TRIES} tries")
