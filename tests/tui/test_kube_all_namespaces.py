"""The Cluster pane's all-namespaces view (0, as k9s), against the API emulator over HTTP: every
namespace's objects with their namespace, back to the configured namespace on 0 again; a user who may
not list across namespaces is told so in place and keeps the previous scope's rows."""

from __future__ import annotations

import pytest

from infertop.config import Config, KubeConfig
from infertop.sources.kube import ClusterWatcher, KubeSession
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until

TOKEN = "kube-allns-token"
NS, OTHER = "default", "team-b"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.2)


def seed(emu) -> None:
    emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    emu.add_deployment(OTHER, "embed", replicas=1, gpu_per_pod=0)
    emu.add_configmap(OTHER, "router", {"k": "v"})
    emu.wait_until(lambda: all(any(p["spec"].get("nodeName") for p in emu.list("pods", ns)) for ns in (NS, OTHER)),
                   message="scheduled")


def only_default(emu, *cluster_kinds: str) -> None:
    """Everything in namespace default; cluster-scoped only ``cluster_kinds`` — no list across namespaces."""
    emu.set_rules([("*", "*", "*", "*", NS), ("*", "*", "*", "", NS), ("*", "*", list(cluster_kinds), "", "")])


def make_app(tmp_path, kubeconfig) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(kubeconfig), stuck_after_s=0.0, refresh_s=0.3))
    return InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


def names(pane: ClusterPane, view: str) -> list[str]:
    t = pane.table(view)
    col = 1 if view == "workloads" else 0
    return [str(getattr(t.get_row(k)[col], "plain", t.get_row(k)[col])) for k in t._order]


def test_the_watcher_reads_every_namespace_and_names_a_kind_refused_across_them(emu, tmp_path):
    seed(emu)
    session = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc")))
    watcher = ClusterWatcher(session, KubeConfig(), all_namespaces=True).start()
    try:
        assert watcher.wait_synced(10)
        snap = watcher.snapshot()
        assert snap.all_namespaces and {NS, OTHER} <= set(snap.namespaces)
        assert {(w.namespace, w.name) for w in snap.workloads} == {(NS, "vllm"), (OTHER, "embed")}
        assert {p.namespace for p in snap.pods} == {NS, OTHER}
        assert (OTHER, "router") in {(c.namespace, c.name) for c in snap.configmaps}
        assert session.namespaces == [NS]  # the session (permissions, actions) keeps its namespaces
    finally:
        watcher.stop()
    # configmaps may be listed in each namespace, not across them: named, not an empty table
    others = ["deployments", "statefulsets", "pods", "horizontalpodautoscalers", "events", "replicasets",
              "services", "endpointslices", "poddisruptionbudgets", "nodes"]
    emu.set_rules([("*", "*", others, "*"), ("*", "*", others), ("*", "*", "configmaps", "", NS)])
    watcher = ClusterWatcher(session, KubeConfig(), all_namespaces=True).start()
    try:
        assert watcher.wait_synced(10)
        snap = watcher.snapshot()
        assert snap.absent["configmaps"] == "forbidden (list configmaps, all namespaces)"
        assert set(snap.absent) == {"configmaps", "inferencepools", "inferenceobjectives"}  # CRDs not installed
        assert {w.namespace for w in snap.workloads} == {NS, OTHER}
    finally:
        watcher.stop()
        session.close()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_zero_shows_every_namespace_and_back(emu, tmp_path, size):
    seed(emu)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and app.kube_ctl.connection.snapshot.workloads, what="connect")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        await until(pilot, lambda: names(pane, "workloads") == ["vllm"], what="the configured namespace")
        assert "ns default" in text(pane.query_one("#cluster-header"))

        await pilot.press("0")
        await until(pilot, lambda: app.kube_ctl.connection.all_namespaces and sorted(names(pane, "workloads")) ==
                    [f"{NS}/vllm", f"{OTHER}/embed"], what="all namespaces")
        assert "all namespaces" in text(pane.query_one("#cluster-header"))
        assert pane.scope_note is None and not pane.query_one("#cluster-absent").display
        pane.set_view("pods")
        await until(pilot, lambda: {n.split("/")[0] for n in names(pane, "pods")} == {NS, OTHER}, what="pods")
        pane.set_view("configmaps")
        await until(pilot, lambda: f"{OTHER}/router" in names(pane, "configmaps"), what="configmaps")

        await pilot.press("0")
        await until(pilot, lambda: not app.kube_ctl.connection.all_namespaces and f"{OTHER}/router" not in names(pane, "configmaps")
                    and "ns default" in text(pane.query_one("#cluster-header")), what="back")
        pane.set_view("workloads")
        await until(pilot, lambda: names(pane, "workloads") == ["vllm"], what="back to default's rows")


async def test_a_list_across_namespaces_forbidden_is_said_in_place_and_the_rows_stay(emu, tmp_path):
    seed(emu)
    only_default(emu, "nodes", "selfsubjectaccessreviews", "namespaces")
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and app.kube_ctl.connection.snapshot.workloads, what="connect")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        await until(pilot, lambda: names(pane, "workloads") == ["vllm"], what="rows")
        watcher = app.kube_ctl.connection.watcher
        await pilot.press("0")
        absent = pane.query_one("#cluster-absent")
        await until(pilot, lambda: absent.display and text(absent).startswith(
            "forbidden: list pods (all namespaces)"), what="said in place")
        assert app.kube_ctl.connection.watcher is watcher and not app.kube_ctl.connection.all_namespaces  # the previous scope, still watched
        assert names(pane, "workloads") == ["vllm"] and pane.query_one("#cluster-switcher").display
        assert "ns default" in text(pane.query_one("#cluster-header"))
