"""Active alerts: what is wrong right now, worst first."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..domain.engine import DEGRADED, DOWN, EngineStats
from ..format import pct_human, seconds_human, seconds_over

CRITICAL = "critical"
WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Alert:
    severity: str
    target: str
    text: str


def engine_alerts(stats: Iterable[EngineStats], slo) -> list[Alert]:
    """Alerts for engines against the SLO targets (``config.SloConfig``)."""
    out: list[Alert] = []
    for s in stats:
        if s.state in (DOWN, DEGRADED):
            out.append(Alert(CRITICAL, s.name, f"{s.state}: {s.error or 'no data'}"))
            continue
        checks = (
            ("TTFT p99", s.ttft_p99_s, slo.ttft_p99_s),
            ("ITL p95", s.itl_p95_s, slo.itl_p95_s),
            ("E2E p99", s.e2e_p99_s, slo.e2e_p99_s),
            ("queue p99", s.queue_p99_s, slo.queue_p99_s),
        )
        for label, value, target in checks:
            if value is not None and value > target:
                out.append(Alert(WARNING, s.name, f"{label} {seconds_over(value, target)} > {seconds_human(target)}"))
        if s.kv_cache_pct is not None and s.kv_cache_pct > slo.kv_cache_pct:
            out.append(Alert(WARNING, s.name, f"KV cache {pct_human(s.kv_cache_pct)} > {pct_human(slo.kv_cache_pct)}"))
        if s.preemptions_per_s:
            out.append(Alert(WARNING, s.name, f"preempting {s.preemptions_per_s:.1f}/s (KV cache full)"))
        if s.waiting and s.max_num_seqs and s.running is not None and s.running >= s.max_num_seqs:
            out.append(Alert(WARNING, s.name, f"saturated: {s.running:.0f}/{s.max_num_seqs} running, {s.waiting:.0f} waiting"))
    out.sort(key=lambda a: (a.severity != CRITICAL, a.target))
    return out
