"""Resource quantities ("500m", "16Gi") and int-or-percent values ("25%"), as the
API server and the controllers read them."""

from __future__ import annotations

from typing import Any


def parse_quantity(value: Any) -> float:
    """Parse a resource quantity ("1", "500m", "16Gi", 2) to a float."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    suffixes = {
        "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
        "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    }
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


def resolve_intstr(value: Any, total: int, round_up: bool) -> int:
    """An int-or-percent ``value`` as a count of ``total`` (a percentage rounded up or down)."""
    if isinstance(value, int):
        return value
    pct = int(str(value).rstrip("%"))
    scaled = pct * total / 100
    return int(-(-scaled // 1)) if round_up else int(scaled // 1)
