"""``infertop --demo`` watches the simulator's Kubernetes API: the Cluster pane is live on first contact.

The demo starts the real ``infertop sim`` child (engines, dcgm exporter and the API emulator on
127.0.0.1); the app reads it through the kubeconfig the simulator wrote in the demo's own state
directory (context ``infertop-demo``). Nothing is patched; ``XDG_STATE_HOME`` points the state
directory at ``tmp_path``.
"""

from __future__ import annotations

import os
import stat

from infertop.cli import build_parser, fleet_sources, resolve_config
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.kube_dialogs import FormDialog
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


async def test_the_demo_cluster_pane_is_live_and_its_actions_dry_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    args = build_parser().parse_args(["--demo", "--demo-engines", "3", "--config", str(tmp_path / "none.yaml")])
    (tmp_path / "none.yaml").write_text("gpu:\n  nvml: false\naudit_log: " + str(tmp_path / "audit.jsonl") + "\n")
    cfg, notes = resolve_config(args)
    with fleet_sources(args, cfg, notes) as fleet:
        # one kubeconfig per demo run: a second demo on the host cannot overwrite this one's token
        kubeconfig = tmp_path / "xdg" / "infertop" / "demo" / f"kubeconfig-{os.getpid()}"
        assert cfg.kube.kubeconfig == str(kubeconfig) and cfg.kube.context == "infertop-demo"
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        assert any("simulated Kubernetes cluster" in n for n in notes)
        settings = Settings(config=cfg, endpoints=fleet.endpoints, read_only=False, mode="demo", notes=notes,
                            dcgm_urls=fleet.dcgm_urls, engine_pods=fleet.engine_pods, state_dir=fleet.state_dir)
        app = InfertopApp(settings, poll=False)
        async with app.run_test(size=(140, 40)) as pilot:
            def bound():  # the HPA may have added pods since (Pending: the node has 3 GPUs)
                snap = app.kube_ctl.connection.snapshot
                return snap is not None and len([p for p in snap.pods if p.engine_url]) == 3

            await until(pilot, bound, what="the demo cluster read")
            await pilot.press("5")
            await until(pilot, lambda: "infertop-demo" in text(app.query_one(ClusterPane).query_one("#cluster-header")),
                        what="the Cluster pane's header")
            pane = app.query_one(ClusterPane)
            header = text(pane.query_one("#cluster-header"))
            assert "infertop-demo" in header and "not configured" not in header
            snap = app.kube_ctl.connection.snapshot
            assert [w.name for w in snap.workloads] == ["vllm"] and [h.name for h in snap.hpas] == ["vllm"]
            assert {p.engine_url for p in snap.pods if p.engine_url} == {e.url for e in fleet.endpoints}
            assert set(fleet.engine_pods) == {p.name for p in snap.pods if p.engine_url}  # GPU → pod → engine
            # a Kubernetes action runs its dry run against the simulated cluster; cancelled here
            await pilot.press("S")
            form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
            box = form.query_one("#field-replicas")
            box.value = "1"
            box.focus()
            await until(pilot, lambda: app.focused is box, what="the replicas field focused")
            await pilot.press("enter")
            screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen)
                                 and app.screen.dry_run_ok is not None and app.screen, what="dry run")
            assert screen.dry_run_ok, screen.dry_run_text
            assert screen.change.startswith("replicas ") and screen.change.endswith(" → 1")  # the HPA may move
            await pilot.press("escape")
    assert not kubeconfig.exists(), "the demo's kubeconfig outlived the demo"
