"""The Kubernetes API emulator, driven over real HTTP by the real client.

Every test talks to a :class:`KubeEmulator` on 127.0.0.1 through a
kubeconfig written to ``tmp_path`` and ``kubernetes.config.new_client_from_config``;
nothing is patched. Most tests run the controllers explicitly
(``emu.reconcile()``); the watch and rolling-update tests use the
background reconcile loop and wait with bounded, event-driven polling.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes
import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

try:
    from kube_emulator import KubeEmulator
    from kube_emulator.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
except ImportError:  # tests/ importable as a package
    from kube_emulator import KubeEmulator
    from kube_emulator.patch import PatchError, json_patch, merge_patch, strategic_merge_patch

TOKEN = "s3cr3t-emulator-token"
NS = "default"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class FakeClock:
    def __init__(self, t: float = 1_750_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def emu(kube_emulator):
    """Controllers run only when the test calls ``emu.reconcile()``."""
    return kube_emulator(TOKEN, reconcile_interval=None)


@pytest.fixture
def live_emu(kube_emulator):
    """Controllers react to every write in a background thread."""
    return kube_emulator(TOKEN, reconcile_interval=0.02)


def make_client(emu: KubeEmulator, tmp_path, **kw) -> client.ApiClient:
    path = emu.write_kubeconfig(tmp_path / "kubeconfig", **kw)
    return kubernetes.config.new_client_from_config(config_file=str(path))


@pytest.fixture
def api(request, tmp_path):
    e = request.getfixturevalue("live_emu" if "live_emu" in request.fixturenames else "emu")
    c = make_client(e, tmp_path)
    yield c
    c.close()


def status_body(exc: ApiException) -> dict:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == exc.status and body["metadata"] == {}
    return body


def pods_of(core: client.CoreV1Api, app: str, ns: str = NS) -> list:
    return core.list_namespaced_pod(ns, label_selector=f"app={app}").items


def active(pods: list) -> list:
    return [p for p in pods if p.metadata.deletion_timestamp is None]


# ----------------------------------------------------------------- basics

def test_discovery_and_version(emu, api):
    assert client.VersionApi(api).get_code().git_version.startswith("v1.")
    versions = client.CoreApi(api).get_api_versions()
    assert versions.versions == ["v1"]
    assert versions.server_address_by_client_cidrs[0].server_address == emu.address
    groups = {g.name: g.preferred_version.version for g in client.ApisApi(api).get_api_versions().groups}
    assert groups == {"apps": "v1", "autoscaling": "v2", "discovery.k8s.io": "v1", "policy": "v1",
                      "authorization.k8s.io": "v1"}
    core = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert core["pods"].namespaced and "watch" in core["pods"].verbs and core["pods"].short_names == ["po"]
    assert core["pods/eviction"].kind == "Eviction" and core["pods/eviction"].group == "policy"
    assert not core["nodes"].namespaced
    apps = {r.name: r for r in client.AppsV1Api(api).get_api_resources().resources}
    assert apps["deployments/scale"].kind == "Scale" and apps["deployments/scale"].group == "autoscaling"
    assert client.AppsApi(api).get_api_group().preferred_version.group_version == "apps/v1"
    hpa = client.AutoscalingV2Api(api).get_api_resources()
    assert [r.name for r in hpa.resources if "/" not in r.name] == ["horizontalpodautoscalers"]
    # the client asks with a trailing slash; both forms work
    paths = {r.path for r in emu.requests}
    assert {"/version/", "/api/", "/apis/", "/api/v1/", "/apis/apps/v1/"} <= paths
    with urllib.request.urlopen(urllib.request.Request(
            emu.url + "/apis/apps/v1", headers={"Authorization": f"Bearer {TOKEN}"})) as resp:
        assert json.load(resp)["groupVersion"] == "apps/v1"


def test_wrong_token_is_401(emu, tmp_path):
    bad = make_client(emu, tmp_path, token="not-the-token")
    with pytest.raises(ApiException) as ei:
        client.CoreV1Api(bad).list_namespaced_pod(NS)
    assert ei.value.status == 401
    assert status_body(ei.value)["reason"] == "Unauthorized"
    bad.close()


def test_unknown_paths_and_objects_are_404(emu, api):
    apps = client.AppsV1Api(api)
    with pytest.raises(ApiException) as ei:
        apps.read_namespaced_deployment("nope", NS)
    assert ei.value.status == 404
    body = status_body(ei.value)
    assert body["reason"] == "NotFound" and body["message"] == 'deployments.apps "nope" not found'
    assert body["details"] == {"name": "nope", "group": "apps", "kind": "deployments"}
    with pytest.raises(ApiException) as ei:
        client.CoreV1Api(api).create_namespaced_config_map("no-such-ns", {"metadata": {"name": "x"}})
    assert ei.value.status == 404
    assert status_body(ei.value)["message"] == 'namespaces "no-such-ns" not found'


def test_list_with_label_and_field_selectors(emu, api):
    core = client.CoreV1Api(api)
    emu.add_namespace("team-b")
    emu.add_deployment(NS, "llama", replicas=2, labels={"app": "llama", "tier": "serving"})
    emu.add_deployment(NS, "qwen", replicas=1, labels={"app": "qwen", "tier": "batch"})
    emu.add_deployment("team-b", "mistral", replicas=1, labels={"app": "mistral"})
    emu.reconcile()

    def names(**kw):
        return sorted(p.metadata.name.split("-")[0] for p in core.list_namespaced_pod(NS, **kw).items)

    assert names(label_selector="app=llama") == ["llama", "llama"]
    assert names(label_selector="app==qwen") == ["qwen"]
    assert names(label_selector="app!=llama") == ["qwen"]
    assert names(label_selector="tier in (serving, batch),app notin (qwen)") == ["llama", "llama"]
    assert names(label_selector="tier") == ["llama", "llama", "qwen"]
    assert names(label_selector="!tier") == []
    everywhere = core.list_pod_for_all_namespaces(label_selector="!tier").items
    assert [p.metadata.namespace for p in everywhere] == ["team-b"]
    assert len(core.list_pod_for_all_namespaces().items) == 4

    llama = pods_of(core, "llama")
    # two nodes, round-robin
    assert sorted(p.spec.node_name for p in llama) == ["gpu-a", "gpu-b"]
    target = llama[0].metadata.name
    assert [p.metadata.name for p in core.list_namespaced_pod(NS, field_selector=f"metadata.name={target}").items] \
        == [target]
    on_a = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-a").items
    assert on_a and all(p.spec.node_name == "gpu-a" for p in on_a)
    assert len(core.list_namespaced_pod(NS, field_selector="status.phase=Running,spec.nodeName!=gpu-a").items) \
        == 3 - len([p for p in on_a if p.metadata.namespace == NS])
    assert core.list_namespaced_pod(NS, field_selector="status.phase=Pending").items == []
    assert len(core.list_pod_for_all_namespaces(field_selector="metadata.namespace=team-b").items) == 1

    events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={target},involvedObject.kind=Pod")
    assert {e.reason for e in events.items} >= {"Scheduled", "Pulled", "Created", "Started"}
    for e in events.items:
        assert e.involved_object.name == target and e.involved_object.kind == "Pod"
        assert e.involved_object.uid == llama[0].metadata.uid and e.count >= 1
        assert e.first_timestamp is not None and e.last_timestamp is not None and e.type == "Normal"

    with pytest.raises(ApiException) as ei:
        core.list_namespaced_pod(NS, field_selector="spec.bogus=x")
    assert ei.value.status == 400 and "field label not supported: spec.bogus" in ei.value.body
    with pytest.raises(ApiException) as ei:
        core.list_namespaced_pod(NS, label_selector="app in (a")
    assert ei.value.status == 400

    # pagination
    page = core.list_pod_for_all_namespaces(limit=3)
    assert len(page.items) == 3 and page.metadata.remaining_item_count == 1
    rest = core.list_pod_for_all_namespaces(limit=3, _continue=page.metadata._continue)
    assert len(rest.items) == 1 and rest.metadata._continue is None


def test_every_kind_deserializes_into_the_strict_models(emu, api):
    """The client's pydantic models reject wrong types and missing required
    fields: read every kind, in healthy and unhealthy states."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    emu.add_node("tiny", gpus=0)
    emu.cordon("tiny")
    emu.add_deployment(NS, "vllm", replicas=2, args=["--model", "meta-llama/Llama-3.1-8B"])
    emu.add_deployment(NS, "broken", replicas=1, image="vllm/vllm-openai:nope")
    emu.add_deployment(NS, "crashy", replicas=1, args=["--crash-me"])
    emu.add_deployment(NS, "huge", replicas=1, gpu_per_pod=16)
    emu.add_statefulset(NS, "engine", replicas=2)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=8)
    emu.add_pdb(NS, "vllm", {"app": "vllm"}, max_unavailable="50%")
    emu.add_configmap(NS, "settings", {"model": "llama"})
    emu.add_service(NS, "vllm", {"app": "vllm"}, [8000])
    emu.fail_image("*:nope")
    emu.fail_args("--crash-me")
    emu.reconcile()
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget("vllm", NS)
    assert pdb.status.expected_pods == 2 and pdb.status.current_healthy == 2 and pdb.status.desired_healthy == 1
    assert pdb.status.conditions[0].type == "DisruptionAllowed"
    terminating = core.delete_namespaced_pod(pods_of(core, "vllm")[0].metadata.name, NS)
    assert terminating.metadata.deletion_timestamp is not None

    nodes = core.list_node().items
    assert {n.metadata.name for n in nodes} == {"gpu-a", "gpu-b", "tiny"}
    gpu_a = core.read_node("gpu-a")
    assert gpu_a.status.allocatable["nvidia.com/gpu"] == "8"
    assert gpu_a.status.node_info.kubelet_version.startswith("v1.")
    assert core.read_node("tiny").spec.unschedulable is True
    assert {ns.metadata.name for ns in core.list_namespace().items} >= {"default", "kube-system"}

    pods = core.list_pod_for_all_namespaces().items
    assert len(pods) == 7  # 2 vllm (one terminating), broken, crashy, huge, 2 engine
    for p in pods:
        assert p.spec.containers[0].name and p.spec.containers[0].image
        assert isinstance(p.metadata.resource_version, str)
    by_app = {p.metadata.labels.get("app"): p for p in pods if p.metadata.deletion_timestamp is None}
    assert by_app["huge"].status.phase == "Pending"
    waiting = by_app["broken"].status.container_statuses[0].state.waiting
    assert by_app["broken"].status.phase == "Pending" and waiting.reason == "ImagePullBackOff"
    crash = by_app["crashy"].status.container_statuses[0]
    assert crash.state.waiting.reason == "CrashLoopBackOff" and crash.restart_count >= 1
    assert crash.last_state.terminated.reason == "Error" and crash.last_state.terminated.exit_code == 1
    ready = by_app["engine"].status
    assert ready.phase == "Running" and ready.pod_ip and ready.host_ip.startswith("127.1.0.")
    assert {c.type: c.status for c in ready.conditions}["Ready"] == "True"

    events = core.list_event_for_all_namespaces().items
    assert {"FailedScheduling", "Failed", "BackOff", "ScalingReplicaSet", "SuccessfulCreate"} <= \
        {e.reason for e in events}
    failed = [e for e in events if e.reason == "FailedScheduling"]
    assert failed[0].type == "Warning" and "Insufficient nvidia.com/gpu" in failed[0].message
    assert failed[0].involved_object.kind == "Pod" and failed[0].involved_object.namespace == NS

    assert len(apps.list_deployment_for_all_namespaces().items) == 4
    assert len(apps.list_replica_set_for_all_namespaces().items) == 4
    sts = apps.read_namespaced_stateful_set("engine", NS)
    assert sts.status.replicas == 2 and sts.status.current_revision == sts.status.update_revision

    scale = apps.read_namespaced_deployment_scale("vllm", NS)
    assert isinstance(scale, client.V1Scale) and scale.kind == "Scale" and scale.api_version == "autoscaling/v1"
    assert scale.spec.replicas == 2 and isinstance(scale.status.replicas, int) and scale.status.selector == "app=vllm"

    hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("vllm", NS)
    assert isinstance(hpa, client.V2HorizontalPodAutoscaler)
    assert hpa.spec.scale_target_ref.name == "vllm" and hpa.spec.max_replicas == 8
    st = hpa.status
    assert st.current_replicas == 2 and st.desired_replicas == 2 and st.last_scale_time is not None
    assert st.current_metrics[0].pods.metric.name == "vllm:num_requests_waiting"
    for c in st.conditions:
        assert c.type and c.status in ("True", "False") and c.reason and c.message and c.last_transition_time
    assert len(client.AutoscalingV2Api(api).list_horizontal_pod_autoscaler_for_all_namespaces().items) == 1

    svc = core.read_namespaced_service("vllm", NS)
    assert svc.spec.cluster_ip.startswith("10.96.") and svc.spec.ports[0].target_port == 8000
    assert core.read_namespaced_config_map("settings", NS).data == {"model": "llama"}


