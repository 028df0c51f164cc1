"""Waiting in Pilot tests for a state on screen, not for time.

``pilot.pause()`` alone is not enough on a starved machine: it waits for the
messages queued when it was called, then for the process to look idle by its
CPU time — and a process the kernel does not schedule looks idle.  Messages
posted in reply (an Input's Changed, a pushed screen's mount) can still be
waiting.  :func:`until` pauses until the condition holds, within a generous
deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.pilot import WaitForScreenTimeout

DEADLINE_S = 60.0


async def until(pilot, predicate: Callable[[], object], what: str = "condition",
                timeout_s: float = DEADLINE_S, *, message: str | None = None) -> object:
    """Pause ``pilot`` until ``predicate()`` is true and return its value; fail naming
    ``what`` (or ``message``, the Queue and Autoscaler tests' word for it) after ``timeout_s``.

    A predicate that raises (a widget not mounted yet) counts as false; the
    last such error is chained to the failure.
    """
    what = message or what
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = None
        except Exception as e:  # noqa: BLE001 — e.g. NoMatches before a screen is composed
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}") from last
        try:
            await pilot.pause(0.02)
        except WaitForScreenTimeout:  # its own 30 s bound; ours is the deadline above
            pass
