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
import threading
import time
from pathlib import Path

import httpx
import pytest
from ports import free_port
from locations import REPO
from prom_run import PROMETHEUS, require_prometheus

from infertop.config import PrometheusConfig
from infertop.sim import SimCluster
from infertop.sources.prometheus.gpu import NO_SERIES
from infertop.sources.prometheus.fleet import PromFleetSource
from infertop.sources.vllm import EngineEndpoint, FleetCollector
from infertop.state.fleet import FRESH, STALE, FleetJoiner

pytestmark = pytest.mark.real_prometheus

N = 4
WINDOW_S = 20.0


def _wait(what: str, cond, timeout_s: float = 60.0, log: Path | None = None):
    """Poll ``cond`` (a bounded loop) until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 — not there yet
            last = e
        else:
            if last:
                return last
        time.sleep(0.2)
    tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
    pytest.fail(f"timed out waiting for {what}; last: {last!r}\n{tail}")


class Prometheus:
    """One Prometheus process on a fixed port and data dir (so a restart keeps both)."""

    def __init__(self, tmp: Path, sim: SimCluster) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp
        self.log = tmp / "prometheus.log"
        targets = tmp / "targets.json"
        targets.write_text(json.dumps(sim.fleet.file_sd()))
        self.cfg = tmp / "prometheus.yml"
        self.cfg.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
            "scrape_configs:\n"
            "  - job_name: vllm\n"
            f"    file_sd_configs: [{{files: [\"{targets}\"], refresh_interval: 1s}}]\n"
            "    metric_relabel_configs: [{source_labels: [__name__], regex: '.*_created', action: drop}]\n"
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.cfg}", f"--storage.tsdb.path={self.tmp / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h"],
                stdout=fh, stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def query(self, promql: str) -> list:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=2, trust_env=False)
        return r.json()["data"]["result"]


class Driver:
    """Advances a ``realtime=False`` cluster on the wall clock in a thread, until frozen."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.1):
            now = time.monotonic()
            self.sim.advance(now - last, tick=0.1)
            last = now

    def start(self) -> "Driver":
        self._thread.start()
        return self

    def freeze(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


@pytest.fixture
def sim():
    with SimCluster(n_engines=N, seed=5, realtime=False, load="steady", shared_port=0, metrics_cache_s=0.0,
                    kubernetes_labels=True, http_metrics=False, process_metrics=False, dcgm=False,
                    base_rate=3.0) as c:
        c.advance(60, tick=0.25)  # counters and histograms with history
        yield c


@pytest.fixture
def prometheus(tmp_path, sim):
    require_prometheus()
    p = Prometheus(tmp_path, sim)
    p.start()
    try:
        _wait(f"{N} targets up with vllm series",
              lambda: len([r for r in p.query("up") if r["value"][1] == "1"]) == N
              and len(p.query("vllm:num_requests_running")) == N, log=p.log)
        yield p
    finally:
        p.stop()


def _source(url: str, **kw) -> PromFleetSource:
    cfg = PrometheusConfig(url=url, window_s=WINDOW_S, timeout_s=5, interval_s=1.0, **kw)
    return PromFleetSource(cfg)


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

        _wait("a scrape of the frozen engines", settled, log=prometheus.log)
        # the window must start after the direct collector's first poll and a scrape before the load
        await asyncio.sleep(max(0.0, t0 + WINDOW_S + 1.5 - time.monotonic()))
        await direct.poll_once()
    finally:
        driver.freeze()
        await direct.aclose()
    assert {e.index: e.core.now for e in sim.engines} == frozen
    src = _source(prometheus.url)
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
    src = _source(prometheus.url)
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

    state = _wait("the engines fresh again", recovered, log=prometheus.log)
    assert [s.ok for s in state.sources if s.kind == "prometheus"] == [True]
    src.close()


def test_a_target_whose_scrape_fails_is_that_engine_down(prometheus, sim):
    src = _source(prometheus.url)
    assert src.refresh().error is None
    sim.set_fault(2, "down")  # its path answers 503: Prometheus records up == 0
    try:
        def down():
            src.refresh()
            return src.last.targets_down == 1 and src

        _wait("up == 0 for engine 2", down, log=prometheus.log)
        by_url = {c.endpoint.url: c for c in src.collectors}
        bad = by_url[sim.engines[2].url]
        assert bad.stats[0].state == "down" and not bad.health.ok
        assert bad.health.last_error == "target down in Prometheus (up == 0: its last scrape failed)"
        assert all(c.health.ok for u, c in by_url.items() if u != sim.engines[2].url)
        assert src.health.ok and src.health.last_error == f"partial: 1 of {N} targets down (up == 0)"
    finally:
        sim.set_fault(2, None)
    _wait("engine 2 back", lambda: (src.refresh(), all(c.health.ok for c in src.collectors))[1],
          log=prometheus.log)
    src.close()
