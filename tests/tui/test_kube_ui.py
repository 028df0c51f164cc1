"""The Cluster pane and every Kubernetes action through the keyboard (Pilot).

The app reads a kubeconfig in ``tmp_path`` that points at the API emulator
(real ``kubernetes`` client, nothing patched). Waits are bounded polls of
app state (``until``), never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest
from kube_ui import NS, TOKEN, audit, audit_all, confirm, connected, make_app, ready, rows, set_input, text

from infertop.sim import SimCluster
from infertop.sim.model import SimRequest
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.actions import ACTIONS
from infertop.ui.controllers.kube_connection import KUBE_MUTATING
from infertop.ui.screens.actions_list import ActionsListScreen, QuitScreen
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.help import HelpScreen
from infertop.ui.screens.kube_dialogs import ChoiceDialog, FormDialog
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until

try:
    from kube_emulator import KubeEmulator
except ImportError:  # tests/ importable as a package
    from kube_emulator import KubeEmulator


@pytest.fixture
def emu(kube_emulator):
    # reconciles on every write; the 0.2 s wake-up only drives time-based transitions. (A busier loop keeps
    # the process from looking idle, and every Pilot key press then waits up to 1 s for idleness.)
    return kube_emulator(TOKEN, reconcile_interval=0.2)


# ----------------------------------------------------------------- viewing

async def test_without_kubernetes_the_pane_says_how_to_enable_it(tmp_path):
    app = make_app(tmp_path, enabled=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("5")
        await until(pilot, lambda: "Kubernetes is not configured" in text(app.query_one(ClusterPane).query_one("#cluster-header")), '"Kubernetes is not configured" in text(app.query_one(Clus…')
        pane = app.query_one(ClusterPane)
        assert "Kubernetes is not configured" in text(pane.query_one("#cluster-header"))
        assert "--context" in text(pane.query_one("#cluster-header"))
        assert all(app.check_action(a, ()) is None for a in KUBE_MUTATING)
        assert app.check_action("kube_context", ()) is True  # K picks a context to enable it
        await pilot.press("S")
        await pilot.pause()  # nothing to wait for: no dialog may open
        assert not isinstance(app.screen, (FormDialog, ConfirmScreen))


async def _metrics_server(running: float, seen: list):
    """A vLLM-like engine on loopback that records the name[] filter of each /metrics read."""
    from aiohttp import web

    from vllm_text import v1_doc

    async def handle(request: web.Request) -> web.Response:
        if request.path.startswith("/metrics"):
            seen.append(tuple(request.query.getall("name[]", [])))
            return web.Response(text=v1_doc(engines={"0": {"running": running, "waiting": 1, "kv": 0.1}}),
                                content_type="text/plain")
        if request.path == "/v1/models":
            return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def test_a_pod_that_is_a_watched_engine_shows_its_numbers_and_only_shown_pods_are_scraped(emu, tmp_path):
    """The pod at a watched engine's address shows that engine's running and waiting from the fleet state
    (one read, one value on every pane); the other pods' loads are read only while the Cluster pane is on
    view (nothing else shows them)."""
    from infertop.sources.kube.load import LOAD_NAMES

    engine_seen: list = []
    other_seen: list = []
    engine, engine_port = await _metrics_server(7, engine_seen)
    other, other_port = await _metrics_server(5, other_seen)
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", engine_port)
        emu.set_pod_endpoint("other-*", "127.0.0.1", other_port)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.add_deployment(NS, "other", replicas=1)
        emu.wait_until(lambda: ready(emu, "vllm", 1) and ready(emu, "other", 1))
        app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"),
                       endpoints=[EngineEndpoint("llama-a", f"http://127.0.0.1:{engine_port}")])
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and sum(
                p.ready for p in app.kube_ctl.connection.snapshot.pods) == 2, what="both pods read")
            for _ in range(2):  # the Cluster pane's timer, with the pane hidden
                app.kube_ctl.connection.tick()
                await until(pilot, lambda: not app.kube_ctl.connection._loads_running, what="the tick's work")
            assert other_seen == []  # hidden: no pod read
            await app.poll_now()  # a tick with the engine's values
            await pilot.press("5")
            await until(pilot, lambda: LOAD_NAMES in other_seen, what="the other pod read once on view")
            app.kube_ctl.connection.render()
            await pilot.press("v")
            await until(pilot, lambda: app.query_one(ClusterPane).view == "pods", what="the pods view")
            pods = {r[0].split("-")[0]: r for r in rows(app.query_one(ClusterPane), "pods").values()}
            assert pods["vllm"][4:6] == ["7", "1"] and pods["vllm"][9] == "llama-a"
            engine_state = app.state.engine("llama-a").stats
            assert (engine_state.running, engine_state.waiting) == (7, 1)
            assert pods["other"][4:6] == ["5", "1"]
            assert engine_seen and LOAD_NAMES not in engine_seen  # the engine: its own polls, no pod read
    finally:
        await engine.cleanup()
        await other.cleanup()


async def test_pods_mapped_to_engines_by_the_pod_map_or_by_name_show_their_engines_numbers(emu, tmp_path):
    """Engines read through Prometheus (or configured by URL elsewhere) have no pod address to match: a pod
    the pod → engine map names, or one named as an engine, shows that engine's Run, Wait and name."""
    sim = SimCluster(2, seed=2, load="none", realtime=False).start()
    try:
        emu.add_pod(NS, "vllm-mapped")
        emu.add_pod(NS, "llama-b")
        emu.set_pod_endpoint("vllm-mapped", "127.0.0.3", 9)  # not an engine's address
        emu.set_pod_endpoint("llama-b", "127.0.0.4", 9)
        emu.wait_until(lambda: all(p["status"].get("phase") == "Running" for p in emu.list("pods", NS)))
        for e, n in zip(sim.engines, (2, 4)):
            with e.lock:
                for _ in range(n):
                    e.core.submit(SimRequest(prompt_tokens=50, max_tokens=500))
        sim.advance(0.2)
        app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"),
                       endpoints=[EngineEndpoint("llama-a", sim.engines[0].url),
                                  EngineEndpoint("llama-b", sim.engines[1].url)],
                       engine_pods={"vllm-mapped": "llama-a"})
        async with app.run_test(size=(120, 40)) as pilot:
            pane = await connected(pilot, app)
            await app.poll_now()
            await app.kube_ctl.connection.refresh_now()
            await pilot.press("v")
            assert pane.view == "pods"
            p = {r[0]: r for r in rows(pane, "pods").values()}
            assert p["vllm-mapped"][4:6] == ["2", "0"] and p["vllm-mapped"][9] == "llama-a"
            assert p["llama-b"][4:6] == ["4", "0"] and p["llama-b"][9] == "llama-b"
    finally:
        sim.stop()


