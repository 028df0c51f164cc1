"""Engines from Prometheus: the fleet source for hundreds of engines.

Instead of scraping every engine, infertop asks the Prometheus that already
scrapes them. A refresh costs a fixed set of HTTP queries whatever the
number of engines (:class:`FleetQueries`), each grouped ``by`` the engine
labels: ``up``, one query for the gauges and rates, and the queue depth on
every refresh; the latency quantiles (one query per histogram, and the
fleet-wide ones) at most every ``latency_interval_s``, in parallel. GPU rows
come from the same Prometheus through
:class:`~infertop.sources.prometheus.gpu.PromGpuSource`.

The result feeds the same fleet state as direct scraping: each engine is a
small collector-like object (``stats``, ``health``, ``windows``, ``endpoint``)
that :class:`~infertop.state.fleet_join.FleetJoiner` joins unchanged, so the TUI
and ``snapshot`` render it as they render scraped engines.

States, each with its own reason (no data is ``None``, never 0):

* Prometheus down or failing (connection refused, timeout, HTTP error):
  every engine keeps its state and last values, marked stale with that reason
  (a monitoring outage, not an engine outage: :data:`METRICS_STALE`);
* slow: a refresh that took longer than ``slow_after_s`` (a warning);
* partial: targets with ``up == 0`` — their engines are down, the rest fresh;
* stale series: an engine whose newest sample is older than
  ``stale_after_s``, or whose series vanished from Prometheus.

Blocking calls (prometheus-api-client) run in a worker thread
(:meth:`PromFleetSource.run` uses ``asyncio.to_thread``), never on the UI loop.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...domain.engine import DOWN, UP, EngineStats, FleetSnapshot
from ...domain.source import SourceHealth
from .connect import connect_prometheus
from .gpu import describe_prom_error
from .fleet_map import (
    EngineRow,
    Key,
    engine_names,
    engine_rows,
    fleet_depth,
    queue_series,
    tagged_values,
    target_key,
    targets_down,
)
from .fleet_query import ENGINE_FIELDS, FleetQueries
from ..sanitize import clean_engine, error_text, plain_or_none, plain_text

KIND = "prometheus"
#: the engines' source is named after the Prometheus URL plus this (the GPU source is the URL alone)
ENGINES_SUFFIX = " (engines)"
#: an engine's reason while Prometheus does not answer: its last values are kept, stale (not down)
METRICS_STALE = "metrics stale (Prometheus unreachable: {})"
#: an engine absent from Prometheus this long is dropped from the fleet
FORGET_AFTER_S = 600.0
#: the fields read with range queries at start (the sparklines' series)
BACKFILL_FIELDS = ("running", "waiting", "kv_cache_pct", "generation_tokens_per_s", "prompt_tokens_per_s",
                   "requests_per_s", "ttft_p99_s", "itl_p95_s", "e2e_p99_s")
BACKFILL_FLEET_FIELDS = ("ttft_p99_s", "itl_p95_s", "e2e_p99_s")
_STAT_FIELDS = tuple(f for f in ENGINE_FIELDS if f != "sample_ts")


@dataclass(frozen=True, slots=True)
class PromEndpoint:
    """What the engine actions and the GPU mapping read of an engine (as EngineEndpoint)."""

    name: str
    url: str
    max_num_seqs: int | None = None
    timeout_s: float = 5.0


@dataclass(slots=True)
class PromEngine:
    """One engine as seen through Prometheus, shaped like an EngineCollector."""

    endpoint: PromEndpoint
    key: Key
    stats: list[EngineStats]
    health: SourceHealth
    windows: dict = field(default_factory=dict)  # fleet quantiles come from Prometheus, not from windows
    completed_polls: int = 0
    missing_since: float | None = None  # monotonic: its series vanished from Prometheus
    values: dict[str, float] = field(default_factory=dict)  # what the stats were made from
    source: str = ""  # the Prometheus source its values come from (the joiner's Freshness.source)


@dataclass(frozen=True, slots=True)
class RefreshResult:
    """What one refresh read (the benchmark and the tests look at it)."""

    queries: int
    engines: int
    targets: int
    targets_down: int
    latency_s: float
    error: str | None = None


class PromFleetSource:
    """Every engine a Prometheus scrapes, refreshed every ``interval_s``.

    Duck-types :class:`~infertop.sources.fleet_collector.FleetCollector` where the app,
    ``snapshot`` and the fleet joiner use it (``collectors``, ``run``,
    ``poll_once``, ``on_polled``, ``aclose``).
    """

    def __init__(self, cfg: Any, *, prom: Any = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, history_step_s: float | None = None) -> None:
        self.cfg = cfg
        self.url = str(cfg.url).rstrip("/")
        self.name = self.url + ENGINES_SUFFIX  # beside the same Prometheus as a GPU source
        self.interval_s = float(cfg.interval_s)
        self.window_s = float(cfg.window_s)
        self.timeout_s = float(cfg.timeout_s)
        self.by = tuple(cfg.by)
        self.target_labels = tuple(cfg.target_labels)
        self.queries = FleetQueries(selector=cfg.selector, by=self.by, window_s=self.window_s,
                                    queue_promql=cfg.queue_promql)
        self.clock, self.wall = clock, wall
        self.history_step_s = history_step_s  # the sparklines' step (the TUI's tick); default interval_s
        self._prom = prom
        self._by_key: dict[Key, PromEngine] = {}
        self.collectors: list[PromEngine] = []
        self.health = SourceHealth(name=self.name, kind=KIND, ok=False)
        self.fleet_values: dict[str, float] = {}  # FleetView fields Prometheus computed over all engines
        self.queues: tuple[dict, ...] = ()  # one doc: the queue query's series (see _queue_doc)
        self._queue_series: list[dict] = []  # the last series read, kept (stale) while the query fails
        self._queue_at: float | None = None  # wall clock of that read
        self._queue_dropped = 0
        self.engine_pods: dict[str, str] = {}  # pod → engine name (GPU rows carry the pod)
        self.last: RefreshResult | None = None
        self.query_count = 0  # HTTP queries sent since start
        self.on_polled: Callable[[Any], None] | None = None
        self.on_update: Callable[[FleetSnapshot], None] | None = None
        self.on_backfill: Callable[[dict[tuple[str, str], list[float | None]]], None] | None = None
        self._stopped: asyncio.Event | None = None  # named as FleetCollector's: record and snapshot stop it
        self.latency_interval_s = float(cfg.latency_interval_s)
        self._fast_pool: ThreadPoolExecutor | None = None
        self._slow_pool: ThreadPoolExecutor | None = None
        self._latency_futures: dict[str, Future] | None = None
        self._latency_started: float | None = None  # monotonic: the latency queries last sent
        self._latency_at: float | None = None  # monotonic: their answers last taken
        self._latency: dict[Key, dict[str, float]] = {}
        self._latency_error: str | None = None
        self._first = True  # the first refresh waits for the latency answers

    # -- FleetCollector's face ---------------------------------------------------
    @property
    def source_health(self) -> list[SourceHealth]:
        """The Prometheus server itself, as a source beside the engines."""
        return [self.health]

    def snapshot(self) -> FleetSnapshot:
        return FleetSnapshot(taken_at=self.wall(), engines=tuple(s for c in self.collectors for s in c.stats))

    def names_by_key(self) -> dict[Key, str]:
        """Engine key (the ``by`` labels' values) → its name: other readers of the same series join by it."""
        return {key: eng.endpoint.name for key, eng in list(self._by_key.items())}

    def add_endpoint(self, ep: Any) -> None:
        """Nothing to add: an engine shows up once Prometheus scrapes it."""
        return None

    def remove_endpoint(self, name: str) -> None:
        return None

    def _connect(self) -> Any:
        if self._prom is None:
            # POST: the engine query is a few KB of PromQL
            self._prom = connect_prometheus(self.url, self.cfg.token_file, self.timeout_s, method="POST")
        return self._prom

    # -- one refresh (blocking: call from a thread) ------------------------------
    def _pools(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
        if self._fast_pool is None or self._slow_pool is None:
            self._fast_pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="infertop-prom")
            self._slow_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infertop-prom-latency")
        return self._fast_pool, self._slow_pool

    def refresh(self) -> RefreshResult:
        """Run this refresh's queries and update every engine; never raises.

        The fast queries (up, gauges and rates, queue depth) run in parallel on every
        refresh. The latency queries (quantiles, one per histogram, and the fleet's) run
        in parallel too, at most every ``latency_interval_s`` and without holding up the
        refresh after the first one: a window quantile barely moves in a second."""
        started = self.clock()
        sent = 0
        try:
            prom = self._connect()
            fast_pool, slow_pool = self._pools()
            if self._latency_futures is None and (
                    self._latency_started is None or started - self._latency_started >= self.latency_interval_s):
                self._latency_started = started
                self._latency_futures = {n: slow_pool.submit(prom.custom_query, q, timeout=self.timeout_s)
                                         for n, q in self.queries.latency().items()}
                sent += len(self._latency_futures)
            fast = {n: fast_pool.submit(prom.custom_query, q, timeout=self.timeout_s)
                    for n, q in self.queries.fast().items()}
            sent += len(fast)
            self.query_count += sent
            up = fast["up"].result()
            values = fast["engines"].result()
            try:
                queue = fast["queue"].result()
                queue_error = None
            except Exception as exc:  # noqa: BLE001 — a bad queue_promql must not hide the engines
                queue, queue_error = None, describe_prom_error(exc, self.timeout_s)
            if self._first and self._latency_futures is not None:
                self._first = False
                wait(self._latency_futures.values())  # the first view is complete
        except Exception as exc:  # noqa: BLE001 — shown, never raised
            why = describe_prom_error(exc, self.timeout_s)
            self._prometheus_failed(why, started)
            self.last = RefreshResult(sent, len(self.collectors), 0, 0,
                                      self.clock() - started, why)
            return self.last
        now = self.clock()
        self._collect_latency(now)
        rows, dropped = engine_rows(values, self.by)
        for key, row in rows.items():
            row.values.update(self._latency.get(key, ()))
        down, n_targets = targets_down(up, self.target_labels)
        self._apply(rows, down, now)
        if queue is not None:
            self._queue_series, self._queue_dropped = queue_series(queue)
            self._queue_at = self.wall()
        self.queues = (self._queue_doc(queue_error),)
        latency = now - started
        warnings = []
        if latency > self.cfg.slow_after_s:
            warnings.append(f"slow: refresh took {latency:.1f} s (> {self.cfg.slow_after_s:g} s)")
        if down:
            warnings.append(f"partial: {len(down)} of {n_targets} targets down (up == 0)")
        if dropped:
            warnings.append(f"{dropped} more engines not shown (narrow prometheus.selector)")
        if queue_error:
            warnings.append(f"queue depth: {queue_error}")
        if self._queue_dropped:
            warnings.append(f"{self._queue_dropped} more queue series not read (narrow prometheus.queue_promql)")
        if not rows:
            warnings.append("no vllm: series — is vLLM scraped by this Prometheus (prometheus.selector)?")
        if self._latency_error:
            warnings.append(f"latency quantiles: {self._latency_error}")
        warning = error_text("; ".join(warnings)) if warnings else None
        self.health = SourceHealth(name=self.name, kind=KIND, ok=True, last_ok_at=now, latency_s=latency,
                                   last_error=warning, last_error_at=now if warning else None)
        self.last = RefreshResult(sent, len(rows), n_targets, len(down), latency)
        return self.last

    def _collect_latency(self, now: float) -> None:
        """Take the latency answers once all have arrived; keep the previous ones for a
        while when they fail (then they are dropped: no data, not 0)."""
        futures = self._latency_futures
        if futures is None or not all(f.done() for f in futures.values()):
            return
        self._latency_futures = None
        try:
            results = {n: f.result() for n, f in futures.items()}
        except Exception as exc:  # noqa: BLE001 — the gauges and rates still show
            self._latency_error = describe_prom_error(exc, self.timeout_s)
            if self._latency_at is None or now - self._latency_at > 3 * self.latency_interval_s + self.timeout_s:
                self._latency, self.fleet_values = {}, {}
            return
        latency: dict[Key, dict[str, float]] = {}
        for name, result in results.items():
            if name == "fleet":
                continue
            rows, _ = engine_rows(result, self.by)
            for key, row in rows.items():
                latency.setdefault(key, {}).update(row.values)
        self._latency, self.fleet_values = latency, tagged_values(results["fleet"])
        self._latency_at, self._latency_error = now, None

    def _apply(self, rows: dict[Key, EngineRow], down: set[Key], now: float) -> None:
        names = engine_names(rows.values(), self.by, self.cfg.name_labels, self.cfg.engine_label,
                             self.cfg.model_label)
        wall = self.wall()
        idx = {n: i for i, n in enumerate(self.by)}
        seen: set[Key] = set()
        for key, row in rows.items():
            seen.add(key)
            eng = self._engine(key, names[key], row.labels)
            tkey = target_key(row.labels, self.target_labels)
            ts = row.values.get("sample_ts")
            age = None if ts is None else max(0.0, wall - ts)
            eng.missing_since = None
            if tkey in down:
                self._engine_failed(eng, "target down in Prometheus (up == 0: its last scrape failed)", now, DOWN)
            elif age is None:  # rates still span old samples, but no current gauge: its series went stale
                self._engine_failed(eng, "stale in Prometheus: no current sample (target gone or not scraped)",
                                    now, DOWN)
            elif age > self.cfg.stale_after_s:
                self._engine_failed(eng, f"stale in Prometheus: newest sample {age:.0f} s old", now, DOWN)
            else:
                # the same samples as last refresh (Prometheus scrapes less often than we ask): same stats
                if row.values != eng.values or not eng.health.ok or eng.stats[0].name != eng.endpoint.name:
                    eng.stats = [self._stats(eng, row, idx, wall if ts is None else ts)]
                    eng.values = row.values
                eng.health = SourceHealth(name=eng.endpoint.name, kind="vllm", ok=True, last_ok_at=now,
                                          latency_s=self.health.latency_s)
                eng.completed_polls += 1
        for key, eng in list(self._by_key.items()):
            if key in seen:
                continue
            if eng.missing_since is None:
                eng.missing_since = now
            if now - eng.missing_since > FORGET_AFTER_S:
                del self._by_key[key]
                continue
            tkey = target_key(dict(zip(self.by, key)), self.target_labels)
            why = ("target down in Prometheus (up == 0: its last scrape failed)" if tkey in down
                   else "no series in Prometheus (target gone, or its series went stale)")
            self._engine_failed(eng, why, now, DOWN)
        self.collectors = sorted(self._by_key.values(), key=lambda e: e.endpoint.name)
        pods: dict[str, str] = {}
        if "pod" in idx:
            # a pod's GPU goes to its engine that answers (not to a stale series of the same pod)
            for eng in sorted(self.collectors, key=lambda e: e.health.ok):
                pod = eng.key[idx["pod"]]
                if pod:
                    pods[pod] = eng.endpoint.name
        self.engine_pods = pods

    def _engine(self, key: Key, name: str, labels: Mapping[str, str]) -> PromEngine:
        eng = self._by_key.get(key)
        if eng is None:
            instance = plain_text(labels.get("instance", ""))
            url = instance if "://" in instance else (f"http://{instance}" if instance else self.url)
            ep = PromEndpoint(name=name, url=url, timeout_s=self.timeout_s)
            model = plain_or_none(labels.get(self.cfg.model_label))
            rank = plain_or_none(labels.get(self.cfg.engine_label))
            eng = self._by_key[key] = PromEngine(ep, key, [EngineStats(name=name, url=url, model=model,
                                                                       engine_label=rank)],
                                                 SourceHealth(name=name, kind="vllm", ok=False), source=self.name)
        elif eng.endpoint.name != name:
            eng.endpoint = replace(eng.endpoint, name=name)
        return eng

    def _stats(self, eng: PromEngine, row: EngineRow, idx: dict[str, int], sampled_at: float) -> EngineStats:
        v = row.values
        key = row.key
        model_label, engine_label = self.cfg.model_label, self.cfg.engine_label
        rank = key[idx[engine_label]] if engine_label in idx else ""
        extra = {n: plain_text(row.labels[n]) for n in self.target_labels if row.labels.get(n)}
        measured: dict[str, Any] = {f: v.get(f) for f in _STAT_FIELDS}  # EngineStats fields (numbers)
        stats = EngineStats(
            name=eng.endpoint.name, url=eng.endpoint.url, state=UP,
            model=plain_or_none(key[idx[model_label]] if model_label in idx else ""),
            engine_label=plain_or_none(rank), metrics_version="v1" if rank else "v0",
            scraped_at=sampled_at, window_s=self.window_s,
            extra=extra, **measured,
        )
        return clean_engine(stats)

    def _engine_failed(self, eng: PromEngine, why: str, now: float, state: str | None) -> None:
        """The engine's read failed: ``state`` DOWN (Prometheus says so), or None: the state it had
        is kept (Prometheus does not answer: nothing is known about the engine)."""
        h = eng.health
        eng.health = SourceHealth(name=eng.endpoint.name, kind="vllm", ok=False, last_ok_at=h.last_ok_at,
                                  last_error=why, last_error_at=now,
                                  consecutive_failures=h.consecutive_failures + 1)
        # identity kept, numbers never shown as current: the joiner shows the last good ones as stale
        eng.stats = [EngineStats(name=s.name, url=s.url, state=state or s.state, error=why, model=s.model,
                                 engine_label=s.engine_label, metrics_version=s.metrics_version,
                                 scraped_at=s.scraped_at) for s in eng.stats]
        eng.completed_polls += 1

    def _prometheus_failed(self, why: str, started: float) -> None:
        now = self.clock()
        h = self.health
        self.health = SourceHealth(name=self.name, kind=KIND, ok=False, last_ok_at=h.last_ok_at,
                                   last_error=why, last_error_at=now, latency_s=now - started,
                                   consecutive_failures=h.consecutive_failures + 1)
        for eng in self.collectors:  # a monitoring outage is not an engine outage: stale, not down
            self._engine_failed(eng, METRICS_STALE.format(why), now, None)
        self.fleet_values = {}
        self.queues = (self._queue_doc(why),)

    def _queue_doc(self, error: str | None) -> dict:
        """The ``queues`` slot's entry: every series of the queue query as last read (``series``:
        kind, labels, depth), when (``sampled_at``, wall clock; None: never), and why it is not
        current (``error``: the last read failed; the series are the previous ones). ``depth``:
        the fleet as one number (:func:`fleet_depth`). The advisor attributes the series to
        workloads (state/advisor/queues.py)."""
        series = self._queue_series
        return {"source": KIND, "promql": self.queries.queue(), "depth": fleet_depth(series),
                "error": error, "sampled_at": self._queue_at, "series": series,
                "dropped": self._queue_dropped}

    # -- backfill (blocking) -----------------------------------------------------
    def backfill(self, points: int | None = None, step_s: float | None = None) -> dict[tuple[str, str], list]:
        """Recent history with two range queries: (engine name | "__fleet__", field) → values,
        oldest first, one per ``step_s`` (a gap is None). {} when Prometheus cannot answer."""
        points = int(self.cfg.backfill_points if points is None else points)
        step = float(step_s or self.history_step_s or self.interval_s)
        if points < 2 or not self.collectors:
            return {}
        end = self.wall()
        start = end - (points - 1) * step
        from datetime import datetime  # noqa: PLC0415

        t0, t1 = datetime.fromtimestamp(start), datetime.fromtimestamp(end)
        try:
            prom = self._connect()
            self.query_count += 2
            engines = prom.custom_query_range(self.queries.engine_values(BACKFILL_FIELDS), t0, t1, f"{step:g}s",
                                              timeout=self.timeout_s)
            fleet = prom.custom_query_range(self.queries.fleet_values(BACKFILL_FLEET_FIELDS), t0, t1, f"{step:g}s",
                                            timeout=self.timeout_s)
        except Exception:  # noqa: BLE001 — no history is not an error: the sparklines start empty
            return {}
        names = {e.key: e.endpoint.name for e in self.collectors}
        out: dict[tuple[str, str], list] = {}
        from .fleet_map import FIELD_LABEL, engine_key  # noqa: PLC0415

        def series(item: Mapping[str, Any]) -> list:
            vals: list = [None] * points
            for pair in item.get("values") or ():
                try:
                    i = round((float(pair[0]) - start) / step)
                    v = float(pair[1])
                except (TypeError, ValueError, IndexError):
                    continue
                if 0 <= i < points and v == v and abs(v) != float("inf"):
                    vals[i] = v
            return vals

        for item in engines:
            metric = item.get("metric") or {}
            name = names.get(engine_key(metric, self.by))
            fld = metric.get(FIELD_LABEL)
            if name is not None and isinstance(fld, str):
                out[(name, fld)] = series(item)
        for item in fleet:
            fld = (item.get("metric") or {}).get(FIELD_LABEL)
            if isinstance(fld, str):
                out[("__fleet__", fld)] = series(item)
        return out

    # -- async face ----------------------------------------------------------------
    async def poll_once(self) -> FleetSnapshot:
        """One refresh in a worker thread; notifies like a FleetCollector poll."""
        await asyncio.to_thread(self.refresh)
        self._notify()
        return self.snapshot()

    def _notify(self) -> None:
        if self.on_polled is not None:
            for c in self.collectors:
                self.on_polled(c)
        if self.on_update is not None:
            self.on_update(self.snapshot())

    async def run(self) -> None:
        """Refresh every ``interval_s`` until :meth:`stop`; the first refresh is followed by the backfill."""
        self._stopped = asyncio.Event()
        first = True
        try:
            while not self._stopped.is_set():
                started = self.clock()
                await self.poll_once()
                if first and self.health.ok:
                    first = False
                    if self.on_backfill is not None and self.cfg.backfill_points >= 2:
                        series = await asyncio.to_thread(self.backfill)
                        if series:
                            self.on_backfill(series)
                delay = max(0.05, self.interval_s - (self.clock() - started))
                try:
                    await asyncio.wait_for(self._stopped.wait(), timeout=delay)
                except TimeoutError:
                    pass
        finally:
            await self.aclose()

    def stop(self) -> None:
        if self._stopped is not None:
            self._stopped.set()

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        for pool in (self._fast_pool, self._slow_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._fast_pool = self._slow_pool = None
        self._latency_futures = None
        session = getattr(self._prom, "_session", None)
        if session is not None:
            session.close()
        self._prom = None


def seed_history(history: Any, series: Mapping[tuple[str, str], list]) -> None:
    """Write backfilled series into a sparkline history (``history.record(entity, field, value)``)
    before the first tick, oldest first."""
    for (entity, name), values in series.items():
        for v in values:
            history.record(entity, name, v)
