"""``snapshot`` (table and JSON) carries each workload's autoscaler view; recordings keep it exactly."""

from __future__ import annotations

import io
import json

import pytest

from infertop.config import Config, KubeConfig
from infertop.sim import SimCluster
from infertop.sim.model import SimRequest
from infertop.snapshot import collect_state, print_table, write_json
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_types import FleetState

NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator("advisor-snap", reconcile_interval=0.05)


async def test_snapshot_table_and_json_carry_the_autoscaler_view(emu, tmp_path):
    sim = SimCluster(1, seed=4, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
        emu.add_deployment(NS, "vllm", replicas=2)
        emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=3, current_replicas=2, desired_replicas=3,
                    conditions=[{"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas",
                                 "message": "the desired replica count is more than the maximum replica count"}])
        eng = sim.engines[0]
        with eng.lock:
            for _ in range(30):
                eng.core.submit(SimRequest(prompt_tokens=50, max_tokens=2000))
        sim.advance(0.5)
        cfg = Config(kube=KubeConfig(kubeconfig=str(emu.write_kubeconfig(tmp_path / "kc"))))
        cfg.gpu.nvml = False
        state = await collect_state([EngineEndpoint("llama", eng.url)], cfg, 0.3)
    finally:
        sim.stop()
    (view,) = state.autoscalers
    assert (view["workload"], view["engines"], view["current"], view["bounds_from"], view["mode"]) == (
        "Deployment/default/vllm", ["llama"], 2, "HPA default/vllm", "recommend")
    latest = view["latest"]
    # one evaluation: the start of the scale-up window holds it (the advisor needs 30 s of the burst)
    assert latest["rule"] == "stabilisation" and latest["action"] == "none", latest["reason"]
    assert latest["reason"].startswith("2 → 2: wants 3, held by the scale-up window 30 s (30 s left): "
                                       "queue depth 26.0 > 5")
    assert [(a["source"], a["current"], a["desired"]) for a in view["autoscalers"]] == [
        ("infertop", 2, 2), ("HPA", 2, 3)]
    # the HPA's own words (with the autoscalers analysis: "at maxReplicas 3 (…)")
    assert "the desired replica count is more than the maximum replica count" in view["autoscalers"][1]["why"]

    buf = io.StringIO()
    write_json(state, buf)
    doc = json.loads(buf.getvalue())
    assert doc["autoscalers"][0]["latest"]["reason"] == latest["reason"]
    again = FleetState.from_doc(doc)
    assert again.autoscalers == state.autoscalers  # a recording keeps the decisions exactly
    assert again.to_doc()["autoscalers"] == doc["autoscalers"]

    buf = io.StringIO()
    print_table(state, buf)
    table = buf.getvalue()
    section = table[table.index("autoscalers:"):]
    lines = section.splitlines()
    assert lines[1] == ("  Deployment default/vllm: replicas 2, bounds 1-3 (HPA default/vllm), advisor mode "
                        "recommend")
    assert lines[2].split()[:4] == ["infertop", "advisor", "2", "→"]
    assert lines[3].split()[:5] == ["HPA", "default/vllm", "2", "→", "3"]
    assert "none" in lines[4] and "wants 3, held by the scale-up window" in lines[4]
