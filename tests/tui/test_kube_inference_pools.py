"""The Cluster pane's Pools view (Gateway API Inference Extension), against the API emulator over HTTP:
InferencePools (selector, target ports, endpoint picker, ready endpoints) and InferenceObjectives (pool,
priority) where their CRDs are served, describe/YAML on them; "not served" where they are not."""

from __future__ import annotations

import pytest

from infertop.config import Config, KubeConfig
from infertop.sources.kube import ClusterWatcher, KubeSession
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.controllers.kube_reads import describe_lines
from infertop.ui.screens.kube_object import KubeTextScreen
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until

TOKEN = "kube-pools-token"
NS = "default"
POOL_NOT_SERVED = "inferencepools: not served by this API server (inferencepools.inference.networking.k8s.io/v1)"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.2)


def seed(emu, crds: bool = True) -> None:
    emu.add_deployment(NS, "vllm", replicas=2, gpu_per_pod=0)
    if crds:
        emu.install("InferencePool", "InferenceObjective")
        emu.add_inference_pool(NS, "chat", {"app": "vllm"}, (8000,), picker="chat-epp")
        emu.add_inference_objective(NS, "interactive", "chat", priority=100)
        emu.add_inference_objective(NS, "batch", "chat", priority=-10)
        emu.add_inference_objective(NS, "orphan", "gone-pool")
    emu.wait_until(lambda: sum(1 for p in emu.list("pods", NS) for c in (p.get("status") or {}).get("conditions") or ()
                               if c["type"] == "Ready" and c["status"] == "True") == 2, message="ready")


def make_app(tmp_path, kubeconfig) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(kubeconfig), stuck_after_s=0.0, refresh_s=0.3))
    return InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


def rows(pane: ClusterPane) -> dict[str, list[str]]:
    t = pane.table("inference")
    return {k: [str(getattr(c, "plain", c)) for c in t.get_row(k)] for k in t._order}


def test_the_watcher_reads_pools_and_objectives_and_describe_reads_them(emu, tmp_path):
    seed(emu)
    session = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc")))
    watcher = ClusterWatcher(session, KubeConfig()).start()
    try:
        assert watcher.wait_synced(10)
        snap = watcher.snapshot()
        (pool,) = snap.inference_pools
        assert (pool.name, pool.selector, pool.target_ports, pool.picker) == ("chat", "app=vllm", (8000,),
                                                                               "chat-epp:9002")
        assert (pool.ready_endpoints, pool.endpoints) == (2, 2)
        assert {(o.name, o.pool, o.priority) for o in snap.inference_objectives} == {
            ("interactive", "chat", 100), ("batch", "chat", -10), ("orphan", "gone-pool", None)}
        assert "inferencepools" not in snap.absent and "inferenceobjectives" not in snap.absent
    finally:
        watcher.stop()
    lines = describe_lines(session, "InferencePool", NS, "chat")
    assert lines[0] == "InferencePool" and any("chat" in ln for ln in lines)
    assert session.read_object("InferenceObjective", NS, "interactive")["spec"]["priority"] == 100
    session.close()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_pools_view_lists_pools_then_objectives_and_d_y_read_them(emu, tmp_path, size):
    seed(emu)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and app.kube_ctl.connection.snapshot.inference_pools,
                    what="connect")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        pane.set_view("inference")
        await until(pilot, lambda: len(pane.table("inference")._order) == 4, what="pools view")
        got = rows(pane)
        assert got[f"InferencePool/{NS}/chat"] == ["pool", "chat", "app=vllm", "8000", "chat-epp:9002", "2/2", "—"]
        assert got[f"InferenceObjective/{NS}/interactive"] == ["objective", "interactive", "chat", "—", "—", "2/2",
                                                               "100"]
        assert got[f"InferenceObjective/{NS}/orphan"][2] == "gone-pool"
        assert "Pools 4" in text(pane.query_one("#cluster-tabs"))
        assert pane.select("inference", f"InferencePool/{NS}/chat")
        detail = text(pane.query_one("#cluster-detail"))
        assert "endpoint picker chat-epp:9002; 2 of 2 ready" in detail
        assert "interactive (priority 100), batch (priority -10)" in detail
        assert pane.select("inference", f"InferenceObjective/{NS}/orphan")
        assert "no InferencePool gone-pool in default" in text(pane.query_one("#cluster-detail"))

        pane.select("inference", f"InferenceObjective/{NS}/interactive")
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, KubeTextScreen), what="YAML screen")
        screen = app.screen
        await until(pilot, lambda: any("priority: 100" in ln for ln in screen.lines), what="YAML read")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, KubeTextScreen), what="back")


async def test_a_cluster_without_the_crds_says_not_served(emu, tmp_path):
    seed(emu, crds=False)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and "inferencepools" in app.kube_ctl.connection.snapshot.absent,
                    what="connect")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        pane.set_view("inference")
        await until(pilot, lambda: pane.query_one("#cluster-absent").display
                    and text(pane.query_one("#cluster-absent")).startswith(POOL_NOT_SERVED), what="the Pools view: not served")
        absent = pane.query_one("#cluster-absent")
        assert absent.display and text(absent).startswith(POOL_NOT_SERVED)
        assert "inferenceobjectives: not served" in text(absent)
        assert not pane.query_one("#cluster-switcher").display  # no empty table under it
        assert "Pools ✗" in text(pane.query_one("#cluster-tabs"))
