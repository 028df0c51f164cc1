"""A healthy simulated engine for the hostile suites to run next to, and an RSS probe."""

from __future__ import annotations

import pytest

from infertop.sim import SimCluster


@pytest.fixture(scope="session")
def healthy():
    """One realtime simulated vLLM engine under steady load (no GPU exporter)."""
    with SimCluster(1, seed=5, load="steady", dcgm=False) as c:
        yield c.engines[0]


def rss_bytes() -> int:
    """Resident set size of this test process, from /proc/self/status."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")
