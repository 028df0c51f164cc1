"""RSS and CPU of infertop watching 6 and 64 engines, and one engine with 20 000 label sets.

    .venv/bin/python benchmarks/bench_fleet_load.py [--seconds 30]
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/bench_fleet_load.py   # "before"

Every scenario runs in a fresh child process (so RSS is its own), for the
same number of seconds at a 1 s refresh, in two modes:

* ``collector``: the per-engine poll loops alone (``FleetCollector.run``);
* ``tui``: the whole app, headless (``InfertopApp.run_test``), polling on its
  own schedule and rendering — what an operator's terminal costs.

The engines are the simulator (``infertop sim``, a child process) or, for the
20 000-label-set case, a small HTTP server in a child process; so the CPU
measured (``time.process_time`` of the measuring process) is infertop's alone.
Reported: CPU as % of one core, RSS at the end (MiB), RSS growth over the run,
and for the fleets the per-engine cost of 64 engines relative to 6.
Only the public interfaces present on both old and new code are used, so the
same script measures "before" (another checkout on PYTHONPATH) and "after".
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time

MANY = 20_000


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def many_series_doc(n: int = MANY) -> bytes:
    rows = ["# TYPE vllm:num_requests_running gauge"]
    rows += [f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1' for i in range(n)]
    rows += ["# TYPE vllm:generation_tokens_total counter"]
    rows += [f'vllm:generation_tokens_total{{engine="{i}",model_name="m"}} {i}' for i in range(n)]
    return ("\n".join(rows) + "\n").encode()


def serve_many(port_q) -> None:
    """Child process: one engine-like server whose /metrics has MANY label sets."""
    doc = many_series_doc()
    bodies = {"/metrics": doc, "/health": b"", "/v1/models": b'{"data":[{"id":"m"}]}', "/version": b'{"version":"x"}'}

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            body = bodies.get(self.path, b"")
            self.send_response(200 if self.path in bodies else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    port_q.put(srv.server_address[1])
    parent = os.getppid()

    def orphaned() -> None:  # the measuring process was killed (a timeout): go too
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    srv.serve_forever()


async def run_collector(endpoints, seconds: float) -> None:
    from infertop.sources.fleet_collector import FleetCollector

    fc = FleetCollector(endpoints, interval_s=1.0, window_s=60.0)
    try:
        await asyncio.wait_for(fc.run(), seconds)
    except asyncio.TimeoutError:
        pass


async def run_tui(endpoints, seconds: float) -> None:
    from infertop.config import Config, GpuConfig
    from infertop.sources.gpu import GpuCollector
    from infertop.ui.app import InfertopApp, Settings

    app = InfertopApp(Settings(config=Config(), endpoints=endpoints), poll=True,
                      gpu_collector=GpuCollector(GpuConfig(nvml=False)))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await asyncio.sleep(seconds)


def child(scenario: str, mode: str, seconds: float) -> dict:
    """Run one scenario in this (fresh) process; the measurement as a dict."""
    from infertop.sources.vllm import EngineEndpoint

    demo = server = None
    if scenario == "many":
        q = multiprocessing.Queue()
        server = multiprocessing.Process(target=serve_many, args=(q,), daemon=True)
        server.start()
        endpoints = [EngineEndpoint("many", f"http://127.0.0.1:{q.get(timeout=30)}")]
        n = 1
    else:
        from infertop.demo import start_demo

        n = int(scenario)
        demo = start_demo(n, seed=3, load="steady", timeout_s=120)
        endpoints = demo.endpoints
    try:
        rss0 = rss_mib()
        peak = [rss0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.5):
                peak[0] = max(peak[0], rss_mib())

        threading.Thread(target=sample, daemon=True).start()
        cpu0, t0 = time.process_time(), time.monotonic()
        asyncio.run((run_tui if mode == "tui" else run_collector)(endpoints, seconds))
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        stop.set()
        return {"scenario": scenario, "mode": mode, "engines": n, "cpu_pct": 100 * cpu / wall,
                "rss_mib": rss_mib(), "rss_peak_mib": max(peak[0], rss_mib()), "rss_growth_mib": rss_mib() - rss0}
    finally:
        if demo is not None:
            demo.stop()
        if server is not None:
            server.terminate()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--child", nargs=2, metavar=("SCENARIO", "MODE"))
    ap.add_argument("--modes", default="collector,tui")
    ap.add_argument("--scenarios", default="6,64,many")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.seconds)))
        return 0
    import infertop

    print(f"infertop from {os.path.dirname(infertop.__file__)}, {args.seconds:g} s per scenario, 1 s refresh")
    print(f"{'mode':>9} {'scenario':>9} {'CPU % core':>11} {'RSS MiB':>8} {'peak':>7} {'growth':>7}", flush=True)
    results: dict[tuple[str, str], dict] = {}
    for mode in args.modes.split(","):
        for scenario in args.scenarios.split(","):
            limit_s = args.seconds * 4 + 120
            try:
                p = subprocess.run([sys.executable, __file__, "--child", scenario, mode, "--seconds", str(args.seconds)],
                                   capture_output=True, text=True, timeout=limit_s)
            except subprocess.TimeoutExpired:
                print(f"{mode:>9} {scenario:>9}  did not finish within {limit_s:g} s (the app never returned)", flush=True)
                continue
            try:
                r = json.loads(p.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                print(f"{mode:>9} {scenario:>9}  failed: {(p.stderr or p.stdout).strip()[-300:]}")
                continue
            results[(mode, scenario)] = r
            print(f"{mode:>9} {scenario:>9} {r['cpu_pct']:11.1f} {r['rss_mib']:8.0f} {r['rss_peak_mib']:7.0f}"
                  f" {r['rss_growth_mib']:7.0f}", flush=True)
    for mode in args.modes.split(","):
        a, b = results.get((mode, "6")), results.get((mode, "64"))
        if a and b:
            print(f"{mode}: per-engine CPU, 64 vs 6 engines: {(b['cpu_pct'] / 64) / (a['cpu_pct'] / 6):.2f}x; "
                  f"RSS growth per engine: {b['rss_growth_mib'] / 64:.2f} vs {a['rss_growth_mib'] / 6:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