async def test_the_pane_shows_workloads_pods_nodes_hpas_and_events(emu, tmp_path):
    sim = SimCluster(1, seed=2, load="none", realtime=False).start()
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
        emu.fail_args("--crash-me")
        emu.add_deployment(NS, "vllm", replicas=1, args=["--max-num-seqs", "64"])
        emu.add_deployment(NS, "crashy", replicas=1, args=["--crash-me"])
        emu.add_deployment(NS, "huge", replicas=1, gpu_per_pod=16)
        emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4, desired_replicas=6, conditions=[
            {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale", "message": "ok"},
            {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas", "message": "max is 4"}])
        emu.wait_until(lambda: ready(emu, "vllm", 1))
        with sim.engines[0].lock:
            for _ in range(3):
                sim.engines[0].core.submit(SimRequest(prompt_tokens=50, max_tokens=500))
        sim.advance(0.2)
        app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"),
                       endpoints=[EngineEndpoint("llama-a", sim.engines[0].url)])
        async with app.run_test(size=(120, 40)) as pilot:
            pane = await connected(pilot, app)
            await app.poll_now()  # a tick with the engine's values: its pod shows them
            await app.kube_ctl.connection.refresh_now()
            header = text(pane.query_one("#cluster-header"))
            assert header.startswith("⎈ emu · ns default · tester · 3 workloads, 3 pods (2 not ready), 2 nodes/16 GPUs")
            w = rows(pane, "workloads")
            assert w["Deployment/default/vllm"][:6] == ["deploy", "vllm", "1/1", "1", "1", "complete"]
            assert w["Deployment/default/vllm"][6] == "1-4 1→6" and w["Deployment/default/vllm"][7] == "--max-num-seqs 64"
            assert w["Deployment/default/huge"][5] == "progressing: Pending: 2 Insufficient nvidia.com/gpu"
            await pilot.press("v")
            assert pane.view == "pods"
            p = {r[0].split("-")[0]: r for r in rows(pane, "pods").values()}
            assert p["vllm"][1:6] == ["Running", "1/1", "0", "3", "0"]  # Run/Wait: the engine's, at this tick
            engine = app.state.engine("llama-a").stats
            assert (engine.running, engine.waiting) == (3, 0)
            assert p["vllm"][9] == "llama-a"  # the pod's IP:port is a configured engine
            assert p["crashy"][1] == "CrashLoopBackOff" and p["crashy"][8] == "Error"
            assert p["huge"][1] == "Pending"
            crashy = next(k for k in rows(pane, "pods") if "crashy" in k)
            assert pane.select("pods", crashy)
            await until(pilot, lambda: "why: CrashLoopBackOff" in text(pane.query_one("#cluster-detail")), '"why: CrashLoopBackOff" in text(pane.query_one("#cluster-…')
            assert "why: CrashLoopBackOff" in text(pane.query_one("#cluster-detail"))
            await pilot.press("v")
            n = rows(pane, "nodes")
            assert n["gpu-a"][:4] == ["gpu-a", "1/8", "Ready", "ok"] and n["gpu-b"][1] == "1/8"  # huge is Pending
            await pilot.press("v")
            (hpa,) = rows(pane, "hpas").values()
            assert hpa[:4] == ["vllm", "Deployment/vllm", "1-4", "1→6"] and hpa[5] == "A·L"
            assert hpa[6] == "at maxReplicas 4 (max is 4)"  # the explanation (analysis/autoscaler/explain.py)
            await pilot.press("v")
            events = list(rows(pane, "events").values())
            assert events[0][0] == "Warning" and {e[3] for e in events if e[0] == "Warning"} >= {"BackOff",
                                                                                              "FailedScheduling"}
            keys = text(pane.query_one("#cluster-keys"))
            assert keys.startswith("S:scale H:hpa A:args R:restart D:drain ^D:delete C:cordon N:node-drain M:cm")
    finally:
        sim.stop()


# ----------------------------------------------------------------- actions

async def test_a_change_made_while_the_pane_is_hidden_shows_when_it_comes_on_view(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.wait_until(lambda: ready(emu, "vllm", 1))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        assert len(rows(pane, "pods")) == 1
        await pilot.press("1")  # the Overview: the Cluster pane is hidden, its table is not repainted
        emu.add_deployment(NS, "other", replicas=2)
        await until(pilot, lambda: len(app.kube_ctl.connection.snapshot.pods) == 3, what="the new pods read")
        await pilot.pause()
        assert len(rows(pane, "pods")) == 1  # no CPU spent on a table nobody sees
        await pilot.press("5")
        await until(pilot, lambda: len(rows(pane, "pods")) == 3, 'len(rows(pane, "pods")) == 3')
        assert len(rows(pane, "pods")) == 3
        assert "3 pods" in text(pane.query_one("#cluster-header"))


async def test_scale_args_restart_and_hpa_from_the_keyboard(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=2, args=["--max-num-seqs", "64"])
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=8)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        assert pane.selected()[1].name == "vllm"
        # scale 2 → 4
        await pilot.press("S")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "replicas", "4")
        await pilot.press("enter")
        screen = await confirm(pilot, app, "replicas 2 → 4")
        assert "+  replicas: 4" in screen._diff and screen.result == "ok"
        # the HPA owns the count: said in the review and after the follow (it may set it back)
        assert screen.result_text == ("replicas 2 → 4: 4/4 ready; HPA default/vllm (min 1, max 8) owns the replica "
                                      "count and may set it back")
        assert ready(emu, "vllm", 4)
        await pilot.press("escape")
        # patch the args: the rolling update is followed to the end
        await pilot.press("A")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "changes", "--max-num-seqs 32")
        await pilot.press("enter")
        screen = await confirm(pilot, app, "vllm args: --max-num-seqs 64 → --max-num-seqs 32")
        assert screen.result == "ok" and "rollout complete" in screen.result_text
        assert all(p["spec"]["containers"][0]["args"] == ["--max-num-seqs", "32"] for p in emu.list("pods", NS))
        await pilot.press("escape")
        # rollout restart
        await pilot.press("R")
        screen = await confirm(pilot, app)
        assert screen.change.startswith("pod template annotation kubectl.kubernetes.io/restartedAt: (none) → ")
        assert screen.result == "ok"
        await pilot.press("escape")
        # HPA bounds, from the workload row
        await pilot.press("H")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "min", "2")
        await set_input(pilot, form, "max", "6")
        await pilot.press("enter")
        screen = await confirm(pilot, app, "min 1 → 2, max 8 → 6")
        assert screen.result == "ok"
        await pilot.press("escape")
        spec = emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]
        assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 6)
        await pilot.press("3")  # the Log pane (RichLog renders once it has a size)
        await until(pilot, lambda: "Scale: deployment default/vllm: ok" in log_text(app), "the scale's outcome in the log")
        log = log_text(app)
        assert "Scale: deployment default/vllm: ok — replicas 2 → 4: 4/4 ready" in log
    entries = audit(tmp_path)
    assert [(e["action"], e["result"]) for e in entries] == [
        ("kube.scale", "ok"), ("kube.args", "ok"), ("kube.restart", "ok"), ("kube.hpa", "ok")]
    assert all(e["diff"] and e["kube_user"] == "tester" and e["context"] == "emu" for e in entries)


