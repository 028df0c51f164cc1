"""Hostile Kubernetes data (issue 29 items 1 and 6): what the API returns is cleaned
where it enters the snapshot, so no pane and no ``snapshot`` output writes it raw.

Unit tests feed API-shaped objects to ``build_snapshot``; the Pilot test serves them
from the API emulator on loopback through the real ``kubernetes`` client.
"""

from __future__ import annotations

import json
import time

import pytest

from infertop.config import Config, KubeConfig
from infertop.sources.kube.view import RawCluster, build_snapshot
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until

ESC_TITLE = "\x1b]2;owned\x07"
ESC_CLIP = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
ESC_CLEAR = "\x1b[2J"
NS = "default"


def _pod(name: str = "vllm-0", **status) -> dict:
    return {"metadata": {"name": name, "namespace": NS, "uid": "u1"},
            "spec": {"nodeName": "gpu-a", "containers": [
                {"name": "vllm", "image": "img", "args": ["--served", ESC_CLEAR]}]},
            "status": {"phase": "Running", **status}}


def _deployment(name: str = "vllm", replicas: object = 1) -> dict:
    return {"metadata": {"name": name, "namespace": NS, "uid": "d1", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"spec": {"containers": [{"name": "vllm", "image": "img" + ESC_TITLE}]}}},
            "status": {"observedGeneration": 1, "replicas": 1,
                       "conditions": [{"type": "Progressing", "status": "False", "reason": "X",
                                       "message": "deadline " + ESC_CLIP}]}}


def _event(message: str, name: str = "vllm-0") -> dict:
    return {"metadata": {"name": "e1", "namespace": NS}, "type": "Warning", "reason": "BackOff" + ESC_TITLE,
            "message": message, "count": 3,
            "involvedObject": {"kind": "Pod", "name": name, "namespace": NS}}


def _snapshot(**items):
    raw = RawCluster()
    raw.items.update(items)
    return build_snapshot(raw, context="ctx\x1b[31m", namespaces=[NS])


def test_escapes_in_names_messages_args_and_images_are_visible_text_in_the_snapshot():
    snap = _snapshot(pods=[_pod("vllm-0" + ESC_CLEAR)], deployments=[_deployment()],
                     events=[_event("term " + ESC_CLIP + ESC_TITLE, "vllm-0" + ESC_CLEAR)])
    doc = json.dumps(snap.to_dict(), ensure_ascii=False)
    assert "\x1b" not in doc and "\x07" not in doc
    assert snap.pods[0].name == "vllm-0\\x1b[2J"
    assert snap.pods[0].args == ("--served", "\\x1b[2J")
    assert snap.workloads[0].image == "img\\x1b]2;owned\\x07"
    assert snap.events[0].message == "term \\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b]2;owned\\x07"
    assert snap.context == "ctx\\x1b[31m"


def test_a_309_digit_replica_count_is_no_data():
    snap = _snapshot(deployments=[_deployment(replicas=10 ** 308)])
    assert snap.workloads[0].desired is None


def test_fields_of_the_wrong_type_drop_that_object_with_a_line_not_a_crash():
    bad_pod = _pod("p1")
    bad_pod["spec"]["containers"] = "not a list"
    worse = _pod("p2")
    worse["metadata"] = ["x"]
    snap = _snapshot(pods=[bad_pod, worse, _pod("ok"), 7], deployments=[_deployment(replicas="many")],
                     events=[{"involvedObject": 5, "message": {"a": 1}}])
    assert [p.name for p in snap.pods if p.name == "ok"] == ["ok"]
    assert snap.workloads == () or snap.workloads[0].desired is None
    assert any("pods:" in e and "wrong type" in e for e in snap.errors), snap.errors
    json.dumps(snap.to_dict())  # snapshot --json still encodes


async def test_the_cluster_pane_detail_shows_escapes_as_text(tmp_path, kube_emulator):
    emu = kube_emulator("hostile-kube-token", reconcile_interval=0.2)
    emu.add_deployment(NS, "vllm", replicas=1, args=["--served-model-name", "m" + ESC_TITLE + ESC_CLEAR])
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(emu.write_kubeconfig(tmp_path / "kc")), refresh_s=0.3))
    app = InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and app.kube_ctl.connection.snapshot.pods, what="pods listed")
        await pilot.press("5")
        pane = app.query_one(ClusterPane)
        await until(pilot, lambda: app.current_pane == "cluster" and pane.table("pods").row_count > 0, what="the pods on the pane")
        pane.set_view("pods")
        pod = next(iter(pane.table("pods").rows)).value
        assert pane.select("pods", pod)
        await until(pilot, lambda: "owned" in str(pane.query_one("#cluster-detail").render()), what="the pod's detail")
        shown = str(pane.query_one("#cluster-detail").render())
        assert "\x1b" not in shown and "\x07" not in shown
        assert "\\x1b]2;owned\\x07\\x1b[2J" in shown