# -------------------------------------------------------------- scaling

def test_scale_subresource_and_replicas_2_to_4(emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.reconcile()
    assert len(pods_of(core, "vllm")) == 2
    gen = apps.read_namespaced_deployment("vllm", NS).metadata.generation

    scale = apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 4}})
    assert scale.spec.replicas == 4 and scale.status.replicas == 2  # nothing reconciled yet
    emu.reconcile()
    pods = pods_of(core, "vllm")
    assert len(pods) == 4 and all(p.status.phase == "Running" for p in pods)
    d = apps.read_namespaced_deployment("vllm", NS)
    assert d.metadata.generation == gen + 1 and d.status.observed_generation == gen + 1
    assert (d.status.replicas, d.status.ready_replicas, d.status.available_replicas) == (4, 4, 4)
    assert apps.read_namespaced_deployment_scale("vllm", NS).status.replicas == 4
    scaled = [e.message for e in core.list_namespaced_event(NS, field_selector="reason=ScalingReplicaSet").items]
    assert any(m.endswith("from 2 to 4") for m in scaled)

    # PUT /scale with a Scale object; 2 -> 1 deletes one pod (gracefully)
    s = apps.read_namespaced_deployment_scale("vllm", NS)
    s.spec.replicas = 1
    apps.replace_namespaced_deployment_scale("vllm", NS, s)
    emu.reconcile()
    assert len(pods_of(core, "vllm")) == 1

    # the same through a plain spec patch
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"replicas": 3}})
    emu.reconcile()
    assert len(pods_of(core, "vllm")) == 3

    with pytest.raises(ApiException) as ei:
        apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": -1}})
    assert ei.value.status == 422 and status_body(ei.value)["reason"] == "Invalid"

    # StatefulSets: OrderedReady creates one ordinal at a time, scales down from the top
    emu.add_statefulset(NS, "engine", replicas=3)
    emu.reconcile(max_passes=1)
    assert [p.metadata.name for p in pods_of(core, "engine")] == ["engine-0"]
    emu.reconcile()
    assert [p.metadata.name for p in pods_of(core, "engine")] == ["engine-0", "engine-1", "engine-2"]
    assert pods_of(core, "engine")[2].spec.hostname == "engine-2"
    sts_scale = apps.patch_namespaced_stateful_set_scale("engine", NS, {"spec": {"replicas": 1}})
    assert sts_scale.status.selector == "app=engine"
    emu.reconcile()
    assert [p.metadata.name for p in pods_of(core, "engine")] == ["engine-0"]
    assert apps.read_namespaced_stateful_set_scale("engine", NS).status.replicas == 1


