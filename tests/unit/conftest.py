"""The unit tier: pure functions and parsers against fixtures — no sockets, no subprocesses, no Pilot.

A test here that opens an internet socket, connects, binds, resolves a name or starts a process
fails, even where the code under test swallows the error: an audit hook (the same mechanism as
tests/conftest.py's loopback guard) records the attempt and the test's teardown reports it. A test
file that drives the App (``run_test``, a Pilot, ``snap_compare``) belongs in tests/tui/ and fails
here. Heavier tests go to tests/loopback/ or tests/tui/."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from unit_guard import UnitGuard

_PILOT_MARKERS = ("run_test(", "snap_compare", "auto_pilot=")

GUARD = UnitGuard()
sys.addaudithook(GUARD.hook)
_pilot_files: dict[Path, bool] = {}


def _drives_the_app(path: Path) -> bool:
    if path not in _pilot_files:
        source = path.read_text()
        _pilot_files[path] = any(marker in source for marker in _PILOT_MARKERS)
    return _pilot_files[path]


@pytest.fixture(autouse=True)
def unit_tier_guard(request):
    """Fail the test if it (or code it calls, in its own threads) used the network or a subprocess."""
    if _drives_the_app(Path(request.node.path)):
        pytest.fail(f"{request.node.path.name} drives the App (run_test / Pilot / snap_compare): it belongs in tests/tui/")
    GUARD.start()
    try:
        yield GUARD
    finally:
        violations = GUARD.stop()
    if violations:
        pytest.fail("unit tier: " + "; ".join(violations[:3]), pytrace=False)
