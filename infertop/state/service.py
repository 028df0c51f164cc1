"""The one composition root: :class:`Fleet` builds every collector of a config and joins them into one
:class:`~infertop.state.fleet_types.FleetState` per tick — the same way for the console, ``snapshot`` and the
recorder.

Before it, each of the three wired its own collectors, joiner, advisor, queues and GPUs, and each built
a different tick: the recorder's had no SLO report and no "what changed" lines, the snapshot's no
change records. Here a tick is one thing everywhere: the join, what changed, the SLO report (before
triage: the SLO verdicts read it), then the verdicts.

The Kubernetes side: the console keeps its own watcher (informers and the pod loads, on the UI's
worker) and hands each read to :meth:`Fleet.set_cluster`; a headless run reads with
:meth:`Fleet.read_cluster` (one read) or :meth:`Fleet.cluster_loop` (a list of every kind each
``kube.refresh_s``: a recorder under cron keeps no informers).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..analysis.alerts import AlertHold
from ..analysis.slo.report import SloWatch, buckets_of, engine_windows
from ..analysis.triage import Triage
from ..domain.source import SourceHealth
from ..sources.gpu import GpuCollector
from ..sources.queues.collector import QueueFleet
from ..sources.queues.config import queue_collectors
from ..sources.vllm import EngineEndpoint
from ..sources.fleet_collector import FleetCollector
from .changes import ChangeRecords
from .fleet_join import CONNECTING_FOR_S, FleetJoiner
from .fleet_types import FleetState

GPU_REFRESH_MIN_S = 2.0  # GPUs are polled on their own schedule, at most this often
# How long a headless window waits on a cluster read still under way: past it the state is built without
# the cluster (shown as not read yet) rather than waiting on a hung API server.
CLUSTER_WAIT_S = 30.0
# The SLO error budget over the objective's window (days) from Prometheus: a few range queries over
# weeks of buckets, so not per tick — on a loop of its own, in a thread, this often.
SLO_RANGE_EVERY_S = 60.0


class Fleet:
    """Every collector of one config, and the tick's state built from their latest reads.

    ``watch``: a console or a recorder (engines not answered yet are "connecting" for a while, warnings are
    held before shown); a one-shot snapshot passes False and says what its window saw.
    ``advisor``: "headless" (evaluates, never applies; only where a cluster is configured and the advisor
    is not off), "console" (always one; auto mode applies only with ``allow_auto``), or None (a replay
    shows the recorded decisions)."""

    def __init__(self, cfg: Any, *, endpoints: Sequence[EngineEndpoint] = (), mode: str = "live",
                 engine_pods: dict[str, str] | None = None, dcgm_urls: Sequence[str] = (),
                 prometheus: bool = False, watch: bool = True, window_s: float | None = None,
                 advisor: str | None = "headless", allow_auto: bool = False, queues: bool = True,
                 gpu: GpuCollector | None = None, backfill_step_s: float | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.prometheus = prometheus
        self.watch = watch
        window_s = cfg.window_s if window_s is None else window_s
        if prometheus:
            from ..sources.prometheus.fleet import PromFleetSource

            self.collector: Any = PromFleetSource(cfg.prometheus, history_step_s=backfill_step_s)
            window_s = cfg.prometheus.window_s if not watch else window_s
        else:
            self.collector = FleetCollector(list(endpoints), interval_s=cfg.refresh_s, window_s=window_s)
        self.joiner = FleetJoiner(self.collector, slo=cfg.slo, refresh_s=cfg.refresh_s, window_s=window_s,
                                  mode=mode, engine_pods=engine_pods, wall=wall)
        if watch:
            self.joiner.connecting_for_s = CONNECTING_FOR_S  # start-up: no answer yet is "connecting", not down
            self.joiner.alert_hold = AlertHold()  # warnings held 5 s before shown, kept 10 s: no blinking
        self.collector.on_polled = lambda c: self.joiner.observe([c])
        self.gpu = gpu or GpuCollector(cfg.gpu, cfg.prometheus, dcgm_urls=list(dcgm_urls))
        self.queues = QueueFleet(queue_collectors(cfg, window_s) if queues else [], interval_s=cfg.refresh_s)
        self.joiner.queue_collectors = self.queues.collectors
        self.advisor: Any = None
        if advisor == "console" or (advisor == "headless" and cfg.kube.configured and cfg.advisor.mode != "off"):
            from .advisor.core import Advisor

            self.advisor = Advisor(cfg.advisor, cfg.slo, engine_pods=engine_pods,
                                   allow_auto=allow_auto and advisor == "console")
            self.joiner.autoscalers = self.advisor
        self.changes = ChangeRecords()  # actions run here, Kubernetes events, rescales: for the verdicts
        self.slo = SloWatch(cfg.slo_classes)
        self.slo_reader: Any = None  # the budget over the objective's window, where engines come from Prometheus
        if prometheus:
            from ..sources.prometheus.slo import PromSloReader

            self.slo_reader = PromSloReader(cfg.prometheus, names=self.collector.names_by_key)
            self.slo.prometheus_burn = True
        if watch:
            self.triage = Triage()
        else:  # one look: conditions seen in this window count (no minimum duration), as snapshot says
            from ..analysis.triage.engine import TIMING

            self.triage = Triage({kind: (0.0, 0.0) for kind in TIMING})
        self.state: FleetState | None = None  # the last state built

    # ----- one tick ------------------------------------------------------------------------------------
    def build(self) -> FleetState:
        """This tick's state: the join, what changed, the SLO report, then triage's verdicts. A one-shot
        window (``watch`` False) counts its SLO over the window: each engine's counts between its first and
        last point, the burn windows scaled to that span (and said so)."""
        state = self.joiner.build()
        self.changes.note_state(state)
        if not self.watch and self.state is None:
            windows = engine_windows(getattr(self.collector, "collectors", ()))
            spans = [edge for w in windows.values() if (edge := w.edges()) is not None]
            span_s = max((e[1][0] - e[0][0] for e in spans), default=0.0)
            self.slo.update(state, buckets_of(windows, 0), now=state.taken_at - span_s)
        state = self.with_slo(state)
        verdicts = self.triage.evaluate(state, state.taken_at, changes=self.changes.records(state.taken_at))
        self.state = state = dataclasses.replace(state, verdicts=verdicts)
        return state

    def with_slo(self, state: FleetState) -> FleetState:
        """``state`` with its SLO report from each engine's latest cumulative buckets; the engines under a
        verdict at the last tick are no healthy history for a class fit."""
        troubled = {v.subject for v in self.state.verdicts} if self.state is not None else set()
        windows = engine_windows(getattr(self.collector, "collectors", ()))
        report = self.slo.update(state, buckets_of(windows), troubled=troubled)
        if self.advisor is not None:
            self.advisor.slo_report = report  # its capacity answer beside the next tick's proposals
        return dataclasses.replace(state, slo_report=report)

    def set_cluster(self, snap: Any, *, error: str | None = None, source: str = "",
                    api_calls: int | None = None) -> None:
        self.joiner.set_cluster(snap, error=error, source=source, api_calls=api_calls)

    # ----- polling -------------------------------------------------------------------------------------
    async def poll_gpus(self, engine_refs: Callable[[list], list] | None = None) -> None:
        """Read every GPU source once (NVML in a thread) and hand the rows to the join. ``engine_refs``
        maps the engines' endpoints to (name, root PID, port) so NVML's processes name their engines."""
        try:
            nvml = self.gpu.nvml
            if engine_refs is not None and nvml is not None and not nvml.gone:
                endpoints = [c.endpoint for c in getattr(self.collector, "collectors", ())]
                self.gpu.set_engines(await asyncio.to_thread(engine_refs, endpoints))
            rows, health = await self.gpu.poll()
        except Exception as e:  # noqa: BLE001 — a GPU source must never stop the others
            self.joiner.set_gpus(self.joiner.gpu_rows, [SourceHealth(
                "gpu", "gpu", False, last_error=f"GPU collection failed: {type(e).__name__}: {e}",
                last_error_at=time.monotonic())])
            return
        self.joiner.set_gpus(rows, health)

    async def gpu_loop(self, stop: asyncio.Event | None = None,
                       engine_refs: Callable[[list], list] | None = None) -> None:
        """The GPU sources on their own schedule; the next poll starts when the last one finished."""
        interval = max(GPU_REFRESH_MIN_S, self.cfg.refresh_s)
        stop = stop or asyncio.Event()
        while not stop.is_set():
            started = time.monotonic()
            await self.poll_gpus(engine_refs)
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.2, interval - (time.monotonic() - started)))
            except TimeoutError:
                pass

    async def read_slo_range(self) -> None:
        """One Prometheus read of each objective window's counts, then of each burn window's (1 h, 5 min,
        6 h, 30 min: not refined to a shorter span — a window it does not hold is the local one), in a
        thread, into the SLO report."""
        if self.slo_reader is None:
            return
        for window_s, targets in self.slo.range_plan().items():
            counts = await asyncio.to_thread(self.slo_reader.read, window_s, targets)
            self.slo.set_range(counts)
        for window_s, targets in self.slo.burn_plan().items():
            counts = await asyncio.to_thread(self.slo_reader.read, window_s, targets, refine=False)
            self.slo.set_burn(counts)

    async def slo_range_loop(self, stop: asyncio.Event | None = None) -> None:
        """The SLO budget over the objective's window every :data:`SLO_RANGE_EVERY_S` (never in a tick)."""
        stop = stop or asyncio.Event()
        while self.slo_reader is not None and not stop.is_set():
            await self.read_slo_range()
            try:
                await asyncio.wait_for(stop.wait(), timeout=SLO_RANGE_EVERY_S)
            except TimeoutError:
                pass

    async def poll_once(self) -> None:
        """Every engine and queue source once (tests and Ctrl+R)."""
        await asyncio.gather(self.collector.poll_once(), self.queues.poll_once())

    def stop_engines(self) -> None:
        """End the engines' poll loop (it ends on its own at its next wake-up)."""
        stopped = getattr(self.collector, "_stopped", None)
        if stopped is not None:
            stopped.set()

    async def run(self, stop: asyncio.Event, *, cluster: bool = False) -> None:
        """Every poll loop until ``stop``: the engines, the GPUs, the queues and (``cluster``) the
        Kubernetes reads of a headless run."""
        tasks = [asyncio.create_task(self.collector.run()), asyncio.create_task(self.gpu_loop(stop)),
                 asyncio.create_task(self.queues.run())]
        if cluster and self.cfg.kube.configured:
            tasks.append(asyncio.create_task(self.cluster_loop(stop)))
        if self.slo_reader is not None:
            tasks.append(asyncio.create_task(self.slo_range_loop(stop)))
        try:
            await stop.wait()
        finally:
            if getattr(self.collector, "_stopped", None) is not None:
                self.stop_engines()
            else:  # stopped before its loop began
                tasks[0].cancel()
            tasks[2].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def poll_window(self, window_s: float) -> None:
        """A one-shot snapshot's window: every engine and queue source polled for ``window_s`` seconds
        (and for as long as the cluster read runs, so every answer is as recent as the cluster's), then
        the GPUs once. The cluster is read while the engines are polled, not after: its first read takes
        seconds, and read in series it left every engine's last answer that old."""
        cluster = self._start_cluster_read()
        if self.prometheus:
            await _until_done(cluster)  # one refresh, taken once the cluster is read: both as recent
            (_, (rows, health)) = await asyncio.gather(asyncio.to_thread(self.collector.refresh), self.gpu.poll())
            self.joiner.observe()
            await self.read_slo_range()
            self.joiner.set_gpus(rows, health)
        else:
            await asyncio.gather(_poll_engines(self.collector, window_s, until=cluster),
                                 _poll_queues(self.queues, window_s, cluster))
            await self.poll_gpus()
        self._take_cluster(cluster)

    # ----- a headless run's cluster --------------------------------------------------------------------
    def _start_cluster_read(self) -> asyncio.Future | None:
        if not self.cfg.kube.configured:
            return None
        return asyncio.ensure_future(asyncio.to_thread(read_cluster_once, self.cfg))

    def _take_cluster(self, cluster: asyncio.Future | None) -> None:
        if cluster is None:
            return
        if not cluster.done():
            cluster.cancel()  # the thread finishes on its own; the state says the read did not end
            self.set_cluster(None, error=f"no answer from the API server in {CLUSTER_WAIT_S:.0f} s")
            return
        snap, error, source, calls = cluster.result()
        self.set_cluster(snap, error=error, source=source, api_calls=calls)

    async def cluster_loop(self, stop: asyncio.Event) -> None:
        """The cluster in every tick: a list of every kind each ``kube.refresh_s``, one session kept open
        and reopened after a failure; a failed read keeps the last objects, marked stale with the error."""
        from ..sources.kube import KubeError, read_cluster, session_for

        cfg = self.cfg
        session = None
        try:
            while not stop.is_set():
                source = cfg.kube.context or "kubernetes"
                try:
                    if session is None:
                        session = await asyncio.to_thread(session_for, cfg.kube)
                    source = session.context
                    snap = await asyncio.to_thread(read_cluster, session, cfg.kube)
                    self.set_cluster(snap, source=source, api_calls=session.calls)
                except Exception as e:  # noqa: BLE001 — a poll loop must not die: any failure is this source's error
                    error = str(e) if isinstance(e, KubeError) else f"{type(e).__name__}: {e}"
                    self.set_cluster(None, error=error, source=source,
                                     api_calls=session.calls if session is not None else None)
                    if session is not None:
                        session.close()
                        session = None
                try:
                    await asyncio.wait_for(stop.wait(), timeout=max(cfg.kube.refresh_s, cfg.refresh_s))
                except TimeoutError:
                    pass
        finally:
            if session is not None:
                session.close()

    async def close(self) -> None:
        """Stop the loops and close every client."""
        self.stop_engines()
        await self.gpu.aclose()
        await self.queues.aclose()
        closer = getattr(self.collector, "aclose", None)
        if closer is not None:
            await closer()
        else:
            await asyncio.to_thread(self.collector.close)


