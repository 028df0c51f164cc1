"""Added latency of ``infertop gateway`` versus calling the engine directly, and vllm-router as
the reference — side by side in one run, on loopback, against the simulator.

Streaming chat completions (``max_tokens`` 4) are sent open-loop at a fixed rate by one
load-client process (started once, a warm connection pool per target); per request it records
the time to the first byte of the body (the simulator sends the first chunk at once, so TTFB is
the HTTP path alone) and the total time. The targets — direct, infertop gateway, vllm-router
(and with ``--asyncio-gateway`` the gateway without uvloop) — alternate in short rounds, their
order rotated each round, so that each comparison is side by side in time on a busy machine.
The load average is sampled each round; the proxies' CPU time (from /proc) per 1000 requests is
reported, and the cost of the /metrics page (hand-written text vs prometheus_client).

    python benchmarks/bench_gateway.py [--rates 200,1000] [--sweep 250,300,400,500,700] [--duration 20]
                                       [--sweep-duration 8] [--round 1] [--asyncio-gateway]
                                       [--nice -10] [--before TREE] [--router PATH]
                                       [--out benchmarks/bench_gateway.md]

vllm-router is looked up at ~/.cache/vllm-router-venv/bin/vllm-router (install it
there: ``python3 -m venv ~/.cache/vllm-router-venv && ~/.cache/vllm-router-venv/bin/pip
install vllm-router``); without it its columns say "not installed".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTES = """## Notes

- Stack: the client port is a hand-written HTTP/1.1 server on asyncio Protocols (`infertop/gateway/http1.py`)
  and the engines are reached through a pool of keep-alive connections, also Protocols
  (`infertop/gateway/upstream_pool.py`); both parse with httptools (uvicorn's C parser), on uvloop's event
  loop. Per request: one read of the client's request, one write of the upstream request (head and body in
  one buffer), then each piece the engine sends is written to the client from the socket callback as it
  arrives (re-framed as one chunk each; the head leaves with the first body bytes) — no task switch per
  chunk, no buffering, no join. The admin API stays on aiohttp (its own port, not on the request path).
  "gateway before" is the previous stack (aiohttp server and client session), run from another checkout
  with `--before`.
- Where the CPU goes (py-spy --native at 400 req/s): about two thirds in system calls — one write to the
  client per streamed piece, the reads, and epoll — which passing chunks through one by one needs; on
  loopback a send also runs the receiver's side of TCP. The gateway's Python code (parse callbacks,
  classify, queue, dispatch, relay) is the remaining ~25-30 %.
- The simulator sets TCP_NODELAY on its connections like uvicorn does (since this version): before, Nagle's
  algorithm held each streamed chunk until the previous write was ACKed, and a proxy's connection, which sends
  nothing back, delays that ACK ~40 ms — the ~42 ms first byte that earlier runs showed for vllm-router (and,
  in a later run, for both gateways) was the simulator's, not the proxies'.
- /metrics is written as text by hand: the page and each observation are several times cheaper than
  prometheus_client's (line above), and a scrape never takes the event loop for long.
