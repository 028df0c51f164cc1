"""Queue series through a real Prometheus (Debian package): an endpoint picker's
flow-control metrics in both name generations and the gateway's own, read with
one PromQL query per series, give the same values as a direct scrape.

Needs /usr/bin/prometheus (skipped without it unless INFERTOP_REQUIRE_REAL=1)."""

from __future__ import annotations

import httpx
import pytest
from locations import FIXTURES

from infertop.sources.expfmt import parse
from infertop.sources.queues.collector import QueueEndpoint, metrics_url
from infertop.sources.queues.names import extract
from infertop.sources.queues.prom import PromQueueCollector
from scripted_server import ScriptedServer
from prom_run import hostport, require_prometheus, running_prometheus, wait_until_up
from queue_gateway_fake import FakeGateway

pytestmark = pytest.mark.real_prometheus
JOBS = {"epp-llmd": "epp_llmd.txt", "epp-gie": "epp_gie.txt"}


@pytest.fixture
def sources():
    servers = {}
    for job, name in JOBS.items():
        s = ScriptedServer()
        s.routes["/metrics"] = (200, (FIXTURES / name).read_text())
        servers[job] = s.start()
    gw = FakeGateway().start()
    gw.burst("realtime", 4, oldest_s=0.7)
    gw.dispatch("batch", "a", 9, wait_s=2.0)
    gw.engines["b"].in_flight = 3
    yield servers, gw
    gw.stop()
    for s in servers.values():
        s.stop()


@pytest.fixture
def prometheus(tmp_path, sources):
    servers, gw = sources
    jobs = [(job, hostport(s.url)) for job, s in servers.items()] + [("gateway", hostport(gw.url))]
    with running_prometheus(tmp_path, "".join(
            f'  - job_name: {job}\n    static_configs:\n      - targets: ["{target}"]\n' for job, target in jobs),
            targets_up=3) as running:
        yield running


@pytest.mark.parametrize("job", list(JOBS))
def test_endpoint_picker_series_through_prometheus_match_a_direct_scrape(prometheus, sources, job):
    url, proc, log = prometheus
    direct = extract(parse((FIXTURES / JOBS[job]).read_text()), "epp")
    src = PromQueueCollector(QueueEndpoint("epp", "epp", url), url, 60, selector=f'job="{job}"')
    got = wait_until_up("every series scraped", lambda: (s := src.query()) and s.pool and s.counters and len(s.engines) == 2
                and s, proc, log)
    assert got.generation == direct.generation
    assert got.classes == direct.classes and got.engines == direct.engines and got.pool == direct.pool
    assert got.counters == direct.counters  # the histogram buckets and dispatched counts, label for label


async def test_gateway_series_through_prometheus_and_a_missing_source(prometheus, sources):
    url, proc, log = prometheus
    _, gw = sources
    direct = extract(parse(gw.metrics()), "gateway")
    src = PromQueueCollector(QueueEndpoint("gw", "gateway", metrics_url(gw.url)), url, 60, selector='job="gateway"')
    got = wait_until_up("gateway series", lambda: (s := src.query()) and len(s.engines) == 2 and s.counters and s, proc, log)
    assert got.classes == direct.classes and got.engines == direct.engines and got.counters == direct.counters
    view = await src.poll()
    assert src.health.ok and view.via == "prometheus" and view.klass("realtime").depth == 4
    assert view.engine("b").in_flight == 3 and view.engine("b").saturation_pct == pytest.approx(37.5)
    nothing = PromQueueCollector(QueueEndpoint("x", "epp", url), url, 60, selector='job="nope"')
    assert await nothing.poll() is None
    assert not nothing.health.ok and "Prometheus has no flow-control series" in nothing.health.last_error


VLLM_WAITING = ("# TYPE vllm:num_requests_waiting gauge\n"
                'vllm:num_requests_waiting{engine="0",model_name="llama"} 4\n'
                'vllm:num_requests_waiting{engine="1",model_name="llama"} 2\n')


def test_the_default_queue_query_gives_one_tagged_series_per_queue_through_prometheus(tmp_path):
    """The fleet source's default queue PromQL, run by a real Prometheus scraping two endpoint pickers (both
    name generations, one pool), a vLLM pod and an infertop gateway: one series per queue, each with the
    labels that say whose it is — the pickers' own pod left out, the older generation not counted twice."""
    from infertop.sources.prometheus.fleet_map import fleet_depth, queue_series
    from infertop.sources.prometheus.fleet_query import FleetQueries

    require_prometheus()
    servers = []
    for text in ((FIXTURES / "epp_llmd.txt").read_text(),
                 (FIXTURES / "epp_gie.txt").read_text().replace("} 120", "} 100"),  # tells which one is read
                 VLLM_WAITING):
        s = ScriptedServer()
        s.routes["/metrics"] = (200, text)
        servers.append(s.start())
    gw = FakeGateway().start()
    gw.burst("realtime", 4, oldest_s=0.7)
    jobs = [("epp", servers[0], {"namespace": "serving", "pod": "epp-llmd-0"}),
            ("epp", servers[1], {"namespace": "serving", "pod": "epp-gie-0"}),
            ("vllm", servers[2], {"namespace": "serving", "pod": "vllm-a"})]
    scrape = ("  - job_name: epp\n    static_configs:\n" + "".join(
                  f'      - targets: ["{hostport(s.url)}"]\n        labels: {labels}\n'
                  for job, s, labels in jobs if job == "epp")
              + f'  - job_name: vllm\n    static_configs:\n      - targets: ["{hostport(servers[2].url)}"]\n'
              f"        labels: {jobs[2][2]}\n"
              f'  - job_name: gateway\n    static_configs:\n      - targets: ["{hostport(gw.url)}"]\n')
    promql = FleetQueries().queue()
    try:
        with running_prometheus(tmp_path, scrape) as (url, proc, log):
            def series():
                # every target scraped first: with one picker not yet read, the other generation's depth is
                # the only one there (a CI run read 145, the older generation's, before the newer was in)
                up = httpx.post(f"{url}/api/v1/query", data={"query": "up == 1"}, timeout=2, trust_env=False).json()
                if len(up["data"]["result"]) < len(jobs) + 1:
                    return False
                r = httpx.post(f"{url}/api/v1/query", data={"query": promql}, timeout=2, trust_env=False).json()
                assert r["status"] == "success", r  # the PromQL parses and runs
                got, dropped = queue_series(r["data"]["result"])
                return len(got) == 3 and dropped == 0 and got

            got = wait_until_up("the three queues scraped", series, proc, log)
    finally:
        gw.stop()
        for s in servers:
            s.stop()
    by_kind = {s["queue"]: s for s in got}
    assert by_kind["epp"] == {"queue": "epp", "depth": 165.0, "labels": {
        "namespace": "serving", "inference_pool": "pool-a", "model_name": "llama", "target_model_name": "llama"}}
    assert by_kind["vllm"]["depth"] == 6.0 and by_kind["vllm"]["labels"] == {
        "namespace": "serving", "pod": "vllm-a", "instance": hostport(servers[2].url)}
    assert by_kind["gateway"] == {"queue": "gateway", "depth": 4.0,
                                  "labels": {"job": "gateway", "instance": hostport(gw.url)}}
    assert fleet_depth(got) == 4.0  # the fleet as one number: the queue nearest the client
