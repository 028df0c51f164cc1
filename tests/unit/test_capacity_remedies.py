"""The capacity answer feeds the triage remedies (issue 25 item 4): a queue-bound verdict on a pool that
is one SLO class takes its replica count and max_num_seqs from the class's capacity model, not from
Little's law alone; without an answer (or for a pool that is not the class) Little's law stays."""

from __future__ import annotations

import dataclasses

from infertop.analysis.slo.capacity import CapacityInputs, answer
from infertop.analysis.slo.report import capacity_text
from infertop.analysis.triage import Triage
from triage_states import engine, fleet, run

BUSY = dict(running=16.0, waiting=12.0, kv_cache_pct=40.0, requests_per_s=6.0, e2e_p95_s=6.0, queue_p99_s=3.0,
            ttft_p99_s=3.5)


class _Class:  # the targets capacity_text reads
    queue_p99_s, ttft_p99_s = 0.5, 2.0


def report_for(names, inp: CapacityInputs) -> dict:
    a = answer(inp, 0.5, 2.0, 30.0)
    cap = dataclasses.asdict(a) | {"text": capacity_text(a, _Class), "computed_at": 0.0}
    return {"classes": [{"name": "chat", "engines": list(names), "targets": {"queue": 0.5, "ttft": 2.0},
                         "capacity": cap, "burn": [], "worst": {}}], "engines": []}


def queue_bound_remedies(state):
    out = run(Triage(), [state] * 7)
    [v] = [v for v in out[-1] if v.kind == "queue-bound" and v.subject == "e0"]
    return {r.key: r for r in v.remedies}


def test_queue_bound_scales_to_the_capacity_models_replicas():
    inp = CapacityInputs(arrival_per_s=12.0, service_s=4.0, replicas=2, max_num_seqs=16, prefill_p99_s=0.3,
                         residence_s=4.5)
    a = answer(inp, 0.5, 2.0, 30.0)
    base = fleet(engine("e0", **BUSY), engine("e1", **BUSY))
    state = dataclasses.replace(base, slo_report=report_for(["e0", "e1"], inp))
    got = queue_bound_remedies(state)
    assert a.replicas_to_hold and a.replicas_to_hold > 2
    assert got["S"].value == a.replicas_to_hold
    assert "class chat's capacity model: holds queue p99" in got["S"].text and "TTFT p99 2" in got["S"].text
    assert "Little's law" in got["S"].text and "30 % headroom" in got["S"].text
    # Little's law alone (6 + 6 req/s × 6 s × 1.3 over 16) would say 6: the value is the model's
    assert got["m"].value == a.max_num_seqs_to_hold > 16


def test_without_a_capacity_answer_little_law_stays():
    base = fleet(engine("e0", **BUSY), engine("e1", **BUSY))
    got = queue_bound_remedies(base)
    assert "Little's law" in got["S"].text and "capacity model" not in got["S"].text
    assert got["S"].value == 6  # ceil(12 req/s × 6 s × 1.3 / 16)


def test_a_class_that_is_not_the_pool_leaves_little_law():
    inp = CapacityInputs(arrival_per_s=12.0, service_s=4.0, replicas=3, max_num_seqs=16, prefill_p99_s=0.3,
                         residence_s=4.5)
    base = fleet(engine("e0", **BUSY), engine("e1", **BUSY))
    state = dataclasses.replace(base, slo_report=report_for(["e0", "e1", "other"], inp))
    got = queue_bound_remedies(state)
    assert "capacity model" not in got["S"].text and got["S"].value == 6


def test_a_malformed_report_is_ignored():
    base = fleet(engine("e0", **BUSY), engine("e1", **BUSY))
    bad = {"classes": [{"name": "chat", "engines": ["e0", "e1"], "capacity": {"replicas_to_hold": "x"}}]}
    got = queue_bound_remedies(dataclasses.replace(base, slo_report=bad))
    assert "Little's law" in got["S"].text


def test_slo_burn_remedy_says_why_its_replica_count():
    """The SLO burn verdict's 'S' names the targets the count holds and Little's law's replicas."""
    from infertop.analysis.triage.slo_rules import _remedies

    inp = CapacityInputs(arrival_per_s=12.0, service_s=4.0, replicas=2, max_num_seqs=16, prefill_p99_s=0.3,
                         residence_s=4.5)
    c = report_for(["e0", "e1"], inp)["classes"][0]
    [s] = [r for r in _remedies(c) if r.key == "S"]
    a = answer(inp, 0.5, 2.0, 30.0)
    assert s.value == a.replicas_to_hold
    assert s.text == (f"scale to {a.replicas_to_hold} replicas (capacity model: holds queue p99 500ms and TTFT p99 "
                      f"2.00s at {a.replicas_to_hold}; Little's law: {a.concurrency_needed / 16:.1f} replicas of 16 "
                      f"at 30 % headroom)")


def test_the_advisor_shows_the_capacity_answer_beside_its_proposal_and_decides_the_same():
    """The advisor's own line carries the class's capacity answer in its 'why'; its decision is unchanged."""
    from advisor_states import T0, advisor, by_name, engine as adv_engine, state as adv_state

    engines = [adv_engine("chat-1", 8001, 6.0, 1.0), adv_engine("chat-2", 8002, 7.0, 2.5)]
    inp = CapacityInputs(arrival_per_s=12.0, service_s=4.0, replicas=2, max_num_seqs=16, prefill_p99_s=0.3,
                         residence_s=4.5)
    plain = by_name(advisor().evaluate(adv_state(T0, engines)))["chat"]
    a = advisor()
    a.slo_report = report_for(["chat-1", "chat-2"], inp)
    told = by_name(a.evaluate(adv_state(T0, engines)))["chat"]
    [mine] = [line for line in told["autoscalers"] if line["name"] == "advisor"]
    [before] = [line for line in plain["autoscalers"] if line["name"] == "advisor"]
    hold = answer(inp, 0.5, 2.0, 30.0).replicas_to_hold
    assert mine["why"] == before["why"] + f"; class chat's capacity model: holds queue p99 500ms and TTFT p99 " \
                                          f"2.00s at {hold}; Little's law: 4.4 replicas of 16 at 30 % headroom"
    assert (mine["current"], mine["desired"]) == (before["current"], before["desired"])
    assert told["latest"] == plain["latest"]  # the decision log is the advisor's own
    # a class that is not the workload's engines says nothing
    a.slo_report = report_for(["chat-1"], inp)
    [line] = [x for x in by_name(a.evaluate(adv_state(T0 + 1, engines)))["chat"]["autoscalers"] if x["name"] == "advisor"]
    assert line["why"] == before["why"]
