"""Healthy control (issue 24 item 6): the demo's fleet under 30 simulated minutes of diurnal load with
bursts raises no alert and no verdict, and the Log gets no alert/cleared line.

The fleet is what ``infertop --demo`` runs (6 engines, seed 7, no hot engine, no throttled GPU),
with the default SLO targets, watched through the real collectors over loopback HTTP on the
simulator's virtual clock (tests/support/sim_fleet_clock.py): 1800 ticks, one a virtual second, from
midnight through noon (20x the night's rate, bursts of 2.4x) of the compressed 30-minute day.
Before the defaults fitted a healthy fleet it showed permanent ITL p95 / E2E p99 alerts on every
engine and alert/cleared pairs at each burst.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from sim_fleet_clock import VirtualFleet

from infertop.sim import SimCluster

DAY_S = 1800
# the verdicts that compare an engine with its own past or its peers (analysis/triage baseline.py)
BASELINE_KINDS = {"long-prompts", "prefix-cache-collapse", "slower-than-peers"}


async def _day():
    sim = SimCluster(6, seed=7, load="diurnal", realtime=False, kubernetes_labels=True, warmup_s=30.0,
                     hot_engine=None, throttle_gpu=None).start()
    fleet = VirtualFleet(sim)
    verdicts: dict[tuple[str, str], float] = {}
    alerts: Counter = Counter()
    lines: list[tuple[float, str]] = []
    peak_rps = 0.0
    try:
        for _ in range(DAY_S):
            tk = await fleet.tick()
            for v in tk.verdicts:
                verdicts.setdefault(v.key, tk.t)
            for a in tk.state.alerts:
                alerts[(a.target, a.text)] += 1
            lines += [(tk.t, line) for line in tk.alert_lines]
            peak_rps = max(peak_rps, tk.state.fleet.requests_per_s or 0.0)
    finally:
        await fleet.aclose()
        sim.stop()
    return verdicts, alerts, lines, peak_rps


@pytest.fixture(scope="module")
def day():
    return asyncio.run(_day())


def test_a_healthy_day_shows_no_alert_and_logs_no_alert_line(day):
    verdicts, alerts, lines, peak_rps = day
    assert peak_rps > 20.0, "the day reached its busy hours"  # 6 engines x 3 req/s at noon, plus bursts
    assert alerts == Counter(), "the Overview's alert list"
    assert lines == [], "alert/cleared lines in the Log"


def test_a_healthy_day_raises_no_verdict(day):
    verdicts = {k: t for k, t in day[0].items() if k[0] not in BASELINE_KINDS}
    assert verdicts == {}


def test_a_healthy_day_raises_no_baseline_or_peer_verdict(day):
    """Before the baselines needed requests behind them: long-prompts on four engines in their first
    2 minutes (baselines of 83-885 prompt tokens/request learnt from warm-up), slower-than-peers on TTFT
    p50 52 ms vs 32 ms, prefix-cache-collapse at night (0 % of a few requests' tokens vs 40 %)."""
    verdicts = {k: t for k, t in day[0].items() if k[0] in BASELINE_KINDS}
    assert verdicts == {}
