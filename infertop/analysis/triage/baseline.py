"""Baselines: what is normal for an engine — its own recent healthy past, and its peers now.

Own baseline: per engine and signal, an exponentially weighted mean over the ticks on which the
engine was healthy (no verdict active on it, no rule finding anything on it), so an incident
never teaches the baseline that it is normal, and on which the signal rested on enough requests
(:meth:`Signals.enough`): the first handful of requests after a start and a night's trickle teach
it nothing. Its half-life (:data:`HALF_LIFE_S`) follows a diurnal cycle; the mean is weighted by
time and corrected for its start (the weights' sum), so a baseline is the plain mean of what it
has learnt until it has learnt for longer than its half-life — not its first tick's value, which
an exponential mean started there keeps for minutes. A baseline stays silent until it has
:data:`MIN_HISTORY_S` of such ticks and :data:`MIN_BASELINE_REQUESTS` requests behind them —
before that, nothing is known to have fallen or grown.

Peer baseline: the median of a signal over the other fresh, up engines serving the same model,
once there are :data:`MIN_PEERS` of them.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from .signals import Signals

WINDOW_S = 60.0  # the display window the latency quantiles are taken over

HALF_LIFE_S = 300.0  # a healthy past of minutes: a diurnal ramp moves it, a 10 s incident does not
MIN_HISTORY_S = 60.0  # healthy ticks with enough requests a baseline needs before it speaks…
MIN_BASELINE_REQUESTS = 200.0  # … and requests behind them (ten samples' worth: its mean within a few %)
MAX_STEP_S = 10.0  # a gap between healthy ticks counts at most this much history
RELEARN_AFTER_S = 1800.0  # unhealthy this long: the engine's new level is its normal, learn it again
MIN_PEERS = 2  # others serving the same model before "slower than its peers" means anything
EXACT_PEERS_UNDER = 32  # groups up to this size take each engine's median without itself exactly

SIGNALS = ("prefix_hit_pct", "prompt_tokens_per_req", "ttft_p50_s", "ttft_p99_s", "itl_p50_s")


@dataclass(slots=True)
class _Mean:
    weighted: float = 0.0  # Σ value · weight, each weight decayed since it was learnt
    weight: float = 0.0  # Σ weight (seconds, decayed): the mean is weighted / weight
    history_s: float = 0.0  # seconds learnt from (not decayed)
    requests: float = 0.0  # requests behind them

    @property
    def value(self) -> float:
        return self.weighted / self.weight


@dataclass(slots=True)
class _Engine:
    means: dict[str, _Mean]
    last_healthy: float | None = None
    unhealthy_since: float | None = None


class Baselines:
    """Each engine's own baseline per signal of :data:`SIGNALS`."""

    def __init__(self, half_life_s: float = HALF_LIFE_S, min_history_s: float = MIN_HISTORY_S,
                 relearn_after_s: float = RELEARN_AFTER_S, min_requests: float = MIN_BASELINE_REQUESTS) -> None:
        self.tau_s = half_life_s / math.log(2)
        self.min_history_s, self.relearn_after_s, self.min_requests = min_history_s, relearn_after_s, min_requests
        self._engines: dict[str, _Engine] = {}

    def own(self, name: str, signal: str) -> float | None:
        """The engine's healthy mean of ``signal``; None until it has :data:`MIN_HISTORY_S` of history
        and :data:`MIN_BASELINE_REQUESTS` requests behind it."""
        e = self._engines.get(name)
        m = e.means.get(signal) if e is not None else None
        if m is None or m.weight <= 0 or m.history_s < self.min_history_s or m.requests < self.min_requests:
            return None
        return m.value

    def update(self, name: str, signals: Signals, now: float, healthy: bool) -> None:
        """Learn from this tick when the engine is healthy; otherwise hold (and relearn after a long spell)."""
        e = self._engines.setdefault(name, _Engine({}))
        if not healthy:
            e.unhealthy_since = e.unhealthy_since if e.unhealthy_since is not None else now
            if now - e.unhealthy_since >= self.relearn_after_s:
                e.means.clear()  # a level held for half an hour is the new normal, not an incident
                e.unhealthy_since = None
            e.last_healthy = None
            return
        e.unhealthy_since = None
        dt = 0.0 if e.last_healthy is None else min(MAX_STEP_S, max(0.0, now - e.last_healthy))
        e.last_healthy = now
        if dt <= 0:
            return
        decay = math.exp(-dt / self.tau_s)
        for signal in SIGNALS:
            v = signals.reliable(signal)  # too few requests behind it this tick: nothing to learn
            if v is None or not math.isfinite(v):
                continue
            m = e.means.get(signal)
            if m is None:
                m = e.means[signal] = _Mean()
            m.weighted = m.weighted * decay + v * dt
            m.weight = m.weight * decay + dt
            m.history_s += dt
            m.requests += _requests_per_s(signals, signal) * dt

    def forget_except(self, names: set[str]) -> None:
        for gone in [n for n in self._engines if n not in names]:
            del self._engines[gone]


def _requests_per_s(signals: Signals, signal: str) -> float:
    """The requests a second behind ``signal``: its short span's, else the 60 s window's."""
    if signal in ("prefix_hit_pct", "prompt_tokens_per_req"):
        rate = signals.request_rate_per_s()
        if rate is not None:
            return rate
    return (signals.window_requests or 0.0) / WINDOW_S


def peer_medians(signals: dict[str, Signals], models: dict[str, str], signal: str) -> dict[str, tuple[float | None, int]]:
    """Engine → (median of ``signal`` over the other engines serving its model, how many), None under
    :data:`MIN_PEERS`. ``signals``/``models``: the fresh, up engines of this tick; an engine's value counts
    only with enough requests behind it (:meth:`Signals.reliable`). One sort per model, then each engine's
    median without itself by index (a fleet of thousands is not n² work)."""
    by_model: dict[str, list[float]] = {}
    values_of = {n: s.reliable(signal) for n, s in signals.items()}
    for n, v in values_of.items():
        if v is not None:
            by_model.setdefault(models.get(n, "?"), []).append(v)
    for values in by_model.values():
        values.sort()
    out: dict[str, tuple[float | None, int]] = {}
    whole = {model: ((values[(len(values) - 1) // 2] + values[len(values) // 2]) / 2, len(values))
             for model, values in by_model.items() if len(values) > EXACT_PEERS_UNDER}
    for n, v in values_of.items():
        model = models.get(n, "?")
        if model in whole:  # a large group: one engine more or less does not move its median
            median, count = whole[model]
            out[n] = (median, count - (v is not None))
            continue
        values = by_model.get(model, [])
        m = len(values) - (v is not None)
        if m < MIN_PEERS:
            out[n] = (None, m)
            continue
        lo, hi = (m - 1) // 2, m // 2  # the median's ranks among the others
        if v is not None:  # the others are the sorted values without one occurrence of v, at rank `skip`
            skip = bisect.bisect_left(values, v)
            lo, hi = lo + (lo >= skip), hi + (hi >= skip)
        out[n] = ((values[lo] + values[hi]) / 2, m)
    return out