async def test_drain_and_delete_a_pod_from_the_keyboard(emu, tmp_path):
    sim = SimCluster(1, seed=4, load="none", realtime=False).start()
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
        emu.add_deployment(NS, "vllm", replicas=2)
        emu.add_service(NS, "vllm", {"app": "vllm"})
        emu.wait_until(lambda: ready(emu, "vllm", 2))
        with sim.engines[0].lock:
            for _ in range(4):
                sim.engines[0].core.submit(SimRequest(prompt_tokens=80, max_tokens=50))
        sim.advance(0.2)
        app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
        async with app.run_test(size=(120, 40)) as pilot:
            pane = await connected(pilot, app)
            await pilot.press("v")  # pods
            first, second = list(rows(pane, "pods"))
            assert pane.select("pods", first)
            await pilot.press("D")
            choice = await until(pilot, lambda: isinstance(app.screen, ChoiceDialog) and app.screen)
            assert choice.current == "delete"
            await pilot.press("enter")  # the default follow-up: delete
            screen = await confirm(pilot, app, press=False)
            assert screen.change.startswith(f"take pod {first.split('/')[1]} out of vllm")
            await pilot.press("y")
            await until(pilot, lambda: screen.progress_text.startswith("in flight: 4"), what="draining")
            assert "app" not in emu.get("pods", first.split("/")[1], NS)["metadata"]["labels"]
            assert screen.state == "running" and not emu.get("pods", first.split("/")[1], NS)["metadata"].get(
                "deletionTimestamp")
            sim.advance(30.0)  # the in-flight requests finish
            await until(pilot, lambda: screen.state == "done", what=screen.progress_text)
            assert screen.result == "ok" and "drained (0 in flight) and deleted" in screen.result_text
            await pilot.press("escape")
            await until(pilot, lambda: first not in rows(pane, "pods"))
            # delete the other pod
            assert pane.select("pods", second)
            await pilot.press("ctrl+d")
            screen = await confirm(pilot, app, f"delete pod {second.split('/')[1]} (deployment vllm creates a "
                                               "replacement)")
            assert screen.result == "ok"
            await pilot.press("escape")
        emu.wait_until(lambda: ready(emu, "vllm", 2))
        assert [(e["action"], e["result"]) for e in audit(tmp_path)] == [("kube.drain_pod", "ok"),
                                                                          ("kube.delete_pod", "ok")]
    finally:
        sim.stop()


