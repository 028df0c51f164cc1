"""Sparkline history recorded from the fleet state, one sample per tick.

Recording from :class:`~infertop.state.fleet_types.FleetState` (not from each
poll) is what makes a sparkline's last point equal the number beside it,
and what lets replay rebuild the same sparklines from a recording.
"""

from __future__ import annotations

from .fleet_types import FleetState
from .history import HistoryStore

FLEET = "__fleet__"
FLEET_FIELDS = ("running", "waiting", "generation_tokens_per_s", "requests_per_s", "ttft_p99_s", "itl_p95_s",
                "e2e_p99_s", "kv_cache_pct_max")
ENGINE_FIELDS = ("running", "waiting", "kv_cache_pct", "generation_tokens_per_s", "prompt_tokens_per_s",
                 "requests_per_s", "ttft_p99_s", "itl_p95_s", "e2e_p99_s")


def record_state(history: HistoryStore, state: FleetState) -> None:
    """Append this tick's values: the fleet line and each engine (a gap while
    it is not fresh). GPU rows are recorded by the GPUs pane's own ids."""
    f = state.fleet
    for name in FLEET_FIELDS:
        history.record(FLEET, name, getattr(f, name))
    for e in state.engines:
        s = e.stats
        for name in ENGINE_FIELDS:
            history.record(s.name, name, getattr(s, name) if e.fresh else None)
