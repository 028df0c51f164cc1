"""Derive an engine's window statistics from its counter window and gauges."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from dataclasses import replace
from operator import itemgetter, sub

from ..domain.engine import QUANTILES, EngineStats
from ..domain.window import CounterWindow
from ..domain.quantiles import Prepared, histogram_quantile, prepare, prepared_edge, prepared_quantile



def window_buckets(window: CounterWindow, hist: str) -> list[tuple[float, float]] | None:
    """(le, increase over the window) for every bucket of ``hist`` (shared: do not modify)."""
    return all_window_buckets(window).get(hist)


def quantile(window: CounterWindow, hist: str, q: float) -> float | None:
    buckets = window_buckets(window, hist)
    if not buckets:
        return None
    v = histogram_quantile(q, buckets)
    return None if v is None or math.isnan(v) else v


def derive(base: EngineStats, window: CounterWindow, gauges: dict[str, float]) -> EngineStats:
    """Fill ``base`` with gauges and window-derived rates and quantiles."""
    return replace(base, **derived_fields(window, gauges))


def derived_fields(window: CounterWindow, gauges: dict[str, float]) -> dict[str, Any]:
    """The EngineStats fields :func:`derive` fills: gauges, rates and quantiles over the window."""
    kv = gauges.get("kv_usage")
    edges = window.edges()
    tokens_total = None
    totals: dict[str, float | None] = {}
    if edges is None:
        rates = {}
    else:
        (t0, first), (t1, last) = edges
        span = t1 - t0
        rates = {k: (last[k] - first[k]) / span for k in _RATE_KEYS if k in last and k in first} if span > 0 else {}
        if "prompt_tokens" in last or "generation_tokens" in last:
            tokens_total = last.get("prompt_tokens", 0.0) + last.get("generation_tokens", 0.0)
        totals = {f"{k}_total": last.get(k) for k in _TOTAL_KEYS}
    hits_rate = rates.get("prefix_hits")
    queries_rate = rates.get("prefix_queries")
    if queries_rate:
        prefix_pct = 100.0 * (hits_rate or 0.0) / queries_rate
    elif queries_rate == 0.0:
        prefix_pct = None  # no lookups in the window: a rate would be 0/0
    else:
        v0 = gauges.get("prefix_hit_rate_v0")
        prefix_pct = 100.0 * v0 if v0 is not None and v0 >= 0 else None
    fields: dict[str, Any] = {
        "running": gauges.get("running"),
        "waiting": gauges.get("waiting"),
        "kv_cache_pct": None if kv is None else 100.0 * kv,
        "prompt_tokens_per_s": rates.get("prompt_tokens"),
        "generation_tokens_per_s": rates.get("generation_tokens"),
        "requests_per_s": rates.get("requests"),
        "preemptions_per_s": rates.get("preemptions"),
        "prefix_cache_hit_pct": prefix_pct,
        "window_s": window.span_s or None,
        "tokens_total": tokens_total,
        **totals,
    }
    buckets = all_window_buckets(window)  # one pass over the samples, not one per quantile
    prepared: dict[str, Prepared | None] = {}  # each histogram sorted once for its quantiles
    quantile_edges: dict[str, str] = {}
    for hist, q, attr in QUANTILES:
        if hist in prepared:
            p = prepared[hist]
        else:
            b = buckets.get(hist)
            p = prepared[hist] = prepare(b) if b else None
        v = prepared_quantile(q, p) if p is not None else None
        if p is not None and v is not None and not math.isnan(v):
            edge = prepared_edge(q, p)
            if edge:
                quantile_edges[attr] = edge
                if edge == "<":
                    v = p[0][0]  # "< 300ms": the bound, not an interpolation from 0
        fields[attr] = None if v is None or math.isnan(v) else v
    fields["quantile_edges"] = quantile_edges
    return fields


_RATE_KEYS = ("prompt_tokens", "generation_tokens", "requests", "preemptions", "prefix_hits", "prefix_queries")
_TOTAL_KEYS = ("prompt_tokens", "requests", "prefix_hits", "prefix_queries", "preemptions")  # EngineStats.<key>_total


_LE: dict[str, tuple[str, float] | None] = {}  # "hist@le" → (hist, le): the same keys every poll
_LE_MAX = 4096  # a source inventing new bounds every poll cannot grow it without limit
# The keys of a window's points → per histogram (name, its bounds, a getter of its keys' values), in
# the order of the keys: an engine's counters keep their keys poll after poll, and engines share them.
_PLANS: dict[tuple[str, ...], list[tuple[str, tuple[float, ...], Callable[[dict], tuple]]]] = {}
_PLANS_MAX = 64


def all_window_buckets(window: CounterWindow) -> dict[str, list[tuple[float, float]]]:
    """(le, increase over the window) of every bucket, by histogram, in one pass.

    Computed once per window edges (the poll's :func:`derive`) and shared by every
    later reader until the next poll (the fleet quantiles of each tick): do not modify."""
    memo = window.memo()
    got = memo.get("buckets")
    if got is not None:
        return got
    edges = window.edges()
    if edges is None:
        return {}
    (_, first), (_, last) = edges
    keys = tuple(last)
    if len(first) == len(keys) and tuple(first) == keys:
        # the usual case: both points have the same series: C-level subtraction per histogram
        plan = _PLANS.get(keys)
        if plan is None:
            plan = _plan(keys)
        out = {hist: list(zip(les, map(sub, get(last), get(first)))) for hist, les, get in plan}
    else:
        out = _buckets(first, last)
    memo["buckets"] = out
    return out


def _split(key: str) -> tuple[str, float] | None:
    """"ttft@0.5" → ("ttft", 0.5); None for a key that is no bucket."""
    try:
        return _LE[key]
    except KeyError:
        pass
    hist, sep, le = key.partition("@")
    split: tuple[str, float] | None
    try:
        split = (hist, float(le)) if sep else None
    except ValueError:
        split = None  # not a bucket
    if len(_LE) >= _LE_MAX:
        _LE.clear()
    _LE[key] = split
    return split


def _buckets(first: dict[str, float], last: dict[str, float]) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for key, v in last.items():
        split = _split(key)
        if split is not None:
            v0 = first.get(key)
            if v0 is not None:
                out.setdefault(split[0], []).append((split[1], v - v0))
    return out


def _plan(keys: tuple[str, ...]) -> list[tuple[str, tuple[float, ...], Callable[[dict], tuple]]]:
    groups: dict[str, tuple[list[float], list[str]]] = {}
    for key in keys:
        split = _split(key)
        if split is not None:
            les, names = groups.setdefault(split[0], ([], []))
            les.append(split[1])
            names.append(key)
    plan = [(hist, tuple(les), _getter(names)) for hist, (les, names) in groups.items()]
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[keys] = plan
    return plan


def _getter(names: list[str]) -> Callable[[dict], tuple]:
    if len(names) == 1:
        name = names[0]
        return lambda d: (d[name],)
    return itemgetter(*names)
