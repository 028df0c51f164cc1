"""Queries and infertop CPU per refresh at 50 and 500 engines through a real Prometheus.

    .venv/bin/python benchmarks/bench_prometheus.py [--sizes 50,500] [--refreshes 20] [--scrape 5]

For each fleet size: ``infertop sim --engines N --shared-port 0 --file-sd …``
(a child process) serves the engines on one port; a real Prometheus (Debian
package, a child process) scrapes them as N targets; this process then runs
the Prometheus fleet source's refresh once a second, each followed by the
fleet joiner's tick (what the TUI does), and measures per refresh:

* HTTP queries sent (the claim: a fixed handful, whatever N);
* wall time of the refresh (Prometheus' answer included) — target ≤ 1 s;
* this process' CPU (``time.process_time``) for the refresh and the tick,
  as % of one core at a 1 s refresh — target < 10 % at 500 engines.

For reference, side by side in the same run: the CPU of scraping the same
engines directly (``FleetCollector``, one poll per engine per second) at the
smallest size, and the CPU the sim and Prometheus used meanwhile.
Needs /usr/bin/prometheus. Prints a Markdown table (``--out FILE`` writes it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infertop.config import PrometheusConfig  # noqa: E402
from infertop.sources.prometheus.fleet import PromFleetSource  # noqa: E402
from infertop.state.fleet_join import FleetJoiner  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
TICKS = os.sysconf("SC_CLK_TCK")


class Slo:
    ttft_p99_s, itl_p95_s, e2e_p99_s, queue_p99_s, kv_cache_pct = 2.0, 0.04, 5.0, 1.0, 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    """utime + stime of a process (and its reaped children), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS


def wait(what: str, cond, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 — not there yet
            pass
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def query(url: str, promql: str) -> list:
    return httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10, trust_env=False).json()["data"][
        "result"]


def start_sim(n: int, tmp: Path) -> tuple[subprocess.Popen, list[str]]:
    targets = tmp / "targets.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "infertop", "sim", "--engines", str(n), "--shared-port", "0", "--file-sd",
         str(targets), "--kubernetes-labels", "--lean", "--load", "steady", "--warmup", "30",
         "--metrics-cache", "1"],
        stdout=subprocess.PIPE, text=True, env=env)
    urls = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("engine "):
            urls.append(line.split()[2])
        if line.strip() == "ready":
            break
    return proc, urls


