"""The advisor end to end: a simulated engine behind a Deployment of the Kubernetes API emulator.

Real parts: the simulator serves vLLM metrics over HTTP, the collector polls
it, the emulator holds the Deployment, its pods (whose ip:port is the
engine) and an HPA; the cluster is read with the real client. The advisor's
clock is the fleet state's (a fake wall clock handed to the joiner), so the
windows are passed by moving that clock, never by sleeping.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from infertop.analysis.scaling import APPLIED, APPLYING, AUTO, RECOMMEND, RECOMMENDED, STABILISATION
from infertop.config import AdvisorConfig, KubeConfig, SloConfig
from infertop.control.audit import AuditLog
from infertop.control.kube import KubeControl
from infertop.sim import SimCluster
from infertop.sim.model import SimRequest
from infertop.sources.kube import KubeSession, read_cluster
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector
from infertop.state.advisor.core import Advisor
from infertop.control.advisor.scale import apply_scale
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import FleetState

TOKEN = "advisor-token"
NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.02)


class Fleet:
    """Sim engine + collector + joiner with the advisor + a cluster read per tick, on a fake clock."""

    def __init__(self, emu, tmp_path, sim: SimCluster, mode: str) -> None:
        self.emu, self.sim = emu, sim
        self.now = time.time()
        self.session = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc")))
        self.kcfg = KubeConfig(stuck_after_s=0.0, rollout_timeout_s=30.0)
        self.audit = AuditLog(tmp_path / "audit.jsonl", user="alice")
        self.control = KubeControl(self.session, self.audit, self.kcfg, poll_s=0.02)
        self.collector = FleetCollector([EngineEndpoint("llama", sim.engines[0].url)], interval_s=1.0, window_s=30.0)
        cfg = AdvisorConfig(mode=mode, target_p99_s=600.0, cooldown_s=5.0, scale_up_window_s=2.0,
                            scale_down_window_s=20.0)
        self.advisor = Advisor(cfg, SloConfig())
        self.joiner = FleetJoiner(self.collector, slo=SloConfig(), refresh_s=1.0, window_s=30.0,
                                  wall=lambda: self.now)
        self.joiner.autoscalers = self.advisor

    async def tick(self, at_offset: float) -> FleetState:
        """Poll the engine, read the cluster, build the state at ``start + at_offset`` (fake clock)."""
        await self.collector.poll_once()
        self.joiner.set_cluster(await asyncio.to_thread(read_cluster, self.session, self.kcfg), source="emu")
        self.now = self.start + at_offset
        return self.joiner.build()

    def replicas(self) -> int:
        return self.emu.get("deployments", "vllm", NS)["spec"]["replicas"]


def ready(emu, n: int) -> bool:
    pods = [p for p in emu.list("pods", NS, "app=vllm") if not p["metadata"].get("deletionTimestamp")]
    return len(pods) == n and all({c["type"]: c["status"] for c in p["status"].get("conditions") or []}.get("Ready")
                                  == "True" for p in pods)


def burst(sim: SimCluster, n: int) -> None:
    eng = sim.engines[0]
    with eng.lock:
        for _ in range(n):
            eng.core.submit(SimRequest(prompt_tokens=50, max_tokens=2000))
    sim.advance(0.5)


@pytest.fixture
def sim():
    s = SimCluster(1, seed=3, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    yield s
    s.stop()


def only(state: FleetState) -> dict:
    (view,) = state.autoscalers
    return view


async def test_burst_recommends_then_auto_applies_through_the_scale_action_and_scales_down_after_the_window(
        emu, sim, tmp_path):
    emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4)
    emu.wait_until(lambda: ready(emu, 1))
    f = Fleet(emu, tmp_path, sim, RECOMMEND)
    f.start = f.now
    try:
        v = only(await f.tick(0.0))
        assert (v["workload"], v["engines"], v["current"], v["bounds_from"]) == (
            "Deployment/default/vllm", ["llama"], 1, "HPA default/vllm")
        assert v["latest"]["action"] == "refused"  # idle: no P99 yet, and no scale-down on partial inputs

        burst(sim, 20)  # 4 run, 16 wait: queue depth 16 > 5
        v = only(await f.tick(1.0))
        assert v["latest"]["rule"] == STABILISATION and v["latest"]["desired"] == 1
        assert v["latest"]["reason"].startswith("1 → 1: wants 4, held by the scale-up window 2 s (1 s left): "
                                                "queue depth 16.0 > 5")
        v = only(await f.tick(2.5))
        latest = v["latest"]
        assert latest["action"] == RECOMMENDED and latest["desired"] == 4
        assert latest["reason"].startswith("1 → 4: queue depth 16.0 > 5, ")
        assert f.advisor.take_applies() == [] and f.replicas() == 1  # recommend changes nothing
        assert [a["source"] for a in v["autoscalers"]] == ["infertop", "HPA"]

        # auto: the same decision is applied through the scale action, audited
        assert f.advisor.set_mode(AUTO) is None
        v = only(await f.tick(3.0))
        assert v["latest"]["action"] == APPLYING  # decided; "applied" only once the scale action says ok
        (change,) = f.advisor.take_applies()
        outcome = await asyncio.to_thread(apply_scale, f.control, change)
        assert outcome.ok, outcome.message
        f.advisor.note_applied(change.workload, f.now, outcome.result)
        assert f.replicas() == 4
        entries = f.audit.entries()
        assert [(e["action"], e.get("phase"), e["result"] if "result" in e else None) for e in entries][-2:] == [
            ("kube.scale", "intent", None), ("kube.scale", "outcome", "ok")]
        assert entries[-1]["target"] == "deployment default/vllm" and (entries[-1]["old"], entries[-1]["new"]) == (1, 4)
        assert entries[-1]["summary"].startswith("replicas 1 → 4 (advisor auto: 1 → 4: queue depth 16.0 > 5")

        # the burst drains: the scale-down waits for the 20 s window (and the 5 s cooldown first)
        sim.advance(120.0)
        v = only(await f.tick(5.0))
        assert v["current"] == 4 and v["latest"]["action"] == "none"
        assert v["latest"]["rule"] in ("cooldown", STABILISATION)
        v = only(await f.tick(15.0))
        assert v["latest"]["rule"] == STABILISATION and "scale-down window 20 s" in v["latest"]["reason"]
        assert f.replicas() == 4 and f.advisor.take_applies() == []
        v = only(await f.tick(30.0))
        assert v["latest"]["action"] == APPLYING and v["latest"]["desired"] == 1, v["latest"]["reason"]
        (change,) = f.advisor.take_applies()
        assert (await asyncio.to_thread(apply_scale, f.control, change)).ok
        assert f.replicas() == 1
        f.advisor.note_applied(change.workload, f.now, "ok")
        assert [d["action"] for d in v["decisions"]][:2] == [APPLIED, "none"]  # newest first
    finally:
        await f.collector.aclose()
        f.session.close()


async def test_an_apply_refuses_a_count_that_moved_since_the_decision(emu, sim, tmp_path):
    from infertop.state.advisor.core import Apply

    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, 2))
    f = Fleet(emu, tmp_path, sim, AUTO)
    try:
        out = await asyncio.to_thread(apply_scale, f.control, Apply("Deployment/default/vllm", "Deployment", NS,
                                                                    "vllm", 1, 3, "1 → 3: test"))
        assert out.result == "refused" and "has 2 replicas now, not 1 as decided" in out.message
        assert f.replicas() == 2
        (entry,) = f.audit.entries()  # decided and not applied: one line says so (no intent: nothing was sent)
        assert (entry["result"], entry["old"], entry["new"]) == ("refused", 1, 3) and "phase" not in entry
    finally:
        await f.collector.aclose()
        f.session.close()
