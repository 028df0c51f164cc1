"""A real Prometheus (Debian package) scraping ``N`` simulated engines served on one port
(``SimCluster(shared_port=0)``, file_sd targets), for the tests that read engines through it:
the ``sim`` and ``prometheus`` fixtures, a wall-clock ``Driver``, ``fleet_source(url)`` and ``wait_for``."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from ports import free_port
from prom_run import PROMETHEUS, require_prometheus

from infertop.config import PrometheusConfig
from infertop.sim import SimCluster
from infertop.sources.prometheus.fleet import PromFleetSource

N = 4
WINDOW_S = 20.0


def wait_for(what: str, cond, timeout_s: float = 60.0, log: Path | None = None):
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
    """One Prometheus on a fixed port and data dir (a restart keeps both), scraping ``static`` targets or
    the ``file_sd`` target groups every ``scrape_s``."""

    def __init__(self, tmp: Path, scrape_s: float, static: list[str] | None = None,
                 file_sd: list[dict] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp, self.log = tmp, tmp / "prometheus.log"
        if file_sd is not None:
            sd = tmp / "targets.json"
            sd.write_text(json.dumps(file_sd))
            targets = f"    file_sd_configs: [{{files: [\"{sd}\"], refresh_interval: 1s}}]\n"
        else:
            targets = f"    static_configs: [{{targets: {json.dumps(static)}}}]\n"
        self.cfg = tmp / "prometheus.yml"
        self.cfg.write_text(
            f"global:\n  scrape_interval: {int(scrape_s * 1000)}ms\n  scrape_timeout: {int(scrape_s * 900)}ms\n"
            "scrape_configs:\n  - job_name: vllm\n" + targets
            + "    metric_relabel_configs: [{source_labels: [__name__], regex: '.*_created', action: drop}]\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.cfg}", f"--storage.tsdb.path={self.tmp / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h"],
                stdout=fh, stderr=subprocess.STDOUT)

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
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5, trust_env=False)
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
    p = Prometheus(tmp_path, 1.0, file_sd=sim.fleet.file_sd())
    p.start()
    try:
        wait_for(f"{N} targets up with vllm series",
              lambda: len([r for r in p.query("up") if r["value"][1] == "1"]) == N
              and len(p.query("vllm:num_requests_running")) == N, log=p.log)
        yield p
    finally:
        p.stop()


def fleet_source(url: str, **kw) -> PromFleetSource:
    cfg = PrometheusConfig(url=url, window_s=WINDOW_S, timeout_s=5, interval_s=1.0, **kw)
    return PromFleetSource(cfg)
