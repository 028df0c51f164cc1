"""CPU cost of GPU telemetry collection.

1. One NVML collection of 8 GPUs (fake pynvml from tests/, so this measures
   infertop's side plus a Python fake; real NVML calls are ctypes calls into
   the driver — see the per-collection call count printed).
2. dcgm-exporter: parse + build rows for 64 GPUs (warm parser = same layout as
   the previous scrape, as with a real exporter; cold = new layout), and a
   full scrape over loopback HTTP (server in another process, so the CPU time
   measured is the client's only) of one 64-GPU endpoint and of 8 endpoints
   with 8 GPUs each.

Run: .venv/bin/python benchmarks/bench_gpu.py
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from fake_pynvml import FakeNvml, FakeProc, h100  # noqa: E402

from infertop.sim.dcgm import SimGpu, render_dcgm  # noqa: E402
from infertop.sources.dcgm import DcgmSource, LabelCache, parse_dcgm  # noqa: E402
from infertop.sources.expfmt import Parser  # noqa: E402
from infertop.sources.nvml import NvmlSource  # noqa: E402


def per_call(fn, n: int) -> tuple[float, float]:
    """(CPU seconds per call, wall seconds per call) over ``n`` calls."""
    fn()  # warm
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        fn()
    return (time.process_time() - c0) / n, (time.perf_counter() - w0) / n


def bench_nvml() -> None:
    gpus = [h100(i, procs=[FakeProc(10_000 + i, 70_000 * 1024 * 1024)]) for i in range(8)]
    nv = FakeNvml(gpus)
    src = NvmlSource(nvml_module=nv, host="bench", read_proc=False)
    src.collect()
    nv.tick(1.0)
    src.collect()
    nv.calls.clear()
    src.collect()
    calls = sum(nv.calls.values())

    def one() -> None:
        nv.tick(1.0)
        src.collect()

    cpu, wall = per_call(one, 2000)
    # the fake's own share: replay the same calls straight on the fake
    h = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(8)]

    def fake_only() -> None:
        for x in h:
            nv.nvmlDeviceGetUtilizationRates(x)
            nv.nvmlDeviceGetMemoryInfo(x, nv.nvmlMemory_v2)
            nv.nvmlDeviceGetTemperature(x, 0)
            nv.nvmlDeviceGetPowerUsage(x)
            nv.nvmlDeviceGetEnforcedPowerLimit(x)
            nv.nvmlDeviceGetClockInfo(x, 1)
            nv.nvmlDeviceGetClockInfo(x, 2)
            nv.nvmlDeviceGetCurrentClocksEventReasons(x)
            nv.nvmlDeviceGetTotalEccErrors(x, 0, 0)
            nv.nvmlDeviceGetTotalEccErrors(x, 1, 0)
            nv.nvmlDeviceGetRemappedRows(x)
            nv.nvmlDeviceGetFieldValues(x, [197, 198])
            nv.nvmlDeviceGetPerformanceState(x)
            nv.nvmlDeviceGetComputeRunningProcesses_v3(x)
            nv.nvmlDeviceGetMigMode(x)

    fcpu, _ = per_call(fake_only, 2000)
    print(f"NVML, 8 GPUs: {cpu * 1e3:.3f} ms CPU per collection ({wall * 1e3:.3f} ms wall), "
          f"of which the fake ~{fcpu * 1e3:.3f} ms; {calls} NVML calls per collection")


def dcgm_text(n: int, host: str, seed: int) -> str:
    gpus = []
    for i in range(n):
        g = SimGpu(i, seed, hostname=host, pod=f"vllm-{i}", namespace="inference", container="vllm")
        g.advance(5.0, 4.0, 1000)
        gpus.append(g)
    return render_dcgm(gpus)


def bench_parse(text: str) -> None:
    p = Parser()
    cache = LabelCache()

    def warm() -> None:
        parse_dcgm(p.parse(text), cache=cache)

    def cold() -> None:
        parse_dcgm(Parser().parse(text))

    wcpu, _ = per_call(warm, 300)
    ccpu, _ = per_call(cold, 100)
    rows = parse_dcgm(Parser().parse(text))
    print(f"dcgm parse + rows, {len(rows)} GPUs ({len(text) / 1024:.0f} KiB): warm {wcpu * 1e3:.2f} ms, "
          f"cold {ccpu * 1e3:.2f} ms CPU")


# A static file server with a listen backlog larger than http.server's 5 (8
# concurrent connects overflow that and cost a SYN retransmit).
SERVER = """
import functools, http.server, sys
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
S(("127.0.0.1", int(sys.argv[1])), functools.partial(H, directory=sys.argv[2])).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_http(one_big: str, nodes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "all").mkdir()
        Path(d, "all", "metrics").write_text(one_big)
        for i, t in enumerate(nodes):
            Path(d, f"node{i}").mkdir()
            Path(d, f"node{i}", "metrics").write_text(t)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), d],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    if httpx.get(base + "/all/metrics", trust_env=False).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            asyncio.run(_http_runs(base, len(nodes)))
        finally:
            server.terminate()
            server.wait(timeout=10)


async def _http_runs(base: str, n_nodes: int) -> None:
    async with httpx.AsyncClient(trust_env=False) as cl:
        for label, urls in (("1 endpoint x 64 GPUs", [base + "/all/metrics"]),
                            (f"{n_nodes} endpoints x 8 GPUs", [f"{base}/node{i}/metrics" for i in range(n_nodes)])):
            src = DcgmSource(urls, timeout_s=5)
            rows, health = await src.poll(cl)
            assert len(rows) == 64 and all(h.ok for h in health), health
            n = 100
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                await src.poll(cl)
            cpu, wall = (time.process_time() - c0) / n, (time.perf_counter() - w0) / n
            print(f"dcgm scrape over loopback HTTP, {label}: {cpu * 1e3:.2f} ms CPU (client), "
                  f"{wall * 1e3:.2f} ms wall per poll")


def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    bench_nvml()
    big = dcgm_text(64, "node-all", 1)
    bench_parse(big)
    nodes = [dcgm_text(8, f"node-{i}", 100 + i) for i in range(8)]
    bench_http(big, nodes)


if __name__ == "__main__":
    main()
