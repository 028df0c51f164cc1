"""Which engine a pod runs, for the Cluster pane's Pods view (Run, Wait, Engine): by the pod's address,
else by the pod → engine map, else by name — engines read through Prometheus have no pod address."""

from __future__ import annotations

from triage_states import engine

from infertop.domain.kube import PodView
from infertop.state.cluster_join import pod_engines, pod_loads_from_engines


def pod(name: str, ip: str | None = None, port: int | None = None) -> PodView:
    return PodView("inference", name, status="Running", ready=True, ip=ip, port=port)


def test_a_pod_runs_the_engine_at_its_address_else_the_one_the_map_or_its_name_gives():
    a, b, c = engine("e1", running=3.0, waiting=1.0), engine("e2", running=5.0), engine("vllm-x", running=7.0)
    at_address = pod("vllm-abc", "127.0.0.1", 8010)  # e1's URL is http://127.0.0.1:8010
    mapped = pod("vllm-def", "10.0.0.9", 8000)  # an address no engine has: Prometheus' engines
    named = pod("vllm-x")
    stranger = pod("other", "10.0.0.8", 8000)
    assert at_address.engine_url == a.stats.url
    pods = [at_address, mapped, named, stranger]
    found = pod_engines(pods, [a, b, c], {"vllm-def": "e2"})
    assert {k: [e.name for e in v] for k, v in found.items()} == {
        at_address.key: ["e1"], mapped.key: ["e2"], named.key: ["vllm-x"]}
    loads = pod_loads_from_engines(pods, [a, b, c], {"vllm-def": "e2"})
    assert (loads[at_address.key].running, loads[at_address.key].waiting) == (3, 1)
    assert (loads[mapped.key].running, loads[named.key].running) == (5, 7)
    assert stranger.key not in loads


def test_the_address_wins_over_the_map_and_a_stale_engine_gives_its_reason():
    a, b = engine("e1", running=3.0), engine("e2", fresh=False)
    p = pod("vllm-abc", "127.0.0.1", 8010)
    assert [e.name for e in pod_engines([p], [a, b], {"vllm-abc": "e2"})[p.key]] == ["e1"]
    q = pod("vllm-q")
    load = pod_loads_from_engines([q], [a, b], {"vllm-q": "e2"})[q.key]
    assert load.error == "connection refused"
