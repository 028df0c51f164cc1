"""The objects a rollout depends on as Cluster views (issue 28 item 3): ReplicaSets, Services with their
EndpointSlices (is this pod receiving traffic?), PodDisruptionBudgets, ConfigMaps' keys; owner-less pods
attributed to a Deployment by its selector. Emulator over HTTP; Pilot at 80x24 and 120x40."""

from __future__ import annotations

import pytest

from infertop.config import Config, KubeConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.cluster import VIEWS, ClusterPane
from pilot_wait import until

TOKEN = "kube-rollout-token"
NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.1)


def _seed(emu) -> None:
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_pod(NS, "stray-0", labels={"app": "vllm"})  # no ownerReferences: the vllm Deployment selects it
    emu.add_service(NS, "vllm", {"app": "vllm"})
    emu.add_service(NS, "nowhere", {"app": "nothing"})
    emu.add_pdb(NS, "vllm-pdb", {"app": "vllm"}, min_available=2)
    emu.add_configmap(NS, "engine-args", {"MAX_NUM_SEQS": "64", "MODEL": "m"})
    emu.wait_until(lambda: sum(1 for p in emu.list("pods", NS) if p["status"].get("podIP")) == 3, message="pods")


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_cycling_the_new_views_shows_replicasets_services_pdbs_and_configmaps(emu, tmp_path, size):
    _seed(emu)
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(emu.write_kubeconfig(tmp_path / "kc")), refresh_s=0.3))
    app = InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)
    async with app.run_test(size=size) as pilot:
        def ready() -> bool:
            s = app.kube_ctl.connection.snapshot
            svc = next((v for v in s.services if v.name == "vllm"), None) if s is not None else None
            return (svc is not None and svc.ready_endpoints == 3 and s.replicasets and s.configmaps
                    and any(b.disruptions_allowed == 1 for b in s.pdbs))
        await until(pilot, ready, what="the watcher read every new kind")
        snap = app.kube_ctl.connection.snapshot
        stray = next(p for p in snap.pods if p.name == "stray-0")
        assert (stray.owner_kind, stray.owner_name) == ("Deployment", "vllm")
        (rs,) = snap.replicasets
        assert rs.owner_name == "vllm" and (rs.ready, rs.desired) == (2, 2)
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        order = [v for v, _ in VIEWS]
        assert order[:5] == ["workloads", "pods", "nodes", "hpas", "events"]
        assert order[5:] == ["replicasets", "services", "pdbs", "configmaps", "inference"]
        pane.set_view("events")
        seen = {}
        for view in order[5:9]:  # the rollout objects (the Pools view: test_kube_inference_pools)
            pane.focus_table()
            await pilot.press("v")
            await until(pilot, lambda: pane.view == view and pane.table(view)._order, what=view)
            key = pane.table(view)._order[0]
            pane.select(view, key)
            await until(pilot, lambda: pane.table(view).selected_key == key and pane.selected()[1] is not None
                        and pane.selected()[1].name in text(pane.query_one("#cluster-detail")), what=f"{view}: the detail of {key}")
            seen[view] = text(pane.query_one("#cluster-detail"))
        assert seen["replicasets"].startswith(f"ReplicaSet {rs.name} (revision 1 of Deployment vllm): 2 ready")
        assert "no pod matches its selector: it sends traffic nowhere" in seen["services"]  # 'nowhere' sorts first
        pane.select("services", f"{NS}/vllm")
        await until(pilot, lambda: "stray-0 " in text(pane.query_one("#cluster-detail")), '"stray-0 " in text(pane.query_one("#cluster-detail"))')
        assert "stray-0 " in text(pane.query_one("#cluster-detail"))
        assert "receives traffic" in text(pane.query_one("#cluster-detail"))
        assert "1 disruption(s) allowed now: 3 healthy of 3 pods, 2 required" in seen["pdbs"]
        assert "MAX_NUM_SEQS, MODEL" in seen["configmaps"]
        assert "PDBs 1" in text(pane.query_one("#cluster-tabs"))
        pane.select("pods", f"{NS}/stray-0")
        await until(pilot, lambda: "traffic: Service vllm sends it traffic" in text(pane.query_one("#cluster-detail")), '"traffic: Service vllm sends it traffic" in text(pane.que…')
        assert "traffic: Service vllm sends it traffic" in text(pane.query_one("#cluster-detail"))