async def test_cordon_and_drain_a_node_with_a_blocking_pdb(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_pdb(NS, "vllm", {"app": "vllm"}, min_available=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        pane.set_view("nodes")
        assert pane.select("nodes", "gpu-b")
        await pilot.press("C")
        screen = await confirm(pilot, app, "node gpu-b: schedulable → cordoned (no new pods)")
        assert screen.result == "ok" and emu.get("nodes", "gpu-b")["spec"]["unschedulable"] is True
        await pilot.press("escape")
        await until(pilot, lambda: rows(pane, "nodes")["gpu-b"][2] == "Ready,SchedulingDisabled")
        await pilot.press("C")
        screen = await confirm(pilot, app, "node gpu-b: cordoned → schedulable")
        await pilot.press("escape")
        assert pane.select("nodes", "gpu-a")
        await pilot.press("N")
        screen = await confirm(pilot, app, "drain node gpu-a: cordon, evict 1 pod(s)", press=False)
        assert any("blocked now" in n for n in screen.notes)  # the dry run saw the PDB
        await pilot.press("y")
        await until(pilot, lambda: "blocked by a disruption budget" in screen.progress_text, what="429 countdown")
        assert "retry" in screen.progress_text and screen.state == "running"
        emu.patch("deployments", "vllm", {"spec": {"replicas": 3}}, NS)  # now the PDB allows one disruption
        await until(pilot, lambda: screen.state == "done", what=screen.progress_text)
        assert screen.result == "ok" and "1 pod(s) evicted after" in screen.result_text
        await pilot.press("escape")
    assert [(e["action"], e["result"]) for e in audit(tmp_path)] == [
        ("kube.cordon", "ok"), ("kube.uncordon", "ok"), ("kube.drain_node", "ok")]


async def test_configmap_key_and_a_failing_dry_run_that_changes_nothing(emu, tmp_path):
    emu.add_configmap(NS, "gateway", {"weights": "realtime=4,batch=2"})
    emu.add_deployment(NS, "vllm", replicas=1)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), configmap="gateway")
    async with app.run_test(size=(120, 40)) as pilot:
        await connected(pilot, app)
        await pilot.press("M")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        assert form.query_one("#field-name").value == "gateway"
        await set_input(pilot, form, "key", "bad key!")
        await set_input(pilot, form, "value", "x")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is False
                             and app.screen)
        assert "dry run failed — nothing was changed: 422 Invalid" in screen.dry_run_text
        assert screen.query_one("#confirm-yes").display is False
        await pilot.press("y")  # nothing to confirm
        await pilot.pause()  # nothing to wait for: nothing may be written
        assert emu.get("configmaps", "gateway", NS)["data"] == {"weights": "realtime=4,batch=2"}
        await pilot.press("escape")
        await pilot.press("M")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "key", "weights")
        await set_input(pilot, form, "value", "realtime=8,batch=1")
        await pilot.press("enter")
        screen = await confirm(pilot, app, "data.weights: realtime=4,batch=2 → realtime=8,batch=1")
        assert screen.result == "ok"
    assert emu.get("configmaps", "gateway", NS)["data"] == {"weights": "realtime=8,batch=1"}
    entries = audit(tmp_path)
    assert [(e["action"], e["result"], e.get("dry_run", False)) for e in entries] == [
        ("kube.configmap", "failed", True), ("kube.configmap", "ok", False)]


