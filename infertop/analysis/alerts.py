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


def alert_kind(a: Alert) -> str:
    """What an alert is about, without its values: "ITL p95", "KV cache", "preempting", "saturated:"."""
    words = a.text.split(" ")
    return " ".join(words[:2]) if a.text.startswith(("TTFT", "ITL", "E2E", "queue", "KV")) else words[0]


ALERT_FOR_S = 5.0  # a warning is shown once it has held this long…
ALERT_CLEAR_S = 10.0  # …and kept (with its last values) until it has been gone this long


class AlertHold:
    """The alert list with a minimum duration and a clear delay for warnings (critical ones — down,
    unreachable — show at once and go at once): an ITL hovering at 41 ms against 40 ms no longer
    blinks in and out of the Overview tick by tick. A warning in its clear delay keeps its last text."""

    def __init__(self, for_s: float = ALERT_FOR_S, clear_for_s: float = ALERT_CLEAR_S) -> None:
        from .triage.debounce import Debouncer  # (triage is a sibling: no cycle at import time)

        self._debounce: Debouncer[tuple[str, str]] = Debouncer(for_s, clear_for_s)
        self._last: dict[tuple[str, str], Alert] = {}

    def apply(self, alerts: Iterable[Alert], now: float) -> list[Alert]:
        out, holding = [], {}
        for a in alerts:
            if a.severity == CRITICAL:
                out.append(a)
            else:
                holding[(a.target, alert_kind(a))] = a
        self._last.update(holding)
        self._debounce.update(holding, now)
        active = self._debounce.active()
        for key in [k for k in self._last if k not in active and k not in holding]:
            del self._last[key]
        out += [self._last[k] for k in active if k in self._last]
        out.sort(key=lambda a: (a.severity != CRITICAL, a.target))
        return out
