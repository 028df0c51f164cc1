"""A gateway's or endpoint picker's queues at one tick: its classes or priority bands and the engines
behind it (plain values; the collectors in :mod:`infertop.sources.queues` build them, the fleet state
joins them). ``None`` is "no data", never 0."""

from __future__ import annotations

from dataclasses import dataclass, field

from .freshness import FRESH, Freshness

# PRODUCT.md's queue P99 budgets per workload class (seconds); config queues.budgets overrides.
DEFAULT_BUDGETS_S = {"realtime": 1.0, "chat": 1.0, "code": 0.2, "batch": 30.0}


@dataclass(frozen=True, slots=True)
class QueueClass:
    """One class (infertop gateway) or priority band (endpoint picker) over the window."""

    name: str
    priority: float | None = None
    depth: float | None = None  # requests waiting now
    oldest_wait_s: float | None = None
    wait_p50_s: float | None = None  # time from arrival to dispatch, over the window
    wait_p99_s: float | None = None
    budget_s: float | None = None  # the class's queue P99 budget
    weight: float | None = None
    max_wait_s: float | None = None
    reserved_slots: float | None = None
    share_pct: float | None = None  # of the dispatches over the window
    dispatches_per_s: float | None = None
    promotions: float | None = None  # promoted after max wait, over the window
    queue_bytes: float | None = None

    @property
    def over_budget(self) -> bool:
        return self.budget_s is not None and self.wait_p99_s is not None and self.wait_p99_s > self.budget_s


@dataclass(frozen=True, slots=True)
class QueueEngine:
    """An engine behind a gateway."""

    name: str
    url: str | None = None
    in_flight: float | None = None
    cap: float | None = None
    saturation_pct: float | None = None  # in flight ÷ cap
    vllm_waiting: float | None = None  # from the engine's own metrics (or the picker's per-pod gauge)
    draining: bool | None = None
    up: bool | None = None
    engine: str | None = None  # the watched vLLM engine it is, when known


@dataclass(frozen=True, slots=True)
class QueueSource:
    """One gateway or endpoint picker at one tick."""

    name: str
    kind: str  # gateway, epp
    url: str = ""
    via: str = "direct"  # direct, prometheus
    generation: str | None = None  # infertop, llm-d, gie
    freshness: Freshness = field(default_factory=Freshness)
    classes: tuple[QueueClass, ...] = ()
    engines: tuple[QueueEngine, ...] = ()
    queued: float | None = None
    oldest_wait_s: float | None = None
    pool_saturation_pct: float | None = None
    pool_kv_cache_pct: float | None = None
    strict_top: bool | None = None
    default_class: str | None = None
    admin: str = "none"  # none (no token), ok, refused, error
    admin_error: str | None = None
    missing: dict[str, str] = field(default_factory=dict)  # field → why it has no value
    # e.g. "20000 classes, first 64 shown": ``classes`` holds the first ones, ``queued`` counts them all
    note: str | None = None

    @property
    def fresh(self) -> bool:
        return self.freshness.status == FRESH

    def klass(self, name: str) -> QueueClass | None:
        return next((c for c in self.classes if c.name == name), None)

    def engine(self, name: str) -> QueueEngine | None:
        return next((e for e in self.engines if e.name == name), None)
