"""What the simulated Kubernetes cluster costs beside the simulated engines, at 50 and 500 engines.

    .venv/bin/python benchmarks/bench_sim_kube.py [N ...]

Side by side, in one run and in this process: a SimCluster of N engines alone, then
the same with :class:`~infertop.sim.kube.cluster.SimKube` (the API emulator holding a
Deployment of N pods bound to the engines, a GPU node, the HPA controller). Reported:
the time until every pod runs its engine, and the CPU of a 20 s steady period
(``time.process_time``: every thread of the process) as a share of one core, with
the ratio kube / engines alone. Nothing reads the API meanwhile: this is the
cluster's own upkeep (reconcile passes, HPA evaluations, binding).
"""

from __future__ import annotations

import sys
import time

from infertop.sim import SimCluster
from infertop.sim.kube.cluster import SimKube

STEADY_S = 20.0


def steady_cpu(seconds: float) -> float:
    c0, t0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    return (time.process_time() - c0) / (time.monotonic() - t0)


def run(n: int, kube: bool) -> tuple[float | None, float]:
    sim = SimCluster(n, seed=1, load="steady").start()
    k = None
    try:
        bound_s = None
        if kube:
            t0 = time.monotonic()
            k = SimKube(sim).start()
            if not k.wait_bound(120):
                raise SystemExit(f"{n} pods not bound within 120 s")
            bound_s = time.monotonic() - t0
        return bound_s, steady_cpu(STEADY_S)
    finally:
        if k is not None:
            k.stop()
        sim.stop()


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [50, 500]
    print(f"{'engines':>8} {'alone %core':>12} {'+kube %core':>12} {'ratio':>6} {'pods bound in':>14}")
    for n in sizes:
        _, alone = run(n, kube=False)
        bound_s, with_kube = run(n, kube=True)
        print(f"{n:>8} {alone * 100:>11.0f}% {with_kube * 100:>11.0f}% {with_kube / alone:>6.2f} {bound_s:>12.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
