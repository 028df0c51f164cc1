"""CPU per collection cycle at 8 and 64 simulated engines.

    .venv/bin/python benchmarks/bench_collect.py

The simulator runs in a child process (``infertop sim``), so the CPU time
measured (``time.process_time`` of this process) is the collector's alone:
concurrent HTTP scrapes of /metrics and /health, parsing, extraction, window
update and derivation for every engine. Side by side, in the same run, a
baseline that only fetches /metrics and parses it with prometheus_client.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from infertop.demo import start_demo
from infertop.sources.fleet_collector import FleetCollector


async def measure(endpoints, cycles: int) -> tuple[float, float]:
    fc = FleetCollector(endpoints, interval_s=1.0, window_s=60.0)
    await fc.poll_once()  # connections and parser layouts warm, as in steady state
    ours = []
    for _ in range(cycles):
        t0 = time.process_time()
        await fc.poll_once()
        ours.append(time.process_time() - t0)
    await fc.aclose()
    base = []
    async with httpx.AsyncClient(trust_env=False) as client:
        async def one(url):
            r = await client.get(url + "/metrics")
            return sum(len(f.samples) for f in text_string_to_metric_families(r.text))

        await asyncio.gather(*(one(e.url) for e in endpoints))
        for _ in range(cycles):
            t0 = time.process_time()
            await asyncio.gather(*(one(e.url) for e in endpoints))
            base.append(time.process_time() - t0)
    return statistics.median(ours), statistics.median(base)


def main() -> int:
    print(f"{'engines':>7} {'infertop cycle':>15} {'fetch+prometheus_client':>24} {'ratio':>6}  (CPU ms, median)")
    for n in (8, 64):
        demo = start_demo(n, seed=3, load="steady", timeout_s=120)
        try:
            ours, base = asyncio.run(measure(demo.endpoints, cycles=15 if n == 64 else 30))
        finally:
            demo.stop()
        print(f"{n:7d} {ours * 1e3:15.1f} {base * 1e3:24.1f} {base / ours:5.1f}x"
              f"   → {ours * 100:.1f}% of a core at 1 s refresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