def read_cluster_once(cfg: Any) -> tuple[Any, str | None, str, int | None]:
    """(cluster snapshot, error, context, API calls) of one read (blocking: run it in a thread)."""
    from ..sources.kube import KubeError, read_cluster, session_for

    try:
        session = session_for(cfg.kube)
    except KubeError as e:
        return None, str(e), cfg.kube.context or "kubernetes", None
    try:
        snap = read_cluster(session, cfg.kube)
        return snap, None, session.context, session.calls
    except KubeError as e:
        return None, str(e), session.context, session.calls
    finally:
        session.close()


async def _until_done(task: asyncio.Future | None) -> None:
    if task is not None:
        await asyncio.wait({task}, timeout=CLUSTER_WAIT_S)


async def _poll_engines(collector: FleetCollector, window_s: float, on_poll=None,
                        until: asyncio.Future | None = None) -> None:
    """Run every engine's own poll loop for ``window_s`` seconds — and for as long as ``until`` (the
    cluster read) is still running — then until each engine has answered or failed at least once. One
    slow engine never delays another."""
    done: set[str] = set()
    everyone = asyncio.Event()
    names = {c.endpoint.name for c in collector.collectors}
    previous = collector.on_update

    def polled(snap) -> None:
        if previous is not None:
            previous(snap)
        if on_poll is not None:
            on_poll()
        for c in collector.collectors:
            if c.health.ok or c.health.consecutive_failures:
                done.add(c.endpoint.name)
        if done >= names:
            everyone.set()

    collector.on_update = polled
    if not names:
        everyone.set()
    task = asyncio.create_task(collector.run())
    try:
        await asyncio.gather(asyncio.sleep(max(0.0, window_s)), _until_done(until))
        longest = max((c.endpoint.timeout_s for c in collector.collectors), default=0.0)
        try:
            await asyncio.wait_for(everyone.wait(), timeout=longest + 2.0)
        except TimeoutError:
            pass
    finally:
        if collector._stopped is not None:
            collector._stopped.set()
        else:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        collector.on_update = previous


async def _poll_queues(queues: QueueFleet, window_s: float, cluster: asyncio.Future | None) -> None:
    """The queue sources' window, ending no earlier than the cluster read (their answers as recent)."""
    start = time.monotonic()
    await _until_done(cluster)
    await queues.run(max(0.0, window_s - (time.monotonic() - start)))
