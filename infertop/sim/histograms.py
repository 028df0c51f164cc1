"""Histogram type and the bucket layouts vLLM 0.32 uses (vllm-metrics.md section 4).

Used by the engine model (:mod:`infertop.sim.model`) and the HTTP
statistics (:mod:`infertop.sim.http_stats`).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left

__all__ = [
    "Histogram",
    "build_1_2_5_buckets",
    "TTFT_BUCKETS_V1",
    "TTFT_BUCKETS_V0",
    "ITL_BUCKETS_V1",
    "ITL_BUCKETS_V0",
    "LATENCY_BUCKETS_V1",
    "LATENCY_BUCKETS_V0",
    "ITERATION_BUCKETS_V1",
    "ITERATION_BUCKETS_V0",
    "PARAMS_N_BUCKETS",
    "PREEMPTION_BUCKETS",
]

# ---------------------------------------------------------------------------
# Histogram buckets (vllm-metrics.md section 4)

TTFT_BUCKETS_V1 = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                   20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TTFT_BUCKETS_V0 = TTFT_BUCKETS_V1[:16]
ITL_BUCKETS_V1 = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                  40.0, 80.0)
ITL_BUCKETS_V0 = ITL_BUCKETS_V1[:13]
LATENCY_BUCKETS_V1 = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                      240.0, 480.0, 960.0, 1920.0, 7680.0)
LATENCY_BUCKETS_V0 = LATENCY_BUCKETS_V1[:15]
ITERATION_BUCKETS_V1 = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
ITERATION_BUCKETS_V0 = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8096)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's ``build_1_2_5_buckets``)."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exponent
            if v > max_value:
                return tuple(float(x) for x in out)
            out.append(v)
        exponent += 1


class Histogram:
    """Prometheus-style histogram; ``counts`` is per bucket (not cumulative), +Inf last."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0.0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, n: float = 1.0) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n

    @property
    def count(self) -> float:
        return sum(self.counts)

    def cumulative(self) -> list[float]:
        return list(itertools.accumulate(self.counts))

    def reset(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)
        self.sum = 0.0
