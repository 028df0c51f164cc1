"""Kubernetes reads (``infertop/sources/kube/read.py``) against the API emulator.

Everything goes through the real ``kubernetes`` client and a kubeconfig
written to ``tmp_path``; nothing is patched. Controllers run when the test
calls ``emu.reconcile()`` unless a test needs the background loop.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from kubernetes.client.rest import ApiException
from ports import free_port

from infertop.cli import build_snapshot_parser, collect_snapshot, resolve_config
from infertop.config import Config, GpuConfig, KubeConfig
from infertop.domain.kube import ClusterSnapshot
from infertop.sim import SimCluster
from infertop.sim.model import SimRequest
from infertop.sources.kube import (
    ClusterWatcher,
    Informer,
    KubeError,
    KubeSession,
    build_snapshot,
    RawCluster,
    describe_api_error,
    fetch_pod_load,
    fetch_pod_loads,
    hpa_view,
    kube_contexts,
    list_all,
    pod_view,
    read_cluster,
)

try:
    from kube_emulator import KubeEmulator
except ImportError:  # tests/ importable as a package
    from kube_emulator import KubeEmulator

TOKEN = "kube-source-token"
NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=None)


@pytest.fixture
def live_emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.02)


def connect(emu: KubeEmulator, tmp_path, **kw) -> KubeSession:
    path = emu.write_kubeconfig(tmp_path / "kubeconfig", **kw)
    return KubeSession.connect(str(path))


def seed_fleet(emu: KubeEmulator) -> None:
    emu.add_node("tiny", gpus=0)
    emu.cordon("gpu-b")
    emu.add_deployment(NS, "vllm", replicas=2, args=["--model", "meta-llama/Llama-3.1-8B", "--max-num-seqs", "64"])
    emu.add_statefulset(NS, "engine", replicas=2)
    emu.add_deployment(NS, "broken", replicas=1, image="vllm/vllm-openai:nope")
    emu.add_deployment(NS, "crashy", replicas=1, args=["--crash-me"])
    emu.add_deployment(NS, "huge", replicas=1, gpu_per_pod=16)
    emu.add_deployment(NS, "other", replicas=1, labels={"app": "other", "tier": "web"}, gpu_per_pod=0)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=2, max_replicas=4, desired_replicas=6, current_metrics=[{
        "type": "Pods", "pods": {"metric": {"name": "vllm:num_requests_waiting"}, "current": {"averageValue": "12"}}}],
        conditions=[
            {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale", "message": "ready"},
            {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound", "message": "ok"},
            {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas",
             "message": "the desired replica count is more than the maximum replica count"},
        ])
    emu.fail_image("*:nope")
    emu.fail_args("--crash-me")
    emu.reconcile()


# --------------------------------------------------------------- reads

def test_read_cluster_shows_workloads_pods_nodes_hpas_events(emu, tmp_path):
    seed_fleet(emu)
    session = connect(emu, tmp_path)
    assert (session.context, session.user, session.namespaces) == ("emu", "tester", [NS])
    snap = read_cluster(session, KubeConfig(selector="tier!=web"))
    by_name = {w.name: w for w in snap.workloads}
    assert set(by_name) == {"vllm", "engine", "broken", "crashy", "huge"}  # the selector left "other" out
    vllm = by_name["vllm"]
    assert (vllm.kind, vllm.desired, vllm.ready, vllm.updated, vllm.rollout) == ("Deployment", 2, 2, 2, "complete")
    assert vllm.args == ("--model", "meta-llama/Llama-3.1-8B", "--max-num-seqs", "64")
    assert by_name["engine"].kind == "StatefulSet" and by_name["engine"].ready == 2
    assert by_name["huge"].rollout == "progressing" and by_name["huge"].ready == 0

    pods = {p.owner_name: p for p in snap.pods}
    assert all(p.owner_kind == "Deployment" for n, p in pods.items() if n != "engine")
    assert pods["engine"].owner_kind == "StatefulSet"
    assert pods["broken"].status == "ImagePullBackOff" and "ImagePullBackOff" in pods["broken"].problem
    assert pods["crashy"].status == "CrashLoopBackOff" and pods["crashy"].restarts >= 1
    assert pods["crashy"].last_termination_reason == "Error"
    assert pods["huge"].status == "Pending" and "Insufficient nvidia.com/gpu" in pods["huge"].problem
    assert pods["vllm"].ready and pods["vllm"].node == "gpu-a" and pods["vllm"].engine_url.endswith(":8000")
    assert snap.workload_of(pods["vllm"]) == vllm and len(snap.pods_of(vllm)) == 2

    nodes = {n.name: n for n in snap.nodes}
    assert set(nodes) == {"gpu-a", "gpu-b"}  # "tiny" has no GPU and none of our pods
    assert nodes["gpu-b"].cordoned and not nodes["gpu-a"].cordoned
    assert (nodes["gpu-a"].gpu_capacity, nodes["gpu-a"].gpu_allocatable) == (8, 8)
    assert nodes["gpu-a"].gpu_requested == 6  # every scheduled pod asks for one GPU, all on the uncordoned node
    assert nodes["gpu-a"].ready and nodes["gpu-a"].problems == ()

    (hpa,) = snap.hpas
    assert (hpa.min_replicas, hpa.max_replicas, hpa.desired_replicas) == (2, 4, 6)
    assert hpa.metrics[0].name == "vllm:num_requests_waiting"
    assert (hpa.metrics[0].current, hpa.metrics[0].target) == ("12", "5")
    assert hpa.flags == "ASL"
    assert hpa.why_not_scaling.startswith("ScalingLimited TooManyReplicas: the desired replica count")
    assert snap.hpa_for(vllm) == hpa and hpa.last_scale_time

    assert snap.events and snap.events[0].warning  # warnings first
    reasons = {e.reason for e in snap.warnings}
    assert {"FailedScheduling", "Failed", "BackOff"} <= reasons
    huge_events = snap.events_for("Pod", pods["huge"].name, NS)
    assert huge_events[0].reason == "FailedScheduling" and "nvidia.com/gpu" in huge_events[0].message
    assert snap.errors == () and snap.synced
    session.close()


def test_one_refresh_is_eleven_lists_whatever_the_number_of_pods(emu, tmp_path):
    """10 lists per namespace (the rollout objects since issue 28 item 3) + 1 for nodes (+ 4 discovery calls for the absent autoscaler and inference-extension types):
    no per-pod call, for 2 pods as for 50."""
    session = connect(emu, tmp_path)
    emu.add_deployment(NS, "vllm", replicas=2, gpu_per_pod=0)
    emu.reconcile()
    emu.clear_requests()
    assert len(read_cluster(session).pods) == 2
    small = emu.count_requests()
    emu.patch("deployments", "vllm", {"spec": {"replicas": 50}}, NS)
    emu.reconcile()
    emu.clear_requests()
    snap = read_cluster(session)
    assert len(snap.pods) == 50 and snap.workloads[0].ready == 50
    assert emu.count_requests() == small == 15
    assert emu.count_requests("GET", f"/api/v1/namespaces/{NS}/pods") == 1
    assert {r.path for r in emu.requests} == {
        f"/apis/apps/v1/namespaces/{NS}/deployments", f"/apis/apps/v1/namespaces/{NS}/statefulsets",
        f"/api/v1/namespaces/{NS}/pods", f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers",
        f"/api/v1/namespaces/{NS}/events", "/api/v1/nodes", "/apis/keda.sh/v1alpha1", "/apis/llmd.ai/v1alpha1",
        "/apis/inference.networking.k8s.io/v1", "/apis/inference.networking.x-k8s.io/v1alpha2",
        f"/apis/apps/v1/namespaces/{NS}/replicasets", f"/api/v1/namespaces/{NS}/services",
        f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
        f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", f"/api/v1/namespaces/{NS}/configmaps"}
    session.close()


def test_watcher_refresh_costs_no_api_call(live_emu, tmp_path):
    """Informers: list + watch once per resource; a refresh then reads memory; a change is one watch event."""
    session = connect(live_emu, tmp_path)
    live_emu.add_deployment(NS, "vllm", replicas=50, gpu_per_pod=0)
    live_emu.wait_until(lambda: len(live_emu.list("pods", NS)) == 50)
    watcher = ClusterWatcher(session, KubeConfig()).start()
    try:
        assert watcher.wait_synced(10)
        live_emu.wait_until(lambda: watcher.snapshot().workloads and watcher.snapshot().workloads[0].ready == 50)
        assert all(inf.lists == 1 for inf in watcher.informers)
        live_emu.wait_until(lambda: live_emu.count_requests(predicate=lambda r: r.query.get("watch") == "true") == 11)
        # one list each, and one discovery GET per (absent) autoscaler and inference-extension API group
        assert live_emu.count_requests(predicate=lambda r: r.query.get("watch") != "true") == 11 + 4
        before = live_emu.count_requests()
        calls = session.calls
        snaps = [watcher.snapshot() for _ in range(20)]
        assert live_emu.count_requests() == before and session.calls == calls  # 20 refreshes, 0 requests
        assert snaps[0] is snaps[-1]  # nothing changed: the cached view
        live_emu.patch("deployments", "vllm", {"spec": {"replicas": 51}}, NS)
        live_emu.wait_until(lambda: len(watcher.snapshot().pods) == 51)
        assert watcher.snapshot() is not snaps[0]
        assert all(inf.lists == 1 for inf in watcher.informers)  # still no relist
    finally:
        watcher.stop()
        watcher.join()
    assert not any(inf._thread.is_alive() for inf in watcher.informers)
    session.close()


def test_informer_relists_after_410_gone(live_emu, tmp_path):
    session = connect(live_emu, tmp_path)
    live_emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    live_emu.wait_until(lambda: len(live_emu.list("pods", NS)) == 1)
    live_emu.compact_history()
    inf = Informer(session, "pods", NS, watch_timeout_s=5)
    inf.resource_version = "1"  # as after a long disconnect: older than the server's history
    inf.start()
    try:
        live_emu.wait_until(lambda: inf.lists == 1 and len(inf.objects()) == 1, message="relist after 410")
        assert inf.error is None
        live_emu.patch("deployments", "vllm", {"spec": {"replicas": 2}}, NS)
        live_emu.wait_until(lambda: len(inf.objects()) == 2)
    finally:
        inf.stop()
        inf.join()
    session.close()


def test_informer_relists_when_its_resource_version_is_from_the_future(live_emu, tmp_path):
    """A server restarted with a lower counter answers 504 "Too large resource version": relist, not stale."""
    session = connect(live_emu, tmp_path)
    live_emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    live_emu.wait_until(lambda: len(live_emu.list("pods", NS)) == 1)
    inf = Informer(session, "pods", NS, watch_timeout_s=5)
    inf.resource_version = str(live_emu.store.resource_version + 1000)
    inf.start()
    try:
        live_emu.wait_until(lambda: inf.lists == 1 and len(inf.objects()) == 1, message="relist after 504")
        assert "Too large resource version" in inf.relist_reason
        assert inf.error is None and inf.stale_since is None and inf.recoveries == 0
    finally:
        inf.stop()
        inf.join()
    session.close()


def test_watcher_goes_stale_when_the_api_server_dies_and_recovers_by_itself_after_a_reset(live_emu, tmp_path):
    """API server stopped: stale with the error, the last objects kept. Restarted with its resourceVersion
    counter reset: every informer relists by itself and shows the server's objects; one reconnect."""
    emu = live_emu
    session = connect(emu, tmp_path)
    emu.add_configmap(NS, "counter")
    for i in range(150):  # a long history: after the reset the counter restarts far below what was seen
        emu.patch("configmaps", "counter", {"data": {"i": str(i)}}, NS)
    emu.add_deployment(NS, "vllm", replicas=2, gpu_per_pod=0)
    emu.add_deployment(NS, "old", replicas=1, gpu_per_pod=0)
    emu.wait_until(lambda: len(emu.list("pods", NS)) == 3)
    watcher = ClusterWatcher(session, KubeConfig(), backoff_s=(0.05, 0.2)).start()
    try:
        assert watcher.wait_synced(10)
        emu.wait_until(lambda: len(watcher.snapshot().pods) == 3)
        assert not watcher.snapshot().stale and watcher.reconnects == 0 and watcher.lists == 11
        emu.stop()
        # (the first failure may be a connection cut during the shutdown; the retries then say why)
        snap = emu.wait_until(lambda: (s := watcher.snapshot()).stale_error == "cannot reach the API server: "
                              "connection refused" and s, message="stale")
        assert {w.name for w in snap.workloads} == {"vllm", "old"} and len(snap.pods) == 3  # the last read, kept
        assert snap.to_dict()["stale_since"] == snap.stale_since and snap.to_dict()["stale_error"]
        assert watcher.reconnects == 0

        emu.reset_resource_versions()
        emu.start()
        emu.delete("deployments", "old", NS)
        emu.add_deployment(NS, "fresh", replicas=1, gpu_per_pod=0)

        def recovered():
            s = watcher.snapshot()
            return (not s.stale and {w.name for w in s.workloads} == {"vllm", "fresh"} and len(s.pods) == 3
                    and not any(p.owner_name == "old" for p in s.pods) and all(i.lists >= 2 for i in watcher.informers)
                    and s)

        snap = emu.wait_until(recovered, message="recovered without a K press")
        assert snap.errors == () and snap.stale_error is None
        assert watcher.reconnects == 1
        # every informer relisted (one waiting out a quick watch end during the outage never saw it fail,
        # and relists on the 504 "Too large resource version" instead) and saw the counter go back
        for inf in watcher.informers:
            assert inf.lists >= 2 and inf.error is None and inf.stale_since is None
            assert inf.rv_resets == 1 and "the API server was restarted or restored" in inf.relist_reason
    finally:
        watcher.stop()
        watcher.join()
    session.close()


