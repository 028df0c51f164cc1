"""Cost of the SLO computation per tick (analysis/slo SloWatch: class assignment, stage budgets, bad requests
from each engine's cumulative buckets, burn windows, the capacity answer, cost) at 6 and 500 engines, side by
side with the tick without it (FleetJoiner.build over the same collectors).

    .venv/bin/python benchmarks/bench_slo.py [--ticks 120]

The engines are collector-shaped objects at the I/O boundary: each keeps a real CounterWindow fed with a
vLLM-like point per tick (four histograms of 16 buckets: ttft, itl, e2e, queue, plus the counters), and
EngineStats derived from it by the real domain.engine_stats.derive — as a poll leaves them. Each tick
advances a fake clock by 1 s. Reported: median and p95 wall time per tick of the build, of the SLO update
(engine_windows + buckets_of + SloWatch.update, as the app runs it), and the ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass, field

from infertop.domain.engine_stats import derive
from infertop.analysis.slo.report import SloWatch, buckets_of, engine_windows
from infertop.config import SloClassesConfig, SloConfig
from infertop.domain.engine import EngineStats
from infertop.domain.source import SourceHealth
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_join import FleetJoiner
from infertop.domain.window import CounterWindow

LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, float("inf"))
HISTS = {"ttft": 0.4, "itl": 0.03, "e2e": 4.0, "queue": 0.05}  # typical value of each (seconds)


@dataclass
class Engine:
    endpoint: EngineEndpoint
    window: CounterWindow = field(default_factory=lambda: CounterWindow(60.0))
    cum: dict = field(default_factory=dict)
    stats: list = field(default_factory=list)
    health: SourceHealth | None = None

    @property
    def windows(self) -> dict:
        return {("", ""): self.window}

    def poll(self, t: float, rng: random.Random) -> None:
        n = rng.randint(3, 8)  # requests finished this second
        c = self.cum
        for k, v in (("requests", n), ("prompt_tokens", 800 * n), ("generation_tokens", 200 * n)):
            c[k] = c.get(k, 0.0) + v
        for hist, typical in HISTS.items():
            for _ in range(n):
                x = rng.expovariate(1 / typical)
                for le in LE:
                    if x <= le:
                        key = f"{hist}@{'+Inf' if le == float('inf') else le}"
                        c[key] = c.get(key, 0.0) + 1
            for le in LE:  # cumulative: a bucket counts every observation up to its bound
                key = f"{hist}@{'+Inf' if le == float('inf') else le}"
                c.setdefault(key, 0.0)
        self.window.add(t, dict(c))
        base = EngineStats(self.endpoint.name, self.endpoint.url, state="up", model="m", max_num_seqs=16)
        self.stats = [derive(base, self.window, {"running": 10.0, "waiting": 0.0, "kv_usage": 0.6})]
        self.health = SourceHealth(self.endpoint.name, "vllm", ok=True, last_ok_at=t, latency_s=0.01)


@dataclass
class Fleet:
    collectors: list


def run(n_engines: int, ticks: int) -> dict:
    rng = random.Random(5)
    engines = [Engine(EngineEndpoint(f"e{i}", f"http://127.0.0.1:{9000 + i}")) for i in range(n_engines)]
    clock = {"t": 1_800_000_000.0, "mono": 1000.0}
    joiner = FleetJoiner(Fleet(engines), slo=SloConfig(), refresh_s=1.0, window_s=60.0,
                         wall=lambda: clock["t"], mono=lambda: clock["mono"])
    watch = SloWatch(SloClassesConfig())
    build_s, slo_s = [], []
    for _ in range(ticks):
        clock["t"] += 1.0
        clock["mono"] += 1.0
        for e in engines:
            e.poll(clock["mono"], rng)
        t0 = time.perf_counter()
        state = joiner.build()
        t1 = time.perf_counter()
        watch.update(state, buckets_of(engine_windows(engines)))
        t2 = time.perf_counter()
        build_s.append(t1 - t0)
        slo_s.append(t2 - t1)
    keep = slice(ticks // 6, None)  # past the warm-up (the class fits settle after 10 ticks)
    b, s = sorted(build_s[keep]), sorted(slo_s[keep])
    return {"engines": n_engines, "build_ms": 1e3 * statistics.median(b), "build_p95_ms": 1e3 * b[int(0.95 * len(b))],
            "slo_ms": 1e3 * statistics.median(s), "slo_p95_ms": 1e3 * s[int(0.95 * len(s))]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=120)
    args = ap.parse_args()
    print(f"{'engines':>8} {'tick ms':>9} {'p95':>7} {'SLO ms':>8} {'p95':>7} {'SLO/tick':>9}")
    for n in (6, 500):
        r = run(n, args.ticks if n <= 6 else max(30, args.ticks // 4))
        print(f"{r['engines']:>8} {r['build_ms']:>9.2f} {r['build_p95_ms']:>7.2f} {r['slo_ms']:>8.2f} "
              f"{r['slo_p95_ms']:>7.2f} {r['slo_ms'] / r['build_ms']:>8.2f}×")


if __name__ == "__main__":
    main()
