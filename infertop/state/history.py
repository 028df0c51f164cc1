"""Bounded history for sparklines: one ring buffer per series, grown once.

Values are stored as float32 (``array('f')``) — sparklines need no more
precision — and a missing value is NaN, so a gap stays a gap. A value that
float32 cannot hold (NaN, ±Inf, beyond ±3.4e38) is stored as a gap too, so
no sparkline ever sees an infinity.

Memory is bounded twice: a ring starts small (a series seen once costs
``FIRST_SLOTS`` values, not an hour) and, once it outlives them, takes its
whole capacity in one step, so a console's memory stops growing within its
first minute instead of doubling for an hour (at 64 engines, 840 series: 12
MiB reached at ~35 minutes); and the store as a whole keeps at most
``max_bytes`` of samples and ``max_series`` series, evicting the entities
written least recently.
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict

FLOAT32_MAX = 3.4028234663852886e38
FIRST_SLOTS = 32  # values before a ring takes its whole capacity: 32 s at a 1 s refresh
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_SERIES = 50_000
# Python objects per ring (the Ring, its array header, dict entries): counted
# against max_bytes so that many tiny rings are bounded too.
RING_OVERHEAD_BYTES = 240


def storable(value: float | None) -> float:
    """``value`` as float32 can hold it; NaN (a gap) when it cannot."""
    if value is None:
        return math.nan
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return v if -FLOAT32_MAX <= v <= FLOAT32_MAX else math.nan


class Ring:
    """Float ring buffer of at most ``capacity`` values: ``FIRST_SLOTS`` of them, then all."""

    __slots__ = ("_buf", "_head", "_len", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._buf = array("f")
        self._head = 0  # next write position once the buffer is full size
        self._len = 0

    def append(self, value: float | None) -> int:
        """Add one value; returns how many bytes the buffer grew by."""
        v = storable(value)
        buf = self._buf
        if len(buf) < self.capacity:
            # Still growing: the buffer holds exactly the values so far, oldest first.
            before = buf.buffer_info()[1] * buf.itemsize
            if self._len == len(buf):
                target = min(self.capacity, FIRST_SLOTS) if not buf else self.capacity
                buf.extend(array("f", bytes(4 * (target - len(buf)))))
            buf[self._len] = v
            self._len += 1
            self._head = self._len % self.capacity
            return buf.buffer_info()[1] * buf.itemsize - before
        buf[self._head] = v
        self._head = (self._head + 1) % self.capacity
        if self._len < self.capacity:
            self._len += 1
        return 0

    def __len__(self) -> int:
        return self._len

    def last(self, n: int | None = None) -> list[float]:
        """The newest ``n`` values, oldest first."""
        n = self._len if n is None else max(0, min(n, self._len))
        if n == 0:
            return []
        if len(self._buf) < self.capacity:  # not wrapped yet
            return self._buf[self._len - n : self._len].tolist()
        start = (self._head - n) % self.capacity
        if start + n <= self.capacity:
            return self._buf[start : start + n].tolist()
        return self._buf[start:].tolist() + self._buf[: (start + n) - self.capacity].tolist()

    @property
    def nbytes(self) -> int:
        return self._buf.itemsize * len(self._buf)


class HistoryStore:
    """Rings keyed by (entity, metric), created on first write, bounded in total."""

    def __init__(self, capacity: int = 3600, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_series: int = DEFAULT_MAX_SERIES) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_series = max_series
        self._rings: dict[tuple[str, str], Ring] = {}
        # entity → its metrics, least recently written first
        self._entities: OrderedDict[str, list[str]] = OrderedDict()
        self._nbytes = 0
        self.evicted = 0  # entities dropped to stay within the bounds

    def record(self, entity: str, metric: str, value: float | None) -> None:
        key = (entity, metric)
        ring = self._rings.get(key)
        if ring is None:
            ring = self._rings[key] = Ring(self.capacity)
            metrics = self._entities.get(entity)
            if metrics is None:
                metrics = self._entities[entity] = []
            metrics.append(metric)
        self._entities.move_to_end(entity)
        grew = ring.append(value)
        if grew:
            self._nbytes += grew
            self._evict(entity)
        elif len(self._rings) > self.max_series:
            self._evict(entity)

    def _evict(self, keep: str) -> None:
        """Drop the least recently written entities (never ``keep``) until within bounds."""
        while (self.footprint_bytes > self.max_bytes or len(self._rings) > self.max_series) and len(self._entities) > 1:
            oldest = next(iter(self._entities))
            if oldest == keep:
                break
            self.forget(oldest)
            self.evicted += 1

    def series(self, entity: str, metric: str, n: int | None = None) -> list[float]:
        ring = self._rings.get((entity, metric))
        return [] if ring is None else ring.last(n)

    def forget(self, entity: str) -> None:
        for metric in self._entities.pop(entity, ()):
            ring = self._rings.pop((entity, metric), None)
            if ring is not None:
                self._nbytes -= ring.nbytes

    def __len__(self) -> int:
        return len(self._rings)

    @property
    def nbytes(self) -> int:
        """Bytes of samples held."""
        return self._nbytes

    @property
    def footprint_bytes(self) -> int:
        """Samples plus a fixed per-series overhead: what ``max_bytes`` bounds."""
        return self._nbytes + RING_OVERHEAD_BYTES * len(self._rings)
