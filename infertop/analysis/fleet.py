"""Fleet-wide aggregates over many engines."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..domain.engine import UP, EngineStats
from ..domain.window import CounterWindow
from ..domain.engine_stats import window_buckets
from ..domain.quantiles import histogram_quantile, prepare, prepared_quantile


@dataclass(frozen=True, slots=True)
class FleetTotals:
    engines: int
    engines_up: int
    running: float
    waiting: float
    prompt_tokens_per_s: float
    generation_tokens_per_s: float
    requests_per_s: float
    preemptions_per_s: float
    kv_cache_pct_mean: float | None
    kv_cache_pct_max: float | None


def totals(stats: Iterable[EngineStats]) -> FleetTotals:
    stats = list(stats)
    up = [s for s in stats if s.state == UP]
    kv = [s.kv_cache_pct for s in up if s.kv_cache_pct is not None]

    def total(attr: str) -> float:
        return sum(getattr(s, attr) or 0.0 for s in up)

    return FleetTotals(
        engines=len(stats),
        engines_up=len(up),
        running=total("running"),
        waiting=total("waiting"),
        prompt_tokens_per_s=total("prompt_tokens_per_s"),
        generation_tokens_per_s=total("generation_tokens_per_s"),
        requests_per_s=total("requests_per_s"),
        preemptions_per_s=total("preemptions_per_s"),
        kv_cache_pct_mean=sum(kv) / len(kv) if kv else None,
        kv_cache_pct_max=max(kv) if kv else None,
    )


def fleet_quantile(windows: Iterable[CounterWindow], hist: str, q: float) -> float | None:
    """Quantile of the fleet: bucket increases summed across engines, then
    interpolated — like ``histogram_quantile(q, sum by (le) (rate(...)))``."""
    return fleet_quantiles(windows, hist, (q,))[0]


def fleet_quantiles(windows: Iterable[CounterWindow], hist: str, qs: Sequence[float]) -> list[float | None]:
    """:func:`fleet_quantile` of each of ``qs``, the buckets summed and sorted once for all of them."""
    summed: dict[float, float] = {}
    for w in windows:
        for le, inc in window_buckets(w, hist) or ():
            summed[le] = summed.get(le, 0.0) + inc
    prepared = prepare(list(summed.items())) if summed else None
    out: list[float | None] = []
    for q in qs:
        v = prepared_quantile(q, prepared) if prepared is not None and 0.0 <= q <= 1.0 else (
            histogram_quantile(q, list(summed.items())) if summed else None)
        out.append(None if v is None or math.isnan(v) else v)
    return out
