"""Per object on the Cluster pane, on k9s's keys (Pilot, the API emulator over HTTP): d describe,
y YAML, e events, l logs (followed, bounded), p the previous container's log; Esc back."""

from __future__ import annotations

import pytest

from infertop.config import Config, KubeConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.kube_logs import KubeLogScreen
from infertop.ui.screens.kube_object import KubeTextScreen
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until

TOKEN = "kube-object-token"
NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.2)


def make_app(tmp_path, kubeconfig) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(kubeconfig), stuck_after_s=0.0, refresh_s=0.3))
    return InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)


def running(emu, app: str) -> str:
    def find():
        pods = emu.list("pods", NS, f"app={app}")
        return pods and pods[0]["status"].get("conditions") and "running" in (
            pods[0]["status"].get("containerStatuses") or [{}])[0].get("state", {}) and pods[0]["metadata"]["name"]
    return emu.wait_until(find, message=f"a running {app} pod")


async def on_cluster(pilot, app) -> ClusterPane:
    await until(pilot, lambda: app.kube_ctl.connection.session is not None and app.kube_ctl.connection.snapshot is not None, what="connect")
    await pilot.press("5")
    pane = app.query_one(ClusterPane)
    await until(pilot, lambda: pane.snapshot is not None and pane.snapshot.pods, what="pods on the pane")
    return pane


async def select(pilot, pane: ClusterPane, view: str, key: str) -> None:
    pane.set_view(view)
    await until(pilot, lambda: key in pane.table(view)._order, what=f"{key} in {view}")
    pane.table(view).move_cursor(row=pane.table(view)._order.index(key))
    await until(pilot, lambda: pane.view == view and pane.table(view).selected_key == key, what=f"{key} selected")


async def open_text(pilot, app, key: str) -> KubeTextScreen:
    await pilot.press(key)
    screen = await until(pilot, lambda: isinstance(app.screen, KubeTextScreen) and app.screen.loaded and app.screen,
                         what=f"{key}'s screen read")
    return screen


async def back(pilot, app) -> None:
    await pilot.press("escape")
    await until(pilot, lambda: not isinstance(app.screen, (KubeTextScreen, KubeLogScreen)), what="back")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_describe_yaml_and_events_of_a_pod_a_deployment_a_node_and_an_hpa(emu, tmp_path, size):
    emu.add_deployment(NS, "vllm", replicas=1, resources={"requests": {"cpu": "2", "memory": "16Gi"},
                                                          "limits": {"cpu": "2", "memory": "16Gi",
                                                                     "nvidia.com/gpu": "1"}})
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4, desired_replicas=1)
    pod = running(emu, "vllm")
    emu.restart_container(pod, reason="OOMKilled", exit_code=137)
    emu.record_event("Pod", pod, NS, "Warning", "BackOff", "Back-off restarting failed container [red]x[/red]")
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=size) as pilot:
        pane = await on_cluster(pilot, app)
        await until(pilot, lambda: any(p.restarts for p in app.kube_ctl.connection.snapshot.pods), what="the restart read")
        await select(pilot, pane, "pods", f"{NS}/{pod}")
        screen = await open_text(pilot, app, "d")
        text = screen.text
        assert f"Name:         {pod}" in text
        assert "Controlled by: ReplicaSet vllm-" in text and "→ Deployment vllm" in text
        assert "QoS class:    Guaranteed" in text  # cpu and memory limited at their requests
        assert "Last state:    Terminated: OOMKilled, exit code 137" in text
        assert "Restarts:      1" in text and "Node:         gpu-" in text
        assert "Requests:      cpu 2, memory 16Gi, nvidia.com/gpu 1" in text
        assert "Back-off restarting failed container [red]x[/red]" in text  # from the API: shown as is, no markup
        await back(pilot, app)

        screen = await open_text(pilot, app, "y")
        assert "kind: Pod" in screen.text and f"  name: {pod}" in screen.text
        assert "restartCount: 1" in screen.text
        await back(pilot, app)

        screen = await open_text(pilot, app, "e")
        assert " event(s) of Pod " in screen.text and "Warning  BackOff" in screen.text
        await back(pilot, app)

        await select(pilot, pane, "workloads", f"Deployment/{NS}/vllm")
        screen = await open_text(pilot, app, "d")
        assert "Replicas:     1 desired" in screen.text and "Strategy:     RollingUpdate" in screen.text
        assert "Pod template:" in screen.text and "Image:         vllm/vllm-openai" in screen.text
        await back(pilot, app)

        node = emu.get("pods", pod, NS)["spec"]["nodeName"]
        await select(pilot, pane, "nodes", node)
        screen = await open_text(pilot, app, "d")
        assert "nvidia.com/gpu  8 / 8 / 1 (12%)" in screen.text
        assert "cpu             64 / 64 / 2 (3%)" in screen.text
        assert f"  {NS}/{pod}  cpu 2, memory 16Gi, nvidia.com/gpu 1" in screen.text
        await back(pilot, app)

        await select(pilot, pane, "hpas", f"{NS}/vllm")
        screen = await open_text(pilot, app, "d")
        assert "Target:       Deployment/vllm" in screen.text and "min 1, max 4" in screen.text
        await back(pilot, app)


