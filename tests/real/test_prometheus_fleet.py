"""Engines through a real Prometheus (Debian package) scraping simulated engines
served on one port (``SimCluster(shared_port=0)``, file_sd targets), compared
with scraping the same engines directly; Prometheus stopped and restarted
mid-run; a target whose scrape fails (up == 0).

Needs /usr/bin/prometheus:
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus
Skipped without it, unless INFERTOP_REQUIRE_REAL=1 (then it fails).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from locations import REPO
from prom_sim_fleet import N, WINDOW_S, Driver, prometheus, sim, fleet_source, wait_for  # noqa: F401 — fixtures

from infertop.sources.prometheus.gpu import NO_SERIES
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import FRESH, STALE

pytestmark = pytest.mark.real_prometheus


class Slo:
    ttft_p99_s, itl_p95_s, e2e_p99_s, queue_p99_s, kv_cache_pct = 2.0, 0.04, 5.0, 1.0, 90.0


async def test_values_match_a_direct_scrape_of_the_same_engines(prometheus, sim):
    """Both sides' windows hold the same requests: the load runs for a few seconds inside the window, with
    frozen engines before and after it. (With load across the whole window, its edges — a scrape and a poll
    apart — held a different request or two, and a p99 over a few dozen requests moved a bucket.)"""
    pre_s, load_s = 6.0, 8.0
    direct = FleetCollector([EngineEndpoint(f"e{e.index}", e.url) for e in sim.engines], interval_s=1.0,
                            window_s=WINDOW_S)
    driver = Driver(sim)
    try:
        t0 = time.monotonic()
        await direct.run_for(pre_s)  # both sides see the frozen engines first …
        started = time.monotonic()
        driver.start()
        await direct.run_for(load_s)  # … then the load …
        driver.freeze()
        frozen = {e.index: (e.core.now) for e in sim.engines}
        # … then Prometheus scrapes the frozen engines (their counters no longer move)
        gen = lambda: {r["metric"]["instance"]: r["value"][1] for r in prometheus.query(  # noqa: E731
            "vllm:generation_tokens_total")}
        seen = [gen()]

        def settled() -> bool:
            time.sleep(1.1)  # a scrape interval and a bit: two equal reads in a row are the frozen values
            seen.append(gen())
            return seen[-1] == seen[-2]

        wait_for("a scrape of the frozen engines", settled, log=prometheus.log)
        # the window must start after the direct collector's first poll and a scrape before the load
        await asyncio.sleep(max(0.0, t0 + WINDOW_S + 1.5 - time.monotonic()))
        await direct.poll_once()
    finally:
        driver.freeze()
        await direct.aclose()
    assert {e.index: e.core.now for e in sim.engines} == frozen
    src = fleet_source(prometheus.url)
    res = src.refresh()
    assert time.monotonic() - WINDOW_S < started - 1.5, "too slow: the window no longer holds all the load"
    assert res.error is None and res.queries == 8 and res.engines == N and res.targets_down == 0
    by_url = {c.endpoint.url: c.stats[0] for c in src.collectors}
    scraped = {c.endpoint.url: c.stats[0] for c in direct.collectors}
    assert set(by_url) == set(scraped) == {e.url for e in sim.engines}
    names = {e.url: e.gpu.pod for e in sim.engines}
    for url, p in by_url.items():
        d = scraped[url]
        assert p.state == d.state == "up" and p.name == names[url] and p.model == d.model
        # gauges: the same frozen values
        for f in ("running", "waiting", "kv_cache_pct"):
            assert getattr(p, f) == pytest.approx(getattr(d, f), abs=1e-9), f
        # rates and quantiles over (almost) the same window: within tolerance
        for f in ("generation_tokens_per_s", "prompt_tokens_per_s", "requests_per_s"):
            assert getattr(p, f) == pytest.approx(getattr(d, f), rel=0.2, abs=0.05), f
        for f in ("ttft_p50_s", "ttft_p99_s", "itl_p95_s", "e2e_p99_s"):
            pv, dv = getattr(p, f), getattr(d, f)
            assert (pv is None) == (dv is None), f
            if pv is not None:
                # the same requests on both sides: the same buckets (a bucket first hit inside the window is
                # not extrapolated to the window's start by Prometheus, the others are: a few per cent)
                assert pv == pytest.approx(dv, rel=0.05), f
        assert p.prefix_cache_hit_pct == pytest.approx(d.prefix_cache_hit_pct, abs=5.0)
    # fleet totals through the joiner, and the headless snapshot through the real CLI
    joiner = FleetJoiner(src, slo=Slo(), refresh_s=1.0, window_s=WINDOW_S)
    joiner.observe()
    state = joiner.build()
    assert state.fleet.engines_up == N and state.all_fresh
    assert state.fleet.running == pytest.approx(sum(d.running for d in scraped.values()))
    assert state.fleet.ttft_p99_s is not None
    out = subprocess.run([sys.executable, "-m", "infertop", "snapshot", "--json", "--config", os.devnull,
                          "--prometheus", prometheus.url], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    doc = json.loads(out.stdout)
    assert {e["url"] for e in doc["engines"]} == set(by_url) and all(e["state"] == "up" for e in doc["engines"])
    proms = {s["name"]: s for s in doc["sources"] if s["kind"] == "prometheus"}
    assert proms[f"{prometheus.url} (engines)"]["ok"]
    # the same Prometheus as a GPU source says it has no dcgm-exporter series: degraded, exit 1
    assert proms[prometheus.url]["error"] == NO_SERIES and out.returncode == 1
    src.close()


def test_prometheus_stopped_mid_run_then_restarted_recovers_without_restarting(prometheus, sim):
    src = fleet_source(prometheus.url)
    joiner = FleetJoiner(src, slo=Slo(), refresh_s=1.0, window_s=WINDOW_S)
    assert src.refresh().error is None
    joiner.observe()
    assert sum(e.fresh for e in joiner.build().engines) == N
    prometheus.stop()
    res = src.refresh()
    assert res.error == "connection refused"
    joiner.observe()
    state = joiner.build()
    assert [e.freshness.status for e in state.engines] == [STALE] * N
    assert all(e.freshness.reason == "metrics stale (Prometheus unreachable: connection refused)"
               for e in state.engines)
    assert all(e.stats.running is not None for e in state.engines)  # the last good values, not zeros
    assert not state.all_fresh
    prometheus.start()  # same port, same data

    def recovered():
        src.refresh()
        joiner.observe()
        st = joiner.build()
        return all(e.freshness.status == FRESH for e in st.engines) and len(st.engines) == N and st

    state = wait_for("the engines fresh again", recovered, log=prometheus.log)
    assert [s.ok for s in state.sources if s.kind == "prometheus"] == [True]
    src.close()


def test_a_target_whose_scrape_fails_is_that_engine_down(prometheus, sim):
    src = fleet_source(prometheus.url)
    assert src.refresh().error is None
    sim.set_fault(2, "down")  # its path answers 503: Prometheus records up == 0
    try:
        def down():
            src.refresh()
            return src.last.targets_down == 1 and src

        wait_for("up == 0 for engine 2", down, log=prometheus.log)
        by_url = {c.endpoint.url: c for c in src.collectors}
        bad = by_url[sim.engines[2].url]
        assert bad.stats[0].state == "down" and not bad.health.ok
        assert bad.health.last_error == "target down in Prometheus (up == 0: its last scrape failed)"
        assert all(c.health.ok for u, c in by_url.items() if u != sim.engines[2].url)
        assert src.health.ok and src.health.last_error == f"partial: 1 of {N} targets down (up == 0)"
    finally:
        sim.set_fault(2, None)
    wait_for("engine 2 back", lambda: (src.refresh(), all(c.health.ok for c in src.collectors))[1],
          log=prometheus.log)
    src.close()
