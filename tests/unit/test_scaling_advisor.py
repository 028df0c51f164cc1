"""The scaling policy over recorded input traces, with a fake clock (the time of each step).

Each trace is a list of steps ``(t, current replicas, queue depth, p99 s)``
and, per step, the decision expected: action, rule, desired replicas and the
one-line reason. Policy: targets queue depth 5 and P99 2 s, bounds 1..8,
tolerance ±10 %, cooldown 60 s, scale-up window 30 s, scale-down 300 s.
"""

from __future__ import annotations

import pytest

from infertop.analysis.scaling import (
    APPLIED,
    AUTO,
    COOLDOWN,
    MAX,
    MIN,
    NONE,
    RECOMMEND,
    RECOMMENDED,
    REFUSED,
    STABILISATION,
    STALE,
    TOLERANCE,
    DecisionRecord,
    Inputs,
    Policy,
    ScalingPolicy,
    Signal,
)

POLICY = Policy(max_replicas=8)
W = "Deployment/default/vllm"


def inputs(cur, q, p99, *, q_status="fresh", p_status="fresh", age=1.0, why=None, lo=None, hi=None,
           current_why=None) -> Inputs:
    return Inputs(W, cur, Signal("queue depth", q, POLICY.target_queue_depth, status=q_status, age_s=age, why=why),
                  Signal("P99", p99, POLICY.target_p99_s, "s", status=p_status, age_s=age, why=why), lo, hi,
                  current_why=current_why)


def replay(steps, mode=RECOMMEND, policy=POLICY) -> list[DecisionRecord]:
    pol = ScalingPolicy(policy)
    return [pol.evaluate(inputs(*s[1:4], **(s[4] if len(s) > 4 else {})), s[0], mode=mode) for s in steps]


Q = "queue depth {q} {qo} 5, P99 {p} ms {po} 2000 ms"


def sig(q: str, qo: str, p: int, po: str) -> str:
    return Q.format(q=q, qo=qo, p=p, po=po)


