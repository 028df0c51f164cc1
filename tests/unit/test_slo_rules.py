"""SLO verdicts: a fast burn and a week's budget spent, from the SLO report the state carries, through the
real Triage (timing as TIMING)."""

from __future__ import annotations

import dataclasses
import math

from infertop.analysis.slo.report import SloWatch
from infertop.analysis.triage import Triage
from infertop.config import SloClassesConfig

from slo_states import state_at, stats

INF = math.inf


def run(bad_per_tick: float, ticks: int = 40, step: float = 10.0):
    watch, triage = SloWatch(SloClassesConfig()), Triage()
    within = total = 0.0
    verdicts = ()
    for i in range(ticks):
        t = i * step
        state = state_at(t, [stats("chat-0")])
        buckets = {"chat-0": {"e2e": [(5.0, within), (INF, total)]}}
        state = dataclasses.replace(state, slo_report=watch.update(state, buckets))
        verdicts = triage.evaluate(state, t)
        within += 100 - bad_per_tick
        total += 100
    return verdicts, state


def test_a_fast_burn_is_a_critical_verdict_with_the_capacity_answer():
    verdicts, state = run(bad_per_tick=3.0)  # 3 % bad at 99.9 %: 30×
    v = next(v for v in verdicts if v.kind == "slo-fast-burn")
    assert v.subject == "slo:chat" and v.severity == "critical"
    assert "30×" in v.explanation and "windows scaled to the history there is" in v.explanation
    assert [e.signal for e in v.evidence] == ["burn rate, long window", "burn rate, short window"]
    assert any(e.window.startswith("last 6m") for e in v.evidence)  # the window actually used
    # 2 % of a week from 6.5 min of history: no budget verdict
    assert not any(v.kind == "slo-budget-spent" for v in verdicts)


def test_a_healthy_class_raises_nothing():
    verdicts, _ = run(bad_per_tick=0.05)  # 0.05 %: half the budget's rate
    assert not [v for v in verdicts if v.kind.startswith("slo-")]


def test_a_recorded_report_of_the_wrong_shape_says_nothing():
    _, state = run(bad_per_tick=3.0, ticks=3)
    broken = dataclasses.replace(state, slo_report={"classes": [{"name": "chat", "fast_burn_firing": True,
                                                                 "burn": [{"pair": "fast", "long_burn": "x"}]}]})
    assert not [v for v in Triage().evaluate(broken, 100.0) if v.kind.startswith("slo-")]


def test_a_week_budget_mostly_spent_is_its_own_verdict_without_a_fast_burn():
    verdicts, state = run(bad_per_tick=1.0, ticks=25, step=3600.0)  # 10× for a day: 24/168 × 10 = 143 %
    kinds = {v.kind for v in verdicts}
    assert "slo-budget-spent" in kinds and "slo-fast-burn" not in kinds
    chat = state.slo_report["classes"][0]
    assert round(chat["week_budget_used_pct"]) == 143 and chat["week_span_s"] == 24 * 3600
    _, calm = run(bad_per_tick=0.4, ticks=25, step=3600.0)  # 4× for a day: 57 %
    assert not calm.slo_report["classes"][0]["week_budget_spent"]


def test_a_burn_over_seconds_of_history_is_shown_but_no_verdict_until_five_minutes():
    """The demo's first 26 s burned chat's budget "14×" (32 of 2568 requests over 5 s): a burn rate over
    seconds is noise, so it is reported, and it pages only once 5 minutes of history stand behind it."""
    verdicts, state = run(bad_per_tick=30.0, ticks=20, step=10.0)  # 190 s of history
    chat = next(c for c in state.slo_report["classes"] if c["name"] == "chat")
    assert [w["long_burn"] for w in chat["burn"] if w["pair"] == "fast"][0] > 14.4
    assert not chat["fast_burn_firing"] and "slo-fast-burn" not in {v.kind for v in verdicts}
    verdicts, _ = run(bad_per_tick=30.0, ticks=40, step=10.0)  # 390 s
    assert "slo-fast-burn" in {v.kind for v in verdicts}
