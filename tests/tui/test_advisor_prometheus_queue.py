"""Queue depth per Deployment from Prometheus (issue 12): the queue query's series, each
attributed to a workload, feed the advisor — through a loopback server speaking the
Prometheus API (tests/support/prom_api_server.py), the recorded engine answers of
tests/fixtures/prometheus_fleet, and a cluster read of two Deployments.

Deployment ``llama`` owns the four Llama engines' pods, ``qwen`` the Qwen one. The
queue answer has vLLM's waiting per pod, an endpoint picker's queue for the Llama
model (only ``llama`` serves it) and a gateway's queue no label ties to a workload."""

from __future__ import annotations

import io
import json

import pytest

from infertop.analysis.scaling import REFUSED
from infertop.config import AdvisorConfig, PrometheusConfig, SloConfig
from infertop.domain.kube import ClusterSnapshot, PodView, WorkloadView
from infertop.sources.prometheus.fleet import PromFleetSource
from infertop.snapshot import print_table
from infertop.sources.prometheus.fleet_query import FAST_FIELDS, LATENCY_FIELDS, FleetQueries
from infertop.state.advisor.core import Advisor
from infertop.state.fleet_join import FleetJoiner
from prom_api_server import PromApiServer
from prom_fleet_fixture import LIVE, RECORDED_AT, fixture

NS = "inference"
LLAMA, QWEN = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"
PODS = {f"vllm-{i}-0000": ("qwen" if i == 2 else "llama") for i in range(5)}  # the fixture's live pods
WAITING = {f"vllm-{i}-0000": float(i + 1) for i in range(5)}  # vLLM waiting per pod in the queue answer
EPP_LLAMA, GATEWAY = 45.0, 7.0


def vector(result: list[dict]) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def sample(labels: dict, value: float) -> dict:
    return {"metric": labels, "value": [RECORDED_AT, f"{value:g}"]}


def queue_answer(*, epp: bool = True) -> dict:
    """What Prometheus answers the default queue query with (the shape of its ``or`` of tagged sums)."""
    result = [sample({"infertop_queue": "gateway", "job": "gateway", "instance": "10.0.0.9:8100"}, GATEWAY)]
    if epp:
        result.append(sample({"infertop_queue": "epp", "inference_pool": "pool-a", "model_name": LLAMA,
                              "target_model_name": LLAMA}, EPP_LLAMA))
    for i, inst in enumerate(LIVE):
        pod = f"vllm-{i}-0000"
        result.append(sample({"infertop_queue": "vllm", "namespace": NS, "pod": pod, "instance": inst}, WAITING[pod]))
    return vector(result)


def live_only(doc: dict, fields) -> dict:
    """The recorded engine answer without the stopped sim's series, cut to ``fields``."""
    return vector([r for r in doc["data"]["result"] if r["metric"]["instance"] in LIVE
                   and r["metric"]["infertop_field"] in fields])


def cluster(t: float) -> ClusterSnapshot:
    workloads = (WorkloadView("Deployment", NS, "llama", desired=4, ready=4),
                 WorkloadView("Deployment", NS, "qwen", desired=1, ready=1))
    pods = tuple(PodView(NS, pod, phase="Running", ready=True, owner_kind="Deployment", owner_name=owner)
                 for pod, owner in PODS.items())
    return ClusterSnapshot("lab", (NS,), t, workloads=workloads, pods=pods)


class Console:
    """What the app does each tick: a Prometheus refresh → the fleet state (with the cluster) → the advisor."""

    def __init__(self, srv: PromApiServer) -> None:
        self.now = RECORDED_AT
        cfg = PrometheusConfig(url=srv.url, timeout_s=2.0, backfill_points=0)
        self.src = PromFleetSource(cfg, wall=lambda: self.now)
        self.joiner = FleetJoiner(self.src, slo=SloConfig(), refresh_s=1.0, window_s=60.0, wall=lambda: self.now)
        self.advisor = Advisor(AdvisorConfig(scale_up_window_s=0.0, scale_down_window_s=0.0), SloConfig())
        self.joiner.autoscalers = self.advisor

    def tick(self, dt: float = 0.0):
        self.now += dt
        self.src.refresh()
        self.joiner.observe()
        self.joiner.set_cluster(cluster(self.now), source="lab")
        self.state = self.joiner.build()
        return {v["name"]: v for v in self.state.autoscalers}