- Two CPUs are shared by the client, the simulator, the proxies and whatever else the machine runs (its load
  average is in the table): a p99 is a few requests stalled by the scheduler (a monitor inside the gateway
  saw event-loop stalls of 50-100 ms with under 5 ms of the thread's CPU — the process waiting for a CPU),
  so the alternating rounds are what make a row comparable with the direct row beside it; a negative
  "added" figure is noise. At 1000 req/s the machine is saturated: even the direct path's p99 is hundreds
  of ms and the client falls behind its schedule ("client lag max"), so that row ranks the proxies' CPU
  cost rather than their added latency.
"""
ROUTER = Path.home() / ".cache" / "vllm-router-venv" / "bin" / "vllm-router"
BODY = json.dumps({"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4, "stream": True})


# ----------------------------------------------------------------------------------- client


async def _client(session, url: str, rate: float, duration_s: float) -> dict:
    """Open-loop: one request every 1/rate s for duration_s, whatever the answers do."""
    n = int(rate * duration_s)
    ttfb: list[float] = []
    total: list[float] = []
    kinds: dict[str, int] = {}
    lag_max = 0.0
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.01
    tasks = []
    for i in range(n):
        at = t0 + i / rate
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lag_max = max(lag_max, loop.time() - at)
        tasks.append(asyncio.create_task(_one(session, url, ttfb, total, kinds)))
    results = await asyncio.gather(*tasks)
    return {"ttfb": ttfb, "total": total, "errors": sum(1 for ok in results if not ok), "sent": n,
            "lag_max_s": lag_max, "error_kinds": kinds}


async def _one(s, url: str, ttfb: list, total: list, kinds: dict) -> bool:
    import aiohttp

    t = time.perf_counter()
    try:
        async with s.post(url + "/v1/chat/completions", data=BODY,
                          headers={"Content-Type": "application/json"}) as r:
            first = await r.content.readany()
            t1 = time.perf_counter()
            rest = await r.read()
            t2 = time.perf_counter()
            if r.status != 200 or not (first + rest).rstrip().endswith(b"[DONE]"):
                key = f"http {r.status}"
                kinds[key] = kinds.get(key, 0) + 1
                return False
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        key = type(e).__name__
        kinds[key] = kinds.get(key, 0) + 1
        return False
    ttfb.append(t1 - t)
    total.append(t2 - t)
    return True


async def _client_server() -> None:
    """The load client as its own process: one JSON command a line on stdin
    (``{"url", "rate", "duration_s"}``), one JSON result a line on stdout. It keeps a warm
    connection pool per target, so the short alternating rounds never measure connection setup."""
    import aiohttp

    sessions: dict[str, aiohttp.ClientSession] = {}
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := await reader.readline():
            cmd = json.loads(line)
            url = cmd["url"]
            s = sessions.get(url)
            if s is None:
                s = sessions[url] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                          timeout=aiohttp.ClientTimeout(total=30))
                await asyncio.gather(*(_one(s, url, [], [], {}) for _ in range(64)))  # warm the pool
            res = await _client(s, url, cmd["rate"], cmd["duration_s"])
            sys.stdout.write(json.dumps(res) + "\n")
            sys.stdout.flush()
    finally:
        for s in sessions.values():
            await s.close()


class LoadClient:
    """The client process, started once for the whole run."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--client-server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=_env())

    def run(self, url: str, rate: float, duration_s: float) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"url": url, "rate": rate, "duration_s": duration_s}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the load client died")
        return json.loads(line)


# ----------------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(root: Path = ROOT) -> dict:
    return {**os.environ, "PYTHONPATH": str(root)}


