"""The simulated cluster (``infertop sim --kube-port``, ``infertop/sim/kube/cluster.py``): a Kubernetes
API whose Deployment's pods are the simulated engines, read and scaled through the real client.

Nothing is patched: the engines and the API emulator are HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import httpx
import kubernetes
import pytest
from poll_wait import wait_for

from infertop.analysis.autoscaler.explain import AT_MAX, PENDING_GPU, explain_workloads
from infertop.sim import SimCluster
from infertop.sim.kube.cluster import DEMO_CONTEXT, SimKube
from infertop.sim.model import SimRequest
from infertop.sources.kube import KubeSession, read_cluster

NS = "inference"


def answers(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def sim_kube(tmp_path):
    started = []

    def make(n: int = 3, **kw) -> tuple[SimCluster, SimKube, KubeSession]:
        sim = SimCluster(n, seed=3, load="none", realtime=False, dcgm=False).start()
        kube = SimKube(sim, termination_delay_s=0.3, start_delay_s=0.0, **kw).start()
        assert kube.wait_bound(15)
        session = KubeSession.connect(str(kube.write_kubeconfig(tmp_path / "kc")))
        started.append((sim, kube, session))
        return sim, kube, session

    yield make
    for sim, kube, session in started:
        session.close()
        kube.stop()
        sim.stop()
        assert kube.emu.errors == []


def test_the_pods_are_the_engines_and_scaling_starts_and_stops_them(sim_kube):
    sim, kube, session = sim_kube(3, hpa=False)
    snap = read_cluster(session)
    assert snap.context == DEMO_CONTEXT and snap.namespaces == (NS,)
    (node,) = snap.nodes
    assert (node.name, node.gpu_capacity, node.gpu_requested) == ("sim-node-0", 3, 3)
    urls = sorted(p.engine_url for p in snap.pods)
    assert urls == sorted(e.url for e in sim.engines) and all(p.status == "Running" for p in snap.pods)
    for p in snap.pods:  # each pod's GPU row carries the pod's name, as dcgm-exporter -k does
        assert next(e for e in sim.engines if e.url == p.engine_url).gpu.pod == p.name

    apps = kubernetes.client.AppsV1Api(session.api_client)
    apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 1}})
    wait_for(lambda: sum(answers(e.url) for e in sim.engines) == 1, what="two engines stopped")
    wait_for(lambda: len(read_cluster(session).pods) == 1, what="one pod left")
    (pod,) = read_cluster(session).pods
    assert answers(pod.engine_url)

    apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 3}})
    wait_for(lambda: sum(answers(e.url) for e in sim.engines) == 3, what="the engines started again")
    snap = wait_for(lambda: (s := read_cluster(session)) and len([p for p in s.pods if p.engine_url]) == 3 and s,
                    what="three pods with engines")
    assert sorted(p.engine_url for p in snap.pods) == sorted(e.url for e in sim.engines)


def test_a_deleted_pod_drains_then_its_engine_stops_and_a_replacement_takes_one(sim_kube):
    sim, kube, session = sim_kube(2, hpa=False, replicas=1)
    (pod,) = read_cluster(session).pods
    engine = next(e for e in sim.engines if e.url == pod.engine_url)
    spare = next(e for e in sim.engines if e is not engine)
    assert not answers(spare.url)  # no pod, no engine process
    kubernetes.client.CoreV1Api(session.api_client).delete_namespaced_pod(pod.name, NS)
    wait_for(lambda: not engine.alive, what="the terminating pod's engine out of the Service")
    wait_for(lambda: kube.pod_of(engine.index) is None, what="the old pod gone")
    new = wait_for(lambda: [p for p in read_cluster(session).pods if p.name != pod.name and p.engine_url],
                   what="the replacement pod bound")
    assert answers(new[0].engine_url)


def test_a_scale_up_while_pods_terminate_waits_for_engines_instead_of_running_without_one(sim_kube):
    """3 → 1 → 3 at once on a node with GPUs to spare: the new pods are placed while every engine still serves
    a terminating pod. They wait in ContainerCreating and take the engines as those pods go — never Ready
    without an engine (the demo's Cluster pane once said 6/8 ready while 3 engines ran)."""
    sim, kube, session = sim_kube(3, hpa=False)
    kube.emu.update_status("Node", "sim-node-0", {"allocatable": {
        **kube.emu.get("nodes", "sim-node-0")["status"]["allocatable"], "nvidia.com/gpu": "8"}})
    # the old pods stay, terminating, until the new ones have been seen waiting (a fixed delay raced a slow
    # machine: the old pods could be gone before the new ones were placed)
    kube.emu.termination_delay = 600.0
    apps = kubernetes.client.AppsV1Api(session.api_client)
    apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 1}})
    wait_for(lambda: sum(p.terminating for p in read_cluster(session).pods) == 2, what="two pods terminating")
    apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 3}})

    def check(pods):  # at every read: a Ready pod serves a live engine
        for p in pods:
            assert not p.ready or (p.port is not None and answers(f"http://{p.ip}:{p.port}")), p
        return pods

    def two_waiting():
        pods = check([p for p in read_cluster(session).pods if not p.terminating])
        return [p for p in pods if p.waiting_reason == "ContainerCreating" and p.ip is None and not p.ready]

    assert len(wait_for(two_waiting, what="two new pods waiting for an engine")) == 2
    with kube.emu.store.lock:  # now the kubelet may remove the terminating pods
        kubelet = kube.emu.controllers.kubelet
        kubelet.terminating.update(dict.fromkeys(kubelet.terminating, 0.0))
        kube.emu.store.changed.notify_all()

    def settled():
        pods = check([p for p in read_cluster(session).pods if not p.terminating])
        return len(pods) == 3 and all(p.ready for p in pods) and pods

    pods = wait_for(settled, what="three ready pods, each with an engine")
    assert sorted(f"http://{p.ip}:{p.port}" for p in pods) == sorted(e.url for e in sim.engines)
    assert sum(answers(e.url) for e in sim.engines) == 3