def test_hpa_status_set_by_the_test(emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    hpas = client.AutoscalingV2Api(api)
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.reconcile()
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=2, max_replicas=6, desired_replicas=2)
    emu.set_hpa_status(NS, "vllm", desired_replicas=5, scale_target=True, current_metrics=[{
        "type": "Pods", "pods": {"metric": {"name": "vllm:num_requests_waiting"}, "current": {"averageValue": "12"}}}])
    emu.reconcile()
    assert apps.read_namespaced_deployment("vllm", NS).spec.replicas == 5
    assert len(pods_of(core, "vllm")) == 5
    hpa = hpas.read_namespaced_horizontal_pod_autoscaler("vllm", NS)
    assert hpa.status.desired_replicas == 5 and hpa.status.current_replicas == 5  # follows the target
    assert hpa.status.current_metrics[0].pods.current.average_value == "12"
    rescale = core.list_namespaced_event(NS, field_selector="involvedObject.kind=HorizontalPodAutoscaler").items
    assert [e.reason for e in rescale] == ["SuccessfulRescale"] and "New size: 5" in rescale[0].message
    # an HPA created through the API gets the status the real server gives it
    created = hpas.create_namespaced_horizontal_pod_autoscaler(NS, client.V2HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="other"),
        spec=client.V2HorizontalPodAutoscalerSpec(
            max_replicas=3, scale_target_ref=client.V2CrossVersionObjectReference(kind="Deployment", name="vllm"))))
    assert created.status.desired_replicas == 0 and created.spec.min_replicas == 1


# ------------------------------------------------------------- patching

def test_patch_flavours_differ(emu, api):
    apps = client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=1, args=["--max-num-seqs", "64"], env={"HF_HOME": "/cache"})
    emu.patch("deployments", "vllm", {"spec": {"template": {"spec": {"containers": [
        {"name": "metrics-sidecar", "image": "busybox:1.36"}]}}}}, NS)

    def containers():
        return apps.read_namespaced_deployment("vllm", NS).spec.template.spec.containers

    assert [c.name for c in containers()] == ["vllm", "metrics-sidecar"]
    emu.clear_requests()

    # strategic merge (a dict body): containers merge by name, env by name, args replaced
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "args": ["--max-num-seqs", "128"], "env": [{"name": "VLLM_LOG", "value": "debug"}]}]}}}})
    cs = containers()
    assert [c.name for c in cs] == ["vllm", "metrics-sidecar"]
    assert cs[0].image == "vllm/vllm-openai:v0.9.2" and cs[0].args == ["--max-num-seqs", "128"]
    assert [e.name for e in cs[0].env] == ["HF_HOME", "VLLM_LOG"]

    # merge patch (RFC 7386): the list is replaced wholesale, so the partial container lacks an image
    partial = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["--x"]}]}}}}
    with pytest.raises(ApiException) as ei:
        apps.patch_namespaced_deployment("vllm", NS, partial, _content_type=MERGE)
    assert ei.value.status == 422
    assert status_body(ei.value)["details"]["causes"][0]["field"] == "spec.template.spec.containers[0].image"

    # JSON patch (a list body): pointer ops, "-" appends, "test" guards
    apps.patch_namespaced_deployment("vllm", NS, [
        {"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "vllm"},
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--enable-prefix-caching"},
        {"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": "busybox:1.37"},
    ])
    cs = containers()
    assert cs[0].args == ["--max-num-seqs", "128", "--enable-prefix-caching"] and cs[1].image == "busybox:1.37"
    with pytest.raises(ApiException) as ei:
        apps.patch_namespaced_deployment("vllm", NS, [
            {"op": "test", "path": "/spec/replicas", "value": 9},
            {"op": "replace", "path": "/spec/replicas", "value": 9}])
    assert ei.value.status == 422 and apps.read_namespaced_deployment("vllm", NS).spec.replicas == 1

    # merge patch with the whole container: the sidecar is gone
    full = containers()[0].to_dict(serialize=True)
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"template": {"spec": {"containers": [full]}}}},
                                     _content_type=MERGE)
    assert [c.name for c in containers()] == ["vllm"]

    # strategic $patch: delete removes one element by its merge key
    emu.patch("deployments", "vllm", {"spec": {"template": {"spec": {"containers": [
        {"name": "metrics-sidecar", "image": "busybox:1.36"}]}}}}, NS)
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "metrics-sidecar", "$patch": "delete"}]}}}})
    assert [c.name for c in containers()] == ["vllm"]

    # what the client sent: dict -> strategic merge, list -> JSON patch, merge only when asked
    patches = [r.content_type for r in emu.requests if r.method == "PATCH"]
    assert patches == [STRATEGIC, MERGE, JSON_PATCH, JSON_PATCH, MERGE, STRATEGIC]


