"""Queue series through a real Prometheus (Debian package): an endpoint picker's
flow-control metrics in both name generations and the gateway's own, read with
one PromQL query per series, give the same values as a direct scrape.

Needs /usr/bin/prometheus (skipped without it unless INFERTOP_REQUIRE_REAL=1)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from infertop.sources.expfmt import parse
from infertop.sources.queues import QueueEndpoint, metrics_url
from infertop.sources.queues_names import extract
from infertop.sources.queues_prom import PromQueueCollector
from scripted_server import ScriptedServer
from test_gpu_prometheus import PROMETHEUS, _free_port, _hostport, _require_prometheus, _wait
from tests.queue_gateway_fake import FakeGateway

pytestmark = pytest.mark.real_prometheus
FIXTURES = Path(__file__).parent / "fixtures"
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
    _require_prometheus()
    servers, gw = sources
    port = _free_port()
    jobs = [(job, _hostport(s.url)) for job, s in servers.items()] + [("gateway", _hostport(gw.url))]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n" + "".join(
        f'  - job_name: {job}\n    static_configs:\n      - targets: ["{target}"]\n' for job, target in jobs))
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=2h"],
                                stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def all_up():
            r = httpx.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=2, trust_env=False).json()
            res = r["data"]["result"]
            return len(res) == 3 and all(x["value"][1] == "1" for x in res)

        _wait("up == 1 for the 3 targets", all_up, proc, log)
        yield url, proc, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize("job", list(JOBS))
def test_endpoint_picker_series_through_prometheus_match_a_direct_scrape(prometheus, sources, job):
    url, proc, log = prometheus
    direct = extract(parse((FIXTURES / JOBS[job]).read_text()), "epp")
    src = PromQueueCollector(QueueEndpoint("epp", "epp", url), url, 60, selector=f'job="{job}"')
    got = _wait("every series scraped", lambda: (s := src.query()) and s.pool and s.counters and len(s.engines) == 2
                and s, proc, log)
    assert got.generation == direct.generation
    assert got.classes == direct.classes and got.engines == direct.engines and got.pool == direct.pool
    assert got.counters == direct.counters  # the histogram buckets and dispatched counts, label for label


async def test_gateway_series_through_prometheus_and_a_missing_source(prometheus, sources):
    url, proc, log = prometheus
    _, gw = sources
    direct = extract(parse(gw.metrics()), "gateway")
    src = PromQueueCollector(QueueEndpoint("gw", "gateway", metrics_url(gw.url)), url, 60, selector='job="gateway"')
    got = _wait("gateway series", lambda: (s := src.query()) and len(s.engines) == 2 and s.counters and s, proc, log)
    assert got.classes == direct.classes and got.engines == direct.engines and got.counters == direct.counters
    view = await src.poll()
    assert src.health.ok and view.via == "prometheus" and view.klass("realtime").depth == 4
    assert view.engine("b").in_flight == 3 and view.engine("b").saturation_pct == pytest.approx(37.5)
    nothing = PromQueueCollector(QueueEndpoint("x", "epp", url), url, 60, selector='job="nope"')
    assert await nothing.poll() is None
    assert not nothing.health.ok and "Prometheus has no flow-control series" in nothing.health.last_error
