"""Joining every source into one :class:`~infertop.state.fleet_types.FleetState` per tick:
:class:`FleetJoiner` (it keeps what must survive a failed poll: an engine's last good values and since
when it is down) and :func:`missing_reasons` (why a value has none). Never imports textual or rich.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from ..analysis.alerts import CRITICAL, WARNING, Alert, AlertHold, engine_alerts
from ..analysis.fleet import fleet_quantile, fleet_quantiles
from ..domain.engine import DEGRADED, DOWN, UNKNOWN, UP, EngineStats
from ..domain.gpu import GpuStats
from ..domain.kube import ClusterSnapshot
from ..domain.source import SourceHealth
from ..sources.nvml import NO_BINDING, NO_DRIVER
from .cluster_join import ClusterJoin
from ..domain.window import BUCKETS_RESTARTED
from .fleet_types import (FRESH, MISSING, STALE, ClusterState, EngineState, FleetState, FleetView, Freshness, Slo,
                          SourceState)

QUIET_NVML = (NO_DRIVER, NO_BINDING)
STALE_AFTER_POLLS = 3  # a value older than this many poll intervals is stale
# A source that has never answered is "connecting" — not down — this long after it is first watched,
# while its polls only time out (a first answer can take seconds on a loaded host); anything else it
# says (refused: nothing listens; stale in Prometheus; an HTTP error) is what it is at once.
CONNECTING_FOR_S = 20.0
_STILL_CONNECTING = ("timeout", "timed out")

_VALUE_FIELDS = tuple(
    f.name for f in fields(EngineStats)
    if f.name not in ("name", "url", "state", "error", "model", "engine_label", "metrics_version", "vllm_version",
                      "scraped_at", "window_s", "extra", "max_num_seqs", "quantile_edges")
)
_QUANTILE_FIELDS = {"ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p95_s", "e2e_p95_s", "e2e_p99_s", "queue_p99_s"}
_RATE_FIELDS = {"prompt_tokens_per_s", "generation_tokens_per_s", "requests_per_s", "preemptions_per_s",
                "prefix_cache_hit_pct"}


def _clean(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


def missing_reasons(s: EngineStats, fresh: Freshness) -> dict[str, str]:
    """Why each value of ``s`` that is ``None`` has no value."""
    out: dict[str, str] = {}
    for name in _VALUE_FIELDS:
        if getattr(s, name) is not None:
            continue
        if fresh.status == MISSING:
            out[name] = fresh.reason or "no data yet"
        elif fresh.status == STALE and s.scraped_at is None:
            out[name] = fresh.reason or "stale"
        elif name in _QUANTILE_FIELDS:
            if s.error is not None and BUCKETS_RESTARTED in s.error and name.split("_")[0] in s.error:  # "… (ttft)"
                out[name] = BUCKETS_RESTARTED
            else:
                out[name] = "not enough history yet" if not s.window_s else "no requests finished in the window"
        elif name in _RATE_FIELDS:
            out[name] = "not enough history yet" if not s.window_s else "not exported or no traffic"
        else:
            out[name] = "not exported by this engine"
    if s.max_num_seqs is None:
        out["max_num_seqs"] = "unknown: set engines[].max_num_seqs in the config"
    return out


class FleetJoiner:
    """Builds one :class:`FleetState` per tick from the live sources.

    ``collector`` is a :class:`~infertop.sources.fleet_collector.FleetCollector` (its
    collectors' ``stats``, ``health`` and ``windows``); GPUs, local engine
    records and the cluster are handed in by whoever polls them.
    """

    def __init__(self, collector: Any, *, slo: Any, refresh_s: float, window_s: float, mode: str = "live",
                 engine_pods: Mapping[str, str] | None = None,
                 wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic) -> None:
        self.collector = collector
        self.slo = slo
        self.refresh_s = refresh_s
        self.window_s = window_s
        self.mode = mode
        self.engine_pods = dict(engine_pods or {})
        self.cluster_join = ClusterJoin(self.engine_pods)  # pods ↔ engines from each cluster read
        self.wall, self.mono = wall, mono
        self.tick = 0
        self._last_good: dict[str, EngineStats] = {}
        self._last_good_at: dict[str, float] = {}  # monotonic time of each engine's last good sample
        self._down_since: dict[str, float] = {}
        self._source_down_since: dict[str, float] = {}
        self._first_seen: dict[str, float] = {}  # source key → wall clock it was first built (for "connecting")
        # a console watches on: a source that has not answered yet is "connecting" this long; a one-shot
        # snapshot (0) waited its window and says what it saw
        self.connecting_for_s = 0.0
        # warnings with a minimum duration and a clear delay (the console, the recorder); None: each
        # state's own alerts as they are (a one-shot snapshot has no "held for 5 s")
        self.alert_hold: AlertHold | None = None
        self._observed: dict[int, tuple[Any, Any]] = {}  # id(collector) → (stats, health) last observed
        # engine name → (stats, status, reason, missing): an engine not polled since the last tick keeps its
        # reasons (the dict is shared by the states of those ticks, read-only as the states are)
        self._missing: dict[str, tuple[EngineStats, str, str | None, dict[str, str]]] = {}
        # inputs handed in by other pollers
        self.gpu_rows: list[GpuStats] = []
        self.gpu_health: list[SourceHealth] = []
        self.gpus_configured = False
        self.local: dict[str, dict[str, Any]] = {}
        self.cluster: ClusterSnapshot | None = None
        self.cluster_error: str | None = None
        self.cluster_error_since: float | None = None
        self.cluster_ok_at: float | None = None
        self.cluster_source = ""
        self.cluster_api_calls: int | None = None
        self.kube_configured = False
        self.extra_sources: list[SourceState] = []
        self.queue_collectors: list[Any] = []  # sources.queues collectors (gateways, endpoint pickers)
        # the scaling advisor (state/advisor/core.py): (state, engine name → its counter windows) → the autoscalers slot
        self.autoscalers: Callable[[FleetState, Mapping[str, list]], Sequence[dict]] | None = None

    @property
    def stale_after_s(self) -> float:
        # a source refreshing slower than the ticks (Prometheus) is stale after its own polls
        return STALE_AFTER_POLLS * max(self.refresh_s, getattr(self.collector, "interval_s", 0.0) or 0.0)

    # -- inputs -------------------------------------------------------------
    def set_gpus(self, rows: Iterable[GpuStats], health: Iterable[SourceHealth], configured: bool | None = None) -> None:
        self.gpu_rows, self.gpu_health = list(rows), list(health)
        self.gpus_configured = bool(self.gpu_health) if configured is None else configured

    def set_cluster(self, snap: ClusterSnapshot | None, *, error: str | None = None, source: str = "",
                    api_calls: int | None = None, error_since: float | None = None) -> None:
        """The latest cluster read; with ``error`` the previous objects are kept and marked stale
        (``error_since``: when the reads began to fail, where the reader knows it; else now)."""
        now = self.wall()
        self.cluster_api_calls = api_calls
        self.kube_configured = True
        self.cluster_source = source or self.cluster_source
        if error:
            if self.cluster_error is None:
                self.cluster_error_since = error_since if error_since is not None else now
            self.cluster_error = error
            if snap is not None:
                self.cluster = snap  # the objects last read, kept (and marked stale) while reads fail
            return
        self.cluster, self.cluster_error, self.cluster_error_since = snap, None, None
        if snap is not None:
            self.cluster_ok_at = snap.taken_at or now

    # -- the state ------------------------------------------------------------
    def build(self) -> FleetState:
        """Join everything into the state of this tick."""
        self.tick += 1
        self.observe()
        now, mono = self.wall(), self.mono()
        engines: list[EngineState] = []
        windows = []
        engine_windows: dict[str, list] = {}
        sources: list[SourceState] = []
        pod_engines, gone = self.cluster_join.join(self.cluster, not self.cluster_error, self.collector.collectors)
        collectors = [c for c in self.collector.collectors if id(c) not in gone]  # scaled away: gone, not down
        # the GPU → engine mapping first, so that each engine's state is built once, with its GPUs
        gpus = self._gpus({s.name for c in collectors for s in c.stats}, pod_engines)
        by_engine: dict[str, list[str]] = {}
        for g in gpus:
            for name in _gpu_engines(g):
                by_engine.setdefault(name, []).append(g.label if not g.host else f"{g.host}:{g.label}")
        local = self.local
        for c in collectors:
            h: SourceHealth = c.health
            sources.append(self._source(h, now, mono))
            fresh_poll = h.ok
            if fresh_poll:
                windows.extend(c.windows.values())
            for s in c.stats:
                engines.append(self._engine(s, h, fresh_poll, now, mono, tuple(by_engine.get(s.name, ())),
                                            local.get(s.name), getattr(c, "source", None)))
                if fresh_poll:
                    engine_windows[s.name] = list(c.windows.values())
        for h in self.gpu_health:
            sources.append(self._source(h, now, mono))
        feeds_down = []  # the Prometheus the engines come through, when it does not answer
        for h in getattr(self.collector, "source_health", ()):  # the Prometheus engines come through
            sources.append(self._source(h, now, mono))
            if not h.ok and h.last_error:
                feeds_down.append(sources[-1])
        cluster = self._cluster(now)
        if cluster is not None:
            f = cluster.freshness
            sources.append(SourceState(name=self.cluster_source or "kubernetes", kind="kube", ok=f.status == FRESH,
                                       error=f.reason, since=f.since, last_ok_at=f.sampled_at, age_s=f.age_s))
        sources.extend(self.extra_sources)
        queues: tuple[Any, ...] = ()
        if self.queue_collectors:
            from .queues import join_queues  # noqa: PLC0415 — state.queues builds on this module

            queues = join_queues(self.queue_collectors, engines, now, mono, self.stale_after_s)
            sources.extend(self._source(c.health, now, mono) for c in self.queue_collectors)
        fleet = self._fleet(engines, windows)
        alerts = self._alerts(engines, feeds_down)
        if self.alert_hold is not None:
            alerts = self.alert_hold.apply(alerts, now)
        state = FleetState(
            tick=self.tick, taken_at=now, refresh_s=self.refresh_s, window_s=self.window_s,
            slo=Slo(self.slo.ttft_p99_s, self.slo.itl_p95_s, self.slo.e2e_p99_s, self.slo.queue_p99_s,
                    self.slo.kv_cache_pct),
            engines=tuple(engines), fleet=fleet, alerts=tuple(alerts), sources=tuple(sources),
            gpus=tuple(gpus), gpus_configured=self.gpus_configured, cluster=cluster, mode=self.mode,
            queues=queues + tuple(getattr(self.collector, "queues", ())),
        )
        if self.autoscalers is not None:
            state = replace(state, autoscalers=tuple(self.autoscalers(state, engine_windows)))
        return state

    def _source(self, h: SourceHealth, now: float, mono: float) -> SourceState:
        def wall(t: float | None) -> float | None:
            return None if t is None else now - max(0.0, mono - t)

        key = f"{h.kind}:{h.name}"
        connecting = self._connecting(h, now)
        if h.ok:
            self._source_down_since.pop(key, None)
            since = None
        else:
            since = self._source_down_since.setdefault(key, wall(h.last_error_at) or now)
        age = h.age_s(mono)
        absent = (h.kind == "nvml" and h.last_error in QUIET_NVML) or (h.kind == "gpu" and not h.ok)
        return SourceState(absent=absent, warning=h.last_error if h.ok else None, name=h.name, kind=h.kind, ok=h.ok, error=None if h.ok else (h.last_error or "no data yet"),
                           since=since, last_ok_at=wall(h.last_ok_at), age_s=age, latency_s=h.latency_s,
                           stale=bool(h.ok and age is not None and age > self.stale_after_s),
                           connecting=connecting)

    def _connecting(self, h: SourceHealth, now: float) -> bool:
        """Never answered, not refused, and watched for less than :data:`CONNECTING_FOR_S`."""
        first = self._first_seen.setdefault(f"{h.kind}:{h.name}", now)
        if h.ok or h.last_ok_at is not None or now - first >= self.connecting_for_s:
            return False
        error = (h.last_error or "").lower()
        return not error or any(word in error for word in _STILL_CONNECTING)

    def observe(self, collectors: Sequence[Any] | None = None) -> None:
        """Remember each engine's last good values (call after every poll, so a
        good sample followed by a failure before the next tick is not lost);
        ``collectors``: only these (the one just polled), default all."""
        now, mono = self.wall(), self.mono()
        for c in self.collector.collectors if collectors is None else collectors:
            h: SourceHealth = c.health
            # A poll replaces a collector's stats list and health: the same objects mean
            # nothing new, so each poll costs one copy of its own engine, not of the fleet.
            seen = self._observed.get(id(c))
            if seen is not None and seen[0] is c.stats and seen[1] is h:
                continue
            same_stats = seen is not None and seen[0] is c.stats  # a new read of the same values (Prometheus)
            self._observed[id(c)] = (c.stats, h)
            for s in c.stats:
                if h.ok and s.state in (UP, DEGRADED):
                    if not same_stats or s.name not in self._last_good:
                        # a copy only when a value is not finite (the collectors' own are already clean)
                        unclean = {f: None for f in _VALUE_FIELDS
                                   if (v := getattr(s, f)) is not None and _clean(v) is None}
                        self._last_good[s.name] = replace(s, **unclean) if unclean else s
                    self._last_good_at[s.name] = h.last_ok_at if h.last_ok_at is not None else mono
                    self._down_since.pop(s.name, None)
                elif s.state != UNKNOWN or h.last_error_at is not None:
                    self._down_since.setdefault(s.name, now if h.last_error_at is None
                                                else now - max(0.0, mono - h.last_error_at))

    def _engine(self, s: EngineStats, h: SourceHealth, fresh_poll: bool, now: float, mono: float,
                gpus: tuple[str, ...] = (), local: dict[str, Any] | None = None,
                source: str | None = None) -> EngineState:
        name = s.name
        src = source or s.url  # where the values come from (a Prometheus, or the engine itself)
        last = self._last_good.get(name)
        age = None if last is None else max(0.0, mono - self._last_good_at[name])
        sampled_at = None if age is None else now - age
        if fresh_poll and s.state in (UP, DEGRADED) and last is not None and age is not None:
            status = FRESH if age <= self.stale_after_s else STALE
            fresh = Freshness(status, src, sampled_at, age, None if status == FRESH else sampled_at,
                              None if status == FRESH else f"no new sample for {age:.0f} s")
            return EngineState(last, fresh, self._missing_reasons(name, last, fresh), gpus, local)
        since = self._down_since.get(name)
        reason = s.error or h.last_error or ("not polled yet" if s.state == UNKNOWN else "no data")
        if last is None and self._connecting(h, now):
            # no answer yet at start-up: "connecting", not down (no alert, no "new → down" line)
            fresh = Freshness(MISSING, src, None, None, None,
                              "connecting" + (f": no answer yet ({reason})" if h.last_error else ""))
            shown = replace(s, state=UNKNOWN, error=None)
            return EngineState(shown, fresh, self._missing_reasons(name, shown, fresh), gpus, local)
        if local and local.get("phase") == "orphaned":
            # not merely refused: its main process is gone and its workers still hold the GPU memory
            reason = f"orphaned: {local.get('detail') or 'main process exited, workers still alive'}"
        if last is None:
            fresh = Freshness(MISSING, src, None, None, since, reason)
            return EngineState(s, fresh, self._missing_reasons(name, s, fresh), gpus, local)
        shown = replace(last, state=s.state if s.state != UNKNOWN else DOWN, error=reason)
        fresh = Freshness(STALE, src, sampled_at, age, since, reason)
        return EngineState(shown, fresh, missing_reasons(shown, fresh), gpus, local)

    def _missing_reasons(self, name: str, s: EngineStats, fresh: Freshness) -> dict[str, str]:
        """:func:`missing_reasons`, computed again only when the values or the freshness status changed."""
        got = self._missing.get(name)
        if got is not None and got[0] is s and got[1] == fresh.status and got[2] == fresh.reason:
            return got[3]
        out = missing_reasons(s, fresh)
        if len(self._missing) > 4 * len(self._last_good) + 64:
            self._missing.clear()  # engines come and go: forget the ones gone
        self._missing[name] = (s, fresh.status, fresh.reason, out)
        return out

    def _gpus(self, names: set[str], live_pods: Mapping[str, str]) -> list[GpuStats]:
        rows = self.gpu_rows
        # Prometheus: from pod labels; a cluster read: pods by address (after a rescale too)
        pods = {**self.engine_pods, **getattr(self.collector, "engine_pods", {}), **live_pods}
        if pods:
            from ..sources.gpu import assign_pod_engines

            rows = assign_pod_engines(rows, pods, names)
        return list(rows)

    def cluster_state(self) -> ClusterState | None:
        """The cluster part the next state will carry, now (the Cluster pane paints it between ticks)."""
        return self._cluster(self.wall())

    def _cluster(self, now: float) -> ClusterState | None:
        if not self.kube_configured:
            return None
        if self.cluster_error:
            status = STALE if self.cluster is not None else MISSING
            age = None if self.cluster_ok_at is None else max(0.0, now - self.cluster_ok_at)
            return ClusterState(self.cluster, Freshness(status, self.cluster_source, self.cluster_ok_at, age,
                                                        self.cluster_error_since, self.cluster_error),
                                self.cluster_api_calls)
        if self.cluster is None:
            return ClusterState(None, Freshness(MISSING, self.cluster_source, None, None, None, "connecting"))
        age = None if self.cluster_ok_at is None else max(0.0, now - self.cluster_ok_at)
        return ClusterState(self.cluster, Freshness(FRESH, self.cluster_source, self.cluster_ok_at, age),
                            self.cluster_api_calls)

    def _fleet(self, engines: list[EngineState], windows: list) -> FleetView:
        up = [e.stats for e in engines if e.fresh and e.stats.state == UP]
        if not up:
            why = "no engine is up" if engines else "no engines configured"
            names = [f.name for f in fields(FleetView) if f.name not in ("engines", "engines_up", "missing")]
            return FleetView(engines=len(engines), engines_up=0, missing={n: why for n in names})

        def total(attr: str) -> float | None:
            vals = [getattr(s, attr) for s in up if getattr(s, attr) is not None]
            return sum(vals) if vals else None

        kv = [s.kv_cache_pct for s in up if s.kv_cache_pct is not None]
        ttft_p50_s, ttft_p99_s = fleet_quantiles(windows, "ttft", (0.5, 0.99))  # one sum for both
        view = FleetView(
            engines=len(engines), engines_up=len(up),
            running=total("running"), waiting=total("waiting"),
            prompt_tokens_per_s=total("prompt_tokens_per_s"),
            generation_tokens_per_s=total("generation_tokens_per_s"),
            requests_per_s=total("requests_per_s"), preemptions_per_s=total("preemptions_per_s"),
            kv_cache_pct_mean=sum(kv) / len(kv) if kv else None, kv_cache_pct_max=max(kv) if kv else None,
            ttft_p50_s=_clean(ttft_p50_s), ttft_p99_s=_clean(ttft_p99_s),
            itl_p95_s=_clean(fleet_quantile(windows, "itl", 0.95)),
            e2e_p99_s=_clean(fleet_quantile(windows, "e2e", 0.99)),
        )
        computed = getattr(self.collector, "fleet_values", None)  # Prometheus: over every engine's buckets
        if computed is not None:
            quantiles: dict[str, Any] = {k: _clean(computed.get(k)) for k in ("ttft_p50_s", "ttft_p99_s", "itl_p95_s",
                                                                              "e2e_p99_s")}
            view = replace(view, **quantiles)
        missing = {f.name: "no engine up exports it, or no requests finished in the window"
                   for f in fields(FleetView) if f.name not in ("missing",) and getattr(view, f.name) is None}
        return replace(view, missing=missing)

    def _alerts(self, engines: list[EngineState], feeds_down: Sequence[SourceState] = ()) -> list[Alert]:
        current = [e.stats for e in engines if e.fresh]
        alerts = engine_alerts(current, self.slo)
        broken = {f.name for f in feeds_down}
        kept = {e.name for e in engines if not e.fresh and e.freshness.source in broken}
        # a monitoring outage: the engines' last alerts stand, marked stale (none is cleared), and one
        # alert says why instead of one per engine
        alerts += [replace(a, text=f"{a.text} (stale)") for a in engine_alerts(
            [e.stats for e in engines if e.name in kept and e.stats.state == UP], self.slo)]
        for f in feeds_down:
            since = time.strftime("%H:%M:%S", time.localtime(f.since)) if f.since else "?"
            n = sum(1 for e in engines if e.freshness.source == f.name and e.name in kept)
            alerts.append(Alert(WARNING, f.name, f"metrics stale: Prometheus unreachable since {since} ({f.error})"
                                + (f"; {n} engines keep their last values" if n else "")))
        for e in engines:
            if e.fresh or e.name in kept:
                continue
            fr = e.freshness
            if fr.status == MISSING and (fr.reason or "").startswith(("connecting", "not polled yet")):
                continue  # start-up: it has not answered yet, nothing is known to be wrong
            down_since = time.strftime("%H:%M:%S", time.localtime(fr.since)) if fr.since else None
            word = e.stats.state if e.stats.state in (DOWN, DEGRADED) else "no data"
            text = f"{word} since {down_since}: {fr.reason}" if down_since else f"{word}: {fr.reason}"
            alerts.append(Alert(CRITICAL, e.name, text))
        alerts.sort(key=lambda a: (a.severity != CRITICAL, a.target))
        return alerts


def _gpu_engines(g: GpuStats) -> set[str]:
    names = {g.engine} if g.engine else set()
    names.update(p.engine for p in g.processes or () if p.engine)
    for m in g.mig_devices or ():
        names.update(_gpu_engines(m))
    return names