TRACES = {
    # steady, then a burst at t=30: the scale-up waits until the window holds no lower wish (t=50)
    "burst": (
        [(0, 2, 4.0, 1.5), (10, 2, 4.0, 1.5), (20, 2, 4.0, 1.5), (30, 2, 12.3, 2.45), (40, 2, 12.3, 2.45),
         (50, 2, 12.3, 2.45), (60, 2, 12.3, 2.45)],
        [(NONE, "", 2, "2 → 2: " + sig("4.0", "<", 1500, "<")),
         (NONE, "", 2, "2 → 2: " + sig("4.0", "<", 1500, "<")),
         (NONE, "", 2, "2 → 2: " + sig("4.0", "<", 1500, "<")),
         (NONE, STABILISATION, 2, "2 → 2: wants 5, held by the scale-up window 30 s (20 s left): "
          + sig("12.3", ">", 2450, ">")),
         (NONE, STABILISATION, 2, "2 → 2: wants 5, held by the scale-up window 30 s (10 s left): "
          + sig("12.3", ">", 2450, ">")),
         (RECOMMENDED, "", 5, "2 → 5: " + sig("12.3", ">", 2450, ">")),
         (RECOMMENDED, "", 5, "2 → 5: " + sig("12.3", ">", 2450, ">"))],
    ),
    # queue creeps up: inside ±10 % nothing moves; beyond it the scale-up goes to the least recent wish
    "slow ramp": (
        [(0, 4, 5.0, 1.0), (10, 4, 5.3, 1.0), (20, 4, 5.5, 1.0), (30, 4, 6.0, 1.0), (40, 4, 6.5, 1.0),
         (50, 4, 7.0, 1.0), (60, 4, 7.5, 1.0)],
        [(NONE, TOLERANCE, 4, "4 → 4: within ±10 % (×1.00): " + sig("5.0", "=", 1000, "<")),
         (NONE, TOLERANCE, 4, "4 → 4: within ±10 % (×1.06): " + sig("5.3", ">", 1000, "<")),
         (NONE, TOLERANCE, 4, "4 → 4: within ±10 % (×1.10): " + sig("5.5", ">", 1000, "<")),
         (NONE, STABILISATION, 4, "4 → 4: wants 5, held by the scale-up window 30 s (20 s left): "
          + sig("6.0", ">", 1000, "<")),
         # the 5 wanted at t=30 is in the window until t=60
         (NONE, STABILISATION, 4, "4 → 4: wants 6, held by the scale-up window 30 s (20 s left): "
          + sig("6.5", ">", 1000, "<")),
         # the window (t 30..50) wanted 5, 6, 6: up to its least, 5
         (RECOMMENDED, STABILISATION, 5, "4 → 5: wants 6, held by the scale-up window 30 s (10 s left): "
          + sig("7.0", ">", 1000, "<")),
         (RECOMMENDED, "", 6, "4 → 6: " + sig("7.5", ">", 1000, "<"))],
    ),
    # queue flapping around the target: every wish is held back by the other window, replicas stay 4
    "oscillation": (
        [(t, 4, 8.0 if i % 2 == 0 else 2.0, 1.0) for i, t in enumerate(range(0, 100, 20))],
        [(NONE, STABILISATION, 4, "4 → 4: wants 7, held by the scale-up window 30 s (30 s left): "
          + sig("8.0", ">", 1000, "<")),
         (NONE, STABILISATION, 4, "4 → 4: wants 2, held by the scale-down window 300 s (280 s left): "
          + sig("2.0", "<", 1000, "<")),
         (NONE, STABILISATION, 4, "4 → 4: wants 7, held by the scale-up window 30 s (10 s left): "
          + sig("8.0", ">", 1000, "<")),
         (NONE, STABILISATION, 4, "4 → 4: wants 2, held by the scale-down window 300 s (280 s left): "
          + sig("2.0", "<", 1000, "<")),
         (NONE, STABILISATION, 4, "4 → 4: wants 7, held by the scale-up window 30 s (10 s left): "
          + sig("8.0", ">", 1000, "<"))],
    ),
    # stale or missing inputs: the guard refuses; a scale-up on the one input there is still allowed
    "stale data": (
        [(0, 2, 12.0, 2.5, {"p_status": "stale", "why": "vllm-0: connection refused"}),
         (10, 2, 12.0, 2.5, {"age": 20.0}),
         (20, 2, 1.0, None, {"why": "no request finished in the window"}),
         (30, 2, None, None, {"why": "no engine of this workload is watched"}),
         (40, None, 12.0, 2.5),
         (50, 2, 12.0, 2.5, {"current_why": "stale (cluster reads failing)"}),
         (60, 2, 12.0, None, {"why": "no request finished in the window"})],
        [(REFUSED, STALE, 2, "refused: P99 stale (vllm-0: connection refused)"),
         (REFUSED, STALE, 2, "refused: queue depth stale (20 s old > 15 s), P99 stale (20 s old > 15 s)"),
         (REFUSED, STALE, 2, "refused: P99 missing (no request finished in the window): "
                             "no scale-down on partial inputs"),
         (REFUSED, STALE, 2, "refused: queue depth missing (no engine of this workload is watched), "
                             "P99 missing (no engine of this workload is watched)"),
         (REFUSED, STALE, None, "refused: current replicas unknown"),
         (REFUSED, STALE, 2, "refused: current replicas stale (cluster reads failing)"),
         # only the seed (t=0, 2 replicas) is in the scale-up window until t=30: now it has passed
         (RECOMMENDED, "", 5, "2 → 5: queue depth 12.0 > 5, P99 n/a")],
    ),
    # at the bound: the formula says more, max says no; below the bound min lifts it
    "at max": (
        [(0, 8, 20.0, 3.0), (40, 8, 20.0, 3.0), (80, 6, 20.0, 3.0), (140, 6, 20.0, 3.0)],
        [(NONE, MAX, 8, "8 → 8: at max 8 (formula 32): " + sig("20.0", ">", 3000, ">")),
         (NONE, MAX, 8, "8 → 8: at max 8 (formula 32): " + sig("20.0", ">", 3000, ">")),
         # replicas went 8 → 6 (someone scaled): the cooldown counts from now
         (NONE, COOLDOWN, 6, "6 → 6: cooldown 60 s left (wants 8): " + sig("20.0", ">", 3000, ">")),
         (RECOMMENDED, MAX, 8, "6 → 8 (max 8; formula 24): " + sig("20.0", ">", 3000, ">"))],
    ),
    "within tolerance": (
        [(0, 3, 5.4, 1.9), (10, 3, 4.6, 2.1), (20, 3, 4.5, 1.8)],
        [(NONE, TOLERANCE, 3, "3 → 3: within ±10 % (×1.08): " + sig("5.4", ">", 1900, "<")),
         (NONE, TOLERANCE, 3, "3 → 3: within ±10 % (×1.05): " + sig("4.6", "<", 2100, ">")),
         (NONE, TOLERANCE, 3, "3 → 3: within ±10 % (×0.90): " + sig("4.5", "<", 1800, "<"))],
    ),
}