def test_patch_algorithms_directly():
    # RFC 7386 appendix A
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"a": "b", "b": "c"}, {"a": None}) == {"b": "c"}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    # RFC 6902
    doc = {"foo": ["bar", "baz"], "a~b": 1, "c/d": 2}
    assert json_patch(doc, [{"op": "add", "path": "/foo/1", "value": "qux"}])["foo"] == ["bar", "qux", "baz"]
    assert json_patch(doc, [{"op": "remove", "path": "/a~0b"}, {"op": "remove", "path": "/c~1d"}]) == \
        {"foo": ["bar", "baz"]}
    assert json_patch(doc, [{"op": "move", "from": "/foo/0", "path": "/first"}])["first"] == "bar"
    assert json_patch(doc, [{"op": "copy", "from": "/foo", "path": "/bar"}])["bar"] == ["bar", "baz"]
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "test", "path": "/foo/0", "value": "nope"}])
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])
    assert doc == {"foo": ["bar", "baz"], "a~b": 1, "c/d": 2}  # never modified in place
    # strategic merge
    pod = {"spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80}]}],
                    "tolerations": [{"key": "t"}]},
           "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}}
    out = strategic_merge_patch(pod, {
        "spec": {"containers": [{"name": "a", "ports": [{"containerPort": 81}]}, {"name": "b", "image": "y"}],
                 "tolerations": [{"key": "u"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["a", "b"]
    assert out["spec"]["containers"][0]["ports"] == [{"containerPort": 80}, {"containerPort": 81}]
    assert out["spec"]["tolerations"] == [{"key": "u"}]
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                           {"type": "Initialized", "status": "True"}]
    out = strategic_merge_patch(pod, {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}})
    assert out["spec"]["containers"] == [{"name": "z", "image": "z"}]
    out = strategic_merge_patch({"metadata": {"finalizers": ["a"]}}, {"metadata": {
        "finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert out["metadata"]["finalizers"] == ["b"]


def test_stale_resource_version_is_409(emu, api):
    apps = client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=1)
    stale = apps.read_namespaced_deployment("vllm", NS)
    apps.patch_namespaced_deployment("vllm", NS, {"metadata": {"labels": {"owner": "infertop"}}})
    assert apps.read_namespaced_deployment("vllm", NS).metadata.resource_version != stale.metadata.resource_version

    stale.spec.replicas = 5
    with pytest.raises(ApiException) as ei:
        apps.replace_namespaced_deployment("vllm", NS, stale)
    assert ei.value.status == 409
    body = status_body(ei.value)
    assert body["reason"] == "Conflict" and "the object has been modified" in body["message"]
    with pytest.raises(ApiException) as ei:
        apps.patch_namespaced_deployment("vllm", NS, {"metadata": {"resourceVersion": stale.metadata.resource_version},
                                                      "spec": {"replicas": 5}})
    assert ei.value.status == 409
    with pytest.raises(ApiException) as ei:
        apps.patch_namespaced_deployment_scale("vllm", NS, {"metadata": {"resourceVersion": "1"},
                                                            "spec": {"replicas": 5}})
    assert ei.value.status == 409
    assert apps.read_namespaced_deployment("vllm", NS).spec.replicas == 1

    fresh = apps.read_namespaced_deployment("vllm", NS)
    fresh.spec.replicas = 5
    updated = apps.replace_namespaced_deployment("vllm", NS, fresh)
    assert updated.spec.replicas == 5 and updated.metadata.generation == fresh.metadata.generation + 1
    assert int(updated.metadata.resource_version) > int(fresh.metadata.resource_version)
    # a no-op update writes nothing (same resourceVersion, as the real API server)
    again = apps.replace_namespaced_deployment("vllm", NS, updated)
    assert again.metadata.resource_version == updated.metadata.resource_version
    # replacing the main resource ignores status; the status subresource changes only status
    updated.status.replicas = 42
    assert apps.replace_namespaced_deployment("vllm", NS, updated).status.replicas != 42


def test_dry_run_changes_nothing(emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_pdb(NS, "vllm", {"app": "vllm"}, min_available=1)
    emu.reconcile()
    rv = emu.store.resource_version
    pod = pods_of(core, "vllm")[0].metadata.name

    made = apps.create_namespaced_deployment(NS, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="ghost"),
        spec=client.V1DeploymentSpec(
            selector=client.V1LabelSelector(match_labels={"app": "ghost"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "ghost"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")])))),
        dry_run="All")
    assert made.metadata.name == "ghost" and made.metadata.uid and made.spec.replicas == 1  # defaulted
    patched = apps.patch_namespaced_deployment("vllm", NS, {"spec": {"replicas": 7}}, dry_run="All")
    assert patched.spec.replicas == 7
    apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 9}}, dry_run="All")
    core.delete_namespaced_pod(pod, NS, dry_run="All")
    core.create_namespaced_pod_eviction(pod, NS, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod, namespace=NS), delete_options=client.V1DeleteOptions(dry_run=["All"])))
    with pytest.raises(ApiException) as ei:  # validation still runs
        apps.patch_namespaced_deployment("vllm", NS, {"spec": {"replicas": -3}}, dry_run="All")
    assert ei.value.status == 422

    assert emu.store.resource_version == rv
    assert [d.metadata.name for d in apps.list_namespaced_deployment(NS).items] == ["vllm"]
    assert apps.read_namespaced_deployment("vllm", NS).spec.replicas == 2
    assert core.read_namespaced_pod(pod, NS).metadata.deletion_timestamp is None
    emu.reconcile()
    assert len(pods_of(core, "vllm")) == 2


def test_validation_errors_are_422(emu, api):
    apps = client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=1)
    for patch, field in [
        ({"spec": {"replicas": -1}}, "spec.replicas"),
        ({"spec": {"replicas": "3"}}, "spec.replicas"),
        ({"spec": {"selector": {"matchLabels": {"app": "other"}}}}, "spec.selector"),
    ]:
        with pytest.raises(ApiException) as ei:
            apps.patch_namespaced_deployment("vllm", NS, patch)
        assert ei.value.status == 422, patch
        body = status_body(ei.value)
        assert body["reason"] == "Invalid" and body["details"]["kind"] == "Deployment"
        assert any(c["field"] == field for c in body["details"]["causes"]), body
    with pytest.raises(ApiException) as ei:
        apps.patch_namespaced_deployment("vllm", NS, [
            {"op": "remove", "path": "/spec/template/spec/containers/0/name"}])
    assert ei.value.status == 422 and "containers[0].name: Required value" in ei.value.body
    with pytest.raises(ApiException) as ei:
        apps.create_namespaced_deployment(NS, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
            "spec": {"selector": {"matchLabels": {"app": "bad"}},
                     "template": {"metadata": {"labels": {"app": "bad"}}, "spec": {"containers": [{"name": "c"}]}}}})
    assert ei.value.status == 422
    assert json.loads(ei.value.body)["message"] == \
        'Deployment.apps "bad" is invalid: spec.template.spec.containers[0].image: Required value'
    # a wrongly typed create body never leaves the client (pydantic validates it) ...
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "typed"}, "spec": {
        "replicas": "3", "selector": {"matchLabels": {"app": "t"}},
        "template": {"metadata": {"labels": {"app": "t"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    with pytest.raises(ValueError):
        apps.create_namespaced_deployment(NS, body)
    # ... over plain HTTP the server fails to decode it: 400, as the real API server
    req = urllib.request.Request(f"{emu.url}/apis/apps/v1/namespaces/{NS}/deployments", method="POST",
                                 data=json.dumps(body).encode(), headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(req)
    assert raw.value.code == 400 and json.load(raw.value)["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string into Go '
        "struct field DeploymentSpec.spec.replicas of type int32")
    with pytest.raises(ApiException) as ei:
        apps.create_namespaced_deployment(NS, {"metadata": {"name": "vllm"}, "spec": {
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {"metadata": {"labels": {"app": "vllm"}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    assert ei.value.status == 409 and status_body(ei.value)["reason"] == "AlreadyExists"


# --------------------------------------------------------- disruptions

def test_eviction_respects_the_pdb(emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    policy = client.PolicyV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_pdb(NS, "vllm-pdb", {"app": "vllm"}, min_available=2)
    emu.reconcile()
    assert policy.read_namespaced_pod_disruption_budget("vllm-pdb", NS).status.disruptions_allowed == 0

    def evict(name):
        return core.create_namespaced_pod_eviction(name, NS, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=NS)))

    victim = pods_of(core, "vllm")[0].metadata.name
    with pytest.raises(ApiException) as ei:
        evict(victim)
    assert ei.value.status == 429
    body = status_body(ei.value)
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 2 healthy pods and has 2 currently" in body["details"]["causes"][0]["message"]

    apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 3}})
    emu.reconcile()
    pdb = policy.read_namespaced_pod_disruption_budget("vllm-pdb", NS)
    assert (pdb.status.disruptions_allowed, pdb.status.current_healthy, pdb.status.desired_healthy) == (1, 3, 2)
    evict(victim)
    assert core.read_namespaced_pod(victim, NS).metadata.deletion_timestamp is not None  # terminating
    others = [p.metadata.name for p in active(pods_of(core, "vllm"))]
    with pytest.raises(ApiException) as ei:  # the budget is spent until a replacement is ready
        evict(others[0])
    assert ei.value.status == 429
    emu.reconcile()
    names = [p.metadata.name for p in pods_of(core, "vllm")]
    assert victim not in names and len(names) == 3
    kills = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={victim},reason=Killing").items
    assert kills and kills[0].message == "Stopping container vllm"
    evict(others[0])


def test_delete_semantics_and_garbage_collection(emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_configmap(NS, "settings", {"a": "1"})
    emu.reconcile()
    emu.add_service(NS, "vllm", {"app": "vllm"})
    # the client types most deletes as a plain object (a dict), pods and services as the object
    st = core.delete_namespaced_config_map("settings", NS)
    assert st["kind"] == "Status" and st["status"] == "Success" and st["details"]["name"] == "settings"
    svc = core.delete_namespaced_service("vllm", NS)
    assert isinstance(svc, client.V1Service) and svc.metadata.name == "vllm"
    pod = pods_of(core, "vllm")[0].metadata.name
    deleted = core.delete_namespaced_pod(pod, NS)
    assert isinstance(deleted, client.V1Pod) and deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 30
    emu.reconcile()
    assert pod not in [p.metadata.name for p in pods_of(core, "vllm")] and len(pods_of(core, "vllm")) == 2
    st = apps.delete_namespaced_deployment("vllm", NS)
    assert st["status"] == "Success" and st["details"]["group"] == "apps" and st["details"]["kind"] == "deployments"
    emu.reconcile()
    assert apps.list_namespaced_replica_set(NS).items == [] and pods_of(core, "vllm") == []
    with pytest.raises(ApiException) as ei:
        core.delete_namespaced_pod(pod, NS)
    assert ei.value.status == 404


# --------------------------------------------------------------- RBAC

def test_rbac_rules_deny_with_403_and_ssar(emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    authz = client.AuthorizationV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.set_rules([
        ("get", "apps", "deployments"),
        ("get", "apps", "deployments/scale"),
        (["list", "watch"], "", "pods", "", NS),
    ])
    assert apps.read_namespaced_deployment("vllm", NS).metadata.name == "vllm"
    assert apps.read_namespaced_deployment_scale("vllm", NS).spec.replicas == 1
    assert core.list_namespaced_pod(NS).items is not None
    with pytest.raises(ApiException) as ei:
        apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 3}})
    assert ei.value.status == 403
    body = status_body(ei.value)
    assert body["reason"] == "Forbidden"
    assert body["message"] == ('deployments.apps "vllm" is forbidden: User "tester" cannot patch resource '
                               '"deployments/scale" in API group "apps" in the namespace "default"')
    assert apps.read_namespaced_deployment("vllm", NS).spec.replicas == 1
    with pytest.raises(ApiException) as ei:
        core.list_pod_for_all_namespaces()
    assert ei.value.status == 403 and "at the cluster scope" in ei.value.body
    with pytest.raises(ApiException) as ei:
        core.list_namespaced_pod("kube-system")
    assert ei.value.status == 403

    def review(verb, group, resource, subresource=None, namespace=NS):
        spec = client.V1SelfSubjectAccessReviewSpec(resource_attributes=client.V1ResourceAttributes(
            verb=verb, group=group, resource=resource, subresource=subresource, namespace=namespace))
        return authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(spec=spec)).status.allowed

    assert review("patch", "apps", "deployments", "scale") is False
    assert review("get", "apps", "deployments", "scale") is True
    assert review("watch", "", "pods") is True
    assert review("list", "", "pods", namespace="kube-system") is False
    assert review("create", "", "pods", "eviction") is False
    emu.set_rules(None)
    assert review("create", "", "pods", "eviction") is True
    apps.patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 3}})


# -------------------------------------------------------------- watches

def test_watch_streams_added_modified_deleted_and_ends(live_emu, api):
    core = client.CoreV1Api(api)
    start_rv = core.list_namespaced_config_map(NS).metadata.resource_version
    # before the watch starts: replayed from the history
    core.create_namespaced_config_map(NS, {"metadata": {"name": "w1", "labels": {"tier": "web"}}, "data": {"v": "1"}})

    def mutate():
        live_emu.wait_until(lambda: live_emu.count_requests(
            "GET", f"/api/v1/namespaces/{NS}/configmaps", lambda r: r.query.get("watch") == "true"))
        core.patch_namespaced_config_map("w1", NS, {"data": {"v": "2"}})
        core.create_namespaced_config_map(NS, {"metadata": {"name": "w2", "labels": {"tier": "db"}}})
        core.patch_namespaced_config_map("w2", NS, {"metadata": {"labels": {"tier": "web"}}})  # enters the selector
        core.delete_namespaced_config_map("w1", NS)

    t = threading.Thread(target=mutate)
    t.start()
    seen = []
    for ev in watch.Watch().stream(core.list_namespaced_config_map, NS, label_selector="tier=web",
                                   resource_version=start_rv, timeout_seconds=2, allow_watch_bookmarks=True):
        if ev["type"] == "BOOKMARK":
            seen.append(("BOOKMARK", ev["raw_object"]["metadata"]["resourceVersion"]))
        else:
            assert isinstance(ev["object"], client.V1ConfigMap)
            seen.append((ev["type"], ev["object"].metadata.name))
    t.join()
    assert seen[:4] == [("ADDED", "w1"), ("MODIFIED", "w1"), ("ADDED", "w2"), ("DELETED", "w1")]
    assert seen[4][0] == "BOOKMARK" and int(seen[4][1]) >= int(start_rv) + 5 and len(seen) == 5


def test_watch_too_old_resource_version_is_410(emu, api):
    core = client.CoreV1Api(api)
    old_rv = core.list_namespaced_pod(NS).metadata.resource_version
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.reconcile()
    emu.compact_history()
    with pytest.raises(ApiException) as ei:
        for _ in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=old_rv, timeout_seconds=5):
            pass
    assert ei.value.status == 410 and "too old resource version" in str(ei.value.reason)
    # a watch without resourceVersion starts with the current state
    events = list(watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED"] and events[0]["object"].status.phase == "Running"


def test_watch_from_a_future_resource_version_is_504_too_large(emu, api):
    core = client.CoreV1Api(api)
    current = int(core.list_namespaced_pod(NS).metadata.resource_version)
    with pytest.raises(ApiException) as ei:
        for _ in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=str(current + 100),
                                      timeout_seconds=5):
            pass
    body = status_body(ei.value)
    assert ei.value.status == 504 and body["reason"] == "Timeout"
    assert body["message"] == f"Too large resource version: {current + 100}, current: {current}"
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_restart_keeps_the_port_and_can_reset_the_resource_version_counter(emu, api):
    core = client.CoreV1Api(api)
    emu.add_configmap(NS, "a", {"v": "1"})
    emu.add_configmap(NS, "b", {"v": "1"})
    for _ in range(20):
        emu.patch("configmaps", "a", {"data": {"v": "2"}}, NS)
    before = int(core.list_namespaced_config_map(NS).metadata.resource_version)
    port = emu.port
    emu.stop()
    assert not emu.running
    with pytest.raises(Exception):  # nothing listens while it is stopped
        core.list_namespaced_config_map(NS, _request_timeout=2)
    emu.delete("configmaps", "b", NS)  # the store stays reachable from the test while the server is down
    emu.restart(reset_resource_version=True)
    assert emu.running and emu.port == port
    after = core.list_namespaced_config_map(NS)
    assert [c.metadata.name for c in after.items] == ["a"] and after.items[0].data == {"v": "2"}
    assert int(after.metadata.resource_version) < before  # the counter started over
    # a resourceVersion from before the restart is now from the future
    with pytest.raises(ApiException) as ei:
        for _ in watch.Watch().stream(core.list_namespaced_config_map, NS, resource_version=str(before),
                                      timeout_seconds=5):
            pass
    assert ei.value.status == 504
    # without a reset the counter goes on
    emu.restart()
    assert int(core.list_namespaced_config_map(NS).metadata.resource_version) == int(after.metadata.resource_version)


