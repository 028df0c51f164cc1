"""Collecting: the poll loops of the engines, the gateways and the GPUs, and "poll everything now".

``CollectionMixin`` is a mixin of :class:`~infertop.ui.app.InfertopApp`; its collectors are made in the
app's ``__init__`` and its loops started in ``on_mount``.
"""

from __future__ import annotations

import asyncio
import time

from textual import work

from ..domain.source import SourceHealth
from .widgets.gpus import engine_refs

GPU_REFRESH_MIN_S = 2.0  # GPUs are polled on their own schedule, at most this often


class CollectionMixin:
    """Each source on a loop of its own that never blocks the UI; each tick joins their latest reads."""

    @work(exclusive=True, group="collect", exit_on_error=False)
    async def start_collection(self) -> None:
        """Poll loops run as an async worker: never block the UI, never overlap."""
        await self.collector.run()

    @work(exclusive=True, group="queues", exit_on_error=False)
    async def start_queue_collection(self) -> None:
        """Gateways and endpoint pickers, each on its own loop (never overlapping)."""
        try:
            await self.queue_fleet.run()
        finally:
            await self.queue_fleet.aclose()

    @work(exclusive=True, group="gpu", exit_on_error=False)
    async def start_gpu_collection(self) -> None:
        """GPU sources on their own schedule; the next poll starts when the last one finished."""
        interval = max(GPU_REFRESH_MIN_S, self.settings.config.refresh_s)
        while True:
            started = time.monotonic()
            await self.poll_gpus()
            await asyncio.sleep(max(0.2, interval - (time.monotonic() - started)))

    async def poll_gpus(self) -> None:
        """Read every GPU source once (NVML runs in a thread) and hand the rows to the fleet state."""
        try:
            nvml = self.gpu_collector.nvml
            if nvml is not None and not nvml.gone:  # only NVML lists processes to map to engines
                endpoints = [c.endpoint for c in self.collector.collectors]
                self.gpu_collector.set_engines(await asyncio.to_thread(self._gpu_engine_refs, endpoints))
            rows, health = await self.gpu_collector.poll()
        except Exception as e:  # noqa: BLE001 — a GPU source must never stop the app
            self.joiner.set_gpus(self.joiner.gpu_rows, [SourceHealth("gpu", "gpu", False, last_error=
                                                                     f"GPU collection failed: {type(e).__name__}: {e}",
                                                                     last_error_at=time.monotonic())])
            return
        self.joiner.set_gpus(rows, health)

    def _gpu_engine_refs(self, endpoints: list) -> list:
        """(name, root PID, port) of the engines on this host (a thread: reads engine state files)."""
        mgr = getattr(self, "engine_manager", None)
        pids = {rec.name: rec.pid for rec in mgr.list() if rec.alive} if mgr is not None else {}
        return engine_refs(endpoints, pids)

    async def poll_gpus_now(self) -> None:
        """Poll the GPU sources once and render a new tick (tests and Ctrl+R)."""
        await self.poll_gpus()
        self.tick()

    async def poll_now(self) -> None:
        """Poll every engine (and queue source) once and render a new tick (tests and Ctrl+R)."""
        await asyncio.gather(self.collector.poll_once(), self.queue_fleet.poll_once())
        self.tick()

    def _on_polled(self, collector) -> None:
        self.joiner.observe([collector])

    async def action_refresh_now(self) -> None:
        if self.player is None:
            self.run_worker(self.kube_refresh_now(), group="kube-refresh-now", exclusive=True, exit_on_error=False)
        self.notify("polling every source now…", timeout=2)
        await asyncio.gather(self.collector.poll_once(), self.queue_fleet.poll_once())
        await self.poll_gpus()
        self.tick()
        n = len(self.state.failing_sources()) if self.state is not None else 0
        self.notify("refreshed: every source answered" if not n else f"refreshed: {n} source{'s' if n != 1 else ''} failing",
                    severity="information" if not n else "warning", timeout=3)
