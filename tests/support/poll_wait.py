"""Waiting outside a Pilot: ``wait_for`` polls a predicate (a bounded loop) and returns its first
truthy value, or fails saying what it waited for."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)
