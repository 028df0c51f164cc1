"""The advisor's inputs from the one fleet state: engine → pod → workload, queue depth, p99, bounds, guards.

Fleet states are built from domain values (no I/O); the clock is each state's ``taken_at``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor_states import T0, advisor, by_name, engine, pod, state

from infertop.domain.kube import HpaView
from infertop.state.fleet_types import FRESH, MISSING, STALE, Freshness


def test_engines_map_to_their_workload_and_the_queue_is_the_sum_of_vllm_waiting():
    a = advisor()
    engines = [engine("chat-1", 8001, 6.0, 1.0), engine("chat-2", 8002, 7.0, 2.5),
               engine("batch-engine", 9000, 0.0, 0.1), engine("elsewhere", 9100, 50.0, 9.0)]
    views = by_name(a.evaluate(state(T0, engines)))
    chat, batch = views["chat"], views["batch"]
    assert chat["engines"] == ["chat-1", "chat-2"] and batch["engines"] == ["batch-engine"]  # by URL; by pod map
    q, p99 = chat["latest"]["inputs"]
    assert (q["name"], q["value"], q["target"]) == ("queue depth", 13.0, 5.0)
    assert chat["queue_source"] == {"from": "engines", "text": "vLLM waiting of its engines (2)"}
    assert chat["queue_fleet_wide"] is None  # no Prometheus queue series in this state
    # no counter windows at hand (a replay): the slowest engine's own p99
    assert (p99["name"], p99["value"], p99["target"], p99["unit"]) == ("P99", 2.5, 2.0, "s")
    assert chat["latest"]["reason"] == "2 → 6: queue depth 13.0 > 5, P99 2500 ms > 2000 ms"
    assert chat["latest"]["action"] == "recommended" and chat["bounds_from"] == "config"
    assert batch["latest"]["reason"] == "1 → 1: queue depth 0.0 < 5, P99 100 ms < 2000 ms"
    assert [v["name"] for v in a.evaluate(state(T0 + 1, engines))] == ["chat", "batch"]  # 'elsewhere': no pod


def test_an_hpa_gives_the_bounds_and_its_own_line():
    hpa = HpaView("serving", "chat", "Deployment", "chat", min_replicas=2, max_replicas=3, current_replicas=2,
                  desired_replicas=3)
    engines = [engine("chat-1", 8001, 20.0, 1.0), engine("chat-2", 8002, 20.0, 1.0)]
    chat = by_name(advisor().evaluate(state(T0, engines, hpa=[hpa])))["chat"]
    assert chat["latest"]["reason"] == "2 → 3 (max 3; formula 16): queue depth 40.0 > 5, P99 1000 ms < 2000 ms"
    assert (chat["min_replicas"], chat["max_replicas"], chat["bounds_from"]) == (2, 3, "HPA serving/chat")
    assert [(a["source"], a["current"], a["desired"]) for a in chat["autoscalers"]] == [
        ("infertop", 2, 3), ("HPA", 2, 3)]


def test_guards_stale_engine_stale_cluster_and_unwatched_workloads():
    a = advisor()
    stale = [engine("chat-1", 8001, 20.0, 3.0), engine("chat-2", 8002, 20.0, 3.0, status=STALE)]
    chat = by_name(a.evaluate(state(T0, stale)))["chat"]
    assert chat["latest"]["reason"] == ("refused: queue depth stale (chat-2: connection refused), "
                                        "P99 stale (chat-2: connection refused)")
    fresh = [engine("chat-1", 8001, 20.0, 3.0), engine("chat-2", 8002, 20.0, 3.0)]
    chat = by_name(a.evaluate(state(T0 + 1, fresh, cluster_status=STALE)))["chat"]
    assert chat["latest"]["reason"] == "refused: current replicas stale (connection refused)"
    # answering, but its sample is old: stale for the advisor only past advisor.max_input_age_s (15 s)
    slow = [engine("chat-1", 8001, 20.0, 3.0), engine("chat-2", 8002, 20.0, 3.0, status=STALE, up=True, age_s=4)]
    chat = by_name(a.evaluate(state(T0 + 1.5, slow)))["chat"]
    assert chat["latest"]["action"] == "recommended"
    old = [engine("chat-1", 8001, 20.0, 3.0), engine("chat-2", 8002, 20.0, 3.0, status=STALE, up=True, age_s=20)]
    chat = by_name(a.evaluate(state(T0 + 1.6, old)))["chat"]
    assert chat["latest"]["reason"] == ("refused: queue depth stale (chat-2: no new sample for 20 s), "
                                        "P99 stale (chat-2: no new sample for 20 s)")
    # a pod whose engine was never read yet is not there yet: the other engine decides
    young = [engine("chat-1", 8001, 20.0, 3.0), engine("chat-2", 8002, None, None, status=MISSING)]
    chat = by_name(a.evaluate(state(T0 + 2, young)))["chat"]
    assert chat["latest"]["inputs"][0]["value"] == 20.0 and chat["latest"]["action"] == "recommended"
    # a workload without watched engines is advised only when named in the config
    none = [engine("other", 7000, 1.0, 0.1)]
    assert a.evaluate(state(T0, none)) == []
    b = advisor(workloads=["serving/chat"])
    (chat,) = b.evaluate(state(T0, none))
    assert chat["latest"]["reason"] == ("refused: queue depth missing (no engine of this workload is watched), "
                                        "P99 missing (no engine of this workload is watched)")


@dataclass(frozen=True)
class _QEngine:
    name: str
    engine: str | None


@dataclass(frozen=True)
class _QSource:  # the shape of the Queue helper's state.queues.QueueSource the advisor reads
    name: str
    queued: float | None
    freshness: Freshness
    engines: tuple = ()
    missing: dict = field(default_factory=dict)


def test_the_gateway_queue_in_front_of_a_workload_replaces_vllm_waiting():
    engines = [engine("chat-1", 8001, 1.0, 1.0), engine("chat-2", 8002, 1.0, 1.0)]
    gw = _QSource("gw", 31.0, Freshness(FRESH, "http://gw", T0, 0.5),
                  (_QEngine("e1", "chat-1"), _QEngine("e2", "chat-2")))
    shared = _QSource("shared", 99.0, Freshness(FRESH, "http://gw2", T0, 0.5),
                      (_QEngine("e1", "chat-1"), _QEngine("e9", "batch-engine")))
    chat = by_name(advisor().evaluate(state(T0, engines, queues=[shared, gw])))["chat"]
    assert chat["latest"]["inputs"][0]["value"] == 31.0  # not the shared gateway's: whose queue is it?
    assert chat["queue_source"]["text"] == "queue gw"  # (this stand-in has no kind)
    down = _QSource("gw", 31.0, Freshness(STALE, "http://gw", T0 - 60, 60.0, T0 - 60, "connection refused"),
                    gw.engines)
    chat = by_name(advisor().evaluate(state(T0, engines, queues=[down])))["chat"]
    assert chat["latest"]["reason"] == "refused: queue depth stale (connection refused)"
    as_dict = {"workload": "Deployment/serving/chat", "depth": 12.0}
    chat = by_name(advisor().evaluate(state(T0, engines, queues=[as_dict])))["chat"]
    assert chat["latest"]["inputs"][0]["value"] == 12.0


def test_mode_off_decides_nothing_and_the_log_merges_repeats():
    engines = [engine("chat-1", 8001, 20.0, 3.0), engine("chat-2", 8002, 20.0, 3.0)]
    off = advisor(mode="off")
    chat = by_name(off.evaluate(state(T0, engines)))["chat"]
    assert chat["latest"] is None and chat["decisions"] == [] and chat["autoscalers"] == []
    a = advisor()
    for i in range(3):
        chat = by_name(a.evaluate(state(T0 + i, engines)))["chat"]
    (entry,) = chat["decisions"]
    assert entry["repeats"] == 3 and entry["first_at"] == T0 and entry["at"] == T0 + 2
