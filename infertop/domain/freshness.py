"""How current a group of values is: fresh, stale (the last good values, since when, why) or missing."""

from __future__ import annotations

from dataclasses import dataclass

FRESH, STALE, MISSING = "fresh", "stale", "missing"


@dataclass(frozen=True, slots=True)
class Freshness:
    """How current a group of values is."""

    status: str = MISSING  # fresh, stale, missing
    source: str = ""  # URL, "nvml", a dcgm URL, a Kubernetes context
    sampled_at: float | None = None  # wall clock of the values shown
    age_s: float | None = None  # seconds between sampled_at and the tick
    since: float | None = None  # wall clock: stale or missing since
    reason: str | None = None  # why stale or missing

    @property
    def fresh(self) -> bool:
        return self.status == FRESH
