"""Hand-made fleet states for triage tests: ``engine`` and ``fleet`` (domain values, no I/O) under
the targets ``SLO``, and ``run`` (each state one tick of a Triage, the verdicts after each)."""

from __future__ import annotations

from infertop.analysis.triage import Triage
from infertop.domain.engine import UP, EngineStats
from infertop.state.fleet_types import FRESH, STALE, EngineState, FleetState, Freshness, Slo


SLO = Slo(ttft_p99_s=2.0, itl_p95_s=0.04, e2e_p99_s=5.0, queue_p99_s=1.0, kv_cache_pct=90.0)


def engine(name="e0", state=UP, fresh=True, **kw) -> EngineState:
    base = dict(model="llama", max_num_seqs=16, running=6.0, waiting=0.0, kv_cache_pct=30.0, requests_per_s=4.0,
                e2e_p95_s=3.0, preemptions_per_s=0.0, window_s=60.0)
    base.update(kw)
    stats = EngineStats(name=name, url=f"http://127.0.0.1:80{name[-1]}0", state=state, **base)
    f = Freshness(FRESH, stats.url, 0.0, 0.0) if fresh else Freshness(STALE, stats.url, 0.0, 9.0, 0.0,
                                                                       "connection refused")
    return EngineState(stats, f)


def fleet(*engines, gpus=(), sources=()) -> FleetState:
    return FleetState(tick=0, taken_at=0.0, refresh_s=1.0, window_s=60.0, slo=SLO, engines=tuple(engines),
                      gpus=tuple(gpus), sources=tuple(sources))


def run(triage: Triage, states, t0: float = 1000.0, step_s: float = 1.0):
    """Each state for one tick; the verdicts after each."""
    return [triage.evaluate(st, t0 + i * step_s) for i, st in enumerate(states)]
