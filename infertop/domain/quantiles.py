"""Histogram quantiles with Prometheus ``histogram_quantile`` interpolation."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate
import operator

Bucket = tuple[float, float]  # (upper bound "le", cumulative count)


def ensure_monotonic(buckets: list[Bucket]) -> list[Bucket]:
    """Cumulative counts can dip through scrape races; Prometheus takes the running max."""
    out = []
    top = -math.inf
    for le, c in buckets:
        top = max(top, c)
        out.append((le, top))
    return out


def histogram_quantile(q: float, buckets: Sequence[Bucket]) -> float | None:
    """Port of Prometheus' ``bucketQuantile``; None where PromQL gives NaN/no data.

    ``buckets`` are (le, cumulative count) pairs, any order, including +Inf.
    The quantile is linearly interpolated inside its bucket, and the lowest
    bucket is assumed to start at 0, as Prometheus does. A rank that falls
    in the +Inf bucket returns the largest finite bound.
    """
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    prepared = prepare(buckets)
    return None if prepared is None else prepared_quantile(q, prepared)


Prepared = tuple[Sequence[float], Sequence[float]]  # (bounds ascending, running-max cumulative counts)


def prepare(buckets: Sequence[Bucket]) -> Prepared | None:
    """``buckets`` sorted, their counts made monotonic (:func:`ensure_monotonic`); None when
    no quantile can come of them. Several quantiles of one histogram share one preparation."""
    bs = sorted(buckets)
    if len(bs) < 2 or not math.isinf(bs[-1][0]):
        return None
    les, counts = zip(*bs)
    if counts[0] == counts[0] and all(map(operator.le, counts, counts[1:])):
        return les, counts  # already non-decreasing (the usual case): the running max is the counts
    # accumulate calls max(top, c) from top = -inf, exactly as ensure_monotonic: a NaN count keeps the top
    cum = list(accumulate(counts, max, initial=-math.inf))
    del cum[0]
    return les, cum


def prepared_quantile(q: float, prepared: Prepared) -> float | None:
    """:func:`histogram_quantile` of ``q`` in 0..1 from :func:`prepare`'s result."""
    les, cum = prepared
    observations = cum[-1]
    if observations <= 0:
        return None
    rank = q * observations
    # the first bucket whose count reaches the rank (counts are non-decreasing)
    b = bisect_left(cum, rank)
    last = len(cum) - 1
    if b >= last:
        return les[-2]
    if b == 0 and les[0] <= 0:
        return les[0]
    start = 0.0
    end = les[b]
    count = cum[b]
    if b > 0:
        start = les[b - 1]
        count -= cum[b - 1]
        rank -= cum[b - 1]
    if count <= 0:
        return end
    return start + (end - start) * (rank / count)


def prepared_edge(q: float, prepared: Prepared) -> str:
    """Where the rank of ``q`` falls: "<" in the first bucket (the value is only known to be under
    its bound — interpolating from 0 reads 297 ms for "all under 300 ms"), ">" in the +Inf bucket
    (only known to be over the largest bound), "" inside the histogram."""
    les, cum = prepared
    observations = cum[-1]
    if observations <= 0 or not 0.0 <= q <= 1.0:
        return ""
    b = bisect_left(cum, q * observations)
    if b >= len(cum) - 1:
        return ">"
    return "<" if b == 0 and les[0] > 0 else ""


def bucket_increase(first: dict[float, float], last: dict[float, float]) -> list[Bucket]:
    """Per-bucket increase between two cumulative snapshots, reset-aware.

    A bucket whose count went down was reset; its increase is then its new
    value (what Prometheus' ``increase`` yields with one reset and two points).
    """
    out = []
    for le, v in last.items():
        v0 = first.get(le)
        if v0 is None:
            continue
        out.append((le, v - v0 if v >= v0 else v))
    return out