def start_prometheus(tmp: Path, scrape_s: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cfg = tmp / "prometheus.yml"
    cfg.write_text(
        # Prometheus durations are integers: milliseconds
        f"global:\n  scrape_interval: {round(scrape_s * 1000)}ms\n  scrape_timeout: {round(scrape_s * 900)}ms\n"
        "scrape_configs:\n  - job_name: vllm\n"
        f"    file_sd_configs: [{{files: [\"{tmp / 'targets.json'}\"], refresh_interval: 5s}}]\n"
        "    metric_relabel_configs: [{source_labels: [__name__], regex: '.*_created', action: drop}]\n")
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=2h"],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def measure_prometheus(url: str, n: int, refreshes: int, window_s: float) -> dict:
    src = PromFleetSource(PrometheusConfig(url=url, window_s=window_s, timeout_s=10, interval_s=1.0))
    joiner = FleetJoiner(src, slo=Slo(), refresh_s=1.0, window_s=window_s)
    src.refresh()  # connection set up, first parse
    walls, cpus, queries, engines, alone = [], [], [], [], []
    for _ in range(refreshes):
        started = time.monotonic()
        c0 = time.process_time()
        busy = src._latency_futures is not None  # a quantile round still running in Prometheus
        res = src.refresh()
        if not busy and src._latency_futures is None:
            alone.append(res.latency_s)
        joiner.observe()
        state = joiner.build()
        cpus.append(time.process_time() - c0)
        walls.append(res.latency_s)
        queries.append(res.queries)
        engines.append(sum(e.fresh for e in state.engines))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    src.close()
    return {"n": n, "queries": max(queries), "queries_min": min(queries), "fresh": min(engines),
            "wall_mean_s": statistics.mean(walls), "wall_max_s": max(walls),
            "alone_n": len(alone), "alone_mean_s": statistics.mean(alone) if alone else None,
            "alone_max_s": max(alone) if alone else None,
            "cpu_mean_s": statistics.mean(cpus), "cpu_max_s": max(cpus)}


def measure_direct(urls: list[str], seconds: float) -> float:
    """CPU % of one core of scraping every engine directly once a second for ``seconds``."""
    from infertop.sources.vllm import EngineEndpoint
    from infertop.sources.fleet_collector import FleetCollector

    col = FleetCollector([EngineEndpoint(f"e{i}", u) for i, u in enumerate(urls)], interval_s=1.0, window_s=30.0)

    async def go() -> float:
        await col.run_for(3)  # warm: first polls, clients, parser layouts
        c0, t0 = time.process_time(), time.monotonic()
        await col.run_for(seconds)
        cpu = time.process_time() - c0
        await col.aclose()
        return 100.0 * cpu / (time.monotonic() - t0)

    return asyncio.run(go())


def run_size(n: int, args, direct: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-prom-") as d:
        tmp = Path(d)
        sim, urls = start_sim(n, tmp)
        prom, url = start_prometheus(tmp, args.scrape)
        try:
            wait(f"{n} targets up", lambda: sum(r["value"][1] == "1" for r in query(url, "up")) == n, 180)
            window = f"{args.window:g}s"
            wait("rates over the window",
                 lambda: len(query(url, f"rate(vllm:generation_tokens_total[{window}])")) == n, 180)
            s0, p0 = cpu_s(sim.pid), cpu_s(prom.pid)
            t0 = time.monotonic()
            row = measure_prometheus(url, n, args.refreshes, args.window)
            dt = time.monotonic() - t0
            row["sim_cpu_pct"] = 100.0 * (cpu_s(sim.pid) - s0) / dt
            row["prom_cpu_pct"] = 100.0 * (cpu_s(prom.pid) - p0) / dt
            row["direct_cpu_pct"] = measure_direct(urls, args.refreshes) if direct else None
            return row
        finally:
            for p in (prom, sim):
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def table(rows: list[dict], args) -> str:
    out = [f"Prometheus scrape interval {args.scrape:g} s, rate window {args.window:g} s, "
           f"{args.refreshes} refreshes at 1 s per size; CPU is this process' (the refresh and the tick).", "",
           "| engines | HTTP queries / refresh | fresh engines | refresh wall mean / max | … with no quantile round "
           "in flight (n) | infertop CPU / refresh mean / max | infertop % of a core at 1 s | direct scraping % of a "
           "core | sim % | Prometheus % |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        direct = "—" if r["direct_cpu_pct"] is None else f"{r['direct_cpu_pct']:.1f}"
        q = f"{r['queries']}" if r["queries"] == r["queries_min"] else f"{r['queries_min']}–{r['queries']}"
        alone = ("—" if r["alone_mean_s"] is None else
                 f"{r['alone_mean_s'] * 1000:.0f} / {r['alone_max_s'] * 1000:.0f} ms ({r['alone_n']})")
        out.append(f"| {r['n']} | {q} | {r['fresh']} | {r['wall_mean_s'] * 1000:.0f} / {r['wall_max_s'] * 1000:.0f} ms"
                   f" | {alone} | {r['cpu_mean_s'] * 1000:.0f} / {r['cpu_max_s'] * 1000:.0f} ms"
                   f" | {100 * r['cpu_mean_s']:.1f} | {direct} | {r['sim_cpu_pct']:.0f} | {r['prom_cpu_pct']:.0f} |")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        out += ["", f"{b['n']} vs {a['n']} engines ({b['n'] / a['n']:g}×): queries {b['queries']} vs {a['queries']}, "
                    f"CPU per refresh ×{b['cpu_mean_s'] / a['cpu_mean_s']:.1f}, "
                    f"wall per refresh ×{b['wall_mean_s'] / a['wall_mean_s']:.1f}."]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="50,500")
    p.add_argument("--refreshes", type=int, default=20)
    p.add_argument("--scrape", type=float, default=5.0, help="Prometheus scrape interval, s")
    p.add_argument("--window", type=float, default=30.0, help="rate window, s")
    p.add_argument("--out", help="also write the Markdown table here")
    args = p.parse_args()
    if not os.path.exists(PROMETHEUS):
        print(f"{PROMETHEUS} not found (apt-get install prometheus)", file=sys.stderr)
        return 2
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    for i, n in enumerate(sizes):
        rows.append(run_size(n, args, direct=(i == 0)))
        print(json.dumps(rows[-1]), file=sys.stderr)
    text = table(rows, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