# ----------------------------------------------------------------- safety

async def test_forbidden_actions_are_hidden_and_a_403_hides_one(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.set_rules([(["get", "list", "watch"], "*", "*"), ("create", "authorization.k8s.io", "*"),
                   ("patch", "apps", "deployments")])  # no scale, no pod/node/configmap writes
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        assert app.check_action("kube_scale", ()) is None
        assert app.check_action("kube_args", ()) is True and app.check_action("kube_restart", ()) is True
        for action in ("kube_hpa", "kube_delete_pod", "kube_drain_pod", "kube_cordon", "kube_drain_node",
                       "kube_configmap"):
            assert app.check_action(action, ()) is None, action
        assert text(pane.query_one("#cluster-keys")) == "A:args R:restart K:ctx ^N:ns"
        await pilot.press("S")
        await pilot.pause()  # nothing to wait for: no dialog may open
        assert not isinstance(app.screen, (FormDialog, ConfirmScreen))
        # the rules change under our feet: the dry run answers 403, the action disappears
        emu.set_rules([(["get", "list", "watch"], "*", "*")])
        await pilot.press("R")
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is False
                             and app.screen)
        assert "403 Forbidden" in screen.dry_run_text
        await pilot.press("escape")
        assert app.check_action("kube_restart", ()) is None and app.check_action("kube_args", ()) is None
        assert text(pane.query_one("#cluster-keys")) == "K:ctx ^N:ns"
    assert emu.get("deployments", "vllm", NS)["metadata"]["generation"] == 1


async def test_a_changed_spec_is_read_again_and_confirmed_again(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        await connected(pilot, app)
        await pilot.press("S")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "replicas", "3")
        await pilot.press("enter")
        screen = await confirm(pilot, app, "replicas 2 → 3", press=False)
        emu.patch("deployments", "vllm", {"spec": {"replicas": 1}}, NS)  # someone else scaled meanwhile
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "review" and "changed since it was read (spec.replicas 2 → 1)"
                    in text(screen.query_one("#confirm-status")) and screen.dry_run_ok, what="re-confirmation")
        assert screen.change == "replicas 1 → 3"  # the re-read object
        assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 1  # nothing retried blindly
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done")
        assert screen.result == "ok"
    assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 3
    assert [(e["action"], e["result"], e["old"], e["new"]) for e in audit(tmp_path)] == [
        ("kube.scale", "conflict", 2, 3), ("kube.scale", "ok", 1, 3)]


