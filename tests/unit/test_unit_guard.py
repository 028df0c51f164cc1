"""The unit tier's guard (tests/support/unit_guard.py, installed by tests/unit/conftest.py): sockets and processes are refused and recorded, even
when the code under test swallows the error; asyncio's own wake-up socketpair and other tiers' threads
are not counted."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading

import pytest
from unit_guard import UnitGuard


def test_an_internet_socket_is_refused_and_recorded(unit_tier_guard):
    with pytest.raises(PermissionError, match="no sockets"):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    assert unit_tier_guard.violations == ["opened an internet socket (AF_INET)"]
    unit_tier_guard.violations.clear()  # the refusal this test provoked is not its failure


def test_a_swallowed_refusal_is_still_recorded(unit_tier_guard):
    try:
        socket.getaddrinfo("localhost", 80)
    except OSError:
        pass  # as a collector that catches OSError would
    assert [v.split("(")[0] for v in unit_tier_guard.violations] == ["socket.getaddrinfo"]
    unit_tier_guard.violations.clear()


def test_a_subprocess_is_refused(unit_tier_guard):
    with pytest.raises(PermissionError, match="subprocess.Popen"):
        subprocess.run([sys.executable, "-c", "pass"])
    assert len(unit_tier_guard.violations) == 1
    unit_tier_guard.violations.clear()


def test_an_event_loop_runs(unit_tier_guard):
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert asyncio.run(answer()) == 42  # its AF_UNIX self-pipe is no network
    assert unit_tier_guard.violations == []


def test_threads_that_predate_the_test_are_not_its_doing():
    guard = UnitGuard()
    go, done = threading.Event(), threading.Event()
    seen: list[BaseException] = []

    def old_thread() -> None:
        go.wait()
        try:
            guard.hook("socket.connect", (None, ("10.0.0.1", 80)))
        except BaseException as exc:  # noqa: BLE001 — what the hook raised is the finding
            seen.append(exc)
        done.set()

    t = threading.Thread(target=old_thread)
    t.start()
    guard.start()
    go.set()
    done.wait()
    t.join()
    assert seen == [] and guard.violations == []
    with pytest.raises(PermissionError):
        guard.hook("socket.connect", (None, ("10.0.0.1", 80)))  # the test's own thread is counted
    assert guard.stop() == ["socket.connect(('10.0.0.1', 80),)"]