@pytest.fixture
def prom():
    srv = PromApiServer().start()
    q = FleetQueries(by=PrometheusConfig().by, window_s=60.0)
    srv.answers[q.up()] = fixture("up")
    srv.answers[q.engine_values(FAST_FIELDS)] = live_only(fixture("engines"), FAST_FIELDS)
    for hist, fields in LATENCY_FIELDS.items():
        srv.answers[q.engine_values(fields)] = live_only(fixture("engines"), fields)
    srv.answers[q.fleet_values()] = fixture("fleet")
    srv.answers[q.queue()] = queue_answer()
    srv.q = q
    yield srv
    srv.stop()


def queue_input(view: dict) -> dict:
    return next(i for i in view["latest"]["inputs"] if i["name"] == "queue depth")


def test_each_deployment_gets_its_own_queue_and_the_unattributed_one_stays_fleet_wide(prom):
    console = Console(prom)
    views = console.tick()
    assert console.src.last.queries == 8  # the first refresh: 3 fast + 5 latency, queue included
    llama, qwen = views["llama"], views["qwen"]
    assert sorted(llama["engines"]) == [p for p, o in PODS.items() if o == "llama"] and qwen["engines"] == ["vllm-2-0000"]
    # llama: the endpoint picker's queue for the model only it serves (nearer the client than its vLLM waiting)
    q = queue_input(llama)
    assert (q["value"], q["status"], q["why"]) == (EPP_LLAMA, "fresh", None)
    assert llama["queue_source"]["from"] == "prometheus" and llama["queue_source"]["queue"] == "epp"
    assert llama["queue_source"]["also"] == ["vllm"]
    assert llama["queue_source"]["text"] == (f"Prometheus: endpoint-picker queue, 1 series (inference_pool=pool-a, "
                                             f"model_name={LLAMA}, target_model_name={LLAMA})")
    assert llama["latest"]["reason"].startswith(f"4 → 10 (max 10; formula 36): queue depth {EPP_LLAMA:.1f} > 5")
    # qwen: vLLM's waiting of its one pod, through the pod label
    q = queue_input(qwen)
    assert (q["value"], q["status"]) == (WAITING["vllm-2-0000"], "fresh")
    assert qwen["queue_source"]["queue"] == "vllm" and qwen["queue_source"]["labels"] == [
        {"namespace": NS, "pod": "vllm-2-0000", "instance": LIVE[2]}]
    # the gateway's queue names no workload: fleet-wide, in neither Deployment's depth
    for v in (llama, qwen):
        assert v["queue_fleet_wide"] == {"series": 1, "depth_by_queue": {"gateway": GATEWAY},
                                         "labels": [{"job": "gateway", "instance": "10.0.0.9:8100"}]}
    (entry,) = [q for q in console.state.queues if isinstance(q, dict)]
    assert entry["depth"] == GATEWAY and len(entry["series"]) == 7 and entry["error"] is None
    # snapshot --json carries both
    doc = json.loads(json.dumps(console.state.to_doc(), allow_nan=False))
    by_name = {v["name"]: v for v in doc["autoscalers"]}
    assert by_name["llama"]["queue_source"]["queue"] == "epp" and by_name["qwen"]["queue_source"]["queue"] == "vllm"
    assert by_name["qwen"]["queue_fleet_wide"]["depth_by_queue"] == {"gateway": GATEWAY}
    # and so does the snapshot's table
    buf = io.StringIO()
    print_table(console.state, buf)
    table = buf.getvalue()
    assert f"    queue depth from: {llama['queue_source']['text']}\n" in table
    assert f"    fleet-wide, no workload's: gateway {GATEWAY:g} (1 series)\n" in table
    # the next refresh is the 3 fast queries: one queue query, whatever the number of series
    console.tick(1.0)
    assert console.src.last.queries == 3


