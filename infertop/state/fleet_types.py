"""The one fleet state: every source joined into one immutable, time-stamped :class:`FleetState` per
tick, and its parts (:class:`Freshness`, :class:`EngineState`, :class:`FleetView`, :class:`SourceState`,
:class:`ClusterState`, :class:`Slo`) with their JSON documents (:meth:`FleetState.to_doc` /
:meth:`FleetState.from_doc`: replay turns recorded documents back into states).

The TUI panes, ``infertop snapshot`` (table and JSON) and the flight recorder all render this same
object, so one metric has one value everywhere at a given moment. Every engine, GPU source and the
cluster carry a :class:`Freshness`: where the values came from, when they were sampled, and whether
they are fresh, stale (since when, why) or missing (why). :mod:`.fleet_join` builds the states.
Never imports textual or rich.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..analysis.alerts import Alert
from ..analysis.triage.types import Verdict
from ..domain.engine import EngineStats
from ..domain.gpu import GpuStats, classify
from ..domain.kube import ClusterSnapshot
from ..domain.codec import from_doc, to_doc
from ..domain.freshness import FRESH, MISSING, STALE, Freshness
from ..domain.queues import QueueSource

DOC_VERSION = 1
MAX_VERDICTS = 1000  # a recorded tick's verdicts shown at most (a file is hostile; triage raises a handful)


@dataclass(frozen=True, slots=True)
class EngineState:
    """One engine as shown at one tick: its values (the last good ones when
    the engine is not answering) and how fresh they are."""

    stats: EngineStats
    freshness: Freshness = field(default_factory=Freshness)
    missing: dict[str, str] = field(default_factory=dict)  # field → why it has no value
    gpus: tuple[str, ...] = ()  # labels of the GPUs mapped to this engine
    local: dict[str, Any] | None = None  # a local engine infertop manages: pid, profile, owner …

    @property
    def name(self) -> str:
        return self.stats.name

    @property
    def fresh(self) -> bool:
        return self.freshness.status == FRESH


@dataclass(frozen=True, slots=True)
class FleetView:
    """The fleet line: totals over the engines that are up at this tick.

    ``None`` — never 0 — when no engine is up or none exports the value."""

    engines: int = 0
    engines_up: int = 0
    running: float | None = None
    waiting: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    preemptions_per_s: float | None = None
    kv_cache_pct_mean: float | None = None
    kv_cache_pct_max: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p95_s: float | None = None
    e2e_p99_s: float | None = None
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SourceState:
    """One data source (an engine endpoint, NVML, a dcgm exporter, Kubernetes)."""

    name: str
    kind: str
    ok: bool
    error: str | None = None
    since: float | None = None  # wall clock: failing since (when not ok)
    last_ok_at: float | None = None  # wall clock of the last good read
    age_s: float | None = None  # since the last good read
    latency_s: float | None = None
    stale: bool = False  # ok, but no good read for more than STALE_AFTER_POLLS intervals
    absent: bool = False  # not available on this host by design (no NVIDIA driver): not a failure
    warning: str | None = None  # answers, but part of it fails ("gpu2: NVML: GPU is lost", "/health failing")
    connecting: bool = False  # never answered yet, and not refused: start-up (or a slow first answer), not an outage


@dataclass(frozen=True, slots=True)
class ClusterState:
    snapshot: ClusterSnapshot | None = None
    freshness: Freshness = field(default_factory=Freshness)
    api_calls: int | None = None  # requests the last read cost (one-shot reads)


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_p99_s: float
    itl_p95_s: float
    e2e_p99_s: float
    queue_p99_s: float
    kv_cache_pct: float


@dataclass(frozen=True, slots=True)
class FleetState:
    """Everything infertop knows at one tick."""

    tick: int
    taken_at: float  # wall clock of the tick
    refresh_s: float
    window_s: float
    slo: Slo
    engines: tuple[EngineState, ...] = ()
    fleet: FleetView = field(default_factory=FleetView)
    alerts: tuple[Alert, ...] = ()
    sources: tuple[SourceState, ...] = ()
    gpus: tuple[GpuStats, ...] = ()
    gpus_configured: bool = False  # at least one GPU source is configured
    cluster: ClusterState | None = None  # None: Kubernetes is not configured
    queues: tuple[Any, ...] = ()  # domain.queues.QueueSource: gateways and endpoint pickers (Queue pane)
    autoscalers: tuple[dict, ...] = ()  # room for the Autoscaler pane
    mode: str = "live"  # live, demo, replay
    verdicts: tuple[Verdict, ...] = ()  # triage's verdicts at this tick, worst first (recorded, replayed)
    slo_report: dict | None = None  # analysis.slo.SloWatch's document: classes, budgets, burn, capacity, cost

    # -- lookups ----------------------------------------------------------
    def engine(self, name: str | None) -> EngineState | None:
        return next((e for e in self.engines if e.name == name), None) if name is not None else None

    @property
    def engine_stats(self) -> list[EngineStats]:
        return [e.stats for e in self.engines]

    def failing_sources(self) -> list[SourceState]:
        return [s for s in self.sources if not s.ok and not s.absent]

    @property
    def all_fresh(self) -> bool:
        """Every source answered lately and nothing shown is stale."""
        if any((not s.ok and not s.absent) or s.stale for s in self.sources):
            return False
        if any(e.freshness.status != FRESH for e in self.engines):
            return False
        return self.cluster is None or self.cluster.freshness.status == FRESH

    # -- documents --------------------------------------------------------
    def to_doc(self) -> dict[str, Any]:
        """Plain JSON-able data (no NaN/Infinity): ``snapshot --json`` and the recorder.

        An engine is its statistics, flat, plus ``freshness``, ``missing``
        (field → why it is null), ``gpus`` and ``local``; the cluster is its
        object lists plus ``freshness`` and ``error``."""
        doc = {
            "version": DOC_VERSION, "tick": self.tick, "taken_at": self.taken_at, "mode": self.mode,
            "refresh_s": self.refresh_s, "window_s": self.window_s, "slo": to_doc(self.slo),
            "fleet": to_doc(self.fleet), "engines": [_engine_doc(e) for e in self.engines],
            "alerts": to_doc(self.alerts), "sources": to_doc(self.sources),
            "gpus": [_gpu_doc(g) for g in self.gpus], "gpus_configured": self.gpus_configured,
            "queues": to_doc(self.queues), "autoscalers": to_doc(self.autoscalers),
            "all_fresh": self.all_fresh, "verdicts": to_doc(self.verdicts),
        }
        if self.slo_report is not None:
            doc["slo_report"] = to_doc(self.slo_report)
        if self.cluster is not None:
            c = self.cluster
            cdoc = c.snapshot.to_dict() if c.snapshot is not None else {}
            cdoc["freshness"] = to_doc(c.freshness)
            cdoc["error"] = c.freshness.reason if c.freshness.status != FRESH else None
            if c.api_calls is not None:
                cdoc["api_calls"] = c.api_calls
            doc["cluster"] = cdoc
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "FleetState":
        """The state a document was made from (replay)."""
        engines = tuple(
            EngineState(stats=from_doc(EngineStats, d), freshness=from_doc(Freshness, d.get("freshness") or {}),
                        missing=dict(d.get("missing") or {}), gpus=tuple(d.get("gpus") or ()), local=d.get("local"))
            for d in doc.get("engines") or ()
        )
        cluster = None
        cdoc = doc.get("cluster")
        if cdoc is not None:
            snap = from_doc(ClusterSnapshot, cdoc) if "context" in cdoc else None
            cluster = ClusterState(snap, from_doc(Freshness, cdoc.get("freshness") or {}), cdoc.get("api_calls"))
        return cls(
            tick=int(doc.get("tick") or 0), taken_at=float(doc.get("taken_at") or 0.0),
            refresh_s=float(doc.get("refresh_s") or 1.0), window_s=float(doc.get("window_s") or 60.0),
            slo=from_doc(Slo, doc["slo"]), engines=engines, fleet=from_doc(FleetView, doc.get("fleet") or {}),
            alerts=from_doc(tuple[Alert, ...], doc.get("alerts") or []),
            sources=from_doc(tuple[SourceState, ...], doc.get("sources") or []),
            gpus=from_doc(tuple[GpuStats, ...], doc.get("gpus") or []),
            gpus_configured=bool(doc.get("gpus_configured")), cluster=cluster,
            queues=_queues_from_doc(doc.get("queues") or ()), autoscalers=tuple(doc.get("autoscalers") or ()),
            mode=str(doc.get("mode") or "replay"),
            verdicts=_verdicts_from_doc(doc.get("verdicts") or []),
            slo_report=doc["slo_report"] if isinstance(doc.get("slo_report"), dict) else None,
        )


def _verdicts_from_doc(docs: Any) -> tuple[Verdict, ...]:
    """A tick's verdicts, checked leaf by leaf: a recording is a file someone may hand over, and a ``since``
    that is no number would end the pane that ages it. A malformed one is a damaged tick (TypeError, as any
    other part of the document of the wrong shape)."""
    if not isinstance(docs, list):
        raise TypeError("verdicts: expected a list")
    out = tuple(from_doc(Verdict, d) for d in docs[:MAX_VERDICTS])
    for v in out:
        texts = [v.kind, v.subject, v.severity, v.explanation, *v.changes]
        texts += [t for e in v.evidence for t in (e.signal, e.value, e.against, e.window)]
        texts += [t for r in v.remedies for t in (r.text, r.key, r.target)]
        if not all(isinstance(t, str) for t in texts) or not isinstance(v.since, float):
            raise TypeError("verdicts: a verdict of the wrong shape")
        if any(r.value is not None and (isinstance(r.value, bool) or not isinstance(r.value, int)) for r in v.remedies):
            raise TypeError("verdicts: a remedy value that is not a whole number")
    return out


def _queues_from_doc(docs: Any) -> tuple[Any, ...]:
    """Gateways / endpoint pickers back as QueueSource; any other entry (the Prometheus engine source's
    fleet queue depth, a plain mapping) as it was written."""

    return tuple(from_doc(QueueSource, d) if isinstance(d, dict) and "kind" in d and "name" in d else d
                 for d in docs)


def _engine_doc(e: EngineState) -> dict[str, Any]:
    d = to_doc(e.stats)
    d["running_ratio"] = to_doc(e.stats.running_ratio)
    d["freshness"] = to_doc(e.freshness)
    d["missing"] = dict(e.missing)
    d["gpus"] = list(e.gpus)
    d["local"] = to_doc(e.local)
    return d


def _gpu_doc(g: GpuStats) -> dict[str, Any]:
    d = to_doc(g)
    _gpu_extras(g, d)
    return d


def _gpu_extras(g: GpuStats, d: dict) -> None:
    """Derived GPU fields for documents (status word, percentages)."""
    d["label"] = g.label
    d["status"] = classify(g)
    d["mem_pct"] = to_doc(g.mem_pct)
    d["power_pct"] = to_doc(g.power_pct)
    d["throttle"] = g.throttle_words or None
    for m, md in zip(g.mig_devices, d.get("mig_devices") or []):
        _gpu_extras(m, md)
