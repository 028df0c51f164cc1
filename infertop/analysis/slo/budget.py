"""Per-stage budgets, and requests within a target counted from histogram buckets.

A request's latency is queue → prefill (together TTFT) → decode (TPOT per token) → E2E. vLLM exports each
stage's histogram, so a stage's percentile is read on its own; the shares of a total are the stages'
own percentiles over the total's ("TTFT p99 3.1 s of 2 s: queue 2.6 s (84 %), prefill 0.5 s"): prefill is
TTFT p99 − queue p99, decode is E2E p99 − TTFT p99. Percentiles do not add (the p99 request is not every
stage's p99 request), so the shares are an attribution of the total, not a measurement of one request.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...format import seconds_human
from .targets import STAGE_LABEL, STAGES, SloClass

Bucket = tuple[float, float]  # (le, cumulative count)


def count_within(buckets: Sequence[Bucket], target_s: float) -> tuple[float, float] | None:
    """(requests within ``target_s``, all requests) of a cumulative histogram; None without a +Inf bucket.

    A target between two bounds is interpolated linearly inside its bucket, as ``histogram_quantile``
    does (the bucket's requests are taken as spread evenly; the first bucket starts at 0): with 80
    requests ≤ 1 s and 100 ≤ 2 s, 90 are within 1.5 s. A target past the largest finite bound counts
    the +Inf bucket's requests as over it (only "over the bound" is known of them: the cautious side)."""
    bs = sorted(buckets)
    if len(bs) < 1 or not math.isinf(bs[-1][0]):
        return None
    les = [le for le, _ in bs]
    cum = []
    top = 0.0
    for _, c in bs:  # running max: a scrape race can make a cumulative count dip
        top = max(top, c)
        cum.append(top)
    total = cum[-1]
    b = bisect_left(les, target_s)
    if b >= len(les) - 1:  # past the largest finite bound (or there is only +Inf)
        return (cum[-2] if len(cum) >= 2 else 0.0), total
    if les[b] == target_s:
        return cum[b], total
    lo, lo_count = (les[b - 1], cum[b - 1]) if b > 0 else (0.0, 0.0)
    hi = les[b]
    if hi <= lo:
        return cum[b], total
    return lo_count + (cum[b] - lo_count) * (target_s - lo) / (hi - lo), total


@dataclass(frozen=True, slots=True)
class StageLine:
    """One stage's percentile against its budget, and the stages it is made of."""

    stage: str  # queue, ttft, tpot, e2e
    percentile: str  # p99, p95
    value_s: float | None
    target_s: float
    over: bool
    edge: str = ""  # ">" past the largest bucket bound, "<" under the first
    parts: tuple[tuple[str, float, float], ...] = ()  # (stage, seconds, share of the value in %)
    broke: str | None = None  # the stage that broke the budget, when over
    text: str = ""


def stage_lines(stats, cls: SloClass) -> tuple[StageLine, ...]:
    """Each stage of ``stats`` (an EngineStats: queue/TTFT p99, ITL p95, E2E p99) against ``cls``."""
    v = {stage: getattr(stats, attr) for stage, (_, _, attr) in STAGES.items()}
    edges = getattr(stats, "quantile_edges", None) or {}
    over = {s: v[s] is not None and v[s] > cls.target_s(s) for s in STAGES}
    # a queue p99 under its first bucket bound is a bound, not a time: it cannot be split off the TTFT
    # (at rest "queue 247ms (100 %)" would blame a queue that is near zero)
    queue_known = v["queue"] is not None and edges.get(STAGES["queue"][2], "") != "<"
    out = []
    for stage, (_, pct, attr) in STAGES.items():
        value, target = v[stage], cls.target_s(stage)
        parts: tuple[tuple[str, float, float], ...] = ()
        if stage == "ttft" and value and queue_known:
            queue = min(v["queue"], value)
            parts = _shares(value, (("queue", queue), ("prefill", value - queue)))
        elif stage == "e2e" and value and v["ttft"] is not None:
            ttft = min(v["ttft"], value)
            queue = min(v["queue"], ttft) if queue_known else None
            pieces = (("queue", queue), ("prefill", ttft - queue)) if queue is not None else (("TTFT", ttft),)
            parts = _shares(value, (*pieces, ("decode", value - ttft)))
        broke = _broke(stage, parts, over) if over[stage] else None
        edge = edges.get(attr, "") if edges.get(attr, "") in ("<", ">") else ""
        out.append(StageLine(stage, pct, value, target, over[stage], edge, parts, broke,
                             _text(stage, pct, value, target, edge, parts, broke)))
    return tuple(out)


def _shares(total: float, pieces) -> tuple[tuple[str, float, float], ...]:
    return tuple((name, max(0.0, s), 100.0 * max(0.0, s) / total) for name, s in pieces)


def _broke(stage: str, parts, over: dict[str, bool]) -> str:
    """The stage to blame: its own sub-stage over its own budget first, else the largest share."""
    if stage == "ttft":
        return "queue" if over["queue"] else max(parts, key=lambda p: p[1])[0] if parts else "ttft"
    if stage == "e2e":
        if over["queue"]:
            return "queue"
        if over["ttft"]:
            return "prefill"
        if over["tpot"]:
            return "decode"
        return max(parts, key=lambda p: p[1])[0] if parts else "e2e"
    return stage


def _text(stage, pct, value, target, edge, parts, broke) -> str:
    head = f"{STAGE_LABEL[stage]} {pct} {edge}{seconds_human(value)} of {seconds_human(target)}"
    if value is None:
        return f"{STAGE_LABEL[stage]} {pct} — (no requests in the window) of {seconds_human(target)}"
    if parts:
        head += ": " + ", ".join(f"{n} {seconds_human(s)} ({share:.0f} %)" for n, s, share in parts)
    if broke:
        head += f" — {broke} broke it"
    return head


def worst(lines_by_engine: dict[str, tuple[StageLine, ...]]) -> dict[str, tuple[str, StageLine]]:
    """stage → (engine, its line) with the highest value ÷ target, among engines that have the value."""
    out: dict[str, tuple[str, StageLine]] = {}
    top: dict[str, float] = {}  # stage → the value ÷ target of its line in out
    for name, lines in lines_by_engine.items():
        for line in lines:
            if line.value_s is None:
                continue
            ratio = line.value_s / line.target_s
            if line.stage not in top or ratio > top[line.stage]:
                out[line.stage], top[line.stage] = (name, line), ratio
    return out


def class_counts(buckets: Mapping[str, Mapping[str, Sequence[Bucket]]], class_of: Mapping[str, SloClass]
                 ) -> dict[str, tuple[float, float, int]]:
    """class → (requests, over target, engines counted) from each engine's buckets over a window (its
    requests per bound: increases, not lifetime counts), by the class's objective stage — the same
    :func:`count_within` as the local count, so a target between bounds is handled the same."""
    out: dict[str, tuple[float, float, int]] = {}
    for name, hists in buckets.items():
        cls = class_of.get(name)
        b = hists.get(cls.objective_stage) if cls is not None else None
        got = count_within(b, cls.target_s(cls.objective_stage)) if b and cls is not None else None
        if got is None or cls is None:
            continue
        within, total = got
        req, bad, n = out.get(cls.name, (0.0, 0.0, 0))
        out[cls.name] = (req + total, bad + min(total, max(0.0, total - within)), n + 1)
    return out