@pytest.mark.parametrize("name", list(TRACES))
def test_trace_decisions_and_reasons(name):
    steps, expected = TRACES[name]
    got = [(r.action, r.rule, r.desired, r.reason) for r in replay(steps)]
    assert got == expected


def test_min_bound_and_scale_down_only_after_its_window():
    steps = [(0, 4, 0.5, 0.2)] + [(t, 4, 0.5, 0.2) for t in (60, 120, 299)] + [(300, 4, 0.5, 0.2)]
    got = replay(steps)
    assert [r.action for r in got] == [NONE, NONE, NONE, NONE, RECOMMENDED]
    assert got[0].reason == ("4 → 4: wants 1, held by the scale-down window 300 s (300 s left): "
                             "queue depth 0.5 < 5, P99 200 ms < 2000 ms")
    assert got[3].hold_left_s == pytest.approx(1.0)
    assert got[4].reason == "4 → 1: queue depth 0.5 < 5, P99 200 ms < 2000 ms"
    # an HPA's bounds replace the config's: min 2
    pol = ScalingPolicy(POLICY)
    pol.evaluate(inputs(4, 0.5, 0.2, lo=2, hi=6), 0)
    r = pol.evaluate(inputs(4, 0.5, 0.2, lo=2, hi=6), 300)
    assert (r.action, r.rule, r.desired, r.min_replicas, r.max_replicas) == (RECOMMENDED, MIN, 2, 2, 6)
    assert r.reason == "4 → 2 (min 2; formula 1): queue depth 0.5 < 5, P99 200 ms < 2000 ms"


def test_auto_applies_then_cools_down():
    steps = [(0, 2, 12.3, 2.45), (30, 2, 12.3, 2.45), (40, 2, 12.3, 2.45), (50, 5, 30.0, 4.0), (95, 5, 30.0, 4.0),
             (110, 5, 30.0, 4.0)]
    got = replay(steps, mode=AUTO)
    assert [(r.action, r.rule, r.desired) for r in got] == [
        (NONE, STABILISATION, 2), (APPLIED, "", 5), (NONE, COOLDOWN, 2), (NONE, STABILISATION, 5),
        (NONE, COOLDOWN, 5), (APPLIED, MAX, 8)]
    assert got[1].reason == "2 → 5: queue depth 12.3 > 5, P99 2450 ms > 2000 ms"
    assert got[2].reason == "2 → 2: cooldown 50 s left (wants 5): queue depth 12.3 > 5, P99 2450 ms > 2000 ms"
    # the count changed at t=50 (the apply landed): 60 s from then
    assert got[4].hold_left_s == pytest.approx(15.0)
    assert got[5].reason == "5 → 8 (max 8; formula 30): queue depth 30.0 > 5, P99 4000 ms > 2000 ms"


def test_auto_paused_by_the_kill_switch_only_recommends():
    pol = ScalingPolicy(POLICY)
    pol.evaluate(inputs(2, 12.3, 2.45), 0, mode=AUTO, paused=True)
    r = pol.evaluate(inputs(2, 12.3, 2.45), 30, mode=AUTO, paused=True)
    assert r.action == RECOMMENDED and r.desired == 5
    assert r.reason.endswith("(auto paused: kill switch)")
    assert pol.cooldown_left_s(W, 31) is None  # nothing was applied: no cooldown


def test_record_round_trips_as_plain_data():
    import json

    (r,) = replay([(0, 2, 12.3, None, {"why": "no request finished in the window"})])
    doc = json.loads(json.dumps(r.to_doc(), allow_nan=False))
    assert DecisionRecord.from_doc(doc) == r
    assert doc["inputs"][1] == {"name": "P99", "value": None, "target": 2.0, "unit": "s", "status": "fresh",
                                "age_s": 1.0, "why": "no request finished in the window"}
