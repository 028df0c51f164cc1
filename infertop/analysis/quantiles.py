"""Histogram quantiles with Prometheus ``histogram_quantile`` interpolation."""

from __future__ import annotations

import math
from collections.abc import Sequence

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
    bs = sorted(buckets)
    if len(bs) < 2 or not math.isinf(bs[-1][0]):
        return None
    bs = ensure_monotonic(bs)
    observations = bs[-1][1]
    if observations <= 0:
        return None
    rank = q * observations
    b = 0
    while b < len(bs) - 1 and bs[b][1] < rank:
        b += 1
    if b == len(bs) - 1:
        return bs[-2][0]
    if b == 0 and bs[0][0] <= 0:
        return bs[0][0]
    start = 0.0
    end = bs[b][0]
    count = bs[b][1]
    if b > 0:
        start = bs[b - 1][0]
        count -= bs[b - 1][1]
        rank -= bs[b - 1][1]
    if count <= 0:
        return end
    return start + (end - start) * (rank / count)


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