def test_a_requested_relist_reads_every_resource_again(live_emu, tmp_path):
    session = connect(live_emu, tmp_path)
    live_emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    live_emu.wait_until(lambda: len(live_emu.list("pods", NS)) == 1)
    watcher = ClusterWatcher(session, KubeConfig()).start()
    try:
        assert watcher.wait_synced(10)
        live_emu.clear_requests()
        assert watcher.wait_relisted(watcher.request_relist(), 10)
        assert [inf.lists for inf in watcher.informers] == [2] * 11
        assert live_emu.count_requests(predicate=lambda r: r.query.get("watch") != "true") == 11
        assert not watcher.snapshot().stale and watcher.reconnects == 0  # a relist is not a reconnect
        live_emu.patch("deployments", "vllm", {"spec": {"replicas": 2}}, NS)
        live_emu.wait_until(lambda: len(watcher.snapshot().pods) == 2)  # and the watches go on
    finally:
        watcher.stop()
        watcher.join()
    session.close()


# ----------------------------------------------------- hostile API servers

class HostileApi:
    """A loopback "API server" that lists three pods, then misbehaves as ``mode`` says:
    ``endless-list`` (a list body that never ends), ``huge-length`` (a declared 8 GiB list),
    ``endless-line`` (a watch event that never ends), ``rv-back`` (a watch event older than the list)."""

    LIST = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "100"},
            "items": [{"metadata": {"name": f"p{i}", "namespace": NS, "resourceVersion": "90"}} for i in range(3)]}

    def __init__(self, mode: str) -> None:
        import http.server
        import threading

        self.mode = mode
        self.sent = 0
        self.lists = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                outer.sent += len(data)

            def do_GET(self):  # noqa: N802
                watch = "watch=true" in self.path
                try:
                    if not watch:
                        outer.lists += 1
                    if not watch and outer.mode == "huge-length":
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(8 << 30))
                        self.end_headers()
                        self.wfile.write(b'{"items": [')
                        return
                    if not watch and outer.mode != "endless-list" or watch and outer.mode == "rv-back":
                        body = json.dumps(outer.LIST if not watch else {
                            "type": "ADDED", "object": {"metadata": {"name": "late", "namespace": NS,
                                                                     "resourceVersion": "7"}}}).encode()
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(body) + watch))
                        self.end_headers()
                        self.wfile.write(body + b"\n" * watch)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.chunk(b'{"kind": "PodList", "items": [' if not watch else b'{"type": "ADDED", "object": ')
                    filler = b'{"metadata": {"name": "x"}}, ' * 2000
                    while outer.sent < 512 << 20:  # a safety stop for the test itself
                        self.chunk(filler)
                except OSError:
                    pass  # the client hung up: what we want

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def session(self, tmp_path, **limits) -> KubeSession:
        path = tmp_path / f"kc-{self.mode}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{"name": "x", "cluster": {"server": f"http://127.0.0.1:{self.httpd.server_address[1]}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "x", "user": "u"}}]}))
        session = KubeSession.connect(str(path), timeout_s=5)
        for k, v in limits.items():
            setattr(session, k, v)
        return session

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("mode, expected", [
    ("endless-list", "the API server's answer is over the 1 MiB limit: refused while reading"),
    ("huge-length", "the API server's answer is 8192 MiB, over the 1 MiB limit: refused"),
])
def test_a_list_body_is_capped_while_reading(tmp_path, mode, expected):
    server = HostileApi(mode)
    session = server.session(tmp_path, max_body_bytes=1 << 20)
    try:
        with pytest.raises(KubeError) as ei:
            list_all(session, "pods", NS)
        assert str(ei.value) == expected
        assert server.sent < 32 << 20  # it stopped reading: the server could only fill the socket buffers
        snap = read_cluster(session)  # a refused answer is that resource's error, not the whole read's
        assert snap.errors[0] == f"deployments in {NS}: {expected}" and len(snap.errors) == 12  # + discovery
        # each connection was dropped, not handed to the next request half-read
        session.max_body_bytes = 64 << 20
        server.mode = "ok"
        assert len(read_cluster(session).pods) == 3
    finally:
        session.close()
        server.close()


