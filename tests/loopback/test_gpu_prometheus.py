"""GPU rows through a real Prometheus (Debian package) scraping the simulator's
dcgm-exporter endpoints, compared with a direct scrape of the same endpoint.

Needs /usr/bin/prometheus:
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus
Skipped without it, unless INFERTOP_REQUIRE_REAL=1 (then it fails).
"""

from __future__ import annotations

import httpx
import pytest
from ports import free_port
from prom_run import hostport, running_prometheus, wait_until_up

from infertop.config import GpuConfig, PrometheusConfig
from infertop.sim import SimCluster
from infertop.sources.dcgm import DcgmSource
from infertop.sources.gpu import GpuCollector
from infertop.sources.prometheus.gpu import NO_SERIES, PromGpuSource

pytestmark = pytest.mark.real_prometheus

COMPARED = ("host", "index", "uuid", "name", "util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes",
            "temp_c", "mem_temp_c", "power_w", "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "last_xid",
            "retired_pages", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "gr_engine_active_pct",
            "tensor_active_pct", "dram_active_pct", "pod", "namespace", "container", "pci_bus_id", "driver_version",
            "ecc_corrected", "fan_pct", "power_limit_w")


@pytest.fixture
def sim():
    with SimCluster(n_engines=3, seed=11, realtime=False, load="steady", kubernetes_labels=True) as c:
        c.advance(90)  # frozen from here on: Prometheus and the direct scrape see the same values
        yield c


@pytest.fixture
def prometheus(tmp_path, sim):
    engines = ", ".join(f'"{hostport(e.url)}"' for e in sim.engines)
    with running_prometheus(tmp_path,
                            f"  - job_name: dcgm\n    static_configs:\n      - targets: [\"{hostport(sim.dcgm_url)}\"]\n"
                            # the same GPUs again, through each engine's own endpoint: rows must not double
                            f"  - job_name: dcgm-per-engine\n    metrics_path: /dcgm/metrics\n"
                            f"    static_configs:\n      - targets: [{engines}]\n", targets_up=4) as running:
        yield running


async def test_prometheus_rows_match_a_direct_dcgm_scrape(prometheus, sim):
    url, proc, log = prometheus
    src = PromGpuSource(url, timeout_s=5)
    # wait until every field's series has been scraped once
    rows = wait_until_up("3 GPUs with all fields", lambda: (r := src.collect()) and len(r) == 3
                 and all(g.pcie_rx_bytes_per_s is not None and g.dram_active_pct is not None for g in r) and r,
                 proc, log)
    assert src.health.ok and src.health.kind == "prometheus" and src.health.last_error is None
    async with httpx.AsyncClient(trust_env=False) as cl:
        direct, health = await DcgmSource([sim.dcgm_url]).poll(cl)
    assert health[0].ok and len(direct) == 3
    for p, d in zip(rows, direct):
        assert p.source == "prometheus" and d.source == "dcgm"
        for f in COMPARED:
            pv, dv = getattr(p, f), getattr(d, f)
            if isinstance(dv, float):
                assert pv == pytest.approx(dv, rel=1e-9, abs=1e-6), f
            else:
                assert pv == dv, f
    # "no data" stays None, a real 0 stays 0
    assert rows[0].last_xid == 0 and rows[0].retired_pages == 0
    assert rows[0].ecc_corrected is None and rows[0].fan_pct is None and rows[0].power_limit_w is None
    assert rows[1].slowdowns  # the simulator's hot GPU, seen through Prometheus
    src.close()


async def test_prometheus_through_the_collector_and_its_errors(prometheus, sim):
    url, proc, log = prometheus
    wait_until_up("GPU series", lambda: len(PromGpuSource(url).collect()) == 3, proc, log)
    c = GpuCollector(GpuConfig(nvml=False), PrometheusConfig(url=url, timeout_s=5))
    rows, health = await c.poll()
    await c.aclose()
    assert len(rows) == 3 and [(h.kind, h.ok) for h in health] == [("prometheus", True)]
    assert {g.pod for g in rows} == {g.pod for g in sim.gpus}
    # dcgm URLs given explicitly: Prometheus is not asked for GPUs
    c = GpuCollector(GpuConfig(nvml=False), PrometheusConfig(url=url), dcgm_urls=[sim.dcgm_url])
    assert c.prom is None
    c.close()
    # a Prometheus without dcgm series says so
    empty = PromGpuSource(url, selector='job="no-such-job"')
    assert empty.collect() == [] and empty.health.last_error == NO_SERIES and not empty.health.ok
    # a Prometheus that is not there
    dead = PromGpuSource(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    assert dead.collect() == [] and dead.health.last_error == "connection refused"
    assert dead.health.consecutive_failures == 1