def test_a_watch_adding_pods_without_end_is_stopped_at_the_limit_and_relists_when_it_fits(kube_emulator, tmp_path):
    from infertop.sources.kube.session import KubeSession
    from infertop.sources.kube.watch import Informer

    emu = kube_emulator("hostile-kube-token", reconcile_interval=0.02)
    session = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc")))
    inf = Informer(session, "pods", NS, watch_timeout_s=5, backoff_s=(0.05, 0.2))
    inf.max_objects = 5
    inf.start()
    try:
        emu.wait_until(lambda: inf.lists == 1, message="first list")
        emu.add_deployment(NS, "flood", replicas=9, gpu_per_pod=0)
        emu.wait_until(lambda: inf.error is not None, message="limit hit")
        assert "more than 5 pods (the limit held per kind)" in inf.error
        assert inf.stale_since is not None and len(inf.objects()) <= 5
        emu.patch("deployments", "flood", {"spec": {"replicas": 3}}, NS)
        emu.wait_until(lambda: inf.error is None and len(inf.objects()) == 3, timeout=20, message="relisted")
    finally:
        inf.stop()
        inf.join()
        session.close()


def _kubeconfig(tmp_path, port: int):
    path = tmp_path / "kc-hostile"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "hostile",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "hostile", "context": {"cluster": "c", "user": "u", "namespace": NS}}]}))
    return path


def test_endless_bookmarks_are_a_flood_that_stops_the_watch(tmp_path):
    from infertop.sources.kube.session import KubeSession
    from infertop.sources.kube.watch import Informer
    from scripted_server import ScriptedServer, Stream

    def bookmarks():  # bounded: the test ends by itself even if nothing stops the watch
        for rv in range(2, 200_002):
            yield b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"%d"}}}\n' % rv

    def pods(query: str):
        if "watch=" in query:
            return 200, Stream(bookmarks)
        return 200, json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []})

    with ScriptedServer() as server:
        server.by_query["/api/v1/namespaces/default/pods"] = pods
        session = KubeSession.connect(str(_kubeconfig(tmp_path, server.httpd.server_address[1])))
        inf = Informer(session, "pods", NS, watch_timeout_s=5, backoff_s=(0.05, 0.2))
        inf.max_events_per_s = 500
        inf.start()
        try:
            deadline = time.monotonic() + 20
            while inf.error is None and time.monotonic() < deadline:
                time.sleep(0.02)  # polling a condition with a deadline
            assert inf.error is not None and "watch flood: more than 500 events/s" in inf.error
        finally:
            inf.stop()
            inf.join()
            session.close()


def test_a_401_on_every_read_is_failing_not_fresh(kube_emulator, tmp_path):
    from infertop.sources.kube import read_cluster
    from infertop.sources.kube.session import KubeSession

    emu = kube_emulator("hostile-kube-token")
    session = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc")))
    emu.set_token("another-token")  # the credentials expired: every read answers 401
    try:
        snap = read_cluster(session)
    finally:
        session.close()
    assert snap.stale and snap.stale_error.startswith("unauthorized: every read refused")
    assert "401 Unauthorized" in snap.stale_error


def test_a_403_on_every_watch_is_failing_not_fresh(kube_emulator, tmp_path):
    from infertop.config import KubeConfig
    from infertop.sources.kube.session import KubeSession
    from infertop.sources.kube.watch import ClusterWatcher

    emu = kube_emulator("hostile-kube-token")
    session = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc")))
    emu.set_rules([])  # a user with no permission at all
    watcher = ClusterWatcher(session, KubeConfig()).start()
    try:
        assert watcher.wait_synced(10)
        snap = watcher.snapshot()
    finally:
        watcher.stop()
        watcher.join()
        session.close()
    assert snap.stale and snap.stale_error.startswith("unauthorized: every read refused")


def test_an_exec_credential_plugin_that_never_returns_costs_the_deadline_not_the_process(tmp_path):
    import json as _json
    import os as _os
    import signal as _signal
    import stat as _stat

    from infertop.config import KubeConfig
    from infertop.sources.kube import KubeError
    from infertop.sources.kube.session import session_for

    pidfile = tmp_path / "plugin.pid"
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 600\n")
    plugin.chmod(plugin.stat().st_mode | _stat.S_IEXEC)
    kc = tmp_path / "kc"
    kc.write_text(_json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                  "command": str(plugin), "interactiveMode": "Never"}}}]}))
    try:
        with pytest.raises(KubeError, match="no credentials within 1 s: the kubeconfig's exec credential plugin"):
            session_for(KubeConfig(kubeconfig=str(kc)), deadline_s=1.0)  # hung for good before
    finally:
        if pidfile.exists():
            _os.kill(int(pidfile.read_text()), _signal.SIGKILL)


def test_a_pod_without_a_ready_condition_is_as_ready_as_its_containers():
    from infertop.sources.kube.view import pod_view

    pod = {"metadata": {"name": "p", "namespace": "ns"},
           "spec": {"containers": [{"name": "vllm"}]},
           "status": {"phase": "Running", "containerStatuses": [{"name": "vllm", "ready": True, "state": {"running": {}}}]}}
    v = pod_view(pod)
    assert (v.ready, v.ready_text) == (True, "1/1")  # "3 pods (3 not ready)" beside rows of 1/1 before
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]  # a readiness gate holds it: it says so
    assert pod_view(pod).ready is False
