"""Health of one data source (an engine endpoint, NVML, a dcgm exporter...)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """What the status bar shows for one source."""

    name: str
    kind: str  # "vllm", "dcgm", "nvml", "prometheus", "kube"
    ok: bool
    last_ok_at: float | None = None  # monotonic seconds
    last_error: str | None = None
    last_error_at: float | None = None
    latency_s: float | None = None
    consecutive_failures: int = 0
    next_try_at: float | None = None  # when backing off

    def age_s(self, now: float) -> float | None:
        """Seconds since the last successful read."""
        return None if self.last_ok_at is None else max(0.0, now - self.last_ok_at)
