"""Config loading: hostile files against an ordinary one, and scaling in the number of engines.

    .venv/bin/python benchmarks/bench_config.py [--engines N]

Cases, side by side in one run (medians of interleaved rounds):
  ordinary        the README's example config (30 lines)
  alias bomb      9 levels x 9 aliases used as a mapping key (under 400 bytes)
  deep nesting    200 nested block mappings
  5000 digits     refresh_s: 999…9
Reported as seconds per load and ratio to the ordinary config. Then N/10 and N
engines (default 150 000), once each: a linear loader takes ~10x as long for
10x the engines (the old duplicate-name check was quadratic: ~100x).
"""

from __future__ import annotations

import argparse
import statistics
import time

from infertop.config import ConfigError, parse_config

ORDINARY = """\
refresh_s: 1.0
window_s: 60
history_s: 3600
theme: infertop-dark
engines:
  - name: llama-a
    url: http://10.0.0.5:8000
    max_num_seqs: 64
    timeout_s: 2
  - url: http://10.0.0.6:8000
slo: {ttft_p99_s: 2.0, itl_p95_s: 0.040, e2e_p99_s: 5.0, queue_p99_s: 1.0, kv_cache_pct: 90}
gpu: {nvml: true, dcgm: [http://gpu-node-1:9400/metrics]}
kube:
  context: lab
  namespaces: [inference]
  selector: app.kubernetes.io/component=vllm
  drain_then: delete
profiles:
  tiny:
    model: /models/tiny
    max_num_seqs: 4
    env: {VLLM_CPU_KVCACHE_SPACE: "1"}
"""


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ['a: &a ["lol"]']
    prev = "a"
    for i in range(1, levels):
        name = chr(ord("a") + i)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * width) + "]")
        prev = name
    return "\n".join(lines) + f"\n? *{prev}\n: 1\n"


CASES = {
    "ordinary": ORDINARY,
    "alias bomb": alias_bomb(),
    "deep nesting": "".join(" " * i + "a:\n" for i in range(200)),
    "5000 digits": "refresh_s: " + "9" * 5000 + "\n",
}


def load_s(text: str) -> float:
    t = time.perf_counter()
    try:
        parse_config(text, "bench.yaml")
    except ConfigError:
        pass
    return time.perf_counter() - t


def engines_text(n: int) -> str:
    return "engines:\n" + "".join(f"  - url: http://10.{i // 62500}.{i // 250 % 250}.{i % 250}:8000\n    name: e{i}\n"
                                  for i in range(n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", type=int, default=150_000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in CASES}
    for _ in range(args.rounds):
        for name, text in CASES.items():
            times[name].append(load_s(text))
    base = statistics.median(times["ordinary"])
    print(f"{'case':14} {'bytes':>7} {'ms/load':>9} {'x ordinary':>11}")
    for name, text in CASES.items():
        med = statistics.median(times[name])
        print(f"{name:14} {len(text.encode()):7d} {med * 1e3:9.2f} {med / base:11.1f}")
    small, big = args.engines // 10, args.engines
    t_small = load_s(engines_text(small))
    t_big = load_s(engines_text(big))
    print(f"{small} engines: {t_small:.2f} s; {big} engines: {t_big:.2f} s; ratio {t_big / t_small:.1f} "
          f"(10 = linear, 100 = quadratic)")


if __name__ == "__main__":
    main()
