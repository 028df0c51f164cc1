"""Bounded history for sparklines: one fixed-size ring buffer per series.

Memory grows with series × capacity, never with uptime. Values are
stored as float32 (``array('f')``) — sparklines need no more precision —
and a missing value is NaN, so a gap stays a gap.
"""

from __future__ import annotations

import math
from array import array


class Ring:
    """Fixed-capacity float ring buffer."""

    __slots__ = ("_buf", "_head", "_len", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._buf = array("f", bytes(4 * capacity))
        self._head = 0  # next write position
        self._len = 0

    def append(self, value: float | None) -> None:
        self._buf[self._head] = math.nan if value is None else value
        self._head = (self._head + 1) % self.capacity
        if self._len < self.capacity:
            self._len += 1

    def __len__(self) -> int:
        return self._len

    def last(self, n: int | None = None) -> list[float]:
        """The newest ``n`` values, oldest first."""
        n = self._len if n is None else min(n, self._len)
        start = (self._head - n) % self.capacity
        if start + n <= self.capacity:
            return self._buf[start : start + n].tolist()
        return self._buf[start:].tolist() + self._buf[: (start + n) - self.capacity].tolist()

    @property
    def nbytes(self) -> int:
        return self._buf.itemsize * self.capacity


class HistoryStore:
    """Ring buffers keyed by (entity, metric), created on first write."""

    def __init__(self, capacity: int = 3600) -> None:
        self.capacity = capacity
        self._rings: dict[tuple[str, str], Ring] = {}

    def record(self, entity: str, metric: str, value: float | None) -> None:
        ring = self._rings.get((entity, metric))
        if ring is None:
            ring = self._rings[(entity, metric)] = Ring(self.capacity)
        ring.append(value)

    def series(self, entity: str, metric: str, n: int | None = None) -> list[float]:
        ring = self._rings.get((entity, metric))
        return [] if ring is None else ring.last(n)

    def forget(self, entity: str) -> None:
        for key in [k for k in self._rings if k[0] == entity]:
            del self._rings[key]

    def __len__(self) -> int:
        return len(self._rings)

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self._rings.values())
