"""Requests per histogram bucket over an SLO objective's window (days), read from Prometheus.

The local error budget is counted from the flight history (minutes to hours); the objective's window
is 30 days, which only Prometheus holds. This reads, per engine and objective histogram, how many
requests fell into the buckets that bracket each class's target over that window; the arithmetic (a
target between two bounds, budget used) is the analysis layer's, the same as for the local counts.

Queries (bounded; blocking — call from a thread, at a slow cadence):

1. ``count by (le) (<bucket>)``, instant: the bucket bounds the engines export (a few series);
2. ``sum by (<engine labels>, le) (<bucket>{le=~"<lo>|<hi>|+Inf"})``, a range query over the window
   with at most :data:`MAX_POINTS` points: only the bounds around each target and +Inf (three series
   an engine, not twenty).

An engine's increase is the sum of its rises between points; a drop is a restart (counters began
again: the new value is its rise), as the local count does between ticks. ``increase()`` is not used:
it extrapolates to the window's edges, so it would not equal a count of the requests seen. The window
actually used is from the first point Prometheus holds to the last — less than asked when its
retention (or the engines) is shorter, and it says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .connect import connect_prometheus
from .gpu import describe_prom_error
from .fleet_map import EngineRow, Key, engine_key, engine_names
from .fleet_query import HISTOGRAMS, FleetQueries

MAX_POINTS = 240  # points of the range query: 3 h apart over 30 days, 15 s over a burn window's 1 h
MIN_STEP_S = 1.0
MAX_REFINE = 4  # reads over a shorter span at most, each about 1/120 of the last (30 d → 1 s steps)
MAX_LES = 64  # bucket bounds of one histogram beyond this: a misconfigured exporter

Bucket = tuple[float, float]  # (le, requests up to le over the window)


@dataclass(frozen=True, slots=True)
class RangeCounts:
    """One read: engine name → histogram → [(le, requests ≤ le over the window)], the window used."""

    asked_s: float
    start: float | None  # wall clock of the first point Prometheus held (None: nothing held)
    end: float
    step_s: float
    buckets: dict[str, dict[str, list[Bucket]]] = field(default_factory=dict)
    errors: tuple[str, ...] = ()  # one line per histogram whose query failed
    queries: int = 0

    @property
    def used_s(self) -> float:
        return 0.0 if self.start is None else max(0.0, self.end - self.start)


def le_float(text: str) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def bracketing(les: Sequence[float], target_s: float) -> set[float]:
    """The bounds that decide requests within ``target_s``: the one under it, the first at or over
    it (or the largest finite one when the target is past them all), and +Inf."""
    finite = sorted(le for le in les if not math.isinf(le))
    out = {math.inf}
    under = [le for le in finite if le < target_s]
    over = [le for le in finite if le >= target_s]
    if under:
        out.add(under[-1])
    if over:
        out.add(over[0])
    return out


def le_regex(texts: Sequence[str]) -> str:
    """An exact-match regex of le label values, with no backslashes (``.`` and ``+`` as classes)."""
    return "|".join(t.replace(".", "[.]").replace("+", "[+]") for t in sorted(texts))


def rises(values: Sequence[Sequence[Any]]) -> tuple[float, float | None, float | None]:
    """(sum of rises, first t, last t) of a range series; a drop is a restart: the new value rose from 0."""
    total, prev, first, last = 0.0, None, None, None
    for point in values:
        try:
            t, v = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            continue
        if not math.isfinite(v):
            continue
        if prev is not None:
            total += v - prev if v >= prev else v
        else:
            first = t
        prev, last = v, t
    return total, first, last


class PromSloReader:
    """Reads :class:`RangeCounts` from the Prometheus of ``cfg`` (a PrometheusConfig).

    ``names``: engine key (the ``by`` labels' values) → the name the fleet source gave it, so the counts
    join the engines of the SLO report; keys it does not know are named as the fleet source would."""

    def __init__(self, cfg: Any, *, prom: Any = None, names: Callable[[], Mapping[Key, str]] | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.queries = FleetQueries(selector=cfg.selector, by=tuple(cfg.by))
        self.timeout_s = float(cfg.timeout_s)
        self._prom = prom
        self.names = names
        self.wall = wall

    def _connect(self) -> Any:
        if self._prom is None:
            self._prom = connect_prometheus(str(self.cfg.url), self.cfg.token_file, self.timeout_s, method="POST")
        return self._prom

    def read(self, window_s: float, targets: Mapping[str, Sequence[float]], *, end: float | None = None,
             refine: bool = True) -> RangeCounts:
        """Counts over the last ``window_s`` (to ``end``, default now) of each histogram in ``targets``
        (hist → the targets counted by it, seconds). Never raises: a failed query is a line in ``errors``.

        Where the series begin well inside the window (a Prometheus of hours asked for 30 days), the
        coarse points saw only their last step or two: the read is made again over the span they hold
        (``refine``; a burn window is used only when held whole, so it is not refined)."""
        end = self.wall() if end is None else end
        got = self._read(window_s, targets, end)
        queries, span_s = got.queries, window_s
        for _ in range(MAX_REFINE if refine else 0):
            if got.start is None or got.errors:
                break
            held_s = end - got.start + got.step_s  # a step before the first point: the series began after it
            if not (held_s < span_s / 2 and got.step_s > MIN_STEP_S):
                break
            span_s = held_s
            got = self._read(span_s, targets, end)
            queries += got.queries
        return RangeCounts(window_s, got.start, end, got.step_s, got.buckets, got.errors, queries)

    def _read(self, window_s: float, targets: Mapping[str, Sequence[float]], end: float) -> RangeCounts:
        n = min(MAX_POINTS, max(1, math.ceil(window_s / MIN_STEP_S)))
        # on Prometheus' millisecond grid (start, end and step are sent to the ms): n whole steps from
        # start to end, so the last point is the window's end — a step rounded up put it past the end,
        # and the answer's last point was a step early (missing the requests of the last step)
        end_ms = math.floor(end * 1000.0)
        step_ms = max(1, math.floor(window_s * 1000.0 / n))
        start, step_s = (end_ms - n * step_ms) / 1000.0, step_ms / 1000.0
        query_end = end_ms / 1000.0
        out: dict[str, dict[str, list[Bucket]]] = {}
        errors: list[str] = []
        first_t: float | None = None
        sent = 0
        names = dict(self.names()) if self.names is not None else {}
        by = self.queries.by
        try:
            prom = self._connect()
        except Exception as exc:  # noqa: BLE001 — shown in place, never raised
            return RangeCounts(window_s, None, end, step_s, {}, (describe_prom_error(exc, self.timeout_s),), 0)
        for hist, hist_targets in targets.items():
            try:
                les_text = self._les(prom, hist, end)
                sent += 1
                les = {t: v for t in les_text if (v := le_float(t)) is not None}
                wanted: set[float] = set()
                for target in hist_targets:
                    wanted |= bracketing(list(les.values()), target)
                texts = [t for t, v in les.items() if v in wanted]
                if not texts:
                    continue
                result = prom.custom_query_range(
                    self._buckets_expr(hist, le_regex(texts)),
                    start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(query_end, UTC),
                    step=f"{step_s:.3f}", timeout=self.timeout_s)
                sent += 1
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{hist}: {describe_prom_error(exc, self.timeout_s)}")
                continue
            rows: dict[Key, EngineRow] = {}
            got: dict[Key, list[Bucket]] = {}
            for item in result:
                metric, values = item["metric"], item["values"]
                le = le_float(metric.get("le", ""))
                if le is None:
                    continue
                key = engine_key(metric, by)
                rows.setdefault(key, EngineRow(key, {n: str(metric.get(n, "")) for n in by}))
                rise, t0, _ = rises(values)
                if t0 is not None:
                    first_t = t0 if first_t is None else min(first_t, t0)
                got.setdefault(key, []).append((le, rise))
            unknown = [r for k, r in rows.items() if k not in names]
            if unknown:
                named = engine_names(rows.values(), by, self.cfg.name_labels, self.cfg.engine_label,
                                     self.cfg.model_label)
                for r in unknown:
                    names[r.key] = named[r.key]
            for key, buckets in got.items():
                out.setdefault(names[key], {})[hist] = sorted(buckets)
        return RangeCounts(window_s, first_t, end, step_s, out, tuple(errors), sent)

    def _les(self, prom: Any, hist: str, at: float) -> list[str]:
        expr = self.queries._first([f"count by (le) ({self.queries.sel(n)})" for n in HISTOGRAMS[hist]])
        result = prom.custom_query(expr, params={"time": f"{at:.3f}"}, timeout=self.timeout_s)
        les = sorted({str(item["metric"].get("le", "")) for item in result} - {""})
        return les[:MAX_LES] if "+Inf" not in les[MAX_LES:] else [*les[:MAX_LES - 1], "+Inf"]

    def _buckets_expr(self, hist: str, le_re: str) -> str:
        by = ", ".join((*self.queries.by, "le"))
        sel = self.queries.selector
        parts = []
        for name in HISTOGRAMS[hist]:
            matchers = ", ".join(m for m in (sel, f'le=~"{le_re}"') if m)
            parts.append(f"sum by ({by}) ({name}{{{matchers}}})")
        return self.queries._first(parts)
