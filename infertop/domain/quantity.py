"""Kubernetes quantities (``500m``, ``5``, ``1Gi``, ``80%``) as numbers: read by the sources (pod
requests, node capacity) and the analysis (autoscaler metrics) alike, so it lives at the bottom."""

from __future__ import annotations

import math
import re
from typing import Any

_SUFFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "E": 1e18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE%]?)\s*$")


def parse_quantity(text: Any) -> float | None:
    """A Kubernetes quantity (``500m``, ``5``, ``1Gi``, ``80%``) as a number; None when it is not one."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) if math.isfinite(float(text)) else None
    if not isinstance(text, str):
        return None
    m = _QUANTITY.match(text)
    if not m:
        return None
    value = float(m.group(1))
    suffix = m.group(2)
    return value if suffix == "%" else value * _SUFFIX[suffix]
