"""dcgm-exporter source over real loopback HTTP: the simulator's exporter, and
hand-written exporter text (both hostname spellings, pod labels, -o names, MIG)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from dcgm_text import H100_VALUES, exporter_text, gpu_labels

from infertop.domain.gpu import classify
from infertop.sim import SimCluster
from infertop.sources.dcgm import DcgmEndpoint, DcgmSource, lean_client, normalize_url, parse_dcgm
from infertop.sources.expfmt import parse
from infertop.sources.gpu import GpuCollector
from infertop.sources.http_client import size_text
from infertop.config import GpuConfig

MiB = 1024 * 1024


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(trust_env=False)


# -- the simulator ---------------------------------------------------------------


@pytest.fixture
def sim():
    with SimCluster(n_engines=3, seed=7, realtime=False, load="steady", kubernetes_labels=True) as c:
        c.gpus[1].cooling_loss_c = 20.0  # the poorly cooled GPU reaches its thermal slowdown (see test_gpu_ui)
        c.advance(90)
        yield c


async def test_scrape_the_simulated_exporter(sim):
    src = DcgmSource([sim.dcgm_url], timeout_s=5)
    async with client() as cl:
        rows, health = await src.poll(cl)
    assert [h.ok for h in health] == [True] and health[0].kind == "dcgm" and health[0].last_error is None
    assert len(rows) == 3
    for g, sg in zip(rows, sim.gpus):
        v = sg.values()
        assert g.source == "dcgm" and g.source_url == sim.dcgm_url and g.state == "ok"
        assert g.host == "sim-node-0" and g.name == "NVIDIA H100 80GB HBM3" and g.uuid.startswith("GPU-")
        assert g.util_pct == v["DCGM_FI_DEV_GPU_UTIL"]
        assert g.mem_used_bytes == v["DCGM_FI_DEV_FB_USED"] * MiB
        total = v["DCGM_FI_DEV_FB_USED"] + v["DCGM_FI_DEV_FB_FREE"] + v["DCGM_FI_DEV_FB_RESERVED"]
        assert g.mem_total_bytes == total * MiB
        assert g.temp_c == v["DCGM_FI_DEV_GPU_TEMP"]
        assert g.power_w == pytest.approx(v["DCGM_FI_DEV_POWER_USAGE"], abs=1e-3)
        assert g.sm_clock_mhz == v["DCGM_FI_DEV_SM_CLOCK"]
        assert g.last_xid == 0 and g.retired_pages == 0
        assert g.pod == sg.pod and g.namespace == "inference" and g.container == "vllm"
        assert g.tensor_active_pct == pytest.approx(100 * v["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"], abs=1e-3)
        assert g.pcie_tx_bytes_per_s == pytest.approx(v["DCGM_FI_PROF_PCIE_TX_BYTES"], rel=1e-6)
        assert g.throttle_reasons is not None
    assert [g.index for g in rows] == [0, 1, 2]
    # GPU 1 is the simulator's badly cooled one: hot, SM clock down, a thermal reason set
    hot = rows[1]
    assert hot.slowdowns and "Thermal" in hot.slowdowns[0]
    assert hot.sm_clock_mhz < 1980
    assert classify(hot).startswith("throttled (")


async def test_per_engine_endpoints_and_dedup_in_the_collector(sim):
    per_engine = [e.url + "/dcgm/metrics" for e in sim.engines]
    src = DcgmSource(per_engine, timeout_s=5)
    async with client() as cl:
        rows, health = await src.poll(cl)
    assert all(h.ok for h in health) and len(rows) == 3
    # the node exporter and the per-engine endpoints describe the same GPUs
    c = GpuCollector(GpuConfig(nvml=False), dcgm_urls=[sim.dcgm_url, *per_engine])
    merged, health = await c.poll()
    await c.aclose()
    assert len(health) == 4 and all(h.ok for h in health)
    assert sorted(g.uuid for g in merged) == sorted(g.uuid for g in rows)


async def test_lower_case_hostname_from_the_simulator():
    with SimCluster(n_engines=2, seed=3, realtime=False, load="none", hostname="node-b",
                    hostname_label="hostname") as c:
        async with client() as cl:
            rows, _ = await DcgmSource([c.dcgm_url]).poll(cl)
    assert [g.host for g in rows] == ["node-b", "node-b"]
    assert all(g.pod is None for g in rows)


# -- hand-written exporter text ------------------------------------------------------


async def test_both_hostname_spellings_and_pod_labels(scripted):
    new = exporter_text([
        (gpu_labels(0, "GPU-aaaa", "hostname", "node-new", container="vllm", namespace="llm", pod="vllm-0"),
         H100_VALUES),
        (gpu_labels(1, "GPU-bbbb", "hostname", "node-new"), {**H100_VALUES, "DCGM_FI_DEV_XID_ERRORS": 79,
                                                             "DCGM_FI_DEV_GPU_UTIL": 0}),
    ])
    old = exporter_text([  # dcgm-exporter -o: uuid / pod_name / pod_namespace / container_name
        (gpu_labels(0, "GPU-cccc", "Hostname", "node-old", uuid_key="uuid", container_name="vllm",
                    pod_namespace="batch", pod_name="vllm-7"), H100_VALUES),
    ])
    no_host = exporter_text([(gpu_labels(0, "GPU-dddd", None), {"DCGM_FI_DEV_GPU_UTIL": 3})])
    s = scripted()
    s.routes["/new"] = (200, new)
    s.routes["/old"] = (200, old)
    s.routes["/nohost/metrics"] = (200, no_host)
    src = DcgmSource([s.url + "/new", s.url + "/old", s.url + "/nohost/metrics"])
    async with client() as cl:
        rows, health = await src.poll(cl)
    assert [h.ok for h in health] == [True, True, True]
    by = {g.uuid: g for g in rows}
    a, b, c, d = by["GPU-aaaa"], by["GPU-bbbb"], by["GPU-cccc"], by["GPU-dddd"]
    assert (a.host, b.host, c.host, d.host) == ("node-new", "node-new", "node-old", "127.0.0.1")
    assert (a.pod, a.namespace, a.container) == ("vllm-0", "llm", "vllm")
    assert (b.pod, b.namespace, b.container) == (None, None, None)
    assert (c.pod, c.namespace, c.container) == ("vllm-7", "batch", "vllm")
    # units and derived fields
    assert a.mem_used_bytes == 74066 * MiB and a.mem_total_bytes == (74066 + 6963 + 530) * MiB
    assert a.power_w == 688.25 and a.temp_c == 87 and a.mem_temp_c == 92
    assert a.throttle_reasons == ("HwThermalSlowdown", "SwPowerCap")
    assert a.retired_pages == 2 and a.last_xid == 0
    assert a.gr_engine_active_pct == pytest.approx(97) and a.dram_active_pct == pytest.approx(52)
    assert a.pcie_tx_bytes_per_s == 1.5e9 and a.pcie_rx_bytes_per_s == 2.5e8
    assert a.driver_version == "570.124.06" and a.pci_bus_id == "00000000:18:00.0"
    assert a.power_limit_w is None and a.sm_clock_max_mhz is None  # not in the default counters: n/a
    assert classify(a) == "throttled (HW thermal)"
    assert b.last_xid == 79 and classify(b) == "error (XID 79)"
    assert d.util_pct == 3 and d.mem_used_bytes is None and classify(d) == "idle"


async def test_mig_labels_become_mig_devices(scripted):
    parent = gpu_labels(0, "GPU-mig0", model="NVIDIA A100-SXM4-40GB")
    text = exporter_text([
        (parent, {"DCGM_FI_DEV_GPU_TEMP": 51, "DCGM_FI_DEV_POWER_USAGE": 238.6, "DCGM_FI_DEV_SM_CLOCK": 1410}),
        ({**parent, "GPU_I_PROFILE": "3g.20gb", "GPU_I_ID": "2", "pod": "vllm-a", "namespace": "llm"},
         {"DCGM_FI_DEV_FB_USED": 17010, "DCGM_FI_DEV_FB_FREE": 2958, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.8}),
        ({**parent, "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "9", "pod": "vllm-b", "namespace": "llm"},
         {"DCGM_FI_DEV_FB_USED": 13, "DCGM_FI_DEV_FB_FREE": 4851, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0}),
        # a second GPU on the node whose parent has no series of its own
        ({**gpu_labels(1, "GPU-mig1", model="NVIDIA A100-SXM4-40GB"), "GPU_I_PROFILE": "7g.40gb", "GPU_I_ID": "0"},
         {"DCGM_FI_DEV_FB_USED": 30000, "DCGM_FI_DEV_FB_FREE": 9000}),
    ])
    s = scripted()
    s.routes["/metrics"] = (200, text)
    async with client() as cl:
        rows, health = await DcgmSource([s.url]).poll(cl)
    assert health[0].ok and health[0].name == s.url + "/metrics"
    assert [g.uuid for g in rows] == ["GPU-mig0", "GPU-mig1"]
    p0, p1 = rows
    assert p0.mig_mode and p0.temp_c == 51 and p0.power_w == 238.6
    assert [(m.gpu_instance_id, m.mig_profile, m.pod) for m in p0.mig_devices] == [(2, "3g.20gb", "vllm-a"),
                                                                                   (9, "1g.5gb", "vllm-b")]
    m = p0.mig_devices[0]
    assert m.mem_used_bytes == 17010 * MiB and m.mem_total_bytes == (17010 + 2958) * MiB
    assert m.name == "NVIDIA A100-SXM4-40GB MIG 3g.20gb" and m.label == "gpu0/mig2"
    assert classify(m) == "busy" and classify(p0.mig_devices[1]) == "idle"
    assert p1.mig_mode and p1.name == "NVIDIA A100-SXM4-40GB" and [x.mig_profile for x in p1.mig_devices] == ["7g.40gb"]


@pytest.mark.parametrize("kind", ["lean", "httpx"])
async def test_endpoint_failures_are_per_endpoint(scripted, kind):
    """The same errors through the lean client (the app's) and through an httpx client (scripts)."""
    good = scripted()
    good.routes["/metrics"] = (200, exporter_text([(gpu_labels(0, "GPU-ok"), {"DCGM_FI_DEV_GPU_UTIL": 50})]))
    bad = scripted()
    bad.routes["/404"] = (404, "nope")
    bad.routes["/garbage"] = (200, "this is { not metrics\n")
    bad.routes["/vllm"] = (200, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n")
    bad.hang.add("/hang")
    # a port nobody listens on (outside the range servers binding port 0 draw from)
    from ports import free_port

    dead = f"http://127.0.0.1:{free_port()}/metrics"
    urls = [good.url + "/metrics", bad.url + "/404", bad.url + "/garbage", bad.url + "/vllm", bad.url + "/hang", dead]
    src = DcgmSource(urls, timeout_s=0.5)
    if kind == "httpx":
        async with client() as cl:
            rows, health = await src.poll(cl)
            rows2, health2 = await src.poll(cl)
    else:
        lean = lean_client()
        try:
            rows, health = await src.poll(lean)
            rows2, health2 = await src.poll(lean)
        finally:
            await lean.aclose()
    assert [g.uuid for g in rows] == ["GPU-ok"]
    errs = [h.last_error for h in health]
    assert errs[0] is None and health[0].ok
    assert errs[1] == "HTTP 404"
    assert errs[2].startswith("garbage metrics (line 1")
    assert errs[3] == "no DCGM_FI_ metrics (is this a dcgm-exporter?)"
    assert errs[4] == "timeout after 0.5 s"
    assert errs[5] == "connection refused"
    assert [h.consecutive_failures for h in health2] == [0, 2, 2, 2, 2, 2]


async def test_polls_keep_one_connection_and_bound_the_body(scripted):
    """Without a client given, an endpoint scrapes over its own keep-alive connection;
    a body over the limit is refused with the size, before it is read."""
    s = scripted()
    body = exporter_text([(gpu_labels(i, f"GPU-{i}"), {"DCGM_FI_DEV_GPU_UTIL": 50}) for i in range(8)])
    assert len(body) > 1536
    s.routes["/metrics"] = (200, body)
    ep = DcgmEndpoint(s.url)
    try:
        for _ in range(3):
            rows = await ep.poll()
            assert [g.util_pct for g in rows] == [50.0] * 8 and ep.health.ok
        assert ep.client().opened == 1 and s.hits["/metrics"] == 3
        assert await ep.poll(limit=1024) == []
        assert ep.health.last_error == f"response too large ({size_text(len(body))} announced; the limit is 1 KiB)"
        assert size_text(len(body)) != "1 KiB"
        assert (await ep.poll()) and ep.health.ok  # the refusal cost the connection, not the endpoint
    finally:
        await ep.aclose()


async def test_the_exporters_cached_sample_served_again_is_not_parsed_again(scripted):
    """dcgm-exporter answers with its last collection until the next one: a body the same as the
    last poll's gives the same rows without a parse; a new body, or garbage, is read as it is."""
    s = scripted()
    body = exporter_text([(gpu_labels(i, f"GPU-{i}"), {"DCGM_FI_DEV_GPU_UTIL": 50}) for i in range(2)])
    s.routes["/metrics"] = (200, body)
    ep = DcgmEndpoint(s.url)
    try:
        first = await ep.poll()
        assert [g.util_pct for g in first] == [50.0, 50.0] and ep.documents_parsed == 1
        again = await ep.poll()
        assert again == first and ep.health.ok and ep.documents_parsed == 1 and s.hits["/metrics"] == 2
        s.routes["/metrics"] = (200, body.replace(" 50\n", " 60\n"))
        assert [g.util_pct for g in await ep.poll()] == [60.0, 60.0] and ep.documents_parsed == 2
        s.routes["/metrics"] = (200, "not { metrics\n")
        assert await ep.poll() == [] and ep.health.last_error.startswith("garbage metrics")
        s.routes["/metrics"] = (200, body)  # the first body again, after garbage: read afresh
        assert [g.util_pct for g in await ep.poll()] == [50.0, 50.0] and ep.documents_parsed == 3 and ep.health.ok
    finally:
        await ep.aclose()


async def test_collector_scrapes_over_kept_alive_connections(scripted):
    s = scripted()
    s.routes["/metrics"] = (200, exporter_text([(gpu_labels(0, "GPU-a"), {"DCGM_FI_DEV_GPU_UTIL": 7})]))
    c = GpuCollector(GpuConfig(nvml=False, dcgm=[s.url]))
    try:
        for _ in range(3):
            rows, health = await c.poll()
            assert [g.util_pct for g in rows] == [7.0] and [h.ok for h in health] == [True]
        assert c._http().opened == 1
    finally:
        await c.aclose()
    assert c._client is None


def test_parse_without_http_and_url_normalisation():
    text = exporter_text([(gpu_labels(3, "GPU-x"), {"dcgm_gpu_utilization": 12, "dcgm_fb_used": 100,
                                                    "dcgm_fb_free": 900})])
    (g,) = parse_dcgm(parse(text))
    assert g.index == 3 and g.util_pct == 12 and g.mem_total_bytes == 1000 * MiB  # 1.x names
    assert normalize_url("gpu-node:9400") == "http://gpu-node:9400/metrics"
    assert normalize_url("http://h:9400/") == "http://h:9400/metrics"
    assert normalize_url("https://h/dcgm/metrics") == "https://h/dcgm/metrics"


# -- combining sources, snapshot ------------------------------------------------------


async def test_collector_merges_nvml_and_dcgm_rows_of_the_same_gpu(scripted):
    from fake_pynvml import FakeNvml, FakeProc, h100

    nv = FakeNvml([h100(0, procs=[FakeProc(4321, 1000 * MiB)]), h100(1)])
    uuid0 = nv.gpus[0].uuid
    s = scripted()
    s.routes["/metrics"] = (200, exporter_text([
        (gpu_labels(0, uuid0.upper(), container="vllm", namespace="llm", pod="vllm-0"),
         {"DCGM_FI_DEV_GPU_UTIL": 50, "DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_PROF_DRAM_ACTIVE": 0.3}),
        (gpu_labels(5, "GPU-elsewhere", host="node-9"), {"DCGM_FI_DEV_GPU_UTIL": 10}),
    ]))
    c = GpuCollector(GpuConfig(nvml=True, dcgm=[s.url]), nvml_module=nv)
    rows, health = await c.poll()
    await c.aclose()
    assert [(h.kind, h.ok) for h in health] == [("nvml", True), ("dcgm", True)]
    assert len(rows) == 3
    local = next(g for g in rows if g.uuid == uuid0)
    assert local.source == "nvml" and local.util_pct == 97.0  # NVML wins where both have a value
    assert (local.pod, local.namespace) == ("vllm-0", "llm")  # dcgm fills what NVML lacks
    assert local.dram_active_pct == pytest.approx(30) and [p.pid for p in local.processes] == [4321]
    assert any(g.uuid == "GPU-elsewhere" and g.host == "node-9" for g in rows)


def test_nothing_configured_says_how_to_enable():
    c = GpuCollector(GpuConfig(nvml=False))
    rows, health = c.collect()
    assert rows == [] and len(health) == 1 and not health[0].ok
    assert "gpu.dcgm" in health[0].last_error and "prometheus.url" in health[0].last_error


async def test_gpu_snapshot_is_json(sim, capsys):
    import json

    from infertop.config import Config
    from infertop.gpu_snapshot import gpu_snapshot_async, main

    doc = await gpu_snapshot_async(Config(gpu=GpuConfig(nvml=False)), [sim.dcgm_url])
    json.dumps(doc)
    assert [g["label"] for g in doc["gpus"]] == ["gpu0", "gpu1", "gpu2"]
    assert doc["gpus"][1]["status"].startswith("throttled") and doc["gpus"][1]["throttle"]
    assert doc["sources"][0]["kind"] == "dcgm" and doc["sources"][0]["ok"]
    rc = await asyncio.to_thread(main, ["--no-nvml", "--dcgm", sim.dcgm_url, "--count", "1"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(out["gpus"]) == 3 and out["gpus"][0]["mem_pct"] > 50


def test_blank_sentinels_and_nan_are_no_data():
    text = exporter_text([(gpu_labels(0, "GPU-blank"), {
        "DCGM_FI_DEV_GPU_UTIL": 2147483632, "DCGM_FI_DEV_GPU_TEMP": "NaN", "DCGM_FI_DEV_POWER_USAGE": 140737488355328.0,
        "DCGM_FI_DEV_FB_USED": 0, "DCGM_FI_PROF_PCIE_TX_BYTES": 5.2e10})])
    (g,) = parse_dcgm(parse(text))
    assert g.util_pct is None and g.temp_c is None and g.power_w is None
    assert g.mem_used_bytes == 0 and g.pcie_tx_bytes_per_s == 5.2e10
