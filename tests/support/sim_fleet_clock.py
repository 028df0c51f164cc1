"""A simulated fleet watched through infertop's real collection path, on the simulator's virtual clock.

The simulator runs with ``realtime=False``; each :meth:`VirtualFleet.tick` advances it, then
scrapes every engine's ``/metrics`` and the dcgm exporter over loopback HTTP with the real
collectors (:class:`FleetCollector`, :class:`DcgmSource`), joins them with :class:`FleetJoiner`
into a :class:`FleetState`, and feeds :class:`Triage` and the Log's :class:`AlertLog` as the
console does. Every clock handed to them is the virtual one (epoch + virtual seconds), so a
test reads times in virtual seconds and never depends on the wall clock or the machine's speed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from infertop.analysis.triage import Triage, Verdict
from infertop.config import SloConfig
from infertop.sim import SimCluster
from infertop.sources.dcgm import DcgmSource
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import FleetState
from infertop.analysis.alerts import AlertHold
from infertop.ui.status import AlertLog


@dataclass
class Tick:
    t: float  # virtual seconds since the simulator's epoch
    state: FleetState
    verdicts: tuple[Verdict, ...]
    alert_lines: list[str] = field(default_factory=list)


class VirtualFleet:
    """``sim`` (started, ``realtime=False``, ``kubernetes_labels=True``) as infertop's demo watches it."""

    def __init__(self, sim: SimCluster, slo: SloConfig | None = None, refresh_s: float = 1.0) -> None:
        self.sim = sim
        self.refresh_s = refresh_s

        def mono() -> float:
            return sim.now

        def wall() -> float:
            return sim.epoch_s + sim.now

        self.wall = wall
        self.collector = FleetCollector([EngineEndpoint(f"vllm-{e.index}", e.url, timeout_s=5.0,
                                                       max_num_seqs=e.max_num_seqs)
                                         for e in sim.engines], interval_s=refresh_s, window_s=60.0, clock=mono)
        pods = {e.gpu.pod: f"vllm-{e.index}" for e in sim.engines if e.gpu.pod}
        self.joiner = FleetJoiner(self.collector, slo=slo or SloConfig(), refresh_s=refresh_s, window_s=60.0,
                                  mode="demo", engine_pods=pods, wall=wall, mono=mono)
        self.joiner.alert_hold = AlertHold()  # the alert list as the console holds it
        self.dcgm = DcgmSource([sim.dcgm_url], clock=mono) if sim.dcgm_url else None
        self.triage = Triage()
        self.alert_log = AlertLog()
        self.client = httpx.AsyncClient(trust_env=False)

    async def tick(self, dt: float | None = None) -> Tick:
        self.sim.advance(self.refresh_s if dt is None else dt, tick=0.05)
        await self.collector.poll_once()
        self.joiner.observe()
        if self.dcgm is not None:
            self.joiner.set_gpus(*await self.dcgm.poll(self.client))
        state = self.joiner.build()
        verdicts = self.triage.evaluate(state, state.taken_at)
        lines = [line.plain for line in self.alert_log.changes(state)]
        return Tick(self.sim.now, state, verdicts, lines)

    async def aclose(self) -> None:
        await self.collector.aclose()
        if self.dcgm is not None:
            await self.dcgm.aclose()
        await self.client.aclose()


def run(coro):
    return asyncio.run(coro)


@dataclass
class ScenarioRun:
    """What the fleet looked like, tick by tick, while one scenario played on engine ``engine``."""

    name: str
    engine: str  # the subject engine's name (vllm-<i>)
    gpu: str | None  # its GPU as verdicts name it (host:label)
    onset_s: float
    recovery_at_s: float
    ticks: list[Tick]

    def raised(self, kind: str, subject: str, after_s: float = float("-inf")) -> float | None:
        """Virtual time of the first tick (at or after ``after_s``) with that verdict active."""
        for tk in self.ticks:
            if tk.t >= after_s and any(v.kind == kind and v.subject == subject for v in tk.verdicts):
                return tk.t
        return None

    def cleared(self, kind: str, subject: str) -> float | None:
        """Virtual time of the first tick after the last one with that verdict active (None: never
        raised, or still active at the end)."""
        last_on = None
        for tk in self.ticks:
            if any(v.kind == kind and v.subject == subject for v in tk.verdicts):
                last_on = tk.t
        after = [tk.t for tk in self.ticks if last_on is not None and tk.t > last_on]
        return after[0] if after else None

    def kinds(self, start_s: float = float("-inf"), end_s: float = float("inf")) -> set[tuple[str, str]]:
        """Every (verdict kind, subject) active at some tick in [start_s, end_s)."""
        return {v.key for tk in self.ticks if start_s <= tk.t < end_s for v in tk.verdicts}

    def series(self, field_name: str, engine: str | None = None) -> list[tuple[float, float | None]]:
        """(t, that EngineStats field of the engine) per tick."""
        name = engine or self.engine
        out = []
        for tk in self.ticks:
            e = next((e for e in tk.state.engines if e.name == name), None)
            out.append((tk.t, None if e is None else getattr(e.stats, field_name)))
        return out


def gpu_subject(state: FleetState, engine: str) -> str | None:
    """The engine's GPU as the GPU verdicts name it (host:label)."""
    for g in state.gpus:
        if g.engine == engine:
            return f"{g.host}:{g.label}" if g.host else g.label
    return None


async def play(name: str, *, engine: int = 1, n_engines: int = 4, seed: int = 7, load: str = "bursty",
               onset_s: float = 90.0, after_recovery_s: float = 120.0, **timing: float) -> ScenarioRun:
    """Run a healthy fleet, play ``name`` on ``engine`` from ``onset_s`` (virtual seconds after the
    start), and watch it until ``after_recovery_s`` after its recovery began."""
    sim = SimCluster(n_engines, seed=seed, load=load, realtime=False, kubernetes_labels=True, warmup_s=30.0,
                     hot_engine=None, throttle_gpu=None).start()
    fleet = VirtualFleet(sim)
    try:
        start = sim.now
        player = sim.play(name, engine=engine, onset_s=start + onset_s, **timing)
        end = player.timeline.recovery_at_s + after_recovery_s
        ticks = []
        gpu = None
        while sim.now < end - 1e-9:
            tk = await fleet.tick()
            ticks.append(tk)
            gpu = gpu or gpu_subject(tk.state, f"vllm-{engine}")
        return ScenarioRun(name, f"vllm-{engine}", gpu, player.timeline.onset_s, player.timeline.recovery_at_s,
                           ticks)
    finally:
        await fleet.aclose()
        sim.stop()
