"""The capacity what-if against the simulator (issue 25 item 4): the model is fed what the SLO watch sees of
a simulated engine at a steady arrival rate (scraped over loopback HTTP on the virtual clock), asked
"arrival ×1.5" and "max_num_seqs 4 → 8"; then the change is made in the simulator, left to settle, and the
queue and TTFT measured from every request that arrived afterwards. Reported: predicted ÷ measured.

benchmarks/capacity_vs_sim.py prints the same runs as a table.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from dataclasses import dataclass

import pytest

from infertop.analysis.slo.report import SloWatch, buckets_of, engine_windows
from infertop.config import SloClassesConfig
from infertop.sim import SimCluster
from sim_fleet_clock import VirtualFleet

# ticks of 1 s the SLO watch sees before the change. Its windows are 60 s: one answer's arrival rate is
# ±12 % (Poisson, ~100 requests), and the wait's p99 near a knife-edge (3 % of requests wait at 8 slots)
# swings 2× with it; the median over ~50 answers (one per 10 s) is the model at the load's true rate.
WATCH_S = 600.0
SETTLE_S = 120.0  # after the change, before measuring (a queue of ~10 s drains or builds in far less)
MEASURE_S = 1500.0  # ~3 000 requests: a p99 of the measured waits is ~30 requests, not 3
# Error bound, predicted ÷ measured, on the p99s. Fed the true λ and S, M/M/c overstates the wait's p99
# by 1.3–1.4× at ρ 0.6–0.9 (vLLM's service — prefill + answer length × step time — varies less than an
# exponential) and is within 5 % at 8 slots and ρ 0.43; through the SLO watch's 60 s windows the inputs
# add their noise (S seen 5–15 % short). Measured, seeds 3 and 11: 0.75–1.35. The bound leaves room for
# that and still fails a model off by 2× either way.
RATIO_LO, RATIO_HI = 0.6, 1.7


@dataclass(frozen=True)
class WhatIf:
    what: str  # as the capacity answer names it
    base_rate: float  # requests/s before the change
    max_num_seqs: int
    predicted: dict  # queue_mean_s, queue_p99_s, ttft_p99_s (median over the watch's answers)
    measured: dict  # queue_mean_s, queue_p99_s, ttft_p50_s, ttft_p99_s, requests, arrival_per_s
    inputs: dict  # the model's inputs at the last answer

    def ratio(self, key: str) -> float | None:
        p, m = self.predicted.get(key), self.measured.get(key)
        return p / m if p is not None and m else None


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = math.floor(k)
    hi = min(len(xs) - 1, lo + 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def run_what_if(what: str, *, base_rate: float, max_num_seqs: int = 4, arrival_x: float = 1.0,
                      new_max_num_seqs: int | None = None, seed: int = 3, measure_s: float = MEASURE_S) -> WhatIf:
    """One engine on the virtual clock: watch, ask the model ``what``, make the change, measure."""
    sim = SimCluster(1, seed=seed, load="steady", realtime=False, kubernetes_labels=True, hot_engine=None,
                     throttle_gpu=None, base_rate=base_rate, max_num_seqs=max_num_seqs,
                     scheduling_policy="fcfs",  # the model is one FIFO queue (priority reorders the tail)
                     warmup_s=60.0)
    finished = []
    # every request the load makes reports its end here: the measured figures are each request's own
    sim.load.shapers[0] = lambda req, _max_len: setattr(req, "on_finish", finished.append)
    sim.start()
    fleet = VirtualFleet(sim)
    watch = SloWatch(SloClassesConfig())
    answers: dict[float, dict] = {}
    try:
        for _ in range(int(WATCH_S)):
            tk = await fleet.tick()
            report = watch.update(tk.state, buckets_of(engine_windows(fleet.collector.collectors)))
            cap = next((c["capacity"] for c in report["classes"] if c["engines"] and c["capacity"]), None)
            if cap is not None and tk.t >= 60.0 + 60.0:  # the rate and running windows are full
                answers[cap["computed_at"]] = cap
    finally:
        await fleet.aclose()
    try:
        assert answers, "the SLO watch gave no capacity answer"
        preds = [next(p for p in a["what_ifs"] if p["what"] == what) for a in answers.values()]
        # an answer that says "unbounded" (ρ ≥ 1 at that window's rate) counts as the longest wait
        predicted = {k: statistics.median(math.inf if p[k] is None else p[k] for p in preds)
                     for k in ("queue_mean_s", "queue_p99_s", "ttft_p99_s")}
        if arrival_x != 1.0:
            sim.load.set_rate_scale(0, arrival_x)
        if new_max_num_seqs is not None:
            sim.restart_engine(0, max_num_seqs=new_max_num_seqs)
        sim.advance(SETTLE_S, tick=0.25)
        start = sim.now
        sim.advance(measure_s, tick=0.25)
    finally:
        sim.stop()
    done = [r for r in finished if r.arrival_t >= start and r.finished_reason in ("stop", "length")]
    waits = [r.first_scheduled_t - r.arrival_t for r in done]
    ttfts = [r.first_token_t - r.arrival_t for r in done]
    measured = {"queue_mean_s": statistics.fmean(waits), "queue_p99_s": _quantile(waits, 0.99),
                "ttft_p50_s": _quantile(ttfts, 0.5), "ttft_p99_s": _quantile(ttfts, 0.99),
                "requests": len(done), "arrival_per_s": len(done) / measure_s}
    return WhatIf(what, base_rate, max_num_seqs, predicted, measured, list(answers.values())[-1]["inputs"])


def what_ifs() -> list[WhatIf]:
    """The issue's two what-ifs, each from a load where it matters: ×1.5 from ρ ≈ 0.6 (to ≈ 0.9), and
    4 → 8 slots from ρ ≈ 0.85 (a queue of seconds) to ≈ 0.43."""
    return [asyncio.run(run_what_if("arrival ×1.5", base_rate=1.5, arrival_x=1.5)),
            asyncio.run(run_what_if("max_num_seqs → 8", base_rate=2.2, new_max_num_seqs=8))]


@pytest.fixture(scope="module")
def runs() -> list[WhatIf]:
    return what_ifs()


@pytest.mark.parametrize("i", [0, 1], ids=["arrival x1.5", "max_num_seqs 4 to 8"])
@pytest.mark.parametrize("key", ["queue_p99_s", "ttft_p99_s"])
def test_predicted_within_the_stated_error_of_measured(runs, i, key):
    r = runs[i]
    ratio = r.ratio(key)
    assert ratio is not None, (r.predicted, r.measured)
    assert RATIO_LO <= ratio <= RATIO_HI, f"{r.what} {key}: predicted {r.predicted[key]:.3f} s, measured " \
                                          f"{r.measured[key]:.3f} s (×{ratio:.2f}); inputs {r.inputs}"


def test_the_model_sees_the_change_coming(runs):
    """Direction and size: ×1.5 makes the wait several times longer, twice the slots cut it to a fraction;
    the model says so before the change, the simulator after."""
    grow, cut = runs
    assert grow.measured["queue_p99_s"] > 4.0 and grow.predicted["queue_p99_s"] > 4.0
    assert cut.measured["queue_p99_s"] < 1.0 and cut.predicted["queue_p99_s"] < 1.0
    assert cut.measured["requests"] > 2000 and grow.measured["requests"] > 2000
