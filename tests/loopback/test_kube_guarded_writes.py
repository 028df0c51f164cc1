"""Kubernetes writes against an object whose status keeps changing (issue 8).

The emulator's HPA controller rewrites the HPA's status at every sync (as
kube-controller-manager does every 15 s): a write that carried the
resourceVersion read at plan time failed with 409 after each sync. Every
write now patches only the fields it changes, guarded by a re-read just
before writing: a change of a field the plan was made from is a conflict
(nothing sent, re-plan, re-confirm), a status-only change is not.
"""

from __future__ import annotations

import itertools

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from infertop.config import KubeConfig
from infertop.control.audit import AuditLog
from infertop.control.kube import KubeControl
from infertop.control.objective import ObjectiveApi, ObjectivePriority
from infertop.sources.kube import KubeSession

TOKEN = "guarded-writes-token"
NS = "default"
SYNC_S = 0.05


def _wobbling_metric():
    """Per-pod values within the HPA's tolerance of its target (5): the status changes, the replicas do not."""
    values = itertools.cycle((4.9, 5.0, 5.1))

    def source(namespace, name, metric, pods):
        return [next(values) for _ in pods] or None

    return source


@pytest.fixture
def emu(kube_emulator):
    e = kube_emulator(TOKEN, reconcile_interval=0.02)
    e.add_deployment(NS, "vllm", replicas=2)
    e.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4)
    e.wait_until(lambda: len(e.list("pods", NS, "app=vllm")) == 2)
    return e


@pytest.fixture
def syncing(emu):
    """The HPA controller on: it rewrites the HPA's status every SYNC_S."""
    emu.set_hpa_metrics(_wobbling_metric(), sync_s=SYNC_S)
    return emu


@pytest.fixture
def session(emu, tmp_path):
    s = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kubeconfig", context="lab", user="oncall")))
    yield s
    s.close()


@pytest.fixture
def ctl(session, tmp_path):
    return KubeControl(session, AuditLog(tmp_path / "audit.jsonl", user="alice"),
                       KubeConfig(stuck_after_s=0.0, rollout_timeout_s=30.0), poll_s=0.02)


def _rv(emu, kind: str, name: str, ns: str | None = NS) -> int:
    return int(emu.get(kind, name, ns)["metadata"]["resourceVersion"])


def _status_synced_since(emu, rv: str | None) -> None:
    """Wait until the HPA controller has rewritten the HPA's status after ``rv`` (spec untouched)."""
    before = emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]
    emu.wait_until(lambda: _rv(emu, "horizontalpodautoscalers", "vllm") > int(rv or 0), timeout=10,
                   message="an HPA status sync")
    assert emu.get("horizontalpodautoscalers", "vllm", NS)["spec"] == before


def test_the_emulator_answers_409_to_a_stale_resource_version_after_a_status_sync(syncing, session):
    emu = syncing
    auto = client.AutoscalingV2Api(session.api_client)
    stale = auto.read_namespaced_horizontal_pod_autoscaler("vllm", NS)
    _status_synced_since(emu, stale.metadata.resource_version)
    stale.spec.max_replicas = 6
    with pytest.raises(ApiException) as ei:  # PUT, as the real API server: the object has been modified
        auto.replace_namespaced_horizontal_pod_autoscaler("vllm", NS, stale)
    assert ei.value.status == 409
    with pytest.raises(ApiException) as ei:  # a patch that carries the stale resourceVersion too
        auto.patch_namespaced_horizontal_pod_autoscaler(
            "vllm", NS, {"metadata": {"resourceVersion": stale.metadata.resource_version},
                         "spec": {"maxReplicas": 6}})
    assert ei.value.status == 409
    assert emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]["maxReplicas"] == 4


def test_hpa_bounds_are_written_while_the_controller_syncs_its_status(syncing, ctl):
    emu = syncing
    for lo, hi in ((2, 8), (1, 6), (3, 5)):  # the demo: three tries in a row, each one after a sync
        plan = ctl.prepare("hpa", "HorizontalPodAutoscaler", NS, "vllm", min_replicas=lo, max_replicas=hi)
        assert plan.body == {"spec": {"minReplicas": lo, "maxReplicas": hi}}  # only the bounds
        assert ctl.dry_run(plan).ok
        _status_synced_since(emu, plan.resource_version)
        outcome = ctl.execute(plan)
        assert outcome.ok, outcome
        spec = emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]
        assert (spec["minReplicas"], spec["maxReplicas"]) == (lo, hi)
        assert spec["metrics"][0]["pods"]["metric"]["name"] == "vllm:num_requests_waiting"  # the rest kept


