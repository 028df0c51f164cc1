"""The Cluster pane's filter and sort, as k9s has them: ``/`` a regex over a row's text (``!`` first
keeps the rows that do not match), ``-l app=vllm,tier!=web`` a label selector; ``s`` sorts on a
column (numbers as numbers: 12 restarts after 3; ages as durations: 9m before 1h). Pure: rows in, rows out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
# an age as format.age_short writes it (45s, 12m, 5h, 3d), or kubectl's two-unit form (2d3h, 5m30s)
_AGE = re.compile(r"^\s*((?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y))+)\s*$")
_AGE_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


@dataclass(frozen=True)
class RowFilter:
    text: str = ""
    pattern: re.Pattern | None = None
    invert: bool = False
    labels: tuple[tuple[str, str, bool], ...] = ()  # (key, value, equal?) — value "" with equal: the key exists
    error: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.pattern or self.labels)


def parse_filter(text: str) -> RowFilter:
    """``/`` text → a filter. A regex that does not compile is searched literally."""
    raw = text.strip()
    if not raw:
        return RowFilter()
    if raw.startswith("-l"):
        sel = raw[2:].strip()
        labels = []
        for part in filter(None, (p.strip() for p in sel.split(","))):
            if "!=" in part:
                k, v = part.split("!=", 1)
                labels.append((k.strip(), v.strip(), False))
            elif "=" in part:
                k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
                labels.append((k.strip(), v.strip(), True))
            else:
                labels.append((part, "", True))
        if not labels:
            return RowFilter(text, error="a label selector: -l key=value[,key!=value]")
        return RowFilter(text, labels=tuple(labels))
    invert = raw.startswith("!")
    body = raw[1:] if invert else raw
    if not body:
        return RowFilter(text)
    try:
        pattern = re.compile(body, re.IGNORECASE)
    except re.error:
        pattern = re.compile(re.escape(body), re.IGNORECASE)
    return RowFilter(text, pattern=pattern, invert=invert)


def keeps(f: RowFilter, obj: Any, cells: list[str]) -> bool:
    """Whether the row of ``obj`` (its cells as text) passes ``f``. Objects without labels never match a
    label selector."""
    if f.labels:
        labels = getattr(obj, "labels", None)
        if not isinstance(labels, dict):
            return False
        for k, v, equal in f.labels:
            if equal and (k not in labels if v == "" else labels.get(k) != v):
                return False
            if not equal and labels.get(k) == v:
                return False
        return True
    if f.pattern is None:
        return True
    return bool(f.pattern.search("  ".join(cells))) != f.invert


def duration_s(cell: str) -> float | None:
    """Seconds of an age cell ("9m" → 540, "2d3h" → 183600), None when the cell is no duration."""
    m = _AGE.match(cell)
    if m is None:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in _AGE_PART.findall(m.group(1)))


def sort_key(cell: str) -> tuple:
    """Numbers first and by value ("12" after "3", "1/8" by its 1; an age by its seconds, "9m" before
    "1h"), then text."""
    age = duration_s(cell)
    if age is not None:
        return (0, age, cell.lower())
    m = _NUM.match(cell)
    if m:
        return (0, float(m.group(1)), cell.lower())
    return (1, 0.0, cell.lower())
