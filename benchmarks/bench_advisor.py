"""Time from a load step in the simulator to the scaling advisor's recommendation, and what it costs.

    .venv/bin/python benchmarks/bench_advisor.py [--step-x 6] [--windows 30,10,0]

One simulated engine (virtual time, ``realtime=False``) behind a Deployment
of 2 replicas (a cluster snapshot built in-process: the pod's ip:port is the
engine). Steady load, then at t = 20 s the arrival rate is multiplied by
``--step-x``. Every virtual second: the simulator advances 1 s, the real
collector polls its ``/metrics`` over HTTP, the fleet state is built with
the advisor in it (the advisor's clock is the state's, i.e. virtual time).

Reported per scale-up window: when the queue first exceeds its target, when
the advisor first wants more replicas, and when it recommends — all in
seconds after the step — with the decision's reason. The cost: wall time of
``FleetJoiner.build`` with and without the advisor, measured side by side
over the same ticks, as a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from infertop.config import AdvisorConfig, SloConfig
from infertop.domain.kube import ClusterSnapshot, PodView, WorkloadView
from infertop.sim import SimCluster
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector
from infertop.state.advisor.core import Advisor
from infertop.state.fleet_join import FleetJoiner

STEP_AT_S = 20.0
RUN_S = 90


def cluster(port: int, replicas: int, now: float) -> ClusterSnapshot:
    w = WorkloadView("Deployment", "bench", "vllm", desired=replicas, current=replicas, ready=replicas)
    pod = PodView("bench", "vllm-0", phase="Running", status="Running", ready=True, ip="127.0.0.1", port=port,
                  owner_kind="Deployment", owner_name="vllm")
    return ClusterSnapshot(context="bench", namespaces=("bench",), taken_at=now, workloads=(w,), pods=(pod,))


async def run(window_s: float, step_x: float) -> dict:
    sim = SimCluster(1, seed=11, load="steady", realtime=False, max_num_seqs=16, dcgm=False, base_rate=2.0,
                     hot_engine=None, throttle_gpu=None).start()
    clock = {"now": 1_800_000_000.0}
    collector = FleetCollector([EngineEndpoint("e0", sim.engines[0].url)], interval_s=1.0, window_s=30.0)
    advisor = Advisor(AdvisorConfig(scale_up_window_s=window_s), SloConfig())
    joiner = FleetJoiner(collector, slo=SloConfig(), refresh_s=1.0, window_s=30.0, wall=lambda: clock["now"])
    bare = FleetJoiner(collector, slo=SloConfig(), refresh_s=1.0, window_s=30.0, wall=lambda: clock["now"])
    out: dict = {"window_s": window_s, "over_target": None, "wants_more": None, "recommended": None}
    with_s, without_s = [], []
    start = clock["now"]
    try:
        for second in range(RUN_S):
            t = float(second)
            if t == STEP_AT_S:
                sim.load.set_rate_scale(0, step_x)
            sim.advance(1.0)
            await collector.poll_once()
            clock["now"] = start + t
            snap = cluster(sim.engines[0].port, 2, clock["now"])
            for j in (joiner, bare):
                j.set_cluster(snap, source="bench")
            t0 = time.perf_counter()
            bare.build()
            t1 = time.perf_counter()
            joiner.autoscalers = advisor
            state = joiner.build()
            t2 = time.perf_counter()
            without_s.append(t1 - t0)
            with_s.append(t2 - t1)
            (view,) = state.autoscalers
            d = view["latest"]
            q = d["inputs"][0]["value"]
            after = t - STEP_AT_S
            if t >= STEP_AT_S:
                if out["over_target"] is None and q is not None and q > 5:
                    out["over_target"] = after
                if out["wants_more"] is None and (d.get("wanted") or 0) > 2:
                    out["wants_more"] = after
                if d["action"] == "recommended":
                    out["recommended"], out["reason"] = after, d["reason"]
                    break
    finally:
        await collector.aclose()
        sim.stop()
    out["build_ms_with"] = statistics.median(with_s) * 1000
    out["build_ms_without"] = statistics.median(without_s) * 1000
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step-x", type=float, default=6.0, help="arrival rate multiplier at the step")
    p.add_argument("--windows", default="30,10,0", help="scale-up windows to compare (s)")
    args = p.parse_args()
    print(f"load step ×{args.step_x:g} at t={STEP_AT_S:g} s (virtual); 1 s refresh; times after the step")
    print(f"{'up window':>9}  {'queue > target':>14}  {'wants more':>10}  {'recommended':>11}  "
          f"{'build ms (with/without, ratio)':>30}  reason")
    for w in (float(x) for x in args.windows.split(",")):
        r = asyncio.run(run(w, args.step_x))

        def s(v):
            return "—" if v is None else f"{v:.0f} s"

        ratio = r["build_ms_with"] / r["build_ms_without"] if r["build_ms_without"] else float("nan")
        cost = f"{r['build_ms_with']:.2f}/{r['build_ms_without']:.2f} ×{ratio:.2f}"
        print(f"{w:>7g} s  {s(r['over_target']):>14}  {s(r['wants_more']):>10}  {s(r['recommended']):>11}  "
              f"{cost:>30}  {r.get('reason', '')}")


if __name__ == "__main__":
    main()