# ------------------------------------------------------------- rollouts

def test_rolling_update_after_args_patch_completes(live_emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    live_emu.add_deployment(NS, "vllm", replicas=3, args=["--max-num-seqs", "64"])

    def rolled_out(want_gen=None):
        d = apps.read_namespaced_deployment("vllm", NS)
        s = d.status
        return (s.observed_generation == d.metadata.generation
                and (want_gen is None or d.metadata.generation == want_gen)
                and s.updated_replicas == 3 and s.replicas == 3 and s.available_replicas == 3 and d)

    first = live_emu.wait_until(rolled_out, message="initial rollout")
    old_pods = {p.metadata.name for p in pods_of(core, "vllm")}
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "args": ["--max-num-seqs", "128"]}]}}}})
    d = live_emu.wait_until(lambda: rolled_out(first.metadata.generation + 1), timeout=15, message="rollout")
    assert d.status.updated_replicas == d.spec.replicas == 3
    assert {c.type: c.reason for c in d.status.conditions} == {
        "Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    live_emu.wait_until(lambda: len(core.list_namespaced_pod(NS, label_selector="app=vllm").items) == 3)
    pods = pods_of(core, "vllm")
    assert not old_pods & {p.metadata.name for p in pods}
    assert all(p.spec.containers[0].args == ["--max-num-seqs", "128"] for p in pods)
    rss = {rs.metadata.annotations["deployment.kubernetes.io/revision"]: rs
           for rs in apps.list_namespaced_replica_set(NS).items}
    assert rss["1"].spec.replicas == 0 and rss["2"].spec.replicas == 3
    new_rs = rss["2"].metadata.name
    assert all(p.metadata.name.startswith(new_rs + "-") and len(p.metadata.name) == len(new_rs) + 6 for p in pods)
    # step by step: maxSurge 25% of 3 -> 1 pod at a time, maxUnavailable 25% of 3 -> 0
    scaling = [e.message for e in core.list_namespaced_event(NS, field_selector="reason=ScalingReplicaSet").items]
    for step in ("from 0 to 1", "from 1 to 2", "from 2 to 3"):
        assert f"Scaled up replica set {new_rs} {step}" in scaling
    old_rs = rss["1"].metadata.name
    for step in ("from 3 to 2", "from 2 to 1", "from 1 to 0"):
        assert f"Scaled down replica set {old_rs} {step}" in scaling


def test_rollout_honours_surge_and_unavailability_step_by_step(emu, api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=4, strategy={
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}})
    emu.reconcile()
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2025-06-01T00:00:00Z"}}}}})
    for _ in range(50):
        emu.reconcile(max_passes=1)
        pods = active(pods_of(core, "vllm"))
        ready = [p for p in pods if {c.type: c.status for c in p.status.conditions or []}.get("Ready") == "True"]
        assert len(pods) <= 5 and len(ready) >= 3
        d = apps.read_namespaced_deployment("vllm", NS)
        if d.status.updated_replicas == 4 and d.status.available_replicas == 4 and d.status.replicas == 4:
            break
    else:
        pytest.fail("the rollout did not finish")
    assert all(p.metadata.annotations["kubectl.kubernetes.io/restartedAt"] for p in pods_of(core, "vllm"))


