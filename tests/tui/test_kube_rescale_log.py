"""What an operator reads after a rescale (issue 9): the header counts the engines of the fleet
state (an engine whose pod a scale-down removed has left it), and the Log pane says once each
which engine was scaled away and which joined, with its pod and Deployment.

The app test runs the simulator's engines and its Kubernetes API on 127.0.0.1, read through the
real client, ticked by hand (``poll_now``); waits are bounded polls of state, never sleeps.
"""

from __future__ import annotations

import asyncio

import httpx

from infertop.config import Config, KubeConfig
from infertop.domain.engine import EngineStats
from infertop.domain.kube import ClusterSnapshot, PodView
from infertop.sim import SimCluster
from infertop.state.fleet_types import ClusterState, EngineState, FleetState, Slo
from infertop.state.membership import JOIN_POD_WAIT_S, FleetMembership
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.app import InfertopApp, Settings
from pilot_wait import until

SLO = Slo(1.0, 0.1, 10.0, 5.0, 90.0)


def _state(engines: list[str], pods: list[tuple[str, str, bool]] = (), at: float = 0.0) -> FleetState:
    """Engines vllm-i at http://127.0.0.1:800i; pods (name, engine, terminating) of Deployment vllm."""
    def url(name: str) -> str:
        return f"http://127.0.0.1:80{int(name.split('-')[1]):02d}"

    views = tuple(PodView("inference", p, ip="127.0.0.1", port=int(url(e).rsplit(":", 1)[1]),
                          owner_kind="Deployment", owner_name="vllm", terminating=t) for p, e, t in pods)
    cluster = ClusterState(ClusterSnapshot("demo", ("inference",), 0.0, pods=views))
    return FleetState(tick=1, taken_at=at, refresh_s=1.0, window_s=60.0, slo=SLO, cluster=cluster,
                      engines=tuple(EngineState(EngineStats(n, url(n), state="up")) for n in engines))


def test_membership_logs_each_engine_that_left_or_joined_once_with_its_pod():
    m = FleetMembership()
    pods = [("vllm-7d9f-a1", "vllm-0", False), ("vllm-7d9f-b2", "vllm-1", False), ("vllm-7d9f-c3", "vllm-2", False)]
    assert m.changes(_state(["vllm-0", "vllm-1", "vllm-2"], pods)) == []  # the fleet as found
    # vllm-2's pod terminates; vllm-1's is already gone from the read
    assert m.changes(_state(["vllm-0"], [pods[0], ("vllm-7d9f-c3", "vllm-2", True)])) == [
        "vllm-1 scaled away (pod vllm-7d9f-b2, deployment vllm)",
        "vllm-2 scaled away (pod vllm-7d9f-c3, deployment vllm)"]
    assert m.changes(_state(["vllm-0"], [pods[0]])) == []  # once each
    # scale up: vllm-2's new pod is read; vllm-1 and vllm-3 answer before the read shows their pods
    up = ["vllm-0", "vllm-1", "vllm-2", "vllm-3"]
    now = [pods[0], ("vllm-7d9f-z9", "vllm-2", False)]
    assert m.changes(_state(up, now, at=100.0)) == ["vllm-2 joined (pod vllm-7d9f-z9, deployment vllm)"]
    assert m.pod_of("vllm-2").pod == "vllm-7d9f-z9"
    now.append(("vllm-7d9f-y8", "vllm-1", False))
    assert m.changes(_state(up, now, at=101.0)) == ["vllm-1 joined (pod vllm-7d9f-y8, deployment vllm)"]
    assert m.changes(_state(up, now, at=100.0 + JOIN_POD_WAIT_S - 0.5)) == []
    assert m.changes(_state(up, now, at=100.0 + JOIN_POD_WAIT_S)) == ["vllm-3 joined"]  # no pod read in time
    assert m.changes(_state(up, now, at=120.0)) == []
    no_pods = FleetMembership()
    no_pods.changes(_state(["vllm-0", "vllm-1"]))
    assert no_pods.changes(_state(["vllm-0"])) == ["vllm-1 left the fleet"]  # a target that went away


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/metrics", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


