"""Cluster pane navigation (Pilot, the API emulator over HTTP): / filter (regex, !, -l), s sort in every
view, Enter drills from a Deployment or a node to its pods, Esc back — at 80x24 and 120x40."""

from __future__ import annotations

import pytest

from infertop.config import Config, KubeConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.cluster import VIEWS, ClusterPane
from infertop.ui.widgets.cluster_filter import duration_s, keeps, parse_filter, sort_key
from pilot_wait import until

TOKEN = "kube-nav-token"
NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.2)


def make_app(tmp_path, kubeconfig) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(kubeconfig), stuck_after_s=0.0, refresh_s=0.3))
    return InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


def names(pane: ClusterPane, view: str) -> list[str]:
    t = pane.table(view)
    return [str(getattr(t.get_row(k)[0 if view != "workloads" else 1], "plain", t.get_row(k)[0])) for k in t._order]


def test_filter_parses_regex_inversion_and_label_selectors():
    class Obj:
        labels = {"app": "vllm", "tier": "gpu"}
    assert keeps(parse_filter("vll"), Obj(), ["vllm-1", "Running"])
    assert not keeps(parse_filter("!vll"), Obj(), ["vllm-1", "Running"])
    assert keeps(parse_filter("run+ing|x"), Obj(), ["vllm-1", "Running"])
    assert keeps(parse_filter("[unclosed"), Obj(), ["a [unclosed b"])  # not a regex: searched literally
    assert keeps(parse_filter("-l app=vllm,tier!=web"), Obj(), [])
    assert not keeps(parse_filter("-l app=vllm,tier=web"), Obj(), [])
    assert keeps(parse_filter("-l tier"), Obj(), []) and not keeps(parse_filter("-l zone"), Obj(), [])