def test_a_pod_out_of_its_service_empties_its_engine_and_comes_back(sim_kube):
    sim, kube, session = sim_kube(1, hpa=False)
    (pod,) = read_cluster(session).pods
    (engine,) = sim.engines
    svc = kubernetes.client.CoreV1Api(session.api_client).read_namespaced_service("vllm", NS)
    assert svc.spec.selector == {"app": "vllm", "infertop.io/serving": "true"}
    sim.set_load("steady")
    sim.advance(5.0)
    assert engine.core.num_running > 0
    core = kubernetes.client.CoreV1Api(session.api_client)
    core.patch_namespaced_pod(pod.name, NS, [{"op": "remove", "path": "/metadata/labels/infertop.io~1serving"}])
    wait_for(lambda: not engine.alive, what="the engine out of the Service")
    sim.advance(120.0)  # no new requests: the in-flight ones finish
    assert engine.core.num_running == 0 and engine.core.num_waiting == 0 and answers(engine.url)
    core.patch_namespaced_pod(pod.name, NS, {"metadata": {"labels": {"infertop.io/serving": "true"}}})
    wait_for(lambda: engine.alive, what="the engine back in the Service")
    sim.advance(5.0)
    assert engine.core.num_running > 0


def test_the_hpa_at_its_maximum_explains_itself(sim_kube):
    # 2 engines on a 2-GPU node; the HPA may go to 3 and wants more: one pod cannot be placed
    sim, kube, session = sim_kube(2, hpa_max=3, hpa_target_running=1.0, hpa_sync_s=0.1)
    for e in sim.engines:
        with e.lock:
            for _ in range(6):
                e.core.submit(SimRequest(prompt_tokens=100, max_tokens=4000))
    sim.advance(0.5)
    assert all(e.core.num_running == 6 for e in sim.engines)

    def at_max():
        (w,) = explain_workloads(read_cluster(session), now=time.time())
        hpa = next(a for a in w.autoscalers if a.kind == "HorizontalPodAutoscaler")
        return (w, hpa) if AT_MAX in hpa.codes() and PENDING_GPU in hpa.codes() else None

    w, hpa = wait_for(at_max, what="the HPA at its maximum")
    # beside it, the variant autoscaler's stand-in wants 12 / 1 running per replica: at its maximum too
    wva = wait_for(lambda: next((a for w in explain_workloads(read_cluster(session), now=time.time())
                                 for a in w.autoscalers if a.kind == "VariantAutoscaling"
                                 and (a.current, a.desired) == (3, 3)), None),
                   what="the variant autoscaler's decision")
    assert wva.codes()[0] == AT_MAX and "no HPA consumes wva_desired_replicas: nothing applies this decision" \
        not in wva.notes  # 3 → 3: nothing to apply
    assert (hpa.current, hpa.desired, hpa.max_replicas) == (3, 3, 3)
    assert hpa.reason == "at maxReplicas 3 while vllm:num_requests_running 6 vs target 1 asks for more"
    pending = next(x for x in hpa.why_not if x.code == PENDING_GPU)
    assert pending.text.startswith("3 wanted, 2 ready: 1 pod(s) Pending for lack of nvidia.com/gpu")
    assert any(e.startswith("SuccessfulRescale: New size: 3") for e in hpa.events)


