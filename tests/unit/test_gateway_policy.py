"""The gateway's policy, pure: a fake clock, no I/O."""

from __future__ import annotations

import pytest

from infertop.gateway.policy import ClassState, EngineState, Pending, Policy, PolicyError, vllm_priority


def make(classes=None, engines=None, **kw) -> Policy:
    classes = classes or [ClassState("realtime", 100, 8, 2.0), ClassState("batch", 50, 2, 30.0),
                          ClassState("background", 10, 1, 120.0)]
    engines = engines or [EngineState("a", "http://a", 4)]
    kw.setdefault("default_class", "batch")
    return Policy(classes, engines, **kw)


def add(pol: Policy, cls: str, now: float = 0.0, fid: str = "", n: int = 1) -> list[Pending]:
    out = []
    for _ in range(n):
        p = Pending(origin=pol.class_of(cls), fairness_id=fid, arrived_at=now)
        assert pol.enqueue(p, now)
        out.append(p)
    return out


def run_saturated(pol: Policy, n: int, now: float = 0.0) -> list[str]:
    """Dispatch ``n`` requests one slot at a time (each finishes before the next leaves)."""
    order = []
    for _ in range(n):
        got = pol.dispatch(now)
        assert got, "nothing dispatched while requests are queued and a slot is free"
        for p, e in got:
            order.append(p.dispatched_cls)
            pol.finish(p, e.name)
    return order


def test_weights_3_to_1_share_and_live_change():
    pol = make([ClassState("gold", 100, 3, 60), ClassState("silver", 50, 1, 60)],
               [EngineState("a", "http://a", 1)], default_class="silver")
    add(pol, "gold", n=500)
    add(pol, "silver", n=500)
    order = run_saturated(pol, 200)
    share = order.count("gold") / len(order)
    assert abs(share - 0.75) <= 0.10 * 0.75, share
    pol.change_class("silver", {"weight": 3.0})  # now 1:1
    order = run_saturated(pol, 200)
    share = order.count("gold") / len(order)
    assert abs(share - 0.5) <= 0.05, share
    assert pol.queued == 1000 - 400


def test_idle_class_rejoins_without_saved_credit():
    pol = make([ClassState("gold", 100, 1, 60), ClassState("silver", 50, 1, 60)],
               [EngineState("a", "http://a", 1)], default_class="silver")
    add(pol, "silver", n=100)
    run_saturated(pol, 50)  # silver alone: gold's pass stays behind
    add(pol, "gold", n=100)
    order = run_saturated(pol, 20)
    assert 8 <= order.count("gold") <= 12, order  # 1:1, not a burst of gold


def test_strict_top_goes_first():
    pol = make(strict_top=True, engines=[EngineState("a", "http://a", 1)])
    add(pol, "batch", n=5)
    add(pol, "realtime", n=3)
    assert run_saturated(pol, 5) == ["realtime"] * 3 + ["batch"] * 2


def test_fairness_ids_round_robin_inside_a_class():
    pol = make(engines=[EngineState("a", "http://a", 1)])
    add(pol, "batch", fid="t1", n=4)
    add(pol, "batch", fid="t2", n=2)
    got = []
    for _ in range(6):
        (p, e), = pol.dispatch(0)
        got.append(p.fairness_id)
        pol.finish(p, e.name)
    assert got == ["t1", "t2", "t1", "t2", "t1", "t1"]


def test_background_promoted_after_max_wait():
    pol = make(engines=[EngineState("a", "http://a", 1)])
    pol.engines["a"].in_flight = 1  # saturated: nothing leaves
    p, = add(pol, "background", now=0.0)
    assert pol.next_wakeup(0.0) == pytest.approx(120.0)
    assert pol.promote_due(119.9) == []
    assert pol.promote_due(120.0) == [(p, "background", "batch")]
    assert (p.cls, p.origin, pol.classes["background"].promotions) == ("batch", "background", 1)
    assert (pol.classes["background"].queued, pol.classes["batch"].queued) == (0, 1)
    assert pol.promote_due(149.0) == []
    assert pol.promote_due(150.0) == [(p, "batch", "realtime")]  # batch's own max wait, 30 s
    assert pol.promote_due(1000.0) == []  # the top class promotes nowhere
    assert pol.classes["batch"].promotions == 1


def test_cancelled_request_leaves_the_counts_at_once():
    pol = make()
    p, q = add(pol, "batch", n=2)
    pol.cancel(p)
    assert (pol.queued, pol.classes["batch"].queued) == (1, 1)
    (got, _), = pol.dispatch(0)
    assert got is q