def test_a_pods_endless_metrics_is_refused_while_reading():
    server = HostileApi("endless-list")  # every GET answers a body that never ends
    url = f"http://127.0.0.1:{server.httpd.server_address[1]}"
    try:
        assert fetch_pod_load(url, timeout_s=5).error == "response too large (> 8 MB)"
        sent = server.sent
        assert sent < 64 << 20
        loads = asyncio.run(fetch_pod_loads({"p": url}, timeout_s=5))
        assert loads["p"].error and "too large" in loads["p"].error
        assert server.sent - sent < 64 << 20
    finally:
        server.close()


def test_a_watch_event_is_capped_while_reading(tmp_path):
    server = HostileApi("endless-line")
    session = server.session(tmp_path, max_watch_line_bytes=1 << 20)
    inf = Informer(session, "pods", NS, backoff_s=(5.0, 5.0)).start()
    try:
        wait_for(lambda: inf.error is not None, "the watch error")
        assert inf.error == "a watch event over the 1 MiB limit: refused while reading"
        assert inf.stale_since is not None and len(inf.objects()) == 3  # the list is kept, marked stale
        assert server.sent < 32 << 20
    finally:
        inf.stop()
        inf.join()
        session.close()
        server.close()


def test_a_watch_event_older_than_the_list_relists(tmp_path):
    server = HostileApi("rv-back")
    session = server.session(tmp_path)
    inf = Informer(session, "pods", NS, backoff_s=(5.0, 5.0)).start()
    try:
        wait_for(lambda: inf.lists >= 2, "a relist")
        assert inf.relist_reason == "resourceVersion went back from 100 to 7 in a watch"
        assert "default/late" not in {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in inf.objects()}
    finally:
        inf.stop()
        inf.join()
        session.close()
        server.close()