async def test_previous_container_log_and_a_followed_log_bounded_under_a_fast_writer(emu, tmp_path):
    emu.log_ring_lines = 20_000  # the kubelet keeps every line written here: the bound tested is infertop's
    emu.add_deployment(NS, "vllm", replicas=1)
    pod = running(emu, "vllm")
    emu.append_pod_log(pod, "INFO Starting vLLM API server\n")
    emu.restart_container(pod, reason="OOMKilled", exit_code=137)
    emu.append_pod_log(pod, "INFO second start [bold]not markup[/bold]\n")
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(100, 30)) as pilot:
        pane = await on_cluster(pilot, app)
        await select(pilot, pane, "pods", f"{NS}/{pod}")
        await pilot.press("p")
        screen = await until(pilot, lambda: isinstance(app.screen, KubeLogScreen) and app.screen.loaded
                             and app.screen.lines and app.screen, what="the previous log")
        assert [line.split(" ", 1)[1] for line in screen.lines] == [
            "INFO Starting vLLM API server", "container vllm terminated: OOMKilled (exit code 137)"]
        await back(pilot, app)

        await pilot.press("l")
        screen = await until(pilot, lambda: isinstance(app.screen, KubeLogScreen) and app.screen.lines
                             and app.screen, what="the current log")
        assert screen.lines[-1].endswith("INFO second start [bold]not markup[/bold]")
        assert "following" in screen.status_text
        total = 3 * screen.max_lines
        for start in range(0, total, 1000):  # a container writing far faster than the screen drains
            emu.append_pod_log(pod, "".join(f"line {i}\n" for i in range(start, start + 1000)))
        await until(pilot, lambda: screen.lines and screen.lines[-1].endswith(f"line {total - 1}"),
                    what="the last line written")
        assert len(screen.lines) <= screen.max_lines and len(screen._pending) <= screen.max_lines
        assert screen.received == total + 1
        log = screen.query_one("#klog-log")
        assert len(log.lines) <= screen.max_lines
        await pilot.press("slash")
        await pilot.press(*"line 1499")
        await until(pilot, lambda: screen.pattern is not None and screen.pattern.pattern == "line 1499", what="filter")
        shown = [str(s.text) if hasattr(s, "text") else "".join(seg.text for seg in s) for s in log.lines]
        assert any("line 14999" in s for s in shown) and not any("line 13000" in s for s in shown)
        await pilot.press("escape")
        await back(pilot, app)
        assert screen._follow is None and not screen.following  # the stream was closed


async def test_the_keys_belong_to_the_cluster_pane_only(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    running(emu, "vllm")
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(100, 30)) as pilot:
        await on_cluster(pilot, app)
        assert all(app.check_action(a, ()) for a in ("kube_describe", "kube_yaml", "kube_logs", "kube_events"))
        await pilot.press("6")  # the Queue pane: d is its drain, not describe
        await until(pilot, lambda: app.current_pane == "queues", what="the Queue pane on view")
        assert app.check_action("kube_describe", ()) is False
        await pilot.press("d")
        await pilot.pause()  # nothing to wait for: no describe screen may open
        assert not isinstance(app.screen, KubeTextScreen)
