"""A real Prometheus (the Debian package) for the loopback tests: ``running_prometheus`` starts one on
a free loopback port with the scrape configs given, ``wait_until_up`` polls a condition while
checking that it still runs, ``require_prometheus`` skips (or, with INFERTOP_REQUIRE_REAL=1, fails)
without the binary; ``hostport`` is a URL's host:port, as a scrape config names a target."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from ports import free_port


PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def require_prometheus() -> None:
    if os.path.exists(PROMETHEUS):
        return
    msg = (f"{PROMETHEUS} not found — install it: apt-get update && "
           "DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus")
    if os.environ.get("INFERTOP_REQUIRE_REAL") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def hostport(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def wait_until_up(what: str, cond, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0):
    """Poll ``cond`` (a bounded loop) until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 — not up yet
            last = e
        else:
            if last:
                return last
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}; last: {last!r}\n{log.read_text()[-2000:]}")


@contextlib.contextmanager
def running_prometheus(tmp_path: Path, scrape_configs: str, targets_up: int | None = None):
    """A real Prometheus on a free loopback port scraping ``scrape_configs`` every second; yields
    (url, proc, log) — once ``targets_up`` targets are up, when given — and stops it on the way out."""
    require_prometheus()
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n" + scrape_configs)
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=2h"],
            stdout=fh, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        if targets_up is not None:
            def all_up():
                r = httpx.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=2, trust_env=False).json()
                res = r["data"]["result"]
                return len(res) == targets_up and all(x["value"][1] == "1" for x in res)

            wait_until_up(f"up == 1 for the {targets_up} targets", all_up, proc, log)
        yield url, proc, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