async def test_read_only_offers_nothing(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_configmap(NS, "gateway", {"w": "1"})
    emu.wait_until(lambda: ready(emu, "vllm", 1))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        for action in KUBE_MUTATING:
            assert app.check_action(action, ()) is False, action
        for view, keys in (("workloads", ("S", "H", "A", "R", "M")), ("pods", ("D", "ctrl+d")), ("nodes", ("C", "N"))):
            pane.set_view(view)
            await until(pilot, lambda: pane.selected()[1] is not None, 'pane.selected()[1] is not None')
            assert pane.selected()[1] is not None  # a target is selected: only read-only stands in the way
            await pilot.press(*keys)  # a dialog would stay open
            assert len(app.screen_stack) == 1, view
        assert text(pane.query_one("#cluster-keys")) == "K:ctx ^N:ns"
        assert "read-only" in text(pane.query_one("#cluster-header"))
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen) and app.screen.query_one("#help-keys").row_count,
                    "the help screen with its keys")
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one("#help-keys")
        titles = {str(table.get_row_at(i)[1]) for i in range(table.row_count)}
        kube_titles = {a.title for a in ACTIONS if a.action in KUBE_MUTATING}
        assert len(kube_titles) == 9 and not titles & kube_titles
        assert "Switch the Kubernetes context" in titles
    assert audit(tmp_path) == []
    assert emu.count_requests(predicate=lambda r: r.method in ("PATCH", "PUT", "DELETE")) == 0


async def test_switching_context_and_namespace(emu, tmp_path):
    emu.add_namespace("team-b")
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_deployment("team-b", "mistral", replicas=1)
    doc = emu.kubeconfig(context="lab", namespace=NS)
    doc["contexts"].append({"name": "lab-b", "context": {"cluster": "lab", "user": "tester", "namespace": "team-b"}})
    path = tmp_path / "kc"
    path.write_text(json.dumps(doc))
    app = make_app(tmp_path, path)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        assert app.kube_ctl.connection.session.context == "lab" and list(rows(pane, "workloads")) == ["Deployment/default/vllm"]
        await pilot.press("K")
        dialog = await until(pilot, lambda: isinstance(app.screen, ChoiceDialog) and app.screen)
        assert [oid for oid, _ in dialog.options] == ["lab", "lab-b"]
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.kube_ctl.connection.session.context == "lab-b", what="context switch")
        assert app.kube_ctl.connection.session.namespaces == ["team-b"]
        await until(pilot, lambda: list(rows(pane, "workloads")) == ["Deployment/team-b/mistral"])
        await pilot.press("ctrl+n")
        dialog = await until(pilot, lambda: isinstance(app.screen, ChoiceDialog) and app.screen)
        names = [oid for oid, _ in dialog.options]
        assert {"default", "team-b", "kube-system"} <= set(names)
        dialog.query_one("#choices").highlighted = names.index("default")
        await pilot.press("enter")
        await until(pilot, lambda: app.kube_ctl.connection.session.namespaces == ["default"], what="namespace switch")
        await until(pilot, lambda: list(rows(pane, "workloads")) == ["Deployment/default/vllm"])
        assert app.kube_ctl.connection.session.context == "lab-b"
        await pilot.press("3")
        await until(pilot, lambda: "context lab-b, namespace default" in log_text(app), "the switch in the log")
        assert "context lab-b, namespace default: 1 workloads" in "\n".join(
            line.text for line in app.query_one("#log-view").lines)


# ----------------------------------------------------------------- the one pipeline