def test_infertop_sim_serves_a_kubernetes_api_and_writes_a_private_kubeconfig(tmp_path):
    kc = tmp_path / "state" / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "infertop", "sim", "--engines", "2", "--load", "none",
                             "--kube-port", "0", "--kubeconfig", str(kc)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.split())
            if line.startswith("ready"):
                break
        kube_line = next(parts for parts in lines if parts[0] == "kube")
        opts = dict(p.split("=", 1) for p in kube_line[2:])
        assert opts == {"kubeconfig": str(kc), "context": DEMO_CONTEXT, "namespace": NS}
        assert stat.S_IMODE(kc.stat().st_mode) == 0o600
        token = json.loads(kc.read_text())["users"][0]["user"]["token"]
        assert token and not any(token in " ".join(parts) for parts in lines)  # the secret is never printed
        session = KubeSession.connect(str(kc))
        try:
            pods = read_cluster(session).pods
            engines = {parts[2]: dict(p.split("=", 1) for p in parts[3:])["pod"]
                       for parts in lines if parts[0] == "engine"}
            assert {p.engine_url: p.name for p in pods} == engines
        finally:
            session.close()
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_a_pods_log_reads_as_vllms_startup_and_stats_lines_from_its_engine(sim_kube):
    """``l`` on a demo pod: the start-up lines name the engine's model, limit and port, then the periodic
    stats line agrees with the engine's own state (running requests, tokens generated since the last)."""
    sim, kube, session = sim_kube(1, hpa=False, stats_every_s=0.05)
    (pod,) = read_cluster(session).pods
    engine = sim.engines[kube.bound[pod.name]]
    log = session.pod_log(NS, pod.name)
    assert f"model='{engine.model}', max_num_seqs={engine.max_num_seqs}, port={engine.port}" in log
    assert "Application startup complete." in log
    for _ in range(3):
        engine.core.submit(SimRequest(prompt_tokens=100, max_tokens=4000))
    sim.advance(0.5)
    running = engine.core.num_running
    assert running == 3

    def stats_lines() -> list[str]:
        return [ln for ln in session.pod_log(NS, pod.name).splitlines() if "Engine 000:" in ln]

    def generated(ln: str) -> float:
        return float(ln.split("Avg generation throughput: ")[1].split(" ")[0])

    # the line written after the advance carries the tokens the engine generated in it
    line = wait_for(lambda: next((ln for ln in stats_lines() if f"Running: {running} reqs" in ln
                                  and generated(ln) > 0), None), timeout=10, what="a stats line of the work")
    assert "Waiting: 0 reqs" in line
