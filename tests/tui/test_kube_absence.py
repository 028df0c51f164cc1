"""Honest absence (issue 28 item 4), against the emulator over HTTP: a kind the user may not list says
"forbidden (list pods)", a kind the server lacks "not served", never an empty table; nodes show
capacity/allocatable CPU, memory and GPU with what the pods request."""

from __future__ import annotations

import pytest

from infertop.config import Config, KubeConfig
from infertop.sim.kube.resources import RESOURCE_TYPES
from infertop.sources.kube import ClusterWatcher, KubeSession, read_cluster
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until

TOKEN = "kube-absence-token"
NS = "default"
HPA_NOT_SERVED = "not served by this API server (horizontalpodautoscalers.autoscaling/v2)"
# the Pools view's custom resources, not installed: named by the watcher (after discovery), not an empty table
POOLS_NOT_SERVED = {
    "inferencepools": "not served by this API server (inferencepools.inference.networking.k8s.io/v1)",
    "inferenceobjectives": "not served by this API server (inferenceobjectives.inference.networking.x-k8s.io/v1alpha2)"}


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.2)


def refuse(emu, *plurals: str) -> None:
    """Everything allowed except listing/watching ``plurals`` (get still allowed)."""
    others = [rt.plural for rt in RESOURCE_TYPES if rt.plural not in plurals]
    emu.set_rules([("*", "*", others, "*"), ("*", "*", others), ("get", "*", list(plurals))])


def seed(emu) -> None:
    emu.add_deployment(NS, "vllm", replicas=1, resources={"requests": {"cpu": "2", "memory": "16Gi"}})
    emu.wait_until(lambda: any(p["spec"].get("nodeName") for p in emu.list("pods", NS)), message="scheduled")


def test_forbidden_and_not_served_kinds_are_named_by_the_watcher_and_the_one_shot_read(emu, tmp_path):
    seed(emu)
    refuse(emu, "pods")
    emu.uninstall("horizontalpodautoscalers")
    session = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc")))
    watcher = ClusterWatcher(session, KubeConfig()).start()
    try:
        assert watcher.wait_synced(10)
        snap = watcher.snapshot()
        assert snap.absent == {"pods": "forbidden (list pods)", "hpas": HPA_NOT_SERVED, **POOLS_NOT_SERVED}
        assert not snap.stale  # refused, not failing
        assert [w.name for w in snap.workloads] == ["vllm"]
    finally:
        watcher.stop()
    assert read_cluster(session, KubeConfig()).absent == {"pods": "forbidden (list pods)", "hpas": HPA_NOT_SERVED}
    emu.allow_all()
    emu.install("horizontalpodautoscalers")
    assert read_cluster(session, KubeConfig()).absent == {}
    session.close()


def make_app(tmp_path, kubeconfig) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(kubeconfig), stuck_after_s=0.0, refresh_s=0.3))
    return InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_pane_says_forbidden_and_not_served_instead_of_an_empty_table(emu, tmp_path, size):
    seed(emu)
    refuse(emu, "pods", "nodes")
    emu.uninstall("horizontalpodautoscalers")
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and app.kube_ctl.connection.snapshot.workloads, what="connect")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        await until(pilot, lambda: pane.snapshot is not None, what="painted")
        header = text(pane.query_one("#cluster-header"))
        assert "nodes forbidden (list nodes)" in header and "0 nodes/0 GPUs" not in header
        assert "Pods ✗" in text(pane.query_one("#cluster-tabs")) and "HPAs ✗" in text(pane.query_one("#cluster-tabs"))
        for view, why in (("pods", "pods: forbidden (list pods)"), ("nodes", "nodes: forbidden (list nodes)"),
                          ("hpas", f"hpas: {HPA_NOT_SERVED}")):
            pane.set_view(view)
            await until(pilot, lambda: pane.query_one("#cluster-absent").display
                        and text(pane.query_one("#cluster-absent")).startswith(why), what=f"{view}: why it is absent")
            absent = pane.query_one("#cluster-absent")
            assert absent.display and text(absent).startswith(why), view
            assert not pane.query_one("#cluster-switcher").display  # no empty table under it
        pane.set_view("workloads")
        await until(pilot, lambda: not pane.query_one("#cluster-absent").display and pane.query_one("#cluster-switcher").display, 'not pane.query_one("#cluster-absent").display and pane.qu…')
        assert not pane.query_one("#cluster-absent").display and pane.query_one("#cluster-switcher").display


async def test_nodes_show_cpu_and_memory_requested_against_allocatable(emu, tmp_path):
    seed(emu)
    node = next(p["spec"]["nodeName"] for p in emu.list("pods", NS))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and app.kube_ctl.connection.snapshot.nodes, what="connect")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        pane.set_view("nodes")
        await until(pilot, lambda: node in pane.table("nodes")._order, what="the node")
        t = pane.table("nodes")
        row = [str(getattr(c, "plain", c)) for c in t.get_row(node)]
        assert row[1] == "1/8" and row[4] == "2/64" and row[5] == "16Gi/512Gi"
        other = next(k for k in t._order if k != node)
        assert [str(getattr(c, "plain", c)) for c in t.get_row(other)][4:6] == ["0/64", "0/512Gi"]


async def test_a_workload_and_a_pod_a_verdict_is_about_are_marked_in_the_cluster_pane(emu, tmp_path):
    """Rows of the objects a triage verdict names carry ◆, as in the Engines and GPUs panes."""
    from dataclasses import replace

    from infertop.analysis.triage import Verdict

    seed(emu)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and app.kube_ctl.connection.snapshot.pods, what="connect")
        await app.poll_now()
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        pod = app.kube_ctl.connection.snapshot.pods[0]
        app.painter.state = replace(app.state, verdicts=(
            Verdict("autoscaler-blocked", f"{NS}/Deployment/vllm", "critical", 0.0, "blocked"),
            Verdict("crash-loop", f"{NS}/Pod/{pod.name}", "critical", 0.0, "looping")))
        app.kube_ctl.connection.render()

        def first(view, key):
            return str(getattr(pane.table(view).get_row(key)[0 if view == "pods" else 1], "plain", ""))

        await until(pilot, lambda: first("workloads", f"Deployment/{NS}/vllm") == "◆ vllm"
                    and first("pods", pod.key) == f"◆ {pod.name}", what="the verdicts marked")

        assert first("workloads", f"Deployment/{NS}/vllm") == "◆ vllm"
        assert first("pods", pod.key) == f"◆ {pod.name}"
