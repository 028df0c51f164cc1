"""Onset after a minimum duration, clear after a quiet spell: conditions that do not flap."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _Track:
    first_seen: float  # the condition has held since (wall clock)
    active_since: float | None = None  # raised at
    last_seen: float = 0.0


class Debouncer(Generic[K]):
    """Per key (a ``K``): raise once the condition has held ``for_s`` seconds; clear once it has not held
    for ``clear_for_s`` seconds (a gap shorter than that keeps the raised state and its onset)."""

    def __init__(self, for_s: float, clear_for_s: float) -> None:
        self.for_s, self.clear_for_s = for_s, clear_for_s
        self._tracks: dict[K, _Track] = {}

    def update(self, holding: Iterable[K], now: float) -> tuple[set[K], set[K]]:
        """Feed the keys whose condition holds at ``now``; returns (raised now, cleared now)."""
        raised: set[K] = set()
        cleared: set[K] = set()
        seen = set(holding)
        for key in seen:
            t = self._tracks.get(key)
            if t is None:
                t = self._tracks[key] = _Track(first_seen=now)
            elif t.active_since is None and now - t.last_seen > self.clear_for_s:
                t.first_seen = now  # it lapsed before it was raised: the minimum duration starts again
            t.last_seen = now
            if t.active_since is None and now - t.first_seen >= self.for_s:
                t.active_since = t.first_seen
                raised.add(key)
        for key in [k for k in self._tracks if k not in seen]:
            t = self._tracks[key]
            if now - t.last_seen >= self.clear_for_s:
                if t.active_since is not None:
                    cleared.add(key)
                del self._tracks[key]
        return raised, cleared

    def active(self) -> dict[K, float]:
        """Raised keys → since when their condition has held."""
        return {k: t.active_since for k, t in self._tracks.items() if t.active_since is not None}

    def is_active(self, key: K) -> bool:
        t = self._tracks.get(key)
        return t is not None and t.active_since is not None