def test_ages_sort_as_durations_and_numbers_by_value():
    ages = ["1h", "45s", "2d3h", "9m", "5m30s", "3d"]
    assert sorted(ages, key=sort_key) == ["45s", "5m30s", "9m", "1h", "2d3h", "3d"]
    assert duration_s("2d3h") == 2 * 86400 + 3 * 3600 and duration_s("Running") is None
    assert sorted(["12", "3", "1/8", "web"], key=sort_key) == ["1/8", "3", "12", "web"]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_drill_down_and_back_filter_and_sort_in_each_view(emu, tmp_path, size):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_deployment(NS, "other", replicas=1, labels={"app": "other", "tier": "web"}, gpu_per_pod=0)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4, desired_replicas=2)
    emu.add_service(NS, "vllm", {"app": "vllm"})  # the rollout objects' views (RS, Svc, PDBs, CM) have rows too
    emu.add_pdb(NS, "vllm", {"app": "vllm"}, min_available=1)
    emu.add_configmap(NS, "engine-args", {"MODEL": "m"})
    emu.install("InferencePool", "InferenceObjective")  # the Pools view has rows too
    emu.add_inference_pool(NS, "chat", {"app": "vllm"})
    emu.add_inference_objective(NS, "interactive", "chat", priority=10)
    emu.wait_until(lambda: sum(1 for p in emu.list("pods", NS) if p["spec"].get("nodeName")) == 3, message="bound")
    # a rollout: the drill-down shows the old and the new ReplicaSet together with the pods
    emu.patch("deployments", "vllm", {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "image": "vllm/vllm-openai:v0.10.0"}]}}}}, NS)

    def rolled() -> bool:
        rs = [r for r in emu.list("replicasets", NS) if r["metadata"]["name"].startswith("vllm-")]
        new = [r for r in rs if "v0.10.0" in r["spec"]["template"]["spec"]["containers"][0]["image"]]
        return (len(rs) == 2 and len(new) == 1 and (new[0].get("status") or {}).get("readyReplicas") == 2
                and len(emu.list("pods", NS)) == 3)
    emu.wait_until(rolled, message="rolled out")
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and len(app.kube_ctl.connection.snapshot.pods) == 3
                    and app.kube_ctl.connection.snapshot.events, what="connect")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        await until(pilot, lambda: len(pane.table("workloads")._order) == 2, what="workloads")

        # Enter on the Deployment: its pods, a breadcrumb; Esc: back where it was
        pane.table("workloads").move_cursor(row=pane.table("workloads")._order.index(f"Deployment/{NS}/vllm"))
        await pilot.press("enter")
        await until(pilot, lambda: pane.view == "pods", what="drilled to the pods")
        assert len(pane.table("pods")._order) == 2 and all(n.startswith("vllm-") for n in names(pane, "pods"))
        crumb = text(pane.query_one("#cluster-absent"))
        assert crumb.startswith(f"Deployment {NS}/vllm › pods")
        rs_lines = [ln for ln in crumb.splitlines() if ln.startswith("RS vllm-")]
        assert len(rs_lines) == 2, crumb  # newest revision first: the new image ready, the old one scaled to 0
        assert "rev 2: 2/2 ready, image vllm/vllm-openai:v0.10.0" in rs_lines[0]
        assert "rev 1: 0/0 ready, image vllm/vllm-openai:v0.9.2" in rs_lines[1]
        await pilot.press("escape")
        await until(pilot, lambda: pane.view == "workloads", what="back")
        assert pane.drill is None and len(pane.table("pods")._order) == 3

        # Enter on a node: the pods bound to it, with its allocation
        pane.set_view("nodes")
        await until(pilot, lambda: pane.table("nodes")._order, what="nodes")
        node = pane.table("nodes")._order[0]
        on_node = sorted(p["metadata"]["name"] for p in emu.list("pods", NS) if p["spec"]["nodeName"] == node)
        await pilot.press("enter")
        await until(pilot, lambda: pane.view == "pods", what="drilled from the node")
        assert sorted(names(pane, "pods")) == on_node
        assert f"node {node} › pods — GPUs " in text(pane.query_one("#cluster-absent"))
        await pilot.press("escape")
        await until(pilot, lambda: pane.view == "nodes", what="back to the nodes")

        # / in the workloads view: regex, inverted, label selector; Esc clears
        pane.set_view("workloads")
        await pilot.press("slash")
        await pilot.press(*"oth")
        await until(pilot, lambda: names(pane, "workloads") == ["other"], what="filtered")
        assert "/oth" in text(pane.query_one("#cluster-tabs"))
        pane.set_filter("!oth")
        await until(pilot, lambda: names(pane, "workloads") == ["vllm"], what="inverted")
        pane.set_filter("-l tier=web")
        await until(pilot, lambda: names(pane, "workloads") == ["other"], what="label selector")
        pane.table().focus()
        await pilot.press("escape")
        await until(pilot, lambda: len(names(pane, "workloads")) == 2, what="cleared")

        # every view: a filter that matches nothing empties it, s sorts it up and down
        for view, _title in VIEWS:
            pane.set_view(view)
            await until(pilot, lambda: pane.view == view and pane.table(view)._order, what=f"{view} on view, with rows")
            before = pane.table(view)._order[:]
            assert before, view
            pane.set_filter("no-such-row-zzz")
            await until(pilot, lambda: pane.table(view)._order == [], what=f"{view} filtered")
            pane.set_filter("")
            await until(pilot, lambda: len(pane.table(view)._order) == len(before), what=f"{view} back")
            await pilot.press("s")
            await until(pilot, lambda: "▲" in text(pane.query_one("#cluster-tabs")), what=f"{view} sorted")
            up = pane.table(view)._order[:]
            await pilot.press("s")
            await until(pilot, lambda: "▼" in text(pane.query_one("#cluster-tabs")), what=f"{view} reversed")
            assert sorted(up) == sorted(before)
            if len(up) > 1 and view == "pods":
                assert pane.table(view)._order == up[::-1], view  # distinct names: the exact reverse
