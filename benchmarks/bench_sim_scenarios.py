"""Onset → verdict and recovery → clear, per incident scenario of the simulator, in virtual seconds.

    .venv/bin/python benchmarks/bench_sim_scenarios.py [NAME ...]

Each scenario plays on engine vllm-1 of a healthy 4-engine fleet (seed 7, bursty load, no hot
engine, no throttled GPU) from 90 s after the start; every virtual second the simulator advances,
infertop's real collectors scrape the engines and the dcgm exporter over loopback HTTP, the fleet
state is built and fed to the triage (tests/support/sim_fleet_clock.py, what tests/loopback/test_sim_scenarios.py
asserts on). Printed per scenario: the verdict it should raise, seconds from onset to it and
from the start of recovery to its clear, and every other verdict seen during the run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))

from sim_fleet_clock import play  # noqa: E402

from infertop.sim.scenarios import SCENARIOS  # noqa: E402


ONSET_S = 300.0
AFTER_S = {"crash-loop": 800.0, "kv-bound": 400.0}


def subject(run, kind: str) -> str:
    return run.gpu if kind.startswith("gpu-") else run.engine


async def main(names: list[str]) -> None:
    print(f"{'scenario':<16} {'verdict':<16} {'onset→verdict':>14} {'recovery→clear':>15}  others (kind subject)  wall")
    for name in names:
        sc = SCENARIOS[name]
        t0 = time.monotonic()
        run = await play(name, onset_s=ONSET_S, after_recovery_s=AFTER_S.get(name, 120.0))
        who = subject(run, sc.verdict)
        up = run.raised(sc.verdict, who)
        clear = run.cleared(sc.verdict, who)
        others = sorted(k for k in run.kinds() if k != (sc.verdict, who))
        print(f"{name:<16} {sc.verdict:<16} {fmt(up, run.onset_s):>14} {fmt(clear, run.recovery_at_s):>15}  "
              f"{others}  {time.monotonic() - t0:.0f} s")


def fmt(t, since) -> str:
    return "never" if t is None else f"{t - since:.0f} s"


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or list(SCENARIOS)))