def log_text(app) -> str:
    return "\n".join(line.text for line in app.query_one("#log-view").lines)


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_permissions_per_kind_and_a_disabled_key_says_why(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_statefulset(NS, "db", replicas=1)
    emu.wait_until(lambda: ready(emu, "vllm", 1) and ready(emu, "db", 1))
    everything_but = [("*", "*", "*"), ("*", "*", "*", ("status", "eviction", "log")),
                      ("patch", "apps", "statefulsets", "scale")]  # no deployments/scale
    emu.set_rules(everything_but)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        assert pane.select("workloads", "Deployment/default/vllm")
        await until(pilot, lambda: pane.selected()[1] is not None and pane.selected()[1].name == "vllm"
                    and "S:scale" not in text(pane.query_one("#cluster-keys")), "the Deployment selected, its keys shown")
        assert app.check_action("kube_scale", ()) is None
        assert app.check_action("kube_restart", ()) is True
        assert "S:scale" not in text(pane.query_one("#cluster-keys"))
        await pilot.press("S")
        await until(pilot, lambda: "forbidden: patch deployments/scale in default" in notices(app), "the refusal's notice")
        assert not isinstance(app.screen, (FormDialog, ConfirmScreen))
        assert "forbidden: patch deployments/scale in default" in notices(app)
        assert pane.select("workloads", "StatefulSet/default/db")
        await until(pilot, lambda: text(pane.query_one("#cluster-keys")).startswith("S:scale"), "S:scale offered for the StatefulSet")
        assert app.check_action("kube_scale", ()) is True
        assert text(pane.query_one("#cluster-keys")).startswith("S:scale")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen) and app.screen.query_one("#help-keys").row_count,
                    "the help screen with its keys")
        help_rows = app.screen.query_one("#help-keys")
        assert any("Scale the selected" in str(help_rows.get_row_at(i)[1]) for i in range(help_rows.row_count))
        await pilot.press("escape")
        # a real 403 on the StatefulSet's scale disables S for StatefulSets in this namespace
        emu.set_rules(everything_but[:2])
        await pilot.press("S")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "replicas", "2")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is False
                             and app.screen)
        assert "403" in screen.dry_run_text
        await pilot.press("escape")
        assert app.check_action("kube_scale", ()) is None
        assert app.kube_ctl.connection.perms.allows("restart", NS, "StatefulSet") is True  # only that verb × resource
    assert emu.get("statefulsets", "db", NS)["spec"]["replicas"] == 1


class AuditWitness(KubeEmulator):
    """The emulator, noting what the audit log held when each real (not dry-run) write arrived."""

    audit_path = None
    seen: list = []

    def _log_request(self, req) -> None:
        if req.method in ("PATCH", "PUT", "POST", "DELETE") and req.query.get("dryRun") != "All" \
                and "selfsubjectaccessreviews" not in req.path:
            lines = self.audit_path.read_text().splitlines() if self.audit_path.exists() else []
            self.seen.append((req.method, req.path, [json.loads(line) for line in lines]))
        super()._log_request(req)


async def test_the_audit_intent_is_on_disk_before_the_write_reaches_the_server(tmp_path):
    emu = AuditWitness(token=TOKEN, reconcile_interval=0.2).start()
    emu.audit_path, emu.seen = tmp_path / "audit.jsonl", []
    try:
        emu.add_node("gpu-a", gpus=8)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.wait_until(lambda: ready(emu, "vllm", 1))
        app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            await pilot.press("S")
            form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
            await set_input(pilot, form, "replicas", "2")
            await pilot.press("enter")
            await confirm(pilot, app, "replicas 1 → 2")
        (method, path, before), = emu.seen
        assert (method, path) == ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/vllm/scale")
        (intent,) = before  # the intent, and nothing else yet
        assert (intent["phase"], intent["action"], intent["target"]) == ("intent", "kube.scale", "deployment default/vllm")
        assert intent["summary"] == "replicas 1 → 2" and "dry run" in intent["dry_run_result"]
        outcome = audit(tmp_path)[-1]
        assert (outcome["op"], outcome["result"]) == (intent["op"], "ok")
    finally:
        emu.stop()
    assert emu.errors == []


