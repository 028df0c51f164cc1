"""Counter increase and rate, with Prometheus ``rate()`` semantics.

A counter that goes down was reset (the process restarted); like
Prometheus, the value just before the reset is added back, so a restart
never produces a negative or a huge rate.
"""

from __future__ import annotations

from collections.abc import Sequence

Point = tuple[float, float]  # (time_s, value)


def increase_raw(points: Sequence[Point]) -> float | None:
    """Reset-corrected difference between the last and first point."""
    if len(points) < 2:
        return None
    total = points[-1][1] - points[0][1]
    prev = points[0][1]
    for _, v in points[1:]:
        if v < prev:
            total += prev
        prev = v
    return total


def extrapolated_rate(
    points: Sequence[Point], range_start_s: float, range_end_s: float, *, is_counter: bool = True, is_rate: bool = True
) -> float | None:
    """Port of Prometheus' ``extrapolatedRate`` (promql/functions.go).

    ``points`` are the samples inside [range_start_s, range_end_s], oldest first.
    Returns None with fewer than two points (Prometheus returns no value).
    """
    if len(points) < 2:
        return None
    first_t, first_v = points[0]
    last_t = points[-1][0]
    result = increase_raw(points) if is_counter else points[-1][1] - first_v
    assert result is not None
    sampled = last_t - first_t
    if sampled <= 0:
        return None
    to_start = first_t - range_start_s
    to_end = range_end_s - last_t
    avg_step = sampled / (len(points) - 1)
    if is_counter and result > 0 and first_v >= 0:
        # A counter cannot be extrapolated below zero.
        to_zero = sampled * (first_v / result)
        to_start = min(to_start, to_zero)
    threshold = avg_step * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else avg_step / 2
    interval += to_end if to_end < threshold else avg_step / 2
    result *= interval / sampled
    if is_rate:
        result /= range_end_s - range_start_s
    return result


def window_rate(points: Sequence[Point]) -> float | None:
    """Per-second rate over exactly the sampled span (no extrapolation).

    This is ``extrapolated_rate`` with the range clipped to the first and
    last sample, so a dashboard that has only 5 s of a 60 s window shows
    the rate of those 5 s instead of an under-estimate.
    """
    if len(points) < 2:
        return None
    return extrapolated_rate(points, points[0][0], points[-1][0])