async def test_after_a_scale_down_the_header_and_the_log_say_what_the_fleet_state_says(tmp_path):
    import kubernetes

    from infertop.sim.kube.cluster import SimKube

    sim = SimCluster(3, seed=3, load="none", realtime=False, kubernetes_labels=True, throttle_gpu=None).start()
    kube = SimKube(sim, hpa=False, termination_delay_s=0.3, start_delay_s=0.0).start()
    try:
        assert kube.wait_bound(15)
        kc = kube.write_kubeconfig(tmp_path / "kubeconfig")
        cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                     kube=KubeConfig(kubeconfig=str(kc), context="infertop-demo", refresh_s=0.3))
        endpoints = [EngineEndpoint(f"vllm-{e.index}", e.url, timeout_s=2.0) for e in sim.engines]
        app = InfertopApp(Settings(config=cfg, endpoints=endpoints, mode="demo", state_dir=str(tmp_path / "st"),
                                   engine_pods={e.gpu.pod: f"vllm-{e.index}" for e in sim.engines}), poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            def pods_with_engines(n: int):
                snap = app.kube_ctl.connection.snapshot
                return snap is not None and len([p for p in snap.pods if p.engine_url]) == n

            await until(pilot, lambda: pods_with_engines(3), "the cluster read")
            app.tick()  # before the first poll: every engine is unknown — nothing to tell yet
            await app.poll_now()
            assert not [line for line in app.log_lines if "vllm-" in line], list(app.log_lines)
            top = app.main.query_one("#topbar")
            assert " · 3 engines · " in str(top.render())
            pod_of = {p.engine_url: p.name for p in app.kube_ctl.connection.snapshot.pods}

            apps = kubernetes.client.AppsV1Api(app.kube_ctl.connection.session.api_client)
            await asyncio.to_thread(apps.patch_namespaced_deployment_scale, "vllm", "inference",
                                    {"spec": {"replicas": 1}})
            await until(pilot, lambda: sum(_answers(e.url) for e in sim.engines) == 1, "two engines stopped")
            await until(pilot, lambda: pods_with_engines(1) and len(app.kube_ctl.connection.snapshot.pods) == 1, "one pod left")
            await app.poll_now()
            assert len(app.state.engines) == 1
            assert " · 1 engine · " in str(top.render())  # was: 3 (the endpoints watched)
            gone = sorted((f"vllm-{e.index}", pod_of[e.url]) for e in sim.engines if not _answers(e.url))
            for name, pod in gone:
                assert sum(f"{name} scaled away (pod {pod}, deployment vllm)" in line for line in app.log_lines) == 1
            await app.poll_now()
            assert sum("scaled away" in line for line in app.log_lines) == 2  # once each

            await asyncio.to_thread(apps.patch_namespaced_deployment_scale, "vllm", "inference",
                                    {"spec": {"replicas": 3}})
            await until(pilot, lambda: all(_answers(e.url) for e in sim.engines), "the engines started again")
            await until(pilot, lambda: pods_with_engines(3), "three pods with engines")
            await app.poll_now()
            assert " · 3 engines · " in str(top.render())
            new_pod = {p.engine_url: p.name for p in app.kube_ctl.connection.snapshot.pods}
            by_name = {f"vllm-{e.index}": e.url for e in sim.engines}
            for name, _ in gone:
                line = f"{name} joined (pod {new_pod[by_name[name]]}, deployment vllm)"
                assert sum(line in entry for entry in app.log_lines) == 1, list(app.log_lines)
            assert not [line for line in app.log_lines if " → down" in line]  # gone, not down
    finally:
        kube.stop()
        sim.stop()
    assert kube.emu.errors == []