async def test_abort_a_stuck_scale_while_another_action_runs(emu, tmp_path):
    emu.fail_image("registry.local/broken*")
    emu.add_deployment(NS, "stuck", replicas=1, image="registry.local/broken:1")
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.wait_until(lambda: ready(emu, "vllm", 1))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), stuck_after_s=600.0)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        assert pane.select("workloads", "Deployment/default/stuck")
        await pilot.press("S")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "replicas", "2")
        await pilot.press("enter")
        stuck = await confirm(pilot, app, "replicas 1 → 2", press=False)
        await pilot.press("y")
        await until(pilot, lambda: "ImagePullBackOff" in stuck.progress_text, what=stuck.progress_text)
        assert stuck.state == "running" and "left" in stuck.progress_text  # a countdown to the timeout
        emu.clear_requests()
        await pilot.pause(0.5)  # ~10 follow polls at 0.05 s: from the informers, not GETs
        gets = emu.count_requests("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/stuck")
        assert gets == 0, gets
        await pilot.press("escape")  # hide it: the scale goes on
        await until(pilot, lambda: len(app.screen_stack) == 1)
        assert pane.select("workloads", "Deployment/default/stuck")
        assert pane.selected()[1].name == "stuck"
        await pilot.press("S")  # a second action on the same object is refused, with the reason
        await until(pilot, lambda: any("is still running" in n for n in notices(app)), "the refusal's notice")
        assert len(app.screen_stack) == 1, (stuck.state, stuck.result_text, app.actions_ctl.board.runs())
        assert any("is still running" in n for n in notices(app))
        # meanwhile, another object: a rollout restart runs and completes
        assert pane.select("workloads", "Deployment/default/vllm")
        await pilot.press("R")
        other = await confirm(pilot, app)
        assert other.result == "ok" and stuck.state == "running"
        await pilot.press("escape")
        # reopen the hidden scale from the list of running actions and abort it
        await pilot.press("a")
        listing = await until(pilot, lambda: isinstance(app.screen, ActionsListScreen) and app.screen)
        assert [title for _, title, _ in listing.runs] == ["Scale: deployment default/stuck"]
        await pilot.press("enter")
        reopened = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen)
        assert reopened.state == "running" and reopened.change == "replicas 1 → 2"
        await pilot.press("a")
        await until(pilot, lambda: reopened.state == "done", what=reopened.progress_text)
        assert reopened.result == "aborted" and "the change itself stays applied" in reopened.result_text
        assert app.actions_ctl.board.runs() == []
    assert [(e["action"], e["target"], e["result"]) for e in audit(tmp_path)] == [
        ("kube.restart", "deployment default/vllm", "ok"), ("kube.scale", "deployment default/stuck", "aborted")]


async def test_quit_during_a_rollout_asks_and_the_next_start_reports_it(emu, tmp_path):
    emu.fail_args("--crash-me")
    emu.add_deployment(NS, "vllm", replicas=1, args=["--max-num-seqs", "64"])
    emu.wait_until(lambda: ready(emu, "vllm", 1))
    kc = emu.write_kubeconfig(tmp_path / "kc")
    app = make_app(tmp_path, kc, stuck_after_s=600.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await connected(pilot, app)
        await pilot.press("A")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "changes", "--crash-me")
        await pilot.press("enter")
        screen = await confirm(pilot, app, press=False)
        await pilot.press("enter")  # Enter never confirms: it cancels here
        await until(pilot, lambda: len(app.screen_stack) == 1)
        assert emu.count_requests("PATCH", predicate=lambda r: r.query.get("dryRun") != "All") == 0
        await pilot.press("A")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        await set_input(pilot, form, "changes", "--crash-me")
        await pilot.press("enter")
        screen = await confirm(pilot, app, press=False)
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "running" and "CrashLoopBackOff" in screen.progress_text,
                    what=screen.progress_text)
        await pilot.press("q")
        ask = await until(pilot, lambda: isinstance(app.screen, QuitScreen) and app.screen)
        assert ask.question.startswith("1 action in flight: quit anyway? y/n")
        await pilot.press("n")
        await until(pilot, lambda: app.is_running and screen.state == "running", 'app.is_running and screen.state == "running"')
        assert app.is_running and screen.state == "running"
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running, what="quit")
    # the follow stops without an outcome: the intent stays unfinished
    await asyncio.to_thread(wait_for, lambda: not any(t.name.startswith("action kube:") for t in threading.enumerate()))
    (intent,) = audit_all(tmp_path)
    assert (intent["phase"], intent["action"]) == ("intent", "kube.args")
    # as if that infertop had died: the next start reports the unknown outcome in the Log pane
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (tmp_path / "audit.jsonl").write_text(json.dumps(dict(intent, pid=int(dead))) + "\n")
    again = make_app(tmp_path, kc)
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        log = await until(pilot, lambda: "outcome unknown" in (t := "\n".join(
            line.text for line in again.query_one("#log-view").lines)) and t, what="log")
        assert "kube.args deployment default/vllm" in log
    # … once: it now has an `unknown` outcome in the audit log
    intent_again, unknown = audit_all(tmp_path)
    assert (unknown["phase"], unknown["op"], unknown["result"]) == ("outcome", intent["op"], "unknown")
    third = make_app(tmp_path, kc)
    async with third.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: third.engine_manager is not None, what="start done")
        await third.workers.wait_for_complete()  # adopt_engines (which reports) ran
        await pilot.press("3")
        await pilot.pause()  # nothing to wait for: the report must not come
        assert "outcome unknown" not in "\n".join(line.text for line in third.query_one("#log-view").lines)


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {predicate}")
        time.sleep(0.02)
