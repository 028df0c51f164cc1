"""Fleet states for the SLO watch's tests: ``stats`` (an engine's statistics, healthy by default)
and ``state_at`` (those engines, fresh, in one state at time t)."""

from __future__ import annotations

from infertop.domain.engine import EngineStats
from infertop.state.fleet_types import EngineState, FleetState, Freshness, Slo


def state_at(t: float, engines: list[EngineStats]) -> FleetState:
    return FleetState(tick=int(t), taken_at=t, refresh_s=1.0, window_s=60.0, slo=Slo(2, 0.1, 60, 1, 90),
                      engines=tuple(EngineState(s, Freshness("fresh")) for s in engines))


def stats(name: str, model: str = "m", **kw) -> EngineStats:
    base = dict(state="up", requests_per_s=5.0, running=8.0, generation_tokens_per_s=500.0, ttft_p50_s=0.2,
                ttft_p99_s=0.8, itl_p50_s=0.02, itl_p95_s=0.03, e2e_p99_s=3.0, queue_p99_s=0.1, max_num_seqs=16)
    base.update(kw)
    return EngineStats(name, "http://127.0.0.1:1", model=model, **base)
