"""Built-in load generator: requests injected straight into the engine models.

Arrivals are a Poisson process whose rate is piecewise constant in virtual
time, drawn from one ``random.Random`` per engine, so the load is a pure
function of (seed, engine index, virtual time): how the clock is cut into
ticks does not change it.

Modes:

* ``"steady"``: a constant rate per engine.
* ``"bursty"``: a cycle (default 120 s) of calm (0.15x), normal (1x) and
  burst (2.4x, about 18 s) phases, shifted per engine (or per ``phase_groups``: the engines
  of one model burst together, as behind one load balancer) so the fleet never bursts all at
  once. Bursts overload an engine for a while: its queue builds, requests
  wait, and on an engine with a tight KV cache requests get preempted.
* ``"diurnal"``: the bursty cycle on a compressed day (``day_s``, default 30 min): the rate
  follows a sine from 0.2x (night) to 1x (noon), in steps of a minute, bursts included.
* ``"none"``: no load.

One *hot* engine (opt-in: ``infertop sim`` and ``--demo`` have none) gets 1.25x the rate,
stronger bursts (3.45x) and twice the long-context (RAG) share during them, so an engine queues
and preempts while the others keep up.

The default ``base_rate`` (3 requests/s per engine) is sized against what one engine of the
default configuration serves of this mix (about 12 requests/s at ``max_num_seqs`` 64): the
fleet answers in hundreds of ms, a burst (7.2 requests/s) is absorbed, and only the hot engine's
bursts (~13 requests/s, more of it long-context) queue past a 2 s TTFT for a while.

The request mix: chat (shared system prompts), code completion (shared
repository context), long-context RAG, and low-priority batch jobs
(priority 5; the others 0).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .model import EngineModel, SimRequest

__all__ = ["LoadGenerator", "WorkloadClass", "DEFAULT_MIX", "LOAD_MODES"]

LOAD_MODES = ("steady", "bursty", "diurnal", "none")


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    weight: float
    prompt_mean: float
    prompt_sigma: float
    out_mean: float
    out_sigma: float
    max_tokens: int
    priority: int = 0
    prefixes: tuple[str, ...] = ()
    prefix_tokens: int = 0
    prefix_share: float = 0.0


DEFAULT_MIX: tuple[WorkloadClass, ...] = (
    WorkloadClass("chat", 0.55, 700, 0.6, 170, 0.8, 1024, 0, ("sys-assistant-v3", "sys-support-v1"), 384, 0.85),
    WorkloadClass("code", 0.20, 1600, 0.5, 48, 0.6, 128, 0, ("repo-ctx-a", "repo-ctx-b", "repo-ctx-c"), 1024,
                  0.7),
    WorkloadClass("rag", 0.10, 3500, 0.35, 220, 0.5, 512, 0, ("rag-system-v2",), 256, 0.9),
    WorkloadClass("batch", 0.15, 400, 0.5, 420, 0.5, 1024, 5),
)

# Bursty cycle: (start fraction, rate multiplier) segments of one period.
_BURSTY = ((0.00, 0.15), (0.30, 1.0), (0.70, 2.4), (0.85, 0.9))
_HOT_BURSTY = ((0.00, 0.25), (0.30, 1.0), (0.70, 3.45), (0.86, 1.0))
_DAY_STEP_S = 60.0  # the diurnal curve is constant for a minute at a time (a Poisson rate per segment)


class LoadGenerator:
    """Generates arrivals per engine; call :meth:`generate` before stepping an engine."""

    def __init__(self, n_engines: int, seed: int = 0, mode: str = "bursty", *, base_rate: float = 3.0,
                 hot_engine: int | None = 0, hot_factor: float = 1.25, period_s: float = 120.0,
                 mix: tuple[WorkloadClass, ...] = DEFAULT_MIX, day_s: float = 1800.0) -> None:
        if mode not in LOAD_MODES:
            raise ValueError(f"load mode must be one of {LOAD_MODES}, not {mode!r}")
        self.n = n_engines
        self.seed = seed
        self.mode = mode
        self.base_rate = base_rate
        self.hot_engine = hot_engine
        self.hot_factor = hot_factor
        self.period_s = period_s
        self.day_s = day_s
        self.mix = mix
        #: Engines with the same group burst together (None: each engine on its own phase). The
        #: replicas of one model sit behind one load balancer, which spreads a burst over all of them.
        self.phase_groups: list[int] | None = None
        self.rate_scale = [1.0] * n_engines
        self.rate_add = [0.0] * n_engines  # requests/s on top of the pattern (a scenario's extra traffic)
        #: Per engine, None or a function that reshapes each new request (a scenario: longer prompts,
        #: longer answers, prefixes that no longer repeat); it draws from its own generator, so the
        #: arrivals (times and the base mix) are the same with or without it.
        self.shapers: list[Callable[[SimRequest, int], None] | None] = [None] * n_engines
        self._rngs = [random.Random(f"infertop-sim-load:{seed}:{i}") for i in range(n_engines)]
        self._next: list[float | None] = [None] * n_engines
        self.generated = [0] * n_engines

    # --------------------------------------------------------------- control

    def set_mode(self, mode: str) -> None:
        if mode not in LOAD_MODES:
            raise ValueError(f"load mode must be one of {LOAD_MODES}, not {mode!r}")
        self.mode = mode
        self._next = [None] * self.n  # redrawn from each engine's clock

    def set_rate_scale(self, engine: int, scale: float) -> None:
        """Multiply one engine's arrival rate (e.g. 0 while it is drained)."""
        self.rate_scale[engine] = max(0.0, float(scale))
        self._next[engine] = None

    # ------------------------------------------------------------------ rate

    def _offset(self, i: int) -> float:
        g = self.phase_groups[i] if self.phase_groups is not None else i
        return (g * 0.37 * self.period_s) % self.period_s

    def set_rate_add(self, engine: int, rate: float) -> None:
        """Add a steady stream of ``rate`` requests/s to one engine's pattern."""
        self.rate_add[engine] = max(0.0, float(rate))
        self._next[engine] = None

    def _segment(self, i: int, t: float) -> tuple[float, float]:
        """(rate, end of the constant-rate segment containing t)."""
        rate, end = self._pattern(i, t)
        add = self.rate_add[i]
        return (rate + add, end) if add > 0 and self.mode != "none" else (rate, end)

    def _pattern(self, i: int, t: float) -> tuple[float, float]:
        scale = self.rate_scale[i]
        base = self.base_rate * scale * (self.hot_factor if i == self.hot_engine else 1.0)
        if self.mode == "none" or base <= 0:
            return 0.0, math.inf
        if self.mode == "steady":
            return base, math.inf
        day_end = math.inf
        if self.mode == "diurnal":
            step = math.floor(t / _DAY_STEP_S)
            day_end = (step + 1) * _DAY_STEP_S
            noon = (step + 0.5) * _DAY_STEP_S / self.day_s  # the curve at the step's middle, in days
            base *= 0.6 - 0.4 * math.cos(2.0 * math.pi * noon)  # 0.2x at t = 0 (midnight), 1x at noon
        p = self.period_s
        segs = _HOT_BURSTY if i == self.hot_engine else _BURSTY
        u = t + self._offset(i)
        cycle = math.floor(u / p)
        frac = u / p - cycle
        k = len(segs) - 1
        while segs[k][0] > frac:
            k -= 1
        end_frac = segs[k + 1][0] if k + 1 < len(segs) else 1.0
        end = min((cycle + end_frac) * p - self._offset(i), day_end)
        if end <= t:  # float edge
            end = t + 1e-9
        return base * segs[k][1], end

    def rate(self, i: int, t: float) -> float:
        """Arrival rate (requests/s) of engine ``i`` at virtual time ``t``."""
        return self._segment(i, t)[0]

    def _draw_next(self, i: int, t: float) -> float:
        e = self._rngs[i].expovariate(1.0)
        for _ in range(10_000):
            r, end = self._segment(i, t)
            if r > 0:
                dt = e / r
                if t + dt <= end:
                    return t + dt
                e -= r * (end - t)
            if end == math.inf:
                return math.inf
            t = end
        return math.inf

    # ------------------------------------------------------------- requests

    def make_request(self, i: int, arrival_t: float) -> SimRequest:
        rng = self._rngs[i]
        mix = self.mix
        weights = [w.weight for w in mix]
        if i == self.hot_engine and self.mode != "steady" and self.rate(i, arrival_t) > self.base_rate * 2:
            weights = [w.weight * (2.0 if w.name == "rag" else 1.0) for w in mix]
        cls = rng.choices(mix, weights)[0]
        prompt = int(rng.lognormvariate(math.log(cls.prompt_mean) - cls.prompt_sigma ** 2 / 2, cls.prompt_sigma))
        natural = int(rng.lognormvariate(math.log(cls.out_mean) - cls.out_sigma ** 2 / 2, cls.out_sigma))
        prefix_id = None
        prefix_tokens = 0
        if cls.prefixes and rng.random() < cls.prefix_share:
            prefix_id = rng.choice(cls.prefixes)
            prefix_tokens = cls.prefix_tokens
            prompt += prefix_tokens
        prompt = max(4, min(prompt, 7000))
        return SimRequest(prompt, cls.max_tokens, stop_at=max(1, natural), prefix_id=prefix_id,
                          prefix_tokens=prefix_tokens, priority=cls.priority, arrival_t=arrival_t,
                          request_id=f"load-{i}-{self.generated[i]}", user_data=cls.name)

    def generate(self, i: int, core: EngineModel, until_t: float, submit: bool = True) -> int:
        """Submit every arrival of engine ``i`` up to virtual time ``until_t``; returns how many.

        ``submit=False`` draws and drops them (the engine is down: its clients get errors).
        """
        nxt = self._next[i]
        if nxt is None:
            nxt = self._draw_next(i, core.now)
        count = 0
        max_len = core.config.max_model_len
        shaper = self.shapers[i]
        while nxt <= until_t:
            req = self.make_request(i, nxt)
            if shaper is not None:
                shaper(req, max_len)
            if req.prompt_tokens + 1 >= max_len:
                req.prompt_tokens = max_len // 2
            if req.prompt_tokens + req.max_tokens > max_len:
                req.max_tokens = max(1, max_len - req.prompt_tokens)
            if submit:
                core.submit(req)
            self.generated[i] += 1
            count += 1
            nxt = self._draw_next(i, nxt)
        self._next[i] = nxt
        return count
