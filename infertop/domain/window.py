"""Sliding window of reset-corrected counter snapshots for one engine.

Each scrape adds a point: ``{series_key: cumulative value}``. Counter
resets are folded in as they arrive — when a value goes down, the value
before the reset is added to that series' offset — which is exactly
Prometheus' reset handling, but O(series) per scrape instead of
O(series × points) per query. Increases over the window are then
``last - first`` of the corrected values.

One bad sample cannot poison the window: a value that is not a plausible
counter (NaN, ±Inf, negative, above :data:`MAX_COUNTER`) is dropped and the
series keeps its previous corrected value for that point; a jump larger than
:data:`MAX_STEP` in one scrape is treated like a reset (the jump is not counted).

A decrease is a reset only when it looks like one: the new value below
:data:`RESET_BELOW` of the last. A smaller dip (150 in 1e9: a scrape race, an
exporter summing its shards in another order) is a glitch, not a restart: the
sample is dropped (counted in ``dropped``) and the series waits for a value at
or above its last one — read as a reset, it would count the whole 1e9 again
(1.5e8 tokens/s for a window).

:meth:`CounterWindow.restart` starts some series afresh (a histogram whose
bucket bounds changed): older points take their newest values, so nothing
before the restart is counted.
"""

from __future__ import annotations

from collections import deque
from operator import le, sub

MAX_COUNTER = 1e15  # no vLLM counter gets here (1e15 tokens at 1e6 tokens/s is 30 years)
MAX_STEP = 1e12  # an increase this large between two scrapes is a broken exporter, not traffic
BUCKETS_RESTARTED = "histogram buckets changed: window restarted"  # what a restart() of a histogram is called
RESET_BELOW = 0.5  # a counter that falls below this fraction of its last value was reset; above, a glitch


