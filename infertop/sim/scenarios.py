"""Incidents the simulator plays on its virtual clock (``infertop sim --scenario NAME``).

A scenario acts on one engine, its *subject* (and that engine's GPU), along a timeline of
virtual seconds: healthy until ``onset_s``; the fault ramps in over ``ramp_s``, holds for
``hold_s`` and fades out over ``recovery_s`` (its intensity goes 0 → 1 → 0); then healthy
again. A kind that cannot be half-present (an engine is down or it is not) is on from onset to
the start of recovery. Everything it changes is what the real fault changes, so the engine's
``/metrics`` and the dcgm exporter report it truthfully:

=================  ==========================================================================
queue-bound        12 requests/s more arrive at the subject (its capacity again): slots full, a queue
kv-bound           its answers grow 8x longer (max_tokens up to what fits): the KV cache fills,
                   sequences are preempted and recomputed
prefix-collapse    97 % of its requests stop sharing their prefix (a system prompt that now
                   differs per request): hit rate falls to a few %, prompt size stays
long-prompts       its prompts grow 20x (capped to fit max_model_len): prefill floods
hung               its engine core hangs: /metrics answers, no token moves, running and waiting
                   frozen, the GPU idles; recovery is a restart (counters reset)
engine-down        the engine process is gone (connection refused) until recovery
crash-loop         down 10 s, up 20 s, again and again (each start resets the counters)
gpu-lost           its GPU reports XID 79 (fallen off the bus) and the engine dies with it
gpu-throttled      its GPU's cooling fails: hot, thermal slowdown (SM 1980 → 1830 MHz), the
                   engine's steps ~8 % slower
=================  ==========================================================================

The random draws a scenario makes come from its own generator, so the arrivals (times and the
base request mix) are those of the healthy run. This module never imports textual or rich.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .requests import SimRequest

if TYPE_CHECKING:  # pragma: no cover
    from . import SimCluster

__all__ = ["SCENARIOS", "Scenario", "ScenarioPlayer", "Timeline", "scenario_table"]

QUEUE_EXTRA_RPS = 12.0  # queue-bound: a steady stream on top of the pattern, about one engine's capacity
KV_ANSWER_X = 8.0  # kv-bound: answers this much longer
PREFIX_MISS_SHARE = 0.97  # prefix-collapse: requests whose prefix is now unique
LONG_PROMPT_X = 20.0  # long-prompts: prompt tokens per request
PROMPT_ROOM_TOKENS = 256  # long-prompts: a grown prompt leaves this much of max_model_len to answer in
XID_FALLEN_OFF_BUS = 79
COOLING_LOSS_C = 60.0  # gpu-throttled: the die this much hotter for the same power
CRASH_DOWN_S, CRASH_UP_S = 10.0, 20.0  # crash-loop: one cycle


@dataclass(frozen=True)
class Scenario:
    """One incident kind: what it does (``summary``), the verdict infertop should reach, its timeline's
    default ramp, hold and recovery (virtual seconds)."""

    name: str
    verdict: str  # the triage verdict kind it should raise
    summary: str
    ramp_s: float = 0.0
    hold_s: float = 180.0
    recovery_s: float = 0.0


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("queue-bound", "queue-bound", f"{QUEUE_EXTRA_RPS:g} requests/s more (over capacity): slots full, a queue",
             ramp_s=20.0, recovery_s=20.0),
    Scenario("kv-bound", "kv-bound", f"answers {KV_ANSWER_X:g}x longer: the KV cache fills, sequences are preempted",
             ramp_s=20.0),
    Scenario("prefix-collapse", "prefix-cache-collapse",
             f"{PREFIX_MISS_SHARE:.0%} of requests stop sharing their prefix: hit rate falls, prompt size flat",
             ramp_s=10.0, recovery_s=10.0),
    Scenario("long-prompts", "long-prompts", f"prompts {LONG_PROMPT_X:g}x longer (to fit max_model_len): a prefill flood",
             ramp_s=10.0, recovery_s=10.0),
    Scenario("hung", "hung", "the engine core hangs: /metrics answers, no token moves; recovery is a restart"),
    Scenario("engine-down", "engine-down", "the engine process is gone (connection refused) until recovery"),
    Scenario("crash-loop", "crash-loop", f"down {CRASH_DOWN_S:g} s, up {CRASH_UP_S:g} s, again (counters reset)",
             hold_s=95.0),
    Scenario("gpu-lost", "gpu-fault", f"its GPU reports XID {XID_FALLEN_OFF_BUS} and the engine on it dies"),
    Scenario("gpu-throttled", "gpu-throttled", "its GPU's cooling fails: thermal slowdown, the engine ~8 % slower",
             ramp_s=30.0, recovery_s=30.0),
)}


@dataclass(frozen=True)
class Timeline:
    """Onset, ramp, hold and recovery on the virtual clock (seconds)."""

    onset_s: float
    ramp_s: float
    hold_s: float
    recovery_s: float

    @property
    def recovery_at_s(self) -> float:
        """When recovery starts (the fault is at full strength until then)."""
        return self.onset_s + self.ramp_s + self.hold_s

    @property
    def end_s(self) -> float:
        """When the fault is gone."""
        return self.recovery_at_s + self.recovery_s

    def intensity(self, t: float) -> float:
        """0 before onset, rising to 1 over the ramp, 1 while it holds, falling to 0 over recovery."""
        if t < self.onset_s or t >= self.end_s:
            return 0.0
        if t < self.onset_s + self.ramp_s:
            return (t - self.onset_s) / self.ramp_s
        if t < self.recovery_at_s:
            return 1.0
        return 1.0 - (t - self.recovery_at_s) / self.recovery_s

    def on(self, t: float) -> bool:
        """For an all-or-nothing fault: on from onset until recovery starts."""
        return self.onset_s <= t < self.recovery_at_s


def scenario_table() -> str:
    """``--list-scenarios``: one line per scenario."""
    lines = []
    for s in SCENARIOS.values():
        timing = f"ramp {s.ramp_s:g} s, hold {s.hold_s:g} s, recovery {s.recovery_s:g} s"
        lines.append(f"{s.name:<16} → {s.verdict:<15} {s.summary} ({timing})")
    return "\n".join(lines) + "\n"


class ScenarioPlayer:
    """Plays one scenario on one engine of a :class:`SimCluster`; the cluster calls :meth:`apply`
    before every step. :meth:`stop` puts the engine back as it was, at once."""

    def __init__(self, cluster: SimCluster, scenario: Scenario | str, *, engine: int = 1, onset_s: float | None = None,
                 ramp_s: float | None = None, hold_s: float | None = None, recovery_s: float | None = None,
                 seed: int = 0) -> None:
        if isinstance(scenario, str):
            if scenario not in SCENARIOS:
                raise ValueError(f"unknown scenario {scenario!r}; one of: {', '.join(SCENARIOS)}")
            scenario = SCENARIOS[scenario]
        if not 0 <= engine < len(cluster.engines):
            raise ValueError(f"engine {engine} is not one of the {len(cluster.engines)} simulated engines")
        scenario = replace(scenario, ramp_s=scenario.ramp_s if ramp_s is None else float(ramp_s),
                           hold_s=scenario.hold_s if hold_s is None else float(hold_s),
                           recovery_s=scenario.recovery_s if recovery_s is None else float(recovery_s))
        self.cluster = cluster
        self.scenario = scenario
        self.engine = engine
        self.timeline = Timeline(cluster.now if onset_s is None else float(onset_s), scenario.ramp_s, scenario.hold_s,
                                 scenario.recovery_s)
        self._rng = random.Random(f"infertop-sim-scenario:{scenario.name}:{seed}:{engine}")
        self._unique = 0
        self._x = 0.0  # the intensity last applied
        self._on = False  # an all-or-nothing fault: applied now

    @property
    def name(self) -> str:
        return self.scenario.name

    def describe(self) -> str:
        t = self.timeline
        return (f"scenario {self.name} engine={self.engine} onset={t.onset_s:.0f} recovery={t.recovery_at_s:.0f} "
                f"end={t.end_s:.0f} (virtual s)")

    # ------------------------------------------------------------------ play

    def apply(self) -> None:
        """Set the fault to its strength at the cluster's present (virtual) time."""
        t = self.cluster.now
        kind = self.name
        if kind in ("queue-bound", "kv-bound", "prefix-collapse", "long-prompts", "gpu-throttled"):
            self._set_intensity(self.timeline.intensity(t))
        elif kind == "crash-loop":
            self._set_on(self.timeline.on(t) and (t - self.timeline.onset_s) % (CRASH_DOWN_S + CRASH_UP_S) < CRASH_DOWN_S)
        else:
            self._set_on(self.timeline.on(t))

    def stop(self) -> None:
        """End the fault now (what recovery ends in)."""
        self._set_intensity(0.0)
        self._set_on(False)

    def _set_intensity(self, x: float) -> None:
        x = round(x, 2)  # a rate change redraws the next arrival: not every tick of a ramp
        if x == self._x:
            return
        self._x = x
        c, i = self.cluster, self.engine
        kind = self.name
        if kind == "queue-bound":
            c.load.set_rate_add(i, QUEUE_EXTRA_RPS * x)
        elif kind == "gpu-throttled":
            c.engines[i].gpu.cooling_loss_c = COOLING_LOSS_C * x
        elif kind in ("kv-bound", "prefix-collapse", "long-prompts"):
            c.load.shapers[i] = getattr(self, "_shape_" + kind.replace("-", "_")) if x > 0 else None

    def _set_on(self, on: bool) -> None:
        if on == self._on:
            return
        self._on = on
        c, i = self.cluster, self.engine
        e = c.engines[i]
        kind = self.name
        if kind == "hung":
            if on:
                e.hang_core()
            else:
                e.unhang_core(restart=True)
        elif kind in ("engine-down", "crash-loop"):
            if on:
                c.kill_engine(i)
            else:
                c.revive_engine(i)
        elif kind == "gpu-lost":
            if on:
                e.gpu.xid = XID_FALLEN_OFF_BUS
                c.kill_engine(i)
            else:
                e.gpu.xid = 0  # the node was drained and the GPU reset
                c.revive_engine(i)

    # ------------------------------------------------------ request shapers

    def _shape_kv_bound(self, req: SimRequest, max_len: int) -> None:
        k = 1.0 + (KV_ANSWER_X - 1.0) * self._x
        if req.stop_at is not None:
            req.stop_at = max(1, int(req.stop_at * k))
        req.max_tokens = max(req.max_tokens, max_len - req.prompt_tokens)  # the client asks for what fits

    def _shape_prefix_collapse(self, req: SimRequest, max_len: int) -> None:
        if req.prefix_id is not None and self._rng.random() < PREFIX_MISS_SHARE * self._x:
            self._unique += 1
            req.prefix_id = f"{req.prefix_id}~{self._unique}"  # same length, never seen before

    def _shape_long_prompts(self, req: SimRequest, max_len: int) -> None:
        k = 1.0 + (LONG_PROMPT_X - 1.0) * self._x
        grown = min(int(req.prompt_tokens * k), max_len - PROMPT_ROOM_TOKENS)
        req.prompt_tokens = max(req.prompt_tokens, grown)
