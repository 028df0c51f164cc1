"""Capacity: Little's law for the concurrency needed, an M/M/c queue for the wait.

Model. Each engine slot (one of ``max_num_seqs`` sequences of each of ``replicas`` engines) is a server;
c = replicas × max_num_seqs. Requests arrive at λ per second (Poisson) and hold a slot for a service time
S, measured by Little's law on the running set (S = mean running ÷ λ, the running gauge averaged over the
rate's window by :class:`RunningMean` — one read of a gauge of 4 slots is 0.6 to 2.5 s for a true 1.6 s;
without ``running``: TTFT p50 + output tokens × ITL p50), exponentially distributed. The offered load is a = λS Erlangs, ρ = a ÷ c. The chance
to wait is Erlang C, C(c, a); a wait is exponential with rate cμ − λ (μ = 1/S), so the p99 wait is
ln(C ÷ 0.01) ÷ (cμ − λ) (0 when C ≤ 1 %). Predicted TTFT p99 = max(predicted queue p99 + prefill p50,
prefill p99): the slowest-waiting request's prefill is a typical one, and without a wait TTFT p99 is the
prefill's own p99. Prefill p99 = TTFT p99 − queue p99 measured; prefill p50 = the smaller of that and
TTFT p50 (the two p99s come from histograms of different bounds: under a long queue their difference is
a bucket's width of noise, and the median request's whole TTFT bounds its prefill). ρ ≥ 1: the queue
grows without bound.

Checked against the simulator (tests/unit/test_capacity_vs_sim.py, benchmarks/capacity_vs_sim.py): fed the
true λ and S, M/M/c overstates the wait's p99 by 1.3–1.4× at ρ 0.6–0.9 (vLLM's service times vary less
than an exponential's); through the SLO watch's 60 s windows, predicted ÷ measured p99 was 0.75–1.35
after "arrival ×1.5" and "max_num_seqs 4 → 8". The mean wait is understated at light load (×0.5).

What it leaves out: continuous batching's step time grows with the batch (more sequences → slower tokens),
so "max_num_seqs → n" is optimistic when the GPU, not the slots, is the limit; and the KV cache must hold
the sequences (the kv-bound verdict says when it does not).

Concurrency needed = λ × residence (TTFT + output tokens × TPOT) × (1 + headroom): the slots to provision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MAX_REPLICAS = 1000
MAX_SEQS = 4096


@dataclass(frozen=True, slots=True)
class CapacityInputs:
    arrival_per_s: float  # λ over the class's engines
    service_s: float  # S: how long a request holds a slot
    replicas: int
    max_num_seqs: int | None  # per engine (the smallest known)
    prefill_p99_s: float  # TTFT p99 − queue p99: not changed by the slots
    residence_s: float  # TTFT p50 + output tokens × ITL p50 (Little's law's W)
    service_from: str = "running ÷ arrival (Little's law)"
    prefill_p50_s: float | None = None  # min(TTFT p50, prefill p99); None: prefill p99 stands for it


@dataclass(frozen=True, slots=True)
class Prediction:
    what: str  # "now", "arrival ×1.5", "max_num_seqs → 8", "replicas → 3"
    arrival_per_s: float
    servers: int
    utilisation: float  # ρ
    wait_chance: float | None  # Erlang C; None when unstable
    queue_mean_s: float | None
    queue_p99_s: float | None  # None: unbounded (ρ ≥ 1)
    ttft_p99_s: float | None
    replicas: int
    max_num_seqs: int


def erlang_c(servers: int, load: float) -> float:
    """The chance that an arrival waits in an M/M/c queue (``load`` = λ/μ Erlangs); 1 when unstable."""
    if servers <= 0 or load >= servers:
        return 1.0
    if load <= 0:
        return 0.0
    inv = 1.0  # 1 / Erlang B, by its recursion 1/B(k) = 1 + k/a · 1/B(k−1): stable for thousands of servers
    for k in range(1, servers + 1):
        inv = 1.0 + inv * k / load
    b = 1.0 / inv
    rho = load / servers
    denom = 1.0 - rho * (1.0 - b)
    return min(1.0, b / denom) if denom > 0 else 1.0


def predict(inp: CapacityInputs, what: str = "now", *, arrival_x: float = 1.0, replicas: int | None = None,
            max_num_seqs: int | None = None) -> Prediction | None:
    """The queue and TTFT the model predicts for ``inp`` changed as asked; None without max_num_seqs."""
    r = replicas if replicas is not None else inp.replicas
    n = max_num_seqs if max_num_seqs is not None else inp.max_num_seqs
    if not n or r <= 0 or inp.service_s <= 0:
        return None
    lam = inp.arrival_per_s * arrival_x
    c = r * n
    load = lam * inp.service_s
    rho = load / c
    drain = c / inp.service_s - lam  # cμ − λ
    if rho >= 1.0 or not drain > 0:  # (rounding can leave ρ a hair under 1 with no drain left)
        return Prediction(what, lam, c, rho, None, None, None, None, r, n)
    cw = erlang_c(c, load)
    mean = cw / drain
    p99 = math.log(cw / 0.01) / drain if cw > 0.01 else 0.0
    pre50 = inp.prefill_p99_s if inp.prefill_p50_s is None else inp.prefill_p50_s
    return Prediction(what, lam, c, rho, cw, mean, p99, max(p99 + pre50, inp.prefill_p99_s), r, n)


def holds(p: Prediction | None, queue_target_s: float, ttft_target_s: float) -> bool:
    return (p is not None and p.queue_p99_s is not None and p.ttft_p99_s is not None
            and p.queue_p99_s <= queue_target_s and p.ttft_p99_s <= ttft_target_s)


@dataclass(frozen=True, slots=True)
class CapacityAnswer:
    concurrency: float  # λ × residence
    concurrency_needed: float  # with headroom
    headroom_pct: float
    replicas_for_concurrency: int | None  # ceil(needed ÷ max_num_seqs)
    replicas_to_hold: int | None  # the fewest replicas whose predicted queue/TTFT p99 hold the targets
    max_num_seqs_to_hold: int | None  # at today's replicas
    now: Prediction | None
    what_ifs: tuple[Prediction, ...]
    inputs: CapacityInputs
    note: str = ""


def answer(inp: CapacityInputs, queue_target_s: float, ttft_target_s: float, headroom_pct: float,
           what_ifs: tuple[tuple[str, dict], ...] | None = None) -> CapacityAnswer:
    conc = inp.arrival_per_s * inp.residence_s
    need = conc * (1 + headroom_pct / 100.0)
    n = inp.max_num_seqs
    if not n:
        return CapacityAnswer(conc, need, headroom_pct, None, None, None, None, (), inp,
                              "max_num_seqs unknown: set engines[].max_num_seqs in the config")
    by_conc = max(1, math.ceil(need / n)) if need > 0 else 1
    replicas_hold = _fewest(lambda r: holds(predict(inp, replicas=r), queue_target_s, ttft_target_s),
                            max(1, math.floor(inp.arrival_per_s * inp.service_s / n)), MAX_REPLICAS)
    seqs_hold = _fewest(lambda k: holds(predict(inp, max_num_seqs=k), queue_target_s, ttft_target_s),
                        max(1, math.floor(inp.arrival_per_s * inp.service_s / inp.replicas)), MAX_SEQS)
    if what_ifs is None:
        what_ifs = (("arrival ×1.5", {"arrival_x": 1.5}), ("arrival ×2", {"arrival_x": 2.0}),
                    (f"max_num_seqs → {2 * n}", {"max_num_seqs": 2 * n}),
                    (f"replicas → {inp.replicas + 1}", {"replicas": inp.replicas + 1}))
    preds = tuple(p for what, kw in what_ifs if (p := predict(inp, what, **kw)) is not None)
    return CapacityAnswer(conc, need, headroom_pct, by_conc, replicas_hold, seqs_hold, predict(inp), preds, inp)


def _fewest(ok, lo: int, cap: int) -> int | None:
    """The least x in [lo, cap] with ``ok(x)`` (``ok`` only turns true as x grows: more slots, less queue),
    found by doubling from the stability bound ``lo`` then bisecting: a handful of Erlang C evaluations,
    each O(servers), where a scan from 1 cost hundreds at 500 engines."""
    lo = max(1, min(lo, cap))
    if ok(lo):
        return lo
    hi = lo
    while not ok(hi):
        if hi >= cap:
            return None
        lo, hi = hi, min(cap, hi * 2)
    while hi - lo > 1:  # ok(hi), not ok(lo)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


class RunningMean:
    """The running gauge summed over a class's engines, averaged over the last ``window_s`` (the rates'
    window): Little's law's L is a time average, not one read. Starts again when the engines change."""

    MIN_READS = 5

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._key: tuple = ()
        self._reads: list[tuple[float, float]] = []

    def add(self, now: float, key: tuple, running: float | None) -> None:
        if key != self._key:
            self._key, self._reads = key, []
        if running is not None:
            self._reads.append((now, running))
        while self._reads and now - self._reads[0][0] > self.window_s:
            self._reads.pop(0)

    def mean(self) -> float | None:
        """The mean of the reads held; None before :data:`MIN_READS` of them."""
        reads = self._reads
        return sum(v for _, v in reads) / len(reads) if len(reads) >= self.MIN_READS else None


def mean_of(engines, attr: str) -> float | None:
    """``attr`` of the engines, weighted by their arrival rates; None where none has it."""
    vals = [(getattr(s, attr), s.requests_per_s or 0.0) for s in engines if getattr(s, attr) is not None]
    w = sum(r for _, r in vals)
    return sum(v * r for v, r in vals) / w if vals and w > 0 else None


def inputs_of(engines, prefer_running: bool = True, running_mean: float | None = None) -> CapacityInputs | None:
    """The model's inputs from the EngineStats of one class's fresh, up engines; None without traffic.
    ``running_mean``: their running requests averaged over the rates' window (:class:`RunningMean`),
    used for the service time instead of this tick's gauge."""
    engines = list(engines)
    lam = sum(s.requests_per_s or 0.0 for s in engines)
    if not engines or lam <= 0:
        return None
    gen = sum(s.generation_tokens_per_s or 0.0 for s in engines)
    out_tokens = gen / lam

    def mean(attr: str) -> float | None:
        return mean_of(engines, attr)

    ttft50, itl50 = mean("ttft_p50_s") or 0.0, mean("itl_p50_s") or 0.0
    residence = ttft50 + out_tokens * itl50
    running = [s.running for s in engines if s.running is not None]
    if prefer_running and running_mean is not None and running_mean > 0:
        service, how = running_mean / lam, "mean running ÷ arrival (Little's law)"
    elif prefer_running and len(running) == len(engines) and sum(running) > 0:
        service, how = sum(running) / lam, "running ÷ arrival (Little's law)"
    else:
        service, how = residence, "TTFT p50 + output tokens × ITL p50"
    seqs = [s.max_num_seqs for s in engines if s.max_num_seqs]
    ttft99 = mean("ttft_p99_s")
    # a queue p99 under its first bucket bound ("<300ms") is a bound, not a wait: it would take the whole
    # TTFT (prefill 0, and every what-if's "TTFT p99 0µs"); such an engine's queue counts as none
    known = [s for s in engines if (getattr(s, "quantile_edges", None) or {}).get("queue_p99_s") != "<"]
    queue99 = mean_of(known, "queue_p99_s") if known else 0.0
    prefill = max(0.0, (ttft99 or 0.0) - (queue99 or 0.0))
    pre50 = min(prefill, ttft50) if ttft50 > 0 else None
    return CapacityInputs(lam, service, len(engines), min(seqs) if seqs else None, prefill, residence or service, how,
                          pre50)


def scaled(inp: CapacityInputs, **changes) -> CapacityInputs:
    return replace(inp, **changes)