@pytest.fixture
def clocked(tmp_path):
    clock = FakeClock()
    e = KubeEmulator(token=TOKEN, reconcile_interval=None, clock=clock, crash_period=10).start()
    e.add_node("gpu-a", gpus=8)
    c = make_client(e, tmp_path)
    yield e, c, clock
    c.close()
    e.stop()
    assert e.errors == []


def test_image_pull_backoff_rollout_is_stuck(clocked):
    emu, api, clock = clocked
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    emu.add_deployment(NS, "vllm", replicas=2, progress_deadline_seconds=60)
    emu.reconcile()
    emu.fail_image("*:does-not-exist")
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "image": "vllm/vllm-openai:does-not-exist"}]}}}})
    emu.reconcile()
    d = apps.read_namespaced_deployment("vllm", NS)
    assert (d.status.replicas, d.status.updated_replicas, d.status.available_replicas) == (3, 1, 2)
    assert d.status.unavailable_replicas == 1
    progressing = {c.type: c for c in d.status.conditions}["Progressing"]
    assert progressing.status == "True" and progressing.reason == "ReplicaSetUpdated"
    stuck = [p for p in pods_of(core, "vllm") if p.spec.containers[0].image.endswith(":does-not-exist")]
    assert len(stuck) == 1
    st = stuck[0].status
    assert st.phase == "Pending" and st.pod_ip  # the sandbox exists, the container never starts
    waiting = st.container_statuses[0].state.waiting
    assert waiting.reason == "ImagePullBackOff" and "does-not-exist" in waiting.message
    assert st.container_statuses[0].ready is False
    warnings = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={stuck[0].metadata.name},type=Warning")
    assert [e.reason for e in warnings.items] == ["Failed"]

    clock.advance(30)
    assert emu.reconcile() == 1  # nothing moves
    clock.advance(31)
    emu.reconcile()
    progressing = {c.type: c for c in apps.read_namespaced_deployment("vllm", NS).status.conditions}["Progressing"]
    assert progressing.status == "False" and progressing.reason == "ProgressDeadlineExceeded"

    # rolling back to the old template reuses the old ReplicaSet (as `kubectl rollout undo`)
    apps.patch_namespaced_deployment("vllm", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "image": "vllm/vllm-openai:v0.9.2"}]}}}})
    emu.reconcile()
    d = apps.read_namespaced_deployment("vllm", NS)
    assert (d.status.replicas, d.status.updated_replicas, d.status.available_replicas) == (2, 2, 2)
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "3"
    assert {c.type: c.reason for c in d.status.conditions}["Progressing"] == "NewReplicaSetAvailable"
    assert len(apps.list_namespaced_replica_set(NS).items) == 2