def wait_for(predicate, message: str, timeout: float = 10.0) -> None:
    """Bounded poll (no emulator to wake us here)."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.01)


def test_what_the_user_may_not_read_is_said_not_hidden(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.reconcile()
    emu.set_rules([(["list", "watch"], "*", "*", "", NS)])  # namespaced reads only: no nodes
    session = connect(emu, tmp_path)
    snap = read_cluster(session)
    assert [w.name for w in snap.workloads] == ["vllm"] and len(snap.pods) == 1
    assert snap.nodes == ()
    assert len(snap.errors) == 1 and snap.errors[0].startswith("nodes: 403 Forbidden: nodes is forbidden")
    session.close()


# --------------------------------------------------------------- errors

def test_api_errors_become_one_line_messages(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_pdb(NS, "all", {"app": "vllm"}, min_available=1)
    emu.reconcile()
    session = connect(emu, tmp_path)
    apps, core = session.apps, session.core

    def err(fn, *args, **kw) -> str:
        with pytest.raises(KubeError) as ei:
            session.raw(fn, *args, **kw)
        assert "\n" not in str(ei.value)
        return f"{ei.value.status} {ei.value}"

    assert err(apps.read_namespaced_deployment, "nope", NS) == \
        '404 404 Not found: deployments.apps "nope" not found'
    assert err(apps.patch_namespaced_deployment_scale, "vllm", NS, {"spec": {"replicas": -1}}).startswith(
        "422 422 Invalid: Scale.autoscaling \"vllm\" is invalid")
    assert err(apps.patch_namespaced_deployment, "vllm", NS,
               {"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 2}}).startswith("409 409 Conflict:")
    pod = emu.list("pods", NS)[0]["metadata"]["name"]
    from kubernetes.client import V1Eviction, V1ObjectMeta
    evicted = err(core.create_namespaced_pod_eviction, pod, NS, V1Eviction(metadata=V1ObjectMeta(name=pod)))
    assert evicted.startswith("429 429 Too many requests: Cannot evict pod as it would violate")
    assert "needs 1 healthy pods and has 1 currently" in evicted
    emu.set_rules([("get", "*", "*")])
    assert err(apps.patch_namespaced_deployment, "vllm", NS, {"spec": {"replicas": 2}}) == (
        '403 403 Forbidden: deployments.apps "vllm" is forbidden: User "tester" cannot patch resource '
        '"deployments" in API group "apps" in the namespace "default"')
    emu.set_rules(None)
    bad = connect(emu, tmp_path, token="wrong")
    assert err(bad.core.list_namespaced_pod, NS) == \
        "401 401 Unauthorized: the cluster rejected the credentials (expired token?)"
    # 5xx, as the real API server words them
    exc = ApiException(status=503, reason="Service Unavailable")
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": "etcdserver: request timed out",
                           "reason": "ServiceUnavailable", "code": 503})
    assert describe_api_error(exc) == "503 server error: etcdserver: request timed out"
    session.close()
    bad.close()


def test_unreachable_and_hung_api_servers(tmp_path):
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # accepts connections, never answers
    closed_port = free_port()  # nobody listens there
    try:
        for port, expected in ((hung.getsockname()[1], "timeout after 0.5 s"),
                               (closed_port, "cannot reach the API server: connection refused")):
            path = tmp_path / f"kc-{port}"
            path.write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "x",
                "clusters": [{"name": "x", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "u"}}]}))
            session = KubeSession.connect(str(path), timeout_s=0.5)
            with pytest.raises(KubeError) as ei:
                session.raw(session.core.list_namespaced_pod, "default")
            assert str(ei.value) == expected
            session.close()
    finally:
        hung.close()


def test_kubeconfig_problems_are_one_line(emu, tmp_path):
    path = emu.write_kubeconfig(tmp_path / "kubeconfig", context="prod")
    assert kube_contexts(str(path)) == (["prod"], "prod")
    with pytest.raises(KubeError) as ei:
        KubeSession.connect(str(path), context="staging")
    assert str(ei.value) == "context 'staging' is not in the kubeconfig (contexts: prod)"
    with pytest.raises(KubeError) as ei:
        KubeSession.connect(str(tmp_path / "missing"))
    assert str(ei.value).startswith(f"no usable kubeconfig at {tmp_path / 'missing'}")
    session = KubeSession.connect(str(path), namespaces=["a", "b"])
    assert session.namespaces == ["a", "b"] and session.context == "prod"


# ------------------------------------------------------ recorded objects

OOMKILLED_POD = {  # `kubectl get pod -o json` of a vLLM pod killed by the OOM killer (trimmed)
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
        "name": "llama-8b-7d9f8c6b5-x2x9q", "namespace": "inference", "uid": "5c1f0a57-0b53-4d9e-9a0e-7b1c8d2e3f40",
        "resourceVersion": "918273", "creationTimestamp": "2025-06-01T10:00:00Z",
        "labels": {"app": "llama-8b", "pod-template-hash": "7d9f8c6b5"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llama-8b-7d9f8c6b5",
                             "uid": "0f3c", "controller": True, "blockOwnerDeletion": True}]},
    "spec": {"nodeName": "gpu-node-3", "containers": [
        {"name": "metrics-sidecar", "image": "busybox:1.36"},
        {"name": "vllm", "image": "vllm/vllm-openai:v0.9.2",
         "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "256"],
         "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
         "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}, "requests": {"nvidia.com/gpu": "1"}}}]},
    "status": {
        "phase": "Running", "podIP": "10.244.3.17", "hostIP": "10.0.0.13",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                       {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "metrics-sidecar", "ready": True, "restartCount": 0, "state": {"running": {}}},
            {"name": "vllm", "ready": False, "restartCount": 4,
             "state": {"waiting": {"reason": "CrashLoopBackOff",
                                   "message": "back-off 1m20s restarting failed container=vllm"}},
             "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                          "startedAt": "2025-06-01T10:05:00Z",
                                          "finishedAt": "2025-06-01T10:06:10Z"}}}]},
}


def test_pod_view_of_an_oomkilled_vllm_pod():
    p = pod_view(OOMKILLED_POD)
    assert (p.owner_kind, p.owner_name) == ("Deployment", "llama-8b")
    assert p.container == "vllm" and p.args[-1] == "256"
    assert p.status == "CrashLoopBackOff" and not p.ready and p.ready_text == "1/2" and p.restarts == 4
    assert p.last_termination_reason == "OOMKilled"
    assert p.problem.startswith("CrashLoopBackOff: back-off 1m20s")
    assert p.engine_url == "http://10.244.3.17:8080" and p.gpus == 1
    assert pod_view(OOMKILLED_POD, "", 9000).engine_url == "http://10.244.3.17:9000"
    snap = build_snapshot(RawCluster(items={"deployments": [], "statefulsets": [], "pods": [OOMKILLED_POD],
                                            "hpas": [], "events": [], "nodes": []}),
                          context="prod", namespaces=["inference"], now=0.0)
    assert snap.to_dict()["pods"][0]["last_termination_reason"] == "OOMKilled"


def test_hpa_view_reads_every_metric_kind():
    h = hpa_view({
        "metadata": {"name": "h", "namespace": "n"},
        "spec": {"scaleTargetRef": {"kind": "StatefulSet", "name": "engine"}, "maxReplicas": 8, "metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                        "averageUtilization": 70}}},
            {"type": "External", "external": {"metric": {"name": "queue_depth"},
                                              "target": {"type": "Value", "value": "30"}}}]},
        "status": {"currentReplicas": 3, "desiredReplicas": 3, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 91}}}],
            "conditions": [{"type": "ScalingActive", "status": "False", "reason": "FailedGetExternalMetric",
                            "message": "unable to get external metric queue_depth"}]},
    })
    assert (h.target_kind, h.target_name, h.min_replicas) == ("StatefulSet", "engine", 1)
    assert [(m.name, m.current, m.target) for m in h.metrics] == [("cpu", "91%", "70%"),
                                                                   ("queue_depth", None, "30")]
    assert h.flags == "·s·"
    assert h.why_not_scaling == "ScalingActive FailedGetExternalMetric: unable to get external metric queue_depth"


# ----------------------------------------------------- pods → engines

def test_pods_map_to_engines_and_their_in_flight_requests(emu, tmp_path):
    sim = SimCluster(1, seed=5, load="none", realtime=False).start()
    try:
        eng = sim.engines[0]
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", eng.port)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.reconcile()
        with eng.lock:
            for _ in range(5):
                eng.core.submit(SimRequest(prompt_tokens=200, max_tokens=400))
        sim.advance(0.5)
        session = connect(emu, tmp_path)
        (pod,) = read_cluster(session).pods
        assert pod.engine_url == eng.url
        loads = asyncio.run(fetch_pod_loads({pod.key: pod.engine_url, "gone": "http://127.0.0.1:9"}))
        assert loads[pod.key].in_flight == 5 and loads[pod.key].error is None
        assert loads["gone"].in_flight is None and loads["gone"].error == "connection refused"
        session.close()
    finally:
        sim.stop()


# ------------------------------------------------------ snapshot --json

def test_snapshot_json_includes_the_cluster_when_a_context_is_configured(emu, tmp_path):
    seed_fleet(emu)
    path = emu.write_kubeconfig(tmp_path / "kubeconfig", context="lab")
    args = build_snapshot_parser().parse_args(["--kubeconfig", str(path), "--context", "lab", "--namespace",
                                               f"{NS},kube-system", "--config", str(tmp_path / "none.yaml")])
    (tmp_path / "none.yaml").write_text("gpu:\n  nvml: false\n")
    cfg, _ = resolve_config(args)
    assert (cfg.kube.kubeconfig, cfg.kube.context, cfg.kube.namespaces) == (str(path), "lab", [NS, "kube-system"])
    doc = asyncio.run(collect_snapshot([], cfg, 0.0))
    cluster = json.loads(json.dumps(doc["cluster"], default=str))
    assert cluster["context"] == "lab" and cluster["namespaces"] == [NS, "kube-system"]
    assert cluster["api_calls"] == 25  # 10 per namespace + nodes + 4 discovery calls (no KEDA, llm-d, GIE)
    vllm = next(w for w in cluster["workloads"] if w["name"] == "vllm")
    assert (vllm["desired"], vllm["ready"], vllm["rollout"]) == (2, 2, "complete")
    (hpa,) = cluster["hpas"]
    assert (hpa["current_replicas"], hpa["desired_replicas"]) == (2, 6)
    assert [c["type"] for c in hpa["conditions"]] == ["AbleToScale", "ScalingActive", "ScalingLimited"]
    assert hpa["why_not_scaling"].startswith("ScalingLimited TooManyReplicas")
    assert {p["status"] for p in cluster["pods"]} >= {"Running", "CrashLoopBackOff", "ImagePullBackOff", "Pending"}
    assert {n["name"] for n in cluster["nodes"]} == {"gpu-a", "gpu-b", "tiny"}  # tiny: no GPU, but our pod
    # not configured: no "cluster" key at all
    assert "cluster" not in asyncio.run(collect_snapshot([], Config(gpu=GpuConfig(nvml=False)), 0.0))
    # configured but unreachable: said in the document
    bad = Config(gpu=GpuConfig(nvml=False), kube=KubeConfig(kubeconfig=str(path), context="nope"))
    assert asyncio.run(collect_snapshot([], bad, 0.0))["cluster"]["error"].startswith("context 'nope' is not")


def test_snapshot_to_dict_is_plain_json():
    snap = ClusterSnapshot(context="c", namespaces=("n",), taken_at=1.0)
    assert json.loads(json.dumps(snap.to_dict()))["workloads"] == []


def test_stale_since_dates_the_outage_not_an_older_failure_of_one_resource():
    """One kind refused since 10:00 (a 404), then the API server stops answering at 11:00 for the
    five others: "stale since 11:00: connection refused", not 10:00 and the 404."""
    from infertop.sources.kube.watch import outage

    refused = "cannot reach the API server: connection refused"
    failing = [(36000.0, "(404) events not found")] + [(39600.0 + i, refused) for i in range(5)]
    assert outage(failing) == (39600.0, refused)
    assert outage([(36000.0, "(404) events not found")]) == (36000.0, "(404) events not found")
    assert outage([(100.0, "a"), (200.0, "b")]) == (200.0, "b")  # as many each: the latest onset
    assert outage([]) is None