def _wait_http(url: str, timeout_s: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")
            time.sleep(0.2)


def start_sim() -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([sys.executable, "-m", "infertop", "sim", "--engines", "1", "--load", "none",
                          "--max-num-seqs", "4096", "--print-urls"], stdout=subprocess.PIPE, text=True, env=_env())
    url = p.stdout.readline().strip()
    while p.stdout.readline().strip() != "ready":
        pass
    return p, url


def start_gateway(engine_url: str, tmp: Path, uvloop: bool = True, root: Path = ROOT) -> tuple[subprocess.Popen, str]:
    cfg = tmp / "gateway.yaml"
    cfg.write_text(f"gateway:\n  engines: [{{name: sim, url: '{engine_url}', cap: 100000}}]\n"
                   "  vllm_waiting_max: 1000000\n  kv_cache_max_pct: 100\n  max_queue: 1000000\n")
    argv = ["--config", str(cfg), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
    cmd = [sys.executable, "-m", "infertop", "gateway", *argv]
    if not uvloop:  # the same gateway on asyncio's own event loop, to measure what uvloop brings
        cmd = [sys.executable, "-c", "import sys; from infertop import event_loop; event_loop.USE_UVLOOP = False; from infertop.gateway import cli; "
                                     f"sys.exit(cli.main({argv!r}))"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=_env(root))
    url = p.stdout.readline().split()[1]
    return p, url


def start_router(router: Path, engine_url: str) -> tuple[subprocess.Popen | None, str | None]:
    if not router.exists():
        return None, None
    port = _free_port()
    p = subprocess.Popen([str(router), "--worker-urls", engine_url, "--host", "127.0.0.1", "--port", str(port),
                          "--policy", "round_robin", "--prometheus-port", str(_free_port()),
                          "--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url + "/health", 60)
    except RuntimeError:
        p.kill()
        return None, None
    return p, url


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------------- stats


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1000:.2f}"


def metrics_cost() -> dict[str, float]:
    """µs per /metrics render and per wait observation: hand-written text vs prometheus_client."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from infertop.gateway.metrics import WAIT_BUCKETS_S, GatewayMetrics
    from infertop.gateway.policy import ClassState, EngineState, Policy

    classes = ["realtime", "batch", "background"]
    engines = [f"e{i}" for i in range(6)]
    pol = Policy([ClassState(c, 100 - 40 * i, 1, 10) for i, c in enumerate(classes)],
                 [EngineState(e, "http://x", 8) for e in engines], default_class="batch")
    for c in classes:
        for e in engines:
            pol.dispatch_counts[(c, e)] = 1000
    gm = GatewayMetrics()
    reg = CollectorRegistry()
    h = Histogram("infertop_gateway_queue_wait_seconds", "w", ["class"], buckets=WAIT_BUCKETS_S, registry=reg)
    d = Counter("infertop_gateway_dispatches", "d", ["class", "engine"], registry=reg)
    g = Gauge("infertop_gateway_queue_size", "q", ["class", "priority"], registry=reg)
    for name in ("class_weight", "class_priority", "class_max_wait_seconds"):
        gg = Gauge(f"infertop_gateway_{name}", "x", ["class"], registry=reg)
        for c in classes:
            gg.labels(c).set(1)
    for name in ("engine_in_flight", "engine_cap", "engine_draining", "engine_up"):
        gg = Gauge(f"infertop_gateway_{name}", "x", ["engine"], registry=reg)
        for e in engines:
            gg.labels(e).set(1)
    for c in classes:
        g.labels(c, "1").set(0)
        for e in engines:
            d.labels(c, e).inc(1000)
    n = 20000
    t = time.perf_counter()
    for i in range(n):
        gm.observe_wait("batch", 0.003)
    own_obs = (time.perf_counter() - t) / n
    hb = h.labels("batch")
    t = time.perf_counter()
    for i in range(n):
        hb.observe(0.003)
    lib_obs = (time.perf_counter() - t) / n
    for c in classes:
        gm.observe_wait(c, 0.01)
        h.labels(c).observe(0.01)
    m = 300
    t = time.perf_counter()
    for _ in range(m):
        gm.render(pol, 0.0)
    own_render = (time.perf_counter() - t) / m
    t = time.perf_counter()
    for _ in range(m):
        generate_latest(reg)
    lib_render = (time.perf_counter() - t) / m
    return {"own_observe_us": own_obs * 1e6, "lib_observe_us": lib_obs * 1e6,
            "own_render_us": own_render * 1e6, "lib_render_us": lib_render * 1e6}


# ----------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="200,1000", help="rates of the main table (req/s)")
    ap.add_argument("--sweep", default="250,300,400,500,700", help="further rates for the highest rate under 5 ms")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per target at each table rate")
    ap.add_argument("--sweep-duration", type=float, default=8.0, help="seconds per target at each sweep rate")
    ap.add_argument("--round", type=float, default=1.0, help="seconds per target in one alternating round")
    ap.add_argument("--asyncio-gateway", action="store_true",
                    help="also measure the gateway on asyncio's own event loop (no uvloop)")
    ap.add_argument("--before", type=Path, metavar="TREE",
                    help="also measure the gateway of another checkout (e.g. the main branch) beside this one")
    ap.add_argument("--router", type=Path, default=ROUTER)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "bench_gateway.md")
    ap.add_argument("--nice", type=int, default=0,
                    help="scheduling priority change for this run and every process it starts (all targets "
                         "alike; negative needs root) — on a busy machine it keeps other work from dominating")
    args = ap.parse_args()
    if args.nice:
        try:
            os.nice(args.nice)
        except PermissionError:
            print(f"bench: cannot change priority by {args.nice}; running as is", file=sys.stderr)
            args.nice = 0
    rates = [float(r) for r in args.rates.split(",")]
    sweep = [float(r) for r in args.sweep.split(",") if r]
    procs: list[subprocess.Popen] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    rows: list[str] = []
    loads: dict[float, list[float]] = {}
    load_before = os.getloadavg()
    try:
        sim, sim_url = start_sim()
        procs.append(sim)
        gw, gw_url = start_gateway(sim_url, tmp)
        procs.append(gw)
        targets = [("direct", sim_url, None), ("infertop gateway", gw_url, gw.pid)]
        if args.asyncio_gateway:
            gw2, gw2_url = start_gateway(sim_url, tmp, uvloop=False)
            procs.append(gw2)
            targets.append(("gateway, asyncio loop", gw2_url, gw2.pid))
        if args.before:
            gw3, gw3_url = start_gateway(sim_url, tmp, root=args.before.resolve())
            procs.append(gw3)
            targets.append((f"gateway before ({args.before.name})", gw3_url, gw3.pid))
        router, router_url = start_router(args.router, sim_url)
        if router is not None:
            procs.append(router)
        targets.append(("vllm-router", router_url, router.pid) if router else ("vllm-router", None, None))
        for _, url, _ in targets:
            if url:
                _wait_http(url + "/health")
        client = LoadClient()
        procs.append(client.proc)
        live = [t for t in targets if t[1]]
        results: dict[tuple[str, float], dict] = {}
        cpu: dict[tuple[str, float], float] = {}

        def measure(rate: float, duration_s: float) -> None:
            """Short rounds, targets alternating (order rotated each round), so that every
            comparison is side by side in time and a burst of other work hits all targets alike."""
            n_rounds = max(1, round(duration_s / args.round))
            for i in range(n_rounds):
                loads.setdefault(rate, []).append(os.getloadavg()[0])
                order = live[i % len(live):] + live[:i % len(live)]
                for name, url, pid in order:
                    c0 = cpu_s(pid) if pid else 0.0
                    r = client.run(url, rate, args.round)
                    acc = results.setdefault((name, rate), {"ttfb": [], "total": [], "errors": 0, "sent": 0,
                                                            "lag_max_s": 0.0, "error_kinds": {}})
                    acc["ttfb"] += r["ttfb"]
                    acc["total"] += r["total"]
                    acc["errors"] += r["errors"]
                    acc["sent"] += r["sent"]
                    acc["lag_max_s"] = max(acc["lag_max_s"], r["lag_max_s"])
                    for k, v in r["error_kinds"].items():
                        acc["error_kinds"][k] = acc["error_kinds"].get(k, 0) + v
                    if pid:
                        cpu[(name, rate)] = cpu.get((name, rate), 0.0) + cpu_s(pid) - c0
            for name, _, pid in live:
                r = results[(name, rate)]
                if pid:
                    cpu[(name, rate)] = cpu[(name, rate)] / max(1, r["sent"]) * 1000
                print(f"{name:>22} @ {rate:6.0f}/s: ttfb p50 {ms(pct(r['ttfb'], .5))} p99 "
                      f"{ms(pct(r['ttfb'], .99))} ms, total p99 {ms(pct(r['total'], .99))} ms, "
                      f"errors {r['errors']}/{r['sent']} {r['error_kinds'] or ''}, "
                      f"client lag max {r['lag_max_s'] * 1000:.1f} ms", file=sys.stderr)

        for rate in rates:
            measure(rate, args.duration)
        rows.append("| rate (req/s) | target | TTFB p50 | TTFB p99 | total p50 | total p99 | added TTFB p50 / p99 "
                    "| errors | CPU s / 1000 req | client lag max | load avg (1 min) |")
        rows.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for rate in rates:
            base = results.get(("direct", rate))
            ld = loads.get(rate) or [0.0]
            load = f"{min(ld):.1f}–{max(ld):.1f}"
            for name, url, pid in targets:
                r = results.get((name, rate))
                if r is None:
                    rows.append(f"| {rate:.0f} | {name} | not installed | | | | | | | | |")
                    continue
                added = "—"
                if name != "direct" and base and r["ttfb"] and base["ttfb"]:
                    added = (f"{ms(pct(r['ttfb'], .5) - pct(base['ttfb'], .5))} / "
                             f"{ms(pct(r['ttfb'], .99) - pct(base['ttfb'], .99))}")
                c = cpu.get((name, rate))
                rows.append(f"| {rate:.0f} | {name} | {ms(pct(r['ttfb'], .5))} | {ms(pct(r['ttfb'], .99))} | "
                            f"{ms(pct(r['total'], .5))} | {ms(pct(r['total'], .99))} | {added} | "
                            f"{r['errors']}/{r['sent']} | {'—' if c is None else f'{c:.3f}'} | "
                            f"{ms(r['lag_max_s'])} | {load} |")
        best: dict[str, float | None] = {}
        failed: dict[str, bool] = {}
        sweep_rows = []
        for rate in sorted(set(sweep) | set(rates)):
            if (("direct", rate)) not in results:
                measure(rate, args.sweep_duration)
            base = results[("direct", rate)]
            cells = []
            for name, url, _ in targets[1:]:
                r = results.get((name, rate))
                if r is None:
                    cells.append("—")
                    continue
                if not r["ttfb"] or not base["ttfb"]:
                    cells.append("all failed ✗")
                    continue
                added = pct(r["ttfb"], .99) - pct(base["ttfb"], .99)
                ok = added < 0.005 and r["errors"] == 0
                # the highest rate met with every lower rate met too: a pass above a failure is noise
                if ok and not failed.get(name):
                    best[name] = rate
                failed[name] = failed.get(name, False) or not ok
                best.setdefault(name, None)
                cells.append(f"{ms(added)}{'' if ok else ' ✗'}")
            ld = loads.get(rate) or [0.0]
            sweep_rows.append(f"| {rate:.0f} | {ms(pct(base['ttfb'], .99))} | " + " | ".join(cells)
                              + f" | {min(ld):.1f}–{max(ld):.1f} |")
        cost = metrics_cost()
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    out = [
        "# infertop gateway: added latency (benchmarks/bench_gateway.py)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; loopback; one simulated engine (`infertop sim`, max_num_seqs 4096); "
        "streaming chat completions, max_tokens 4, open-loop at a fixed rate from a separate client process. "
        f"Targets alternate in rounds of {args.round:g} s (order rotated each round), {args.duration:g} s per "
        f"target at each table rate and {args.sweep_duration:g} s at each sweep rate, so each comparison is side "
        "by side in time. Times in ms. The client, the simulator and the proxy share the machine's CPUs, so the "
        "absolute figures include their contention; compare the rows of one rate. Load average (1 min) at the "
        "start {:.1f}, at the end {:.1f} (per rate: the range seen at the start of its rounds); this run's "
        "processes ran at nice {:+d}.".format(load_before[0], os.getloadavg()[0], args.nice),
        "",
        *rows,
        "",
        "Sweep: p99 TTFB added over direct at the same rate (✗: 5 ms or more, or errors).",
        "",
        "| rate | direct TTFB p99 | " + " | ".join(n for n, _, _ in targets[1:]) + " | load avg |",
        "|---|---|" + "---|" * len(targets),
        *sweep_rows,
        "",
        "Highest rate with p99 added TTFB < 5 ms and no error, at it and at every lower rate measured: " + ", ".join(
            f"{n}: {'none' if best.get(n) is None else f'{best[n]:.0f} req/s'}" for n, u, _ in targets[1:] if u),
        "",
        "/metrics cost (3 classes, 6 engines): hand-written text "
        f"{cost['own_render_us']:.0f} µs per page, {cost['own_observe_us']:.2f} µs per wait observation; "
        f"prometheus_client {cost['lib_render_us']:.0f} µs per page, {cost['lib_observe_us']:.2f} µs per observation.",
        "",
        NOTES,
    ]
    args.out.write_text("\n".join(out))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--client-server"]:
        asyncio.run(_client_server())
        sys.exit(0)
    sys.exit(main())
