"""The event loop infertop's long-running commands run on: uvloop's where installed, else asyncio's.

uvloop runs the loop, its timers and socket transports in C: less CPU per proxied request for the
gateway (benchmarks/bench_gateway.md) and per poll and frame for the console (benchmarks/
bench_tui_findings.md, session 11). ``INFERTOP_EVENT_LOOP=asyncio`` picks asyncio's own loop (to rule
the loop out when chasing a problem)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

USE_UVLOOP = True


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A callable making a new event loop: uvloop's when installed and wanted, else asyncio's own."""
    if USE_UVLOOP and os.environ.get("INFERTOP_EVENT_LOOP", "").strip().lower() != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop
