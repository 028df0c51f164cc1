"""Collecting: the poll loops of the engines, the gateways and the GPUs, and "poll everything now".

``CollectionMixin`` is a mixin of :class:`~infertop.ui.app.InfertopApp`; its collectors are made in the
app's ``__init__`` and its loops started in ``on_mount``.
"""

from __future__ import annotations

from textual import work

from .widgets.gpus import engine_refs

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
        await self.fleet.gpu_loop(engine_refs=self._gpu_engine_refs)

    @work(exclusive=True, group="slo-range", exit_on_error=False)
    async def start_slo_range_collection(self) -> None:
        """The SLO budget over the objective's window from Prometheus, every minute, off the tick."""
        await self.fleet.slo_range_loop()

    async def poll_gpus(self) -> None:
        """Read every GPU source once (NVML runs in a thread) and hand the rows to the fleet state."""
        await self.fleet.poll_gpus(self._gpu_engine_refs)

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
        await self.fleet.poll_once()
        self.tick()

    async def action_refresh_now(self) -> None:
        if self.player is None:
            self.run_worker(self.kube_refresh_now(), group="kube-refresh-now", exclusive=True, exit_on_error=False)
        self.notify("polling every source now…", timeout=2)
        await self.fleet.poll_once()
        await self.poll_gpus()
        self.tick()
        n = len(self.state.failing_sources()) if self.state is not None else 0
        self.notify("refreshed: every source answered" if not n else f"refreshed: {n} source{'s' if n != 1 else ''} failing",
                    severity="information" if not n else "warning", timeout=3)