def test_crash_loop_backoff_counts_restarts(clocked):
    emu, api, clock = clocked
    core = client.CoreV1Api(api)
    emu.fail_args("--bad-flag")
    emu.add_deployment(NS, "vllm", replicas=1, args=["--bad-flag"])
    emu.reconcile()
    pod = pods_of(core, "vllm")[0]
    cs = pod.status.container_statuses[0]
    assert pod.status.phase == "Running" and cs.ready is False and cs.restart_count == 1
    assert cs.state.waiting.reason == "CrashLoopBackOff" and cs.last_state.terminated.exit_code == 1
    clock.advance(25)
    emu.reconcile()
    cs = core.read_namespaced_pod(pod.metadata.name, NS).status.container_statuses[0]
    assert cs.restart_count == 3
    backoff = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={pod.metadata.name},reason=BackOff")
    assert backoff.items[0].type == "Warning" and backoff.items[0].count == 3
    d = client.AppsV1Api(api).read_namespaced_deployment("vllm", NS)
    assert d.status.ready_replicas is None and d.status.unavailable_replicas == 1  # omitempty, as the real API


def test_ready_delay_and_readiness_override(tmp_path):
    clock = FakeClock()
    with KubeEmulator(token=TOKEN, reconcile_interval=None, clock=clock, ready_delay=20) as emu:
        emu.add_node("gpu-a", gpus=8)
        api = make_client(emu, tmp_path)
        core = client.CoreV1Api(api)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.reconcile()
        pod = pods_of(core, "vllm")[0]
        assert pod.status.phase == "Running" and pod.status.container_statuses[0].ready is False
        clock.advance(21)
        emu.reconcile()
        assert core.read_namespaced_pod(pod.metadata.name, NS).status.container_statuses[0].ready is True
        emu.set_pod_ready(pod.metadata.name, False)
        emu.reconcile()
        assert client.AppsV1Api(api).read_namespaced_deployment("vllm", NS).status.available_replicas is None
        api.close()
        assert emu.errors == []


# ------------------------------------------------- scheduling, endpoints

