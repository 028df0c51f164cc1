"""What infertop knows about one vLLM engine at one moment."""

from __future__ import annotations

from dataclasses import dataclass, field

# Engine states, as shown in the Engines pane.
UP = "up"
DOWN = "down"
DEGRADED = "degraded"  # answers /metrics but /health fails, or garbage
UNKNOWN = "unknown"


#: (histogram, quantile, EngineStats field): the percentiles an engine's row carries
QUANTILES = (
    ("ttft", 0.50, "ttft_p50_s"),
    ("ttft", 0.99, "ttft_p99_s"),
    ("itl", 0.50, "itl_p50_s"),
    ("itl", 0.95, "itl_p95_s"),
    ("e2e", 0.95, "e2e_p95_s"),
    ("e2e", 0.99, "e2e_p99_s"),
    ("queue", 0.99, "queue_p99_s"),
)

@dataclass(frozen=True, slots=True)
class EngineStats:
    """One engine's derived statistics over the sliding window.

    ``None`` means "not known" (metric not exported, not enough history) and
    renders as an em dash; it is never confused with zero.
    """

    name: str
    url: str
    state: str = UNKNOWN
    error: str | None = None
    model: str | None = None
    engine_label: str | None = None  # V1 "engine" label (data-parallel rank)
    metrics_version: str | None = None  # "v1" or "v0"
    vllm_version: str | None = None
    scraped_at: float | None = None  # wall clock of the last good scrape
    window_s: float | None = None  # span of history the rates used
    # instantaneous gauges
    running: float | None = None
    waiting: float | None = None
    kv_cache_pct: float | None = None
    max_num_seqs: int | None = None
    # rates over the window
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    preemptions_per_s: float | None = None
    prefix_cache_hit_pct: float | None = None
    # histogram quantiles over the window (seconds)
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    e2e_p95_s: float | None = None
    e2e_p99_s: float | None = None
    queue_p99_s: float | None = None
    # prompt + generated tokens counted since the engine started (the latest scrape): the triage's
    # "no token moved for N s" reads it, where a 60 s rate only fades
    tokens_total: float | None = None
    # the cumulative counters behind some rates (the latest scrape): the triage takes their rates over
    # seconds from consecutive ticks, where the 60 s window under-reports a change for its first minute
    prompt_tokens_total: float | None = None
    requests_total: float | None = None  # finished requests (request_success_total)
    prefix_hits_total: float | None = None  # prefix-cache hits (tokens)
    prefix_queries_total: float | None = None  # prefix-cache lookups (tokens)
    preemptions_total: float | None = None
    # percentile field → "<" (its rank is in the first bucket: the value shown is that bucket's bound,
    # the truth is under it) or ">" (in the +Inf bucket: over the largest bound)
    quantile_edges: dict[str, str] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)


    @property
    def running_ratio(self) -> float | None:
        """running ÷ max_num_seqs, when max_num_seqs is known."""
        if self.running is None or not self.max_num_seqs:
            return None
        return self.running / self.max_num_seqs

    @property
    def is_up(self) -> bool:
        return self.state == UP


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Immutable result of one collection cycle across all engines."""

    taken_at: float  # wall clock
    engines: tuple[EngineStats, ...]

    def by_name(self) -> dict[str, EngineStats]:
        return {e.name: e for e in self.engines}