def test_hpa_bounds_changed_since_the_plan_are_a_conflict_and_nothing_is_sent(syncing, ctl):
    emu = syncing
    plan = ctl.prepare("hpa", "HorizontalPodAutoscaler", NS, "vllm", min_replicas=2, max_replicas=8)
    emu.patch("horizontalpodautoscalers", "vllm", {"spec": {"maxReplicas": 10}}, NS)  # someone else
    emu.clear_requests()
    outcome = ctl.execute(plan)
    assert outcome.result == "conflict" and outcome.status == 409
    assert outcome.message == ("HorizontalPodAutoscaler vllm changed since it was read (spec.maxReplicas 4 → 10): "
                               "nothing was sent")
    assert emu.count_requests("PATCH") == 0
    spec = emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 10)
    again = ctl.prepare("hpa", "HorizontalPodAutoscaler", NS, "vllm", min_replicas=2, max_replicas=8)
    assert again.summary == "min 1 → 2, max 10 → 8"  # the re-read object, to confirm again
    assert ctl.execute(again).ok


def _touch_metadata(emu, kind: str, name: str, ns: str | None) -> None:
    emu.patch(kind, name, {"metadata": {"annotations": {"touched-by": "someone-else"}}}, ns)


def _deployment_status(e) -> None:
    e.update_status("deployments", "vllm", {"observedGeneration": 99}, NS)


# action, kind, name, params, a write elsewhere in the object, a change of what the plan was made from,
# and how the conflict names it
WRITES = [
    ("scale", "Deployment", "vllm", {"replicas": 3}, _deployment_status,
     {"spec": {"replicas": 1}}, "spec.replicas 2 → 1"),
    ("args", "Deployment", "vllm", {"changes": "--max-num-seqs 32"}, _deployment_status,
     {"spec": {"template": {"metadata": {"annotations": {"x": "y"}}}}}, "spec.template"),
    ("configmap", "ConfigMap", "gateway", {"key": "weights", "value": "4,2,1"},
     lambda e: _touch_metadata(e, "configmaps", "gateway", NS),
     {"data": {"weights": "9,9,9"}}, "data.weights 1,1,1 → 9,9,9"),
    ("cordon", "Node", "gpu-a", {}, lambda e: e.update_status("nodes", "gpu-a", {"phase": "Running"}),
     {"spec": {"unschedulable": True}}, "spec.unschedulable (unset) → True"),
]
RESOURCE = {"Deployment": "deployments", "ConfigMap": "configmaps", "Node": "nodes"}


def _objects(emu) -> None:
    emu.add_configmap(NS, "gateway", {"weights": "1,1,1"})  # nodes gpu-a and gpu-b: the fixture's


@pytest.mark.parametrize("action,kind,name,params,elsewhere,spec_change,changed", WRITES,
                         ids=[w[0] for w in WRITES])
def test_a_write_elsewhere_in_the_object_is_no_conflict(emu, ctl, action, kind, name, params, elsewhere,
                                                        spec_change, changed):
    _objects(emu)
    resource, ns = RESOURCE[kind], (None if kind == "Node" else NS)
    plan = ctl.prepare(action, kind, ns, name, **params)
    rv = _rv(emu, resource, name, ns)
    elsewhere(emu)
    assert _rv(emu, resource, name, ns) > rv  # what a write carrying the planned resourceVersion lost to
    outcome = ctl.execute(plan)
    assert outcome.ok, outcome


@pytest.mark.parametrize("action,kind,name,params,elsewhere,spec_change,changed", WRITES,
                         ids=[w[0] for w in WRITES])
def test_a_change_of_what_the_plan_was_made_from_is_a_conflict(emu, ctl, action, kind, name, params, elsewhere,
                                                               spec_change, changed):
    _objects(emu)
    resource, ns = RESOURCE[kind], (None if kind == "Node" else NS)
    plan = ctl.prepare(action, kind, ns, name, **params)
    emu.patch(resource, name, spec_change, ns, patch_type="merge")
    emu.clear_requests()
    outcome = ctl.execute(plan)
    assert outcome.result == "conflict" and outcome.status == 409
    assert f"{kind} {name} changed since it was read ({changed})" in outcome.message
    assert outcome.message.endswith("nothing was sent")
    assert emu.count_requests("PATCH") == 0


def test_objective_priority_ignores_status_but_not_a_changed_priority(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.05)
    emu.install("InferenceObjective")
    emu.create({"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferenceObjective",
                "metadata": {"name": "interactive", "namespace": NS},
                "spec": {"priority": 10, "poolRef": {"name": "pool"}}})
    s = KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kc", context="lab", user="oncall")))
    try:
        api = ObjectiveApi("inference.networking.x-k8s.io", "v1alpha2")
        act = ObjectivePriority(s, api, NS, "interactive", 100)
        assert act.plan().summary == "priority 10 → 100" and act.preflight().ok
        _touch_metadata(emu, "InferenceObjective", "interactive", NS)
        assert act.execute(lambda p: None, None).ok
        assert emu.get("InferenceObjective", "interactive", NS)["spec"]["priority"] == 100

        act = ObjectivePriority(s, api, NS, "interactive", 5)
        act.plan()
        emu.patch("InferenceObjective", "interactive", {"spec": {"priority": 50}}, NS, patch_type="merge")
        outcome = act.execute(lambda p: None, None)
        assert outcome.result == "conflict" and outcome.message == (
            "InferenceObjective default/interactive changed since it was read (spec.priority 100 → 50): "
            "nothing was sent")
        assert emu.get("InferenceObjective", "interactive", NS)["spec"]["priority"] == 50
    finally:
        s.close()
