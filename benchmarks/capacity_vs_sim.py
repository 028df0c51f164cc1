"""The capacity what-if checked against the simulator: predicted vs measured queue and TTFT after
"arrival ×1.5" and "max_num_seqs 4 → 8" (issue 25 item 4), as the error ratio predicted ÷ measured.

    .venv/bin/python benchmarks/capacity_vs_sim.py [--seeds 3 11]

Each what-if runs one simulated engine (max_num_seqs 4, steady Poisson load, FCFS) on the virtual clock:
600 s of 1 s ticks scraped over loopback HTTP into the SLO watch, whose capacity answer (every 10 s) gives
the prediction (the median over the answers); then the change is made in the simulator, 120 s to settle,
and 1500 s of requests measured, each by its own arrival, first scheduling and first token
(tests/unit/test_capacity_vs_sim.py asserts the bound on the same runs). The model predicts no TTFT p50: that
column shows the measured value only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit"))

from test_capacity_vs_sim import run_what_if  # noqa: E402


def fmt(v) -> str:
    return "—" if v is None else ("∞" if v == float("inf") else f"{v:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 11])
    args = ap.parse_args()
    print(f"{'what-if':<18} {'seed':>4} {'figure':<14} {'predicted s':>12} {'measured s':>11} {'ratio':>6}")
    for seed in args.seeds:
        for r in (asyncio.run(run_what_if("arrival ×1.5", base_rate=1.5, arrival_x=1.5, seed=seed)),
                  asyncio.run(run_what_if("max_num_seqs → 8", base_rate=2.2, new_max_num_seqs=8, seed=seed))):
            for key in ("queue_mean_s", "queue_p99_s", "ttft_p50_s", "ttft_p99_s"):
                ratio = r.ratio(key)
                print(f"{r.what:<18} {seed:>4} {key:<14} {fmt(r.predicted.get(key)):>12} {fmt(r.measured[key]):>11} "
                      f"{'—' if ratio is None else f'{ratio:.2f}':>6}")
            inp = r.inputs
            print(f"{'':<18} {'':>4} last answer's inputs: λ {inp['arrival_per_s']:.2f}/s, S {inp['service_s']:.2f} s "
                  f"({inp['service_from']}), measured λ after {r.measured['arrival_per_s']:.2f}/s over "
                  f"{r.measured['requests']} requests")


if __name__ == "__main__":
    main()
