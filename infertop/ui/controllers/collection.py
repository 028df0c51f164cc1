"""Collecting: the Fleet's poll loops (engines, gateways, GPUs, the SLO range reads) started as workers of
the console, and "poll everything now"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..widgets.gpus import engine_refs
from .host import ConsoleHost


class Collection:
    """Each source on a loop of its own that never blocks the UI; each tick joins their latest reads.

    ``fleet`` is the console's Fleet service; ``tick`` builds and paints a tick; ``engine_manager`` the
    manager of the engines infertop started (None until ready), for the GPUs' process → engine map."""

    def __init__(self, host: ConsoleHost, fleet: Any, *, tick: Callable[[], None],
                 engine_manager: Callable[[], Any]) -> None:
        self.host, self.fleet, self._tick, self._engine_manager = host, fleet, tick, engine_manager

    def start(self) -> None:
        """Start every loop as an async worker of its own: none overlaps itself, none blocks the UI."""
        fleet = self.fleet
        self.host.run_worker(fleet.collector.run(), group="collect", exclusive=True, exit_on_error=False)
        self.host.run_worker(fleet.gpu_loop(engine_refs=self.gpu_engine_refs), group="gpu", exclusive=True,
                             exit_on_error=False)
        if fleet.slo_reader is not None:  # the SLO budget over the objective's window, every minute
            self.host.run_worker(fleet.slo_range_loop(), group="slo-range", exclusive=True, exit_on_error=False)
        if fleet.queues.collectors:
            self.host.run_worker(self._queues(), group="queues", exclusive=True, exit_on_error=False)

    async def _queues(self) -> None:
        try:
            await self.fleet.queues.run()
        finally:
            await self.fleet.queues.aclose()

    def gpu_engine_refs(self, endpoints: list) -> list:
        """(name, root PID, port) of the engines on this host (a thread: reads engine state files)."""
        mgr = self._engine_manager()
        pids = {rec.name: rec.pid for rec in mgr.list() if rec.alive} if mgr is not None else {}
        return engine_refs(endpoints, pids)

    async def poll_gpus(self) -> None:
        """Read every GPU source once (NVML runs in a thread) and hand the rows to the fleet state."""
        await self.fleet.poll_gpus(self.gpu_engine_refs)

    async def poll_now(self) -> None:
        """Poll every engine (and queue source) once and render a new tick (tests and Ctrl+R)."""
        await self.fleet.poll_once()
        self._tick()

    async def poll_gpus_now(self) -> None:
        """Poll the GPU sources once and render a new tick (tests and Ctrl+R)."""
        await self.poll_gpus()
        self._tick()

    async def refresh_now(self, state: Callable[[], Any]) -> None:
        """^R: every source now, then a tick; says how many are failing."""
        self.host.notify("polling every source now…", timeout=2)
        await self.fleet.poll_once()
        await self.poll_gpus()
        self._tick()
        st = state()
        n = len(st.failing_sources()) if st is not None else 0
        self.host.notify("refreshed: every source answered" if not n
                         else f"refreshed: {n} source{'s' if n != 1 else ''} failing",
                         severity="information" if not n else "warning", timeout=3)