def test_prometheus_failing_makes_the_attributed_depth_stale_with_the_reason(prom):
    console = Console(prom)
    console.tick()
    prom.status = 503
    views = console.tick(2.0)
    q = queue_input(views["llama"])
    assert (q["value"], q["status"]) == (EPP_LLAMA, "stale")  # the last read, kept, not current
    assert q["why"] == "Prometheus queue query: HTTP 503" and q["age_s"] == pytest.approx(2.0)
    assert views["llama"]["latest"]["action"] == REFUSED
    assert "queue depth stale (Prometheus queue query: HTTP 503)" in views["llama"]["latest"]["reason"]
    prom.status = None
    views = console.tick(1.0)
    q = queue_input(views["llama"])
    assert (q["value"], q["status"], q["why"]) == (EPP_LLAMA, "fresh", None)


def test_a_vanished_endpoint_picker_queue_is_missing_not_replaced_by_vllm_waiting(prom):
    console = Console(prom)
    console.tick()
    prom.answers[prom.q.queue()] = queue_answer(epp=False)
    views = console.tick(4.0)
    q = queue_input(views["llama"])
    assert q["value"] is None and q["status"] == "missing"
    assert q["why"] == "no endpoint-picker queue series in Prometheus for 4 s"
    assert views["llama"]["queue_source"]["text"] == "Prometheus: no endpoint-picker queue series in Prometheus for 4 s"
    # a missing input: the P99 alone may scale up (never down), and the reason says the queue is n/a
    assert views["llama"]["latest"]["reason"] == "4 → 10 (max 10; formula 15): queue depth n/a, P99 7075 ms > 2000 ms"
    assert queue_input(views["qwen"])["value"] == WAITING["vllm-2-0000"]  # qwen never had one
    # long gone: forgotten, vLLM's waiting of its pods is the depth again
    views = console.tick(601.0)
    q = queue_input(views["llama"])
    assert q["value"] == sum(w for p, w in WAITING.items() if PODS[p] == "llama")
    assert views["llama"]["queue_source"]["queue"] == "vllm"


def test_a_failing_queue_query_alone_leaves_the_engines_and_says_so(prom):
    console = Console(prom)
    del prom.answers[prom.q.queue()]  # Prometheus answers it 400 (a bad prometheus.queue_promql)
    views = console.tick()
    assert console.src.health.ok and console.src.health.last_error == "queue depth: HTTP 400"
    assert all(c.health.ok for c in console.src.collectors)
    qwen = views["qwen"]
    # never read: no series to attribute; the depth is vLLM's waiting from the engine query, and why
    assert qwen["queue_source"] == {"from": "engines",
                                    "text": "vLLM waiting of its engines (1); Prometheus queue query: HTTP 400"}
    (entry,) = [q for q in console.state.queues if isinstance(q, dict)]
    assert entry["series"] == [] and entry["depth"] is None and entry["error"] == "HTTP 400"


# -- whose series is it: every way a series names its workload ------------------------------------

def _attributor():
    from infertop.state.advisor.queues import Attributor

    snap = ClusterSnapshot("lab", (NS, "other"), RECORDED_AT, workloads=(
        WorkloadView("Deployment", NS, "llama"), WorkloadView("Deployment", NS, "qwen"),
        WorkloadView("StatefulSet", NS, "big"), WorkloadView("Deployment", "other", "llama")),
        pods=(PodView(NS, "llama-1", owner_kind="Deployment", owner_name="llama"),
              PodView("other", "llama-1", owner_kind="Deployment", owner_name="llama"),
              PodView(NS, "big-0", owner_kind="StatefulSet", owner_name="big")))
    urls = {"http://10.0.0.5:8000": "eng-q", "http://10.0.0.6:8000": "eng-b", "http://10.0.0.7:8000": "eng-x"}
    engine_workload = {"eng-q": f"Deployment/{NS}/qwen", "eng-b": f"StatefulSet/{NS}/big"}
    models = {"eng-q": "qwen-7b", "eng-b": "big-70b", "eng-x": "big-70b"}  # eng-x: no workload's
    return Attributor(snap, urls, engine_workload, models)


