"""Human formatting of values with units. ``None`` renders as an em dash."""

from __future__ import annotations

import math

from typing_extensions import TypeIs

DASH = "—"


def _missing(v: float | None) -> TypeIs[None]:
    # TypeIs: past the check ``v`` is a float (a NaN, also "missing", only ever returns the dash)
    return v is None or (isinstance(v, float) and math.isnan(v))


def wait_human(seconds: float | None) -> str:
    """A queue wait: an empty queue's oldest wait is "0", not "0µs"."""
    return "0" if seconds == 0 else seconds_human(seconds)


def percentile_human(stats, attr: str) -> str:
    """A latency percentile of an EngineStats for display: "<300ms" where its rank fell in the first
    bucket (only the bound is known), ">60.0s" where it fell past the largest bound."""
    v = getattr(stats, attr)
    edge = (getattr(stats, "quantile_edges", None) or {}).get(attr, "") if v is not None else ""
    return (edge if edge in ("<", ">") else "") + seconds_human(v)  # a recording's dict is only trusted for these


def seconds_human(v: float | None) -> str:
    """Latency: 850 ms, 2.45 s, 1m05s."""
    if _missing(v):
        return DASH
    if math.isinf(v):
        return "∞"
    if v < 0.001:
        return f"{v * 1e6:.0f}µs"
    if v < 1:
        return f"{v * 1e3:.0f}ms"
    if v < 10:
        return f"{v:.2f}s"
    if v < 60:
        return f"{v:.1f}s"
    m, s = divmod(int(round(v)), 60)
    return f"{m}m{s:02d}s"


def seconds_over(v: float, target: float) -> str:
    """A latency shown beside the target it exceeds: as :func:`seconds_human`, with more digits
    when that would print the same text as the target ("20.04s > 20.0s", not "20.0s > 20.0s")."""
    text, target_text = seconds_human(v), seconds_human(target)
    if text != target_text or v <= target:
        return text
    scale, unit = (1e3, "ms") if v < 1 else (1.0, "s")
    for digits in (1, 2, 3, 4):
        number = f"{v * scale:.{digits}f}"
        if float(number) > target * scale:
            return number + unit
    return f"{v * scale:.10g}{unit}"


def rate_human(v: float | None) -> str:
    """Per-second rates: 0.3, 12, 1.2k, 45k."""
    if _missing(v):
        return DASH
    if v < 10:
        return f"{v:.1f}"
    if v < 1000:
        return f"{v:.0f}"
    if v < 10_000:
        return f"{v / 1000:.1f}k"
    if v < 1_000_000:
        return f"{v / 1000:.0f}k"
    return f"{v / 1e6:.1f}M"


def count_human(v: float | None) -> str:
    if _missing(v):
        return DASH
    return f"{v:.0f}"


def pct_human(v: float | None) -> str:
    if _missing(v):
        return DASH
    return f"{v:.0f}%"


def ratio_human(running: float | None, limit: int | None) -> str:
    if _missing(running) or not limit:
        return DASH
    return f"{running:.0f}/{limit}"


def age_human(seconds: float | None) -> str:
    """How long ago: 3 s, 2 min, 1 h."""
    if _missing(seconds):
        return "never"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def bytes_human(v: float | None) -> str:
    if _missing(v):
        return DASH
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return DASH


def age_short(seconds: float | None) -> str:
    """Compact age for tables, kubectl style: 45s, 12m, 5h, 3d."""
    if _missing(seconds):
        return DASH
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"
