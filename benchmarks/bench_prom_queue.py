"""Cost of the per-queue Prometheus answer, side by side with the engine answer it rides beside.

    .venv/bin/python benchmarks/bench_prom_queue.py [--engines 500]

The recorded engine answer (tests/fixtures/prometheus_fleet) repeated to N engines, and the
default queue query's answer for them (vLLM waiting per pod: one series per engine, the most a
queue answer has). Cases, medians of repeated runs, each as a ratio to the first:
  engine_rows      mapping the gauges-and-rates answer to engines (what every refresh already does)
  queue_series     mapping the queue answer (every refresh)
  attribute        the advisor's series → workload over a cluster read of N pods in 10 Deployments (each tick)
Also: the queue series' JSON size (what the state document and a recording carry per tick).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from infertop.domain.kube import ClusterSnapshot, PodView, WorkloadView
from infertop.sources.prometheus.fleet_map import engine_rows, queue_series
from infertop.sources.prometheus.fleet_query import FAST_FIELDS, FleetQueries
from infertop.state.advisor.queues import attribute

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "prometheus_fleet"


def answers(n_engines: int) -> tuple[list[dict], list[dict], list[str]]:
    live = [r for r in json.loads((FIX / "engines.json").read_text())["data"]["result"]
            if r["metric"]["infertop_field"] in FAST_FIELDS and "36041" in r["metric"]["instance"]]
    per = len({r["metric"]["instance"] for r in live})
    engines, queue, pods = [], [], []
    for i in range(n_engines // per):
        for item in live:
            m = dict(item["metric"], pod=f"{item['metric']['pod']}-{i}", instance=f"{item['metric']['instance']}-{i}")
            engines.append({"metric": m, "value": item["value"]})
            if m["infertop_field"] == "waiting":
                pods.append(m["pod"])
                queue.append({"metric": {"infertop_queue": "vllm", "namespace": m["namespace"], "pod": m["pod"],
                                         "instance": m["instance"]}, "value": item["value"]})
    return engines, queue, pods


def median_ms(f, n: int) -> float:
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    engines, queue, pods = answers(args.engines)
    snap = ClusterSnapshot("lab", ("inference",), 0.0,
                           workloads=tuple(WorkloadView("Deployment", "inference", f"d{k}") for k in range(10)),
                           pods=tuple(PodView("inference", p, owner_kind="Deployment", owner_name=f"d{j % 10}")
                                      for j, p in enumerate(pods)))
    by = FleetQueries().by
    series, _ = queue_series(queue)
    doc = {"series": series, "sampled_at": 0.0, "error": None}
    assert sum(len(v) for v in attribute(doc, snap, (), {}).by_workload.values()) == len(pods)
    base = median_ms(lambda: engine_rows(engines, by), args.repeat)
    print(f"{len(pods)} engines: engine answer {len(engines)} series, queue answer {len(queue)} series")
    print(f"  engine_rows   {base:7.2f} ms  1.00x")
    for name, f in (("queue_series", lambda: queue_series(queue)), ("attribute", lambda: attribute(doc, snap, (), {}))):
        ms = median_ms(f, args.repeat)
        print(f"  {name:<13} {ms:7.2f} ms  {ms / base:.2f}x")
    print(f"  queue series JSON: {len(json.dumps(series)) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
