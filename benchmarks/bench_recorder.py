"""Flight recorder: bytes per 24 h, CPU per hour of recording, seek time.

    .venv/bin/python benchmarks/bench_recorder.py [--hours H] [--out DIR]

Synthesizes fleet-state documents for 8 engines + 8 GPUs at 1 s on a fake
clock: about 30 numeric fields per engine and 15 per GPU, varying slowly as a
loaded fleet does, plus alerts and source health. Rates and percentiles are
derived from simulated counters over a sliding window, the way the collector
derives them, so they carry full float precision (the incompressible part).
Then it replays: random seeks, and a full sequential read.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import os
import random
import sys
import tempfile
import time
import zlib

from infertop.state.recording.recorder import Recorder, encode_block
from infertop.state.recording.replay import Replay

ENGINES = 8
GPUS = 8
T0 = 1_764_489_600.0  # a fixed wall-clock origin: the run is reproducible
QUANTILES = ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p95_s", "e2e_p95_s", "e2e_p99_s", "queue_p99_s")
COUNTERS = ("requests", "prompt_tokens", "generation_tokens", "preemptions", "prefix_hits", "prefix_queries")


class FleetSynth:
    """A fleet whose load follows a daily curve with noise; one doc per tick."""

    def __init__(self, seed: int = 7, window_s: float = 60.0) -> None:
        self.rng = random.Random(seed)
        self.window_s = window_s
        self.counters = [{c: 0 for c in COUNTERS} for _ in range(ENGINES)]
        self.history: list[list[tuple[float, dict[str, int]]]] = [[] for _ in range(ENGINES)]
        self.energy_j = [0] * GPUS
        self.level = [self.rng.uniform(0.3, 0.9) for _ in range(ENGINES)]
        self.alert_since: dict[str, float] = {}
        # A percentile over a sliding 60 s window drifts: each tick swaps 1/60 of its samples.
        self.drift = [[0.0] * len(QUANTILES) for _ in range(ENGINES)]
        self.mem_used = [71_000_000_000 + self.rng.randint(0, 50) * 2**20 for _ in range(GPUS)]

    def _load(self, e: int, t: float) -> float:
        day = 0.55 + 0.4 * math.sin(2 * math.pi * (t - T0) / 86400.0)
        self.level[e] = min(1.0, max(0.05, self.level[e] + self.rng.gauss(0, 0.01)))
        return day * self.level[e]

    def doc(self, t: float) -> dict:
        rng = self.rng
        engines = {}
        alerts = []
        for e in range(ENGINES):
            name = f"vllm-{e}"
            load = self._load(e, t)
            c = self.counters[e]
            reqs = max(0, int(rng.gauss(20 * load, 2)))
            c["requests"] += reqs
            c["prompt_tokens"] += reqs * rng.randint(200, 900)
            c["generation_tokens"] += int(reqs * rng.uniform(80, 300))
            c["preemptions"] += 1 if rng.random() < 0.02 * load else 0
            q = rng.randint(10, 40) * reqs
            c["prefix_queries"] += q
            c["prefix_hits"] += int(q * rng.uniform(0.3, 0.6))
            sampled = t - rng.uniform(0.01, 0.2)  # each poll lands a little before the tick
            hist = self.history[e]
            hist.append((sampled, dict(c)))
            while hist[0][0] < sampled - self.window_s:
                hist.pop(0)
            (ts0, c0), (ts1, c1) = hist[0], hist[-1]
            span = ts1 - ts0
            rate = {k: (c1[k] - c0[k]) / span if span > 0 else None for k in COUNTERS}
            running = int(120 * load + rng.gauss(0, 3))
            waiting = max(0, int(30 * (load - 0.6) + rng.gauss(0, 2))) if load > 0.6 else 0
            kv = min(1.0, max(0.0, 0.95 * load + rng.gauss(0, 0.01)))
            base = 0.05 + 1.5 * load ** 3
            drift = self.drift[e]
            for i in range(len(drift)):
                drift[i] = 0.95 * drift[i] + rng.gauss(0, 0.006)
            stats = {
                "running": running,
                "waiting": waiting,
                "kv_cache_pct": 100.0 * kv,
                "requests_per_s": rate["requests"],
                "prompt_tokens_per_s": rate["prompt_tokens"],
                "generation_tokens_per_s": rate["generation_tokens"],
                "preemptions_per_s": rate["preemptions"],
                "prefix_cache_hit_pct": 100.0 * rate["prefix_hits"] / rate["prefix_queries"]
                if rate["prefix_queries"] else None,
                "window_s": span,
                **{f: base * (1 + i * 0.7) * (1 + drift[i]) for i, f in enumerate(QUANTILES)},
                "requests_total": c["requests"],
                "prompt_tokens_total": c["prompt_tokens"],
                "generation_tokens_total": c["generation_tokens"],
                "preemptions_total": c["preemptions"],
                "max_num_seqs": 256,
                "max_model_len": 8192,
                "num_gpu_blocks": 27_413,
                "block_size": 16,
                "gpu_memory_utilization": 0.9,
                "swapped": 0,
                "aborted_per_s": 0.0,
                "spec_accept_pct": None,
                "lora_adapters": 0,
            }
            engines[name] = {
                "url": f"http://10.0.0.{10 + e}:8000",
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "state": "up",
                "sampled_at": sampled,
                "age_s": t - sampled,
                "gpus": [f"GPU-{e:08x}-0000-0000-0000-000000000000"],
                "stats": stats,
            }
            for metric, target in (("ttft_p99_s", 2.0), ("itl_p95_s", 0.04)):
                key = f"{name}/{metric}"
                v = stats[metric]
                if v is not None and v > target:
                    since = self.alert_since.setdefault(key, t)
                    alerts.append({"engine": name, "metric": metric, "value": v, "target": target,
                                   "since": since, "severity": "warning"})
                else:
                    self.alert_since.pop(key, None)
        gpus = {}
        for g in range(GPUS):
            load = self.level[g] * (0.55 + 0.4 * math.sin(2 * math.pi * (t - T0) / 86400.0))
            power_w = round(120 + 500 * load + rng.gauss(0, 8), 3)
            if rng.random() < 0.01:  # vLLM preallocates the KV cache: used memory moves rarely
                self.mem_used[g] += rng.choice((-1, 1)) * rng.randint(1, 8) * 2**20
            self.energy_j[g] += int(power_w)
            uuid = f"GPU-{g:08x}-0000-0000-0000-000000000000"
            gpus[uuid] = {
                "index": g,
                "name": "NVIDIA H100 80GB HBM3",
                "engine": f"vllm-{g}",
                "source": "dcgm",
                "sampled_at": t - rng.uniform(0.0, 0.5),
                "util_pct": min(100, max(0, int(100 * load + rng.gauss(0, 4)))),
                "mem_util_pct": min(100, max(0, int(60 * load + rng.gauss(0, 3)))),
                "mem_used_bytes": self.mem_used[g],
                "mem_total_bytes": 85_899_345_920,
                "temp_c": int(40 + 35 * load + rng.gauss(0, 1)),
                "power_w": power_w,
                "power_limit_w": 700.0,
                "energy_j": self.energy_j[g],
                "sm_clock_mhz": 1980 if load < 0.9 else 1755,
                "mem_clock_mhz": 2619,
                "pcie_tx_bytes_per_s": int(2e8 * load * rng.uniform(0.8, 1.2)),
                "pcie_rx_bytes_per_s": int(3e8 * load * rng.uniform(0.8, 1.2)),
                "throttle_reasons": [] if load < 0.9 else ["SwPowerCap"],
                "ecc_dbe": 0,
                "xid": None,
            }
        sources = [
            {"name": f"vllm-{e}", "kind": "engine", "ok": True, "error": None, "since": T0}
            for e in range(ENGINES)
        ] + [{"name": "dcgm http://10.0.0.5:9400/metrics", "kind": "gpu", "ok": True, "error": None, "since": T0},
             {"name": "kube prod", "kind": "cluster", "ok": True, "error": None, "since": T0}]
        up = [v["stats"] for v in engines.values()]
        fleet = {
            "engines_up": len(up),
            "engines_total": ENGINES,
            "running": sum(s["running"] for s in up),
            "waiting": sum(s["waiting"] for s in up),
            "requests_per_s": sum(s["requests_per_s"] or 0.0 for s in up),
            "generation_tokens_per_s": sum(s["generation_tokens_per_s"] or 0.0 for s in up),
            "ttft_p99_s": max(s["ttft_p99_s"] for s in up),
            "itl_p95_s": max(s["itl_p95_s"] for s in up),
            "kv_cache_pct": max(s["kv_cache_pct"] for s in up),
        }
        return {"ts": t, "seq": int(t - T0), "fleet": fleet, "engines": engines, "gpus": gpus,
                "alerts": alerts, "sources": sources,
                "slo": {"ttft_p99_s": 2.0, "itl_p95_s": 0.04, "e2e_p99_s": 5.0}}


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def compare(minutes: int) -> None:
    """Bytes per tick of the same documents in other layouts, side by side (per 24 h)."""
    synth = FleetSynth()
    layouts = {
        "JSON lines, uncompressed": lambda b: sum(len(json.dumps(d, separators=(",", ":"))) + 1 for _, d in b),
        "JSON per minute, zlib-6": lambda b: len(zlib.compress(json.dumps(b, separators=(",", ":")).encode(), 6)),
        "JSON per minute, lzma-6": lambda b: len(lzma.compress(json.dumps(b, separators=(",", ":")).encode())),
        "columns + deltas, exact floats": lambda b: len(encode_block(b, precision=None)),
        "columns + deltas, 6 digits (default)": lambda b: len(encode_block(b)),
    }
    sizes = dict.fromkeys(layouts, 0)
    cpu = dict.fromkeys(layouts, 0.0)
    for m in range(minutes):
        block = [(T0 + 60 * m + i, synth.doc(T0 + 60 * m + i)) for i in range(60)]
        for name, enc in layouts.items():
            c = cpu_s()
            sizes[name] += enc(block)
            cpu[name] += cpu_s() - c
    ticks = 60 * minutes
    print(f"layouts compared on the same {minutes} min of documents (block payload only, no SQLite pages):")
    for name in layouts:
        print(f"  {name:38s} {sizes[name] / ticks:8.0f} B/tick  {sizes[name] / ticks * 86400 / 1e6:8.1f} MB/24 h"
              f"  encode {cpu[name] / (ticks / 3600):6.1f} s CPU/h")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0, help="simulated hours to record (default 24)")
    ap.add_argument("--seeks", type=int, default=50)
    ap.add_argument("--out", help="directory for the recording (default: a temporary one)")
    ap.add_argument("--compare", type=int, default=10, metavar="MIN",
                    help="also encode MIN minutes in other layouts for comparison (0: skip)")
    args = ap.parse_args()
    if args.compare:
        compare(args.compare)
    ticks = int(args.hours * 3600)

    synth = FleetSynth()
    docs_cpu = cpu_s()
    # Synthesis is not the recorder's cost: time it apart on a sample and subtract.
    sample = [synth.doc(T0 + i) for i in range(600)]
    synth_per_tick = (cpu_s() - docs_cpu) / len(sample)

    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        path = os.path.join(tmp, "fleet.rec")
        rec = Recorder(path, retention_s=7 * 86400)
        synth = FleetSynth()
        raw_json_bytes = 0
        c0 = cpu_s()
        worst_append = 0.0
        for i in range(ticks):
            t = T0 + i
            doc = synth.doc(t)
            s = time.perf_counter()
            rec.append(t, doc)
            worst_append = max(worst_append, time.perf_counter() - s)
        rec.close()
        total_cpu = cpu_s() - c0
        rec_cpu = total_cpu - synth_per_tick * ticks
        size = os.path.getsize(path)
        raw_json_bytes = len(json.dumps(sample[-1], separators=(",", ":")))

        rp = Replay(path)
        t0, t1 = rp.span()
        rng = random.Random(1)
        minutes = [t0 + 60 * rng.randrange(int((t1 - t0) // 60)) for _ in range(args.seeks)]
        w0 = time.perf_counter()
        worst = 0.0
        for m in minutes:
            s = time.perf_counter()
            ts, _ = rp.at(m)
            worst = max(worst, time.perf_counter() - s)
            assert ts <= m
        seek_mean = (time.perf_counter() - w0) / len(minutes)
        n = rp.count()
        s = time.perf_counter()
        mid = t0 + (t1 - t0) / 2
        read = sum(1 for _ in rp.iter(mid, mid + 3599))  # an hour from the middle
        iter_s = time.perf_counter() - s
        rp.close()

    hours = ticks / 3600
    per_day = size / hours * 24
    print(f"recorded {ticks:,} ticks ({hours:g} h simulated), {ENGINES} engines + {GPUS} GPUs, 1 s")
    print(f"one doc as compact JSON: {raw_json_bytes:,} bytes; a day of it raw: "
          f"{raw_json_bytes * 86400 / 1e6:,.0f} MB")
    print(f"file: {size / 1e6:.1f} MB -> {per_day / 1e6:.1f} MB per 24 h ({size / ticks:.0f} bytes/tick)"
          f"  [target < 50 MB]")
    print(f"recorder CPU: {rec_cpu:.1f} s for {hours:g} h -> {rec_cpu / hours:.1f} s per hour "
          f"= {100 * rec_cpu / (hours * 3600):.2f} % of a core  [target < 1 %]"
          f"  (synthesis {synth_per_tick * 1e3:.2f} ms/tick subtracted)")
    print(f"slowest append (a block written): {worst_append * 1e3:.0f} ms wall — call append off the UI thread")
    print(f"seek to a random minute ({len(minutes)} seeks over {n:,} ticks): mean {seek_mean * 1e3:.1f} ms, "
          f"worst {worst * 1e3:.1f} ms  [target < 1 s]")
    print(f"sequential read: {read:,} ticks in {iter_s:.1f} s ({read / iter_s:,.0f} ticks/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