def test_gpu_scheduling_cordon_and_failed_scheduling_events(tmp_path):
    with KubeEmulator(token=TOKEN, reconcile_interval=None) as emu:
        emu.add_node("small", gpus=2)
        api = make_client(emu, tmp_path)
        core = client.CoreV1Api(api)
        emu.add_deployment(NS, "vllm", replicas=3, gpu_per_pod=1)
        emu.reconcile()
        pending = core.list_namespaced_pod(NS, field_selector="status.phase=Pending").items
        assert len(pending) == 1 and pending[0].spec.node_name is None
        cond = {c.type: c for c in pending[0].status.conditions}["PodScheduled"]
        assert cond.status == "False" and cond.reason == "Unschedulable"
        assert "1 Insufficient nvidia.com/gpu" in cond.message
        ev = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={pending[0].metadata.name},"
                                                           "reason=FailedScheduling").items
        assert ev[0].type == "Warning" and ev[0].message == cond.message
        assert ev[0].source.component == "default-scheduler"
        assert emu.reconcile() == 1  # retrying changes nothing, no event storm
        emu.add_node("spare", gpus=2)
        emu.cordon("spare")
        emu.reconcile()
        pending = core.list_namespaced_pod(NS, field_selector="status.phase=Pending").items
        assert len(pending) == 1 and "1 node(s) were unschedulable" in pending[0].status.conditions[0].message
        core.patch_node("spare", {"spec": {"unschedulable": False}})  # the node controller drops the taint
        emu.reconcile()
        assert core.read_node("spare").spec.taints is None
        assert core.list_namespaced_pod(NS, field_selector="spec.nodeName=spare").items[0].status.phase == "Running"
        assert core.list_namespaced_pod(NS, field_selector="status.phase=Pending").items == []
        # a node registered through the API keeps the status its kubelet reports
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="registered"), status=client.V1NodeStatus(
            allocatable={"nvidia.com/gpu": "4"}, capacity={"nvidia.com/gpu": "4"})))
        client.AppsV1Api(api).patch_namespaced_deployment_scale("vllm", NS, {"spec": {"replicas": 6}})
        emu.reconcile()
        assert len(core.list_namespaced_pod(NS, field_selector="spec.nodeName=registered").items) == 2
        api.close()
        assert emu.errors == []


class _Engine(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"vllm:num_requests_running 3\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_pod_endpoint_points_at_a_simulated_engine(emu, api):
    engine = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    try:
        port = engine.server_address[1]
        core = client.CoreV1Api(api)
        emu.set_pod_endpoint("engine-*", "127.0.0.1", port)
        emu.add_deployment(NS, "engine", replicas=1)
        emu.add_deployment(NS, "other", replicas=2)
        emu.reconcile()
        pod = pods_of(core, "engine")[0]
        assert pod.status.pod_ip == "127.0.0.1" and pod.spec.containers[0].ports[0].container_port == port
        assert emu.pod_endpoint(pod.metadata.name) == ("127.0.0.1", port)
        url = f"http://{pod.status.pod_ip}:{pod.spec.containers[0].ports[0].container_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert b"vllm:num_requests_running 3" in resp.read()
        others = pods_of(core, "other")
        ips = {p.status.pod_ip for p in others}
        assert len(ips) == 2 and all(ip.startswith("127.") and ip != "127.0.0.1" for ip in ips)
        assert emu.pod_endpoint(others[0].metadata.name) == (others[0].status.pod_ip, 8000)
    finally:
        engine.shutdown()
        engine.server_close()


def test_pod_logs(emu, api):
    core = client.CoreV1Api(api)
    emu.fail_image("*:gone")
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_deployment(NS, "broken", replicas=1, image="vllm/vllm-openai:gone")
    emu.reconcile()
    pod = pods_of(core, "vllm")[0].metadata.name
    assert core.read_namespaced_pod_log(pod, NS) == ""
    emu.set_pod_log(pod, "INFO 06-01 Starting vLLM API server\n")
    emu.append_pod_log(pod, "INFO 06-01 Application startup complete.\n")
    assert core.read_namespaced_pod_log(pod, NS, tail_lines=1) == "INFO 06-01 Application startup complete.\n"
    assert core.read_namespaced_pod_log(pod, NS, container="vllm").count("\n") == 2
    with pytest.raises(ApiException) as ei:
        core.read_namespaced_pod_log(pods_of(core, "broken")[0].metadata.name, NS)
    assert ei.value.status == 400 and "is waiting to start: trying and failing to pull image" in ei.value.body


def test_request_log_counts_calls(emu, api):
    core = client.CoreV1Api(api)
    emu.clear_requests()
    for _ in range(3):
        core.list_namespaced_pod(NS, label_selector="app=vllm")
    core.list_node()
    assert emu.count_requests("GET", f"/api/v1/namespaces/{NS}/pods") == 3
    assert emu.count_requests(path="/api/v1/*") == 4
    method, path, query, content_type = emu.requests[0]
    assert (method, path, query, content_type) == ("GET", f"/api/v1/namespaces/{NS}/pods",
                                                   {"labelSelector": "app=vllm"}, "")


def test_namespace_deletion_removes_its_content(emu, api):
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="scratch")))
    emu.add_deployment("scratch", "vllm", replicas=1)
    emu.reconcile()
    ns = core.delete_namespace("scratch")  # the Namespace itself, as a dict
    assert ns["kind"] == "Namespace" and ns["status"]["phase"] == "Terminating"
    with pytest.raises(ApiException) as ei:
        core.create_namespaced_config_map("scratch", {"metadata": {"name": "late"}})
    assert ei.value.status == 403 and "being terminated" in ei.value.body
    emu.reconcile()
    assert "scratch" not in {n.metadata.name for n in core.list_namespace().items}
    assert core.list_pod_for_all_namespaces(field_selector="metadata.namespace=scratch").items == []


def test_every_emulated_address_is_loopback(kube_emulator):
    """The Cluster pane scrapes pod IPs: nothing the emulator hands out may lead off the machine."""
    import ipaddress

    emu = kube_emulator("loopback-addrs", reconcile_interval=0.05)
    emu.add_deployment("default", "vllm", replicas=2)
    emu.wait_until(lambda: all((p.get("status") or {}).get("podIP") for p in emu.list("pods", "default"))
                   and len(emu.list("pods", "default")) == 2)
    addrs = [a["address"] for n in emu.list("nodes") for a in n["status"]["addresses"] if a["type"] == "InternalIP"]
    for p in emu.list("pods", "default"):
        addrs += [p["status"]["podIP"], p["status"]["hostIP"]]
    assert len(addrs) == 2 + 4 and all(ipaddress.ip_address(a).is_loopback for a in addrs), addrs