def test_reserved_slots_are_held_for_their_class():
    classes = [ClassState("realtime", 100, 1, 2, reserved_slots=2), ClassState("batch", 50, 1, 30)]
    pol = make(classes, [EngineState("a", "http://a", 4)])
    add(pol, "batch", n=10)
    got = pol.dispatch(0)
    assert len(got) == 2  # 4 slots, 2 held for realtime
    add(pol, "realtime", n=3)
    got = pol.dispatch(0)
    assert [p.dispatched_cls for p, _ in got] == ["realtime", "realtime"]
    for p, e in got:
        pol.finish(p, e.name)
    pol.change_class("realtime", {"reserved_slots": 0})
    assert len(pol.dispatch(0)) == 2


def test_batching_wait_halved_for_a_long_top_backlog():
    classes = [ClassState("realtime", 100, 1, 2, batch_wait_s=0.1), ClassState("batch", 50, 1, 30)]
    pol = make(classes, [EngineState("a", "http://a", 100)], top_backlog=10)
    add(pol, "realtime", n=5)
    assert pol.dispatch(0.06) == []
    assert pol.next_wakeup(0.06) == pytest.approx(0.1)
    assert len(pol.dispatch(0.1)) == 5
    add(pol, "realtime", now=1.0, n=11)  # backlog 11 > 10: wait 0.05
    assert pol.batch_wait_s(pol.classes["realtime"]) == pytest.approx(0.05)
    assert len(pol.dispatch(1.06)) == 11


def test_engine_choice_least_in_flight_skipping_draining_full_and_saturated():
    engines = [EngineState("a", "http://a", 2), EngineState("b", "http://b", 2), EngineState("c", "http://c", 2)]
    pol = make(engines=engines, kv_cache_max_pct=90, vllm_waiting_max=2)
    pol.change_engine("c", {"draining": True})
    add(pol, "batch", n=10)
    got = pol.dispatch(0)
    assert sorted(e.name for _, e in got) == ["a", "a", "b", "b"]  # c drains, caps hold
    for p, e in got:
        pol.finish(p, e.name)
    engines[0].kv_cache_pct, engines[1].vllm_waiting = 95.0, 3  # both saturated by their own metrics
    got = pol.dispatch(0)
    assert sorted(e.name for _, e in got) == ["a", "b"]  # idle engines are still tried once
    assert pol.dispatch(0) == []
    engines[0].kv_cache_pct = 50.0
    assert [e.name for _, e in pol.dispatch(0)] == ["a"]


def test_requeue_excludes_the_failed_engine_and_reports_unroutable():
    engines = [EngineState("a", "http://a", 1), EngineState("b", "http://b", 1)]
    pol = make(engines=engines)
    p, = add(pol, "batch")
    (_, e), = pol.dispatch(0)
    pol.finish(p, e.name)
    assert pol.requeue(p, e.name, 1.0)
    (_, e2), = pol.dispatch(1.0)
    assert e2.name != e.name
    pol.finish(p, e2.name)
    assert not pol.requeue(p, e2.name, 2.0)  # both failed it
    q, = add(pol, "batch")
    q.excluded.add("a")
    engines[0].in_flight = engines[1].in_flight = 1
    engines[1].up = False
    assert pol.unroutable() == [q] and pol.queued == 0


def test_changes_are_validated():
    pol = make()
    for bad in ({"weight": 0}, {"weight": -1}, {"weight": True}, {"max_wait_s": "x"}, {"reserved_slots": 1.5},
                {"colour": 1}):
        with pytest.raises(PolicyError):
            pol.change_class("batch", bad)
    with pytest.raises(KeyError):
        pol.change_class("nope", {"weight": 1})
    for bad in ({"cap": 0}, {"draining": "yes"}):
        with pytest.raises(PolicyError):
            pol.change_engine("a", bad)
    assert pol.classes["batch"].weight == 2


def test_unknown_class_is_the_default_and_full_queue_refuses():
    pol = make(max_queue=2)
    assert pol.class_of("gold") == pol.class_of(None) == "batch"
    add(pol, "batch", n=2)
    assert not pol.enqueue(Pending(origin="batch", fairness_id="", arrived_at=0), 0)


def test_vllm_priority_lower_is_more_urgent():
    assert vllm_priority(100) < vllm_priority(50) < vllm_priority(10)