class CounterWindow:
    """Corrected cumulative counters over the last ``window_s`` seconds."""

    __slots__ = ("window_s", "_points", "_last_raw", "_last_corrected", "_offset", "resets", "dropped", "_memo",
                 "restarts", "restarted")

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._points: deque[tuple[float, dict[str, float]]] = deque()
        self._last_raw: dict[str, float] = {}
        self._last_corrected: dict[str, float] = {}
        self._offset: dict[str, float] = {}
        self.resets = 0  # number of series resets seen (engine restarts)
        self.dropped = 0  # samples dropped as implausible
        self._memo: tuple[object, object, dict] | None = None  # (first point, last point, values derived from them)
        self.restarts = 0  # calls of restart() that restarted something
        self.restarted: dict[str, float] = {}  # key prefix → time of its last restart (the caller clears it)

    def add(self, t_s: float, raw: dict[str, float]) -> None:
        """Record one scrape taken at monotonic time ``t_s``."""
        if not self._offset and self._last_raw and self._steady(raw):
            # the usual scrape: no series ever reset, the same series in the same order, each one up by a
            # plausible step: the corrected values are the raw ones (checked in C, not once per series)
            self._last_raw, self._last_corrected = dict(raw), dict(raw)
            self._append(t_s, dict(raw))
            return
        last_raw, offset, last_corrected = self._last_raw, self._offset, self._last_corrected
        corrected: dict[str, float] = {}
        for key, v in raw.items():
            prev = last_raw.get(key)
            # ``not 0 <= v <= MAX`` is also true for NaN
            if not 0.0 <= v <= MAX_COUNTER:
                self.dropped += 1
                if key in last_corrected:
                    corrected[key] = last_corrected[key]
                continue
            off = offset.get(key, 0.0)
            if prev is not None:
                if v < prev and v >= prev * RESET_BELOW:
                    # a dip, not a restart: drop it, keep the last value as the mark to climb back to
                    self.dropped += 1
                    if key in last_corrected:
                        corrected[key] = last_corrected[key]
                    continue
                if v < prev:
                    off += prev
                    offset[key] = off
                    self.resets += 1
                elif v - prev > MAX_STEP:
                    off -= v - prev
                    offset[key] = off
                    self.resets += 1
            last_raw[key] = v
            c = v + off
            before = last_corrected.get(key)
            if before is not None and c < before:
                c = before  # float rounding of a large offset must not make a counter go down
            corrected[key] = last_corrected[key] = c
        self._append(t_s, corrected)

    def _steady(self, raw: dict[str, float]) -> bool:
        """Every series of the last scrape, in its order, none new, each within ``[last, last + MAX_STEP]``
        and at most MAX_COUNTER (false for NaN: it compares false)."""
        last_raw = self._last_raw
        if len(raw) != len(last_raw) or list(raw) != list(last_raw):
            return False
        values, before = list(raw.values()), list(last_raw.values())
        return (all(map(le, before, values)) and max(values) <= MAX_COUNTER
                and max(map(sub, values, before)) <= MAX_STEP)

    def _append(self, t_s: float, corrected: dict[str, float]) -> None:
        points = self._points
        points.append((t_s, corrected))
        cutoff = t_s - self.window_s
        # Keep one point at or before the cutoff so the window is fully covered.
        while len(points) > 2 and points[1][0] <= cutoff:
            points.popleft()

    def restart(self, prefixes: tuple[str, ...], t_s: float) -> None:
        """Start the series whose keys begin with one of ``prefixes`` afresh, from the last point:
        every older point takes the last point's values for them (no increase before it) and loses
        those the last point lacks, and their reset memory goes."""
        points = self._points
        if not prefixes or not points:
            return
        last = points[-1][1]
        fresh = {k: v for k, v in last.items() if k.startswith(prefixes)}
        for _, p in list(points)[:-1]:
            for k in [k for k in p if k.startswith(prefixes) and k not in fresh]:
                del p[k]
            # the last point's key order, so both edges keep one layout (the buckets' fast path)
            rebuilt = {k: fresh[k] if k in fresh else p[k] for k in last if k in fresh or k in p}
            rebuilt.update((k, v) for k, v in p.items() if k not in rebuilt)
            p.clear()
            p.update(rebuilt)
        for table in (self._last_raw, self._last_corrected, self._offset):
            for k in [k for k in table if k.startswith(prefixes) and k not in fresh]:
                del table[k]
        lr = self._last_raw  # in the last point's order too, so the next steady scrape takes the shortcut
        self._last_raw = {k: lr[k] for k in last if k in lr}
        self._last_raw.update((k, v) for k, v in lr.items() if k not in self._last_raw)
        self._memo = None  # the points changed in place
        self.restarts += 1
        for prefix in prefixes:
            self.restarted[prefix] = t_s

    def __len__(self) -> int:
        return len(self._points)

    @property
    def span_s(self) -> float:
        if len(self._points) < 2:
            return 0.0
        return self._points[-1][0] - self._points[0][0]

    def edges(self) -> tuple[tuple[float, dict[str, float]], tuple[float, dict[str, float]]] | None:
        """(first, last) points of the window, or None with fewer than two."""
        if len(self._points) < 2:
            return None
        return self._points[0], self._points[-1]

    def memo(self) -> dict:
        """A dict for values derived from the current edges, emptied when they move: what the
        poll derived (bucket increases) is reused by every tick until the next poll."""
        points = self._points
        first, last = (points[0], points[-1]) if points else (None, None)
        memo = self._memo
        if memo is None or memo[0] is not first or memo[1] is not last:
            memo = self._memo = (first, last, {})
        return memo[2]

    def rate(self, key: str) -> float | None:
        """Per-second increase of ``key`` over the window."""
        e = self.edges()
        if e is None:
            return None
        (t0, first), (t1, last) = e
        if key not in first or key not in last or t1 <= t0:
            return None
        return (last[key] - first[key]) / (t1 - t0)

    def increase(self, key: str) -> float | None:
        e = self.edges()
        if e is None:
            return None
        (_, first), (_, last) = e
        if key not in first or key not in last:
            return None
        return last[key] - first[key]
