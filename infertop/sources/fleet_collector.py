"""All engines' poll loops: each engine is polled by its own loop — the next poll starts when the last
one finished plus the interval, so polls of one engine never overlap, and a hung or dead engine (its
own timeout) never delays the others — on one grid of the clock, so the loop wakes once for all."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..domain.engine import FleetSnapshot
from ..domain.source import SourceHealth
from .vllm import EngineCollector, EngineEndpoint


MIN_PAUSE_S = 0.05  # the shortest wait between two polls of one engine


def grid_due(due: float, now: float, interval_s: float) -> float:
    """The multiple of ``interval_s`` nearest to ``due``, at least MIN_PAUSE_S after ``now``.

    Healthy engines poll on this one grid of the clock: their timers share each deadline, so the
    event loop wakes once for all of them rather than once per engine, and their answers come in
    together. Each engine's loop is still its own: a slow engine delays no other."""
    if not interval_s > 0:  # no grid to keep (config bounds the refresh; a caller may not)
        return max(due, now + MIN_PAUSE_S)
    grid = round(due / interval_s) * interval_s
    while grid < now + MIN_PAUSE_S:
        grid += interval_s
    return grid


class FleetCollector:
    """All engines: concurrent independent poll loops and the latest snapshot.

    Sparklines are recorded from the fleet state, once a tick (:mod:`..state.fleet_history`), not here."""

    def __init__(
        self,
        endpoints: list[EngineEndpoint],
        interval_s: float = 1.0,
        window_s: float = 60.0,
        on_update: Callable[[FleetSnapshot], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.window_s = window_s
        self.clock = clock
        self.collectors: list[EngineCollector] = []
        for ep in endpoints:
            self.collectors.append(self._collector(ep))
        self.on_update = on_update
        # called with the one collector just polled: O(1) per poll where on_update builds a fleet snapshot
        self.on_polled: Callable[[EngineCollector], None] | None = None
        self._tasks: dict[str, asyncio.Task] | None = None
        self._stopped: asyncio.Event | None = None

    def _collector(self, ep: EngineEndpoint) -> EngineCollector:
        return EngineCollector(ep, self.window_s, self.clock,
                               reserved=lambda: {c.endpoint.name for c in self.collectors})

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.collectors))

    def snapshot(self) -> FleetSnapshot:
        return FleetSnapshot(taken_at=time.time(), engines=tuple(s for c in self.collectors for s in c.stats))

    def health(self) -> list[SourceHealth]:
        return [c.health for c in self.collectors]

    async def poll_collector(self, c: EngineCollector) -> None:
        """Poll one engine; nothing it sends (and no bug it triggers) escapes as an exception."""
        try:
            await c.poll()
        except Exception as exc:  # noqa: BLE001 — becomes that engine's error state; polling goes on
            c._failed(exc, c.clock(), internal=True)
        if self.on_polled is not None:
            self.on_polled(c)
        if self.on_update is not None:
            self.on_update(self.snapshot())

    async def poll_once(self) -> FleetSnapshot:
        """Poll every engine once, concurrently; returns the new snapshot.

        Lockstep: the call lasts as long as the slowest engine. To collect for a
        while without one slow engine holding back the others, use :meth:`run_for`.
        """
        await asyncio.gather(*(self.poll_collector(c) for c in self.collectors))
        return self.snapshot()

    async def run_for(self, seconds: float) -> FleetSnapshot:
        """Run the independent per-engine loops for ``seconds``, then stop them.

        An engine whose first poll is still in flight at the end gets up to its
        own timeout to finish it, so every engine ends with a state (never
        "unknown"). Bounded: at most ``seconds`` plus the longest engine timeout.
        """
        tasks = {c.endpoint.name: asyncio.create_task(self._loop(c)) for c in self.collectors}
        try:
            await asyncio.sleep(max(0.0, seconds))
            waiting = [c for c in self.collectors if c.completed_polls == 0]
            if waiting:
                deadline = self.clock() + max(c.endpoint.timeout_s for c in waiting) + 0.5
                while any(c.completed_polls == 0 for c in waiting) and self.clock() < deadline:
                    await asyncio.sleep(0.02)
        finally:
            for t in tasks.values():
                t.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
        return self.snapshot()

    async def run(self) -> None:
        """Poll forever, one independent loop per engine (engines may be added later)."""
        self._tasks = {c.endpoint.name: asyncio.create_task(self._loop(c)) for c in self.collectors}
        self._stopped = asyncio.Event()
        try:
            await self._stopped.wait()
        finally:
            for t in self._tasks.values():
                t.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            self._tasks = {}
            await self.aclose()

    def add_endpoint(self, ep: EngineEndpoint) -> EngineCollector:
        """Watch one more engine (e.g. one infertop just started); replaces one of the same name."""
        self.remove_endpoint(ep.name)
        c = self._collector(ep)
        self.collectors.append(c)
        if self._tasks is not None and self._stopped is not None:
            self._tasks[ep.name] = asyncio.get_running_loop().create_task(self._loop(c))
        return c

    def remove_endpoint(self, name: str) -> None:
        for c in [c for c in self.collectors if c.endpoint.name == name]:
            self.collectors.remove(c)
            task = (self._tasks or {}).pop(name, None)
            if task is not None:
                task.cancel()

    async def _loop(self, c: EngineCollector) -> None:
        while True:
            started = c.clock()
            try:
                await self.poll_collector(c)
            except Exception as exc:  # noqa: BLE001 — e.g. on_update failed: this loop must not die
                c._failed(exc, started, internal=True)
            now = c.clock()
            delay = c.next_delay_s(self.interval_s)
            due = started + delay
            if delay == self.interval_s:  # healthy: on the fleet's grid (a failing engine keeps its jitter)
                due = grid_due(due, now, delay)
            await asyncio.sleep(max(MIN_PAUSE_S, due - now))