@pytest.mark.parametrize("labels, workload", [
    ({"workload": f"StatefulSet/{NS}/big"}, f"StatefulSet/{NS}/big"),
    ({"workload": "other/llama"}, "Deployment/other/llama"),
    ({"workload": "qwen"}, f"Deployment/{NS}/qwen"),
    ({"workload": "llama"}, None),  # two namespaces have one: whose?
    ({"workload": "llama", "namespace": "other"}, "Deployment/other/llama"),
    ({"workload": "nope", "pod": "llama-1", "namespace": NS}, None),  # named outright: no second guess
    ({"deployment": "qwen", "namespace": NS}, f"Deployment/{NS}/qwen"),
    ({"deployment": "big", "namespace": NS}, None),  # a StatefulSet
    ({"pod": "llama-1", "namespace": NS}, f"Deployment/{NS}/llama"),
    ({"pod": "llama-1"}, None),  # a pod of that name in two namespaces
    ({"model_server_pod": "big-0", "namespace": "serving-epp"}, f"StatefulSet/{NS}/big"),  # the picker's namespace
    ({"pod": "gone-0", "instance": "10.0.0.5:8000"}, f"Deployment/{NS}/qwen"),  # an unknown pod: its address says
    ({"instance": "10.0.0.7:8000"}, None),  # a watched engine no workload owns
    ({"target_model_name": "qwen-7b", "inference_pool": "p"}, f"Deployment/{NS}/qwen"),
    ({"model_name": "big-70b"}, None),  # served by an engine no workload owns too
    ({"inference_pool": "pool-a"}, None),  # no InferencePool in the cluster read
    ({}, None),
])
def test_a_series_goes_to_the_workload_its_labels_name(labels, workload):
    assert _attributor().workload(labels) == workload


def test_the_nearest_queue_of_a_workload_is_its_depth_and_nothing_is_counted_twice():
    from infertop.state.advisor.queues import attribute, workload_depth

    snap = cluster(RECORDED_AT)
    doc = {"source": "prometheus", "sampled_at": RECORDED_AT, "error": None,
           "series": [{"queue": "vllm", "labels": {"namespace": NS, "pod": p}, "depth": WAITING[p]} for p in PODS]
           + [{"queue": "gateway", "labels": {"deployment": "qwen", "namespace": NS}, "depth": 9.0},
              {"queue": "epp", "labels": {"inference_pool": "x"}, "depth": 3.0}]}
    att = attribute(doc, snap, (), {})
    qwen = workload_depth(att.by_workload[f"Deployment/{NS}/qwen"])
    assert (qwen.kind, qwen.depth, qwen.kinds) == ("gateway", 9.0, ("gateway", "vllm"))
    llama = workload_depth(att.by_workload[f"Deployment/{NS}/llama"])
    assert (llama.kind, llama.depth, len(llama.series)) == ("vllm", 1.0 + 2.0 + 4.0 + 5.0, 4)
    assert att.fleet_doc()["depth_by_queue"] == {"epp": 3.0}
    every = [s for ss in att.by_workload.values() for s in ss] + att.fleet_wide
    assert sorted(map(id, every)) == sorted(map(id, doc["series"]))  # each series in exactly one place
    assert workload_depth([]) is None


async def test_the_autoscaler_pane_says_where_each_depth_came_from(prom):
    from rich.text import Text
    from textual.app import App

    from infertop.ui.widgets.autoscaler import AutoscalerPane
    from pilot_wait import until

    views = Console(prom).tick()

    class Host(App):
        def compose(self):
            yield AutoscalerPane()

    app = Host()
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(AutoscalerPane)
        pane.show(list(views.values()), Text("advisor"))
        detail = pane.query_one("#as-detail")

        def shown() -> str:
            r = detail.render()
            return str(getattr(r, "plain", r))

        await until(pilot, lambda: "queue depth from:" in shown(), "the detail of the first workload")
        assert "queue depth from: Prometheus: endpoint-picker queue, 1 series (inference_pool=pool-a" in shown()
        assert f"fleet-wide, no workload's: gateway {GATEWAY:g} (1 series)" in shown()
        assert pane.select(f"Deployment/{NS}/qwen")
        await until(pilot, lambda: "vLLM waiting, 1 series" in shown(), "the qwen workload's detail")
        assert f"(pod=vllm-2-0000, instance={LIVE[2]})" in shown()
