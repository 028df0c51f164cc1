"""Map Prometheus query results (API JSON) to engines: pure, no I/O.

One engine is one label set over the ``by`` labels. A field Prometheus has
no series for (not exported, NaN from 0/0, no requests in the window) stays
``None`` — never 0. Label values become plain text (they are never markup).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .fleet_query import FIELD_LABEL, QUEUE_KINDS, QUEUE_LABEL
from ..sanitize import plain_text

MAX_ENGINES = 20_000  # a Prometheus answering more label sets is misconfigured (selector too wide)

Key = tuple[str, ...]


@dataclass(slots=True)
class EngineRow:
    """One engine's labels (as Prometheus sent them) and the values it gave for it."""

    key: Key
    labels: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)


def sample_value(item: Mapping[str, Any]) -> float | None:
    """The float of an instant-vector sample; None for NaN, ±Inf or garbage."""
    value = item.get("value")
    if type(value) is not list or len(value) < 2:  # noqa: E721 — JSON arrays are lists
        return None
    try:
        v = float(value[1])
    except (TypeError, ValueError):
        return None
    return v if -math.inf < v < math.inf else None


def engine_key(labels: Mapping[str, str], by: Sequence[str]) -> Key:
    return tuple([str(labels.get(name, "")) for name in by])


def engine_rows(result: Iterable[Mapping[str, Any]], by: Sequence[str],
                max_engines: int = MAX_ENGINES) -> tuple[dict[Key, EngineRow], int]:
    """Group the tagged series of the engine query: (key → row, label sets beyond ``max_engines``)."""
    rows: dict[Key, EngineRow] = {}
    dropped: set[Key] = set()
    for item in result:
        # JSON objects are dicts: isinstance(dict) is much cheaper than the Mapping ABC at 10 000 series
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            continue
        fld = metric.get(FIELD_LABEL)
        if not isinstance(fld, str):
            continue
        key = tuple([str(metric.get(name, "")) for name in by])
        row = rows.get(key)
        if row is None:
            if len(rows) >= max_engines:
                dropped.add(key)
                continue
            row = rows[key] = EngineRow(key, dict(zip(by, key)))  # raw: made plain text where shown
        v = sample_value(item)
        if v is not None:
            row.values[fld] = v
    return rows, len(dropped)


def tagged_values(result: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """field → value of a query whose series carry only the field tag (fleet quantiles)."""
    out: dict[str, float] = {}
    for item in result:
        metric = item.get("metric") if isinstance(item, Mapping) else None
        fld = metric.get(FIELD_LABEL) if isinstance(metric, Mapping) else None
        v = sample_value(item)
        if isinstance(fld, str) and v is not None:
            out[fld] = v
    return out


def scalar(result: Iterable[Mapping[str, Any]]) -> float | None:
    """The one value of a query such as ``sum(...)``; None when empty."""
    for item in result:
        if isinstance(item, Mapping):
            return sample_value(item)
    return None


#: the kind of a queue series no ``infertop_queue`` tag names (a queue_promql of one's own)
PROMQL_QUEUE = "promql"
MAX_QUEUE_SERIES = MAX_ENGINES


def queue_series(result: Iterable[Mapping[str, Any]],
                 max_series: int = MAX_QUEUE_SERIES) -> tuple[list[dict[str, Any]], int]:
    """The queue query's series as ``{"queue": kind, "labels": {…}, "depth": n}`` (labels as plain
    text, without ``__name__`` and the tag), nearest queue kind first, and how many were left out
    (over ``max_series``)."""
    out: list[dict[str, Any]] = []
    dropped = 0
    for item in result:
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            continue
        v = sample_value(item)
        if v is None:
            continue
        if len(out) >= max_series:
            dropped += 1
            continue
        kind = metric.get(QUEUE_LABEL)
        labels = {plain_text(k, 80): plain_text(val) for k, val in metric.items()
                  if k not in (QUEUE_LABEL, "__name__") and val}
        out.append({"queue": plain_text(kind, 40) if isinstance(kind, str) and kind else PROMQL_QUEUE,
                    "labels": labels, "depth": v})
    # Prometheus' order is its own: sorted, a refresh lists the same queues in the same places
    # (the recorder stores each place as a column; the views keep their order)
    out.sort(key=lambda s: (queue_rank(s["queue"]), s["queue"], sorted(s["labels"].items())))
    return out, dropped


def fleet_depth(series: Iterable[Mapping[str, Any]]) -> float | None:
    """The fleet's queue depth as one number: the queues nearest the client that have series (the
    gateway's, else the endpoint picker's, else one's own query's, else vLLM's waiting), summed.
    None when there is none."""
    by_kind: dict[str, float] = {}
    for s in series:
        by_kind[s["queue"]] = by_kind.get(s["queue"], 0.0) + s["depth"]
    for kind in sorted(by_kind, key=queue_rank):
        return by_kind[kind]
    return None


def queue_rank(kind: str) -> int:
    """Order of precedence of a queue kind: gateway, endpoint picker, any other, vLLM waiting."""
    if kind == "vllm":
        return len(QUEUE_KINDS)
    return QUEUE_KINDS.index(kind) if kind in QUEUE_KINDS else len(QUEUE_KINDS) - 1


def target_key(labels: Mapping[str, str], target_labels: Sequence[str]) -> Key:
    return tuple(str(labels.get(n, "")) for n in target_labels)


def targets_down(result: Iterable[Mapping[str, Any]], target_labels: Sequence[str]) -> tuple[set[Key], int]:
    """(keys of the targets whose last scrape failed — up == 0 —, number of targets)."""
    down: set[Key] = set()
    n = 0
    for item in result:
        metric = item.get("metric") if isinstance(item, Mapping) else None
        if not isinstance(metric, Mapping):
            continue
        n += 1
        if sample_value(item) == 0.0:
            down.add(target_key(metric, target_labels))
    return down, n


def engine_names(rows: Iterable[EngineRow], by: Sequence[str], name_labels: Sequence[str],
                 engine_label: str, model_label: str) -> dict[Key, str]:
    """A unique display name per engine: its pod (or instance), and, where one
    target serves several engines (data parallel, several models), ``/model#engine``."""
    idx = {n: i for i, n in enumerate(by)}

    def base(key: Key) -> str:
        for n in name_labels:
            v = key[idx[n]] if n in idx else ""
            if v:
                return plain_text(v.replace("127.0.0.1", "local").replace("localhost", "local"), 120)
        return "?"

    keys = sorted(r.key for r in rows)
    bases = {k: base(k) for k in keys}
    counts: dict[str, int] = {}
    for b in bases.values():
        counts[b] = counts.get(b, 0) + 1
    out: dict[Key, str] = {}
    taken: set[str] = set()
    def part(k: Key, label: str) -> str:
        return k[idx[label]] if label in idx else ""

    # a target serving several engines: "/model#rank", as a direct scrape names them
    multi = {b for b in counts if counts[b] > 1
             and len({(part(k, model_label), part(k, engine_label)) for k in keys if bases[k] == b}) > 1}
    for k in keys:
        name = bases[k]
        if name in multi:
            name = f"{name}/{plain_text(part(k, model_label), 80) or '?'}#{plain_text(part(k, engine_label), 40) or '0'}"
        unique, n = name, 2
        while unique in taken:
            unique, n = f"{name}~{n}", n + 1
        taken.add(unique)
        out[k] = unique
    return out
