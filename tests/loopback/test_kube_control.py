"""Kubernetes actions (``infertop/control/kube/execute.py``): pure planning, then every
action end to end against the API emulator through the real client —
dry run, execute, follow, audit; conflicts, PDBs, drains.

Drains read the pod's in-flight requests from a simulated vLLM engine
(``infertop.sim``) that the emulator maps the pod's IP/port to.
"""

from __future__ import annotations

import json
import threading

import pytest
from ports import free_port

from infertop.config import KubeConfig
from infertop.control.audit import AuditLog
from infertop.control.kube import (
    DRAINED_FROM,
    KubeControl,
    Outcome,
    PlanError,
    Progress,
    apply_arg_changes,
    check_permissions,
    drainable_pods,
    plan_args,
    plan_configmap,
    plan_cordon,
    plan_drain_node,
    plan_drain_pod,
    plan_hpa,
    plan_restart,
    plan_scale,
)
from infertop.sim import SimCluster
from infertop.sim.model import SimRequest
from infertop.sources.kube import RESTARTED_AT, KubeSession

try:
    from kube_emulator import KubeEmulator
except ImportError:  # tests/ importable as a package
    from kube_emulator import KubeEmulator

TOKEN = "kube-control-token"
NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.02)


class Harness:
    def __init__(self, emu: KubeEmulator, tmp_path, **cfg) -> None:
        self.emu = emu
        path = emu.write_kubeconfig(tmp_path / "kubeconfig", context="lab", user="oncall")
        self.session = KubeSession.connect(str(path))
        self.audit = AuditLog(tmp_path / "audit.jsonl", user="alice")
        opts = {"stuck_after_s": 0.0, "eviction_retry_s": 0.1, "rollout_timeout_s": 30.0, "drain_timeout_s": 30.0,
                "node_drain_timeout_s": 30.0} | cfg
        self.ctl = KubeControl(self.session, self.audit, KubeConfig(**opts), poll_s=0.02)
        self.progress: list[Progress] = []

    def record(self, p: Progress) -> None:
        self.progress.append(p)

    def outcomes(self) -> list[dict]:
        """The audit log without the intent lines (every executed action has one before its outcome)."""
        return [e for e in self.audit.entries() if e.get("phase") != "intent"]

    def pods(self, app: str) -> list[dict]:
        return [p for p in self.emu.list("pods", NS, f"app={app}") if not p["metadata"].get("deletionTimestamp")]

    def start(self, plan, abort: threading.Event | None = None) -> tuple[threading.Thread, list[Outcome]]:
        out: list[Outcome] = []
        t = threading.Thread(target=lambda: out.append(self.ctl.execute(plan, self.record, abort)), daemon=True)
        t.start()
        return t, out


@pytest.fixture
def h(emu, tmp_path):
    harness = Harness(emu, tmp_path)
    yield harness
    harness.session.close()


def ready(emu: KubeEmulator, app: str, n: int) -> bool:
    pods = [p for p in emu.list("pods", NS, f"app={app}") if not p["metadata"].get("deletionTimestamp")]
    return len(pods) == n and all({c["type"]: c["status"] for c in p["status"].get("conditions") or []}.get("Ready")
                                  == "True" for p in pods)


# ------------------------------------------------------------- planning

DEPLOY = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "vllm", "namespace": NS, "resourceVersion": "41", "generation": 3,
                 "managedFields": [{"manager": "kubectl"}], "uid": "u-1"},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "vllm"}},
             "template": {"metadata": {"labels": {"app": "vllm", "serving": "true"}},
                          "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.2",
                                                   "args": ["--model", "m", "--max-num-seqs=64"]}]}}},
    "status": {"replicas": 3, "readyReplicas": 3},
}


def test_plan_scale_is_exact_and_conditional():
    plan = plan_scale("Deployment", DEPLOY, 5)
    assert plan.summary == "replicas 3 → 5" and plan.target == "deployment default/vllm"
    # only the field it changes (no resourceVersion: the write adds the one it re-reads just before)
    assert plan.subresource == "scale" and plan.body == {"spec": {"replicas": 5}}
    assert plan.guard == ((("spec", "replicas"), 3),) and plan.resource_version == "41"
    assert "-  replicas: 3\n+  replicas: 5" in plan.diff
    assert "managedFields" not in plan.diff and "resourceVersion" not in plan.diff and "status" not in plan.diff
    assert (plan.old, plan.new) == (3, 5)
    with pytest.raises(PlanError, match="already has 3 replicas"):
        plan_scale("Deployment", DEPLOY, 3)
    with pytest.raises(PlanError, match="≥ 0"):
        plan_scale("Deployment", DEPLOY, -1)
    assert plan_scale("StatefulSet", DEPLOY, 0).warnings == ("scaling to 0 stops every engine of this workload",)


def test_arg_changes():
    old = ["--model", "m", "--max-num-seqs", "64", "--enable-prefix-caching", "--gpu-memory-utilization=0.9"]
    assert apply_arg_changes(old, "--max-num-seqs 32") == ["--model", "m", "--max-num-seqs", "32",
                                                           "--enable-prefix-caching", "--gpu-memory-utilization=0.9"]
    assert apply_arg_changes(old, "--gpu-memory-utilization 0.85")[-1] == "--gpu-memory-utilization=0.85"
    assert apply_arg_changes(old, "!--enable-prefix-caching --enforce-eager --seed -1") == [
        "--model", "m", "--max-num-seqs", "64", "--gpu-memory-utilization=0.9", "--enforce-eager", "--seed", "-1"]
    assert apply_arg_changes(old, "= --model other") == ["--model", "other"]
    for bad, why in (("", "no change"), ("max-num-seqs 3", "expected a --flag"), ("!--nope", "not in the current"),
                     ("--x 'unterminated", "cannot parse")):
        with pytest.raises(PlanError, match=why):
            apply_arg_changes(old, bad)
    plan = plan_args("Deployment", DEPLOY, "--max-num-seqs 32")
    assert plan.summary == "vllm args: --model m --max-num-seqs=64 → --model m --max-num-seqs=32"
    assert plan.body["spec"]["template"]["spec"]["containers"] == [
        {"name": "vllm", "args": ["--model", "m", "--max-num-seqs=32"]}]
    assert "-        - --max-num-seqs=64\n+        - --max-num-seqs=32" in plan.diff
    with pytest.raises(PlanError, match="would not change"):
        plan_args("Deployment", DEPLOY, "--max-num-seqs=64")


def test_other_plans():
    restart = plan_restart("Deployment", DEPLOY, 1_750_000_000.0)
    assert restart.params["restarted_at"] == "2025-06-15T15:06:40Z"
    assert f"+      annotations:\n+        {RESTARTED_AT}: '2025-06-15T15:06:40Z'" in restart.diff
    hpa = {"metadata": {"name": "vllm", "namespace": NS, "resourceVersion": "9"},
           "spec": {"minReplicas": 1, "maxReplicas": 4, "scaleTargetRef": {"kind": "Deployment", "name": "vllm"}}}
    assert plan_hpa(hpa, 2, 8).summary == "min 1 → 2, max 4 → 8"
    assert plan_hpa(hpa, None, 6).summary == "max 4 → 6"
    with pytest.raises(PlanError, match="must not exceed"):
        plan_hpa(hpa, 5, 4)
    node = {"metadata": {"name": "gpu-a", "resourceVersion": "5"}, "spec": {}}
    cordon = plan_cordon(node, True)
    assert cordon.summary == "node gpu-a: schedulable → cordoned (no new pods)" and "+  unschedulable: true" in cordon.diff
    with pytest.raises(PlanError, match="already schedulable"):
        plan_cordon(node, False)
    cm = {"metadata": {"name": "gw", "namespace": NS, "resourceVersion": "3"}, "data": {"weights": "1,1,1"}}
    plan = plan_configmap(cm, "weights", "4,2,1")
    assert plan.summary == "data.weights: 1,1,1 → 4,2,1" and "-  weights: 1,1,1\n+  weights: 4,2,1" in plan.diff
    assert plan_configmap(cm, "new", "x").summary == "data.new: (absent) → x"


def test_plan_drain_pod_takes_the_service_label_not_the_controller_selector():
    pod = {"metadata": {"name": "vllm-abc-1", "namespace": NS, "uid": "p1", "resourceVersion": "7",
                        "labels": {"app": "vllm", "serving": "true", "pod-template-hash": "abc"},
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "vllm-abc", "controller": True}]},
           "spec": {"containers": [{"name": "vllm", "image": "x"}]}}
    svc = {"metadata": {"name": "vllm"}, "spec": {"selector": {"app": "vllm", "serving": "true"}}}
    other = {"metadata": {"name": "unrelated"}, "spec": {"selector": {"app": "qwen"}}}
    plan = plan_drain_pod(pod, [svc, other], DEPLOY, "Deployment")
    assert plan.params["removed"] == {"serving": "true"} and plan.warnings == ()
    assert plan.body["metadata"]["labels"] == {"serving": None}
    assert json.loads(plan.body["metadata"]["annotations"][DRAINED_FROM]) == {"serving": "true"}
    assert "-    serving: 'true'" in plan.diff
    assert plan.steps[0] == "remove label(s) serving=true: out of Service(s) vllm"
    only_app = {"metadata": {"name": "vllm"}, "spec": {"selector": {"app": "vllm"}}}
    plan = plan_drain_pod(pod, [only_app], DEPLOY, "Deployment")
    assert plan.params["removed"] == {"app": "vllm"} and "leaves its controller" in plan.warnings[0]
    plan = plan_drain_pod(pod, [], DEPLOY, "Deployment")
    assert plan.body is None and "no Service selects this pod" in plan.warnings[0]
    sts = {"metadata": {"name": "engine"}, "spec": {"replicas": 3}}
    with pytest.raises(PlanError, match="highest ordinal"):
        plan_drain_pod({**pod, "metadata": {**pod["metadata"], "name": "engine-0"}}, [], sts, "StatefulSet",
                       "scale-down")


def test_plan_drain_node_skips_daemonsets_and_mirror_pods():
    def pod(name, **meta):
        return {"metadata": {"name": name, "namespace": "kube-system", "uid": name, **meta}}

    pods = [pod("a"), pod("ds", ownerReferences=[{"kind": "DaemonSet", "name": "nvidia-device-plugin"}]),
            pod("static", annotations={"kubernetes.io/config.mirror": "x"}), pod("gone", deletionTimestamp="t")]
    keep, skipped = drainable_pods(pods)
    assert [p["metadata"]["name"] for p in keep] == ["a"] and len(skipped) == 3
    plan = plan_drain_node({"metadata": {"name": "gpu-a", "resourceVersion": "1"}, "spec": {}}, pods)
    assert plan.summary == "drain node gpu-a: cordon, evict 1 pod(s)"
    assert plan.params["pods"] == [("kube-system", "a", "a")] and len(plan.warnings) == 3


# ----------------------------------------------------- end to end: writes

def test_scale_2_to_4_dry_run_first_then_pods_appear(emu, h):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    plan = h.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=4)
    assert plan.summary == "replicas 2 → 4"
    rv = emu.store.resource_version
    dry = h.ctl.dry_run(plan)
    assert dry.ok and emu.store.resource_version == rv  # dry run: accepted, nothing written
    assert emu.count_requests("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/vllm/scale",
                              lambda r: r.query.get("dryRun") == "All") == 1
    outcome = h.ctl.execute(plan, h.record)
    assert outcome == Outcome("ok", "replicas 2 → 4: 4/4 ready")
    assert ready(emu, "vllm", 4)
    assert h.progress[-1].fraction == 1.0
    intent, entry = h.audit.entries()
    assert (intent["phase"], intent["action"], intent["op"]) == ("intent", "kube.scale", entry["op"])
    assert intent["diff"] == entry["diff"] and intent["kube_user"] == "oncall"
    (entry,) = h.outcomes()
    assert (entry["action"], entry["target"], entry["result"], entry["old"], entry["new"]) == (
        "kube.scale", "deployment default/vllm", "ok", 2, 4)
    assert entry["user"] == "alice" and entry["kube_user"] == "oncall" and entry["context"] == "lab"
    assert "+  replicas: 4" in entry["diff"] and entry["summary"] == "replicas 2 → 4"


def test_patch_args_follows_the_rolling_update_to_completion(tmp_path):
    emu = KubeEmulator(token=TOKEN, reconcile_interval=0.02, ready_delay=0.1).start()  # pods take a while
    emu.add_node("gpu-a", gpus=8)
    h = Harness(emu, tmp_path)
    emu.add_deployment(NS, "vllm", replicas=3, args=["--model", "m", "--max-num-seqs", "64"])
    emu.wait_until(lambda: ready(emu, "vllm", 3))
    old = {p["metadata"]["name"] for p in h.pods("vllm")}
    plan = h.ctl.prepare("args", "Deployment", NS, "vllm", changes="--max-num-seqs 32")
    assert h.ctl.dry_run(plan).ok
    outcome = h.ctl.execute(plan, h.record)
    assert outcome.ok and "rollout complete" in outcome.message, outcome
    pods = h.pods("vllm")
    assert len(pods) == 3 and not old & {p["metadata"]["name"] for p in pods}
    assert all(p["spec"]["containers"][0]["args"] == ["--model", "m", "--max-num-seqs", "32"] for p in pods)
    steps = [p for p in h.progress if p.text.startswith("rollout:")]
    assert steps and all(0 <= p.fraction < 1 for p in steps) and h.progress[-1].fraction == 1.0
    assert any("of 3 updated" in p.text for p in steps)
    entry = h.outcomes()[-1]
    assert entry["action"] == "kube.args" and entry["result"] == "ok" and entry["new"][-1] == "32"
    h.session.close()
    emu.stop()
    assert emu.errors == []


@pytest.mark.parametrize("case", ["CrashLoopBackOff", "ImagePullBackOff", "Insufficient nvidia.com/gpu"])
def test_a_stuck_rollout_says_why(emu, h, case):
    if case == "CrashLoopBackOff":
        emu.fail_args("--bad-flag")
        emu.add_deployment(NS, "vllm", replicas=2)
        emu.wait_until(lambda: ready(emu, "vllm", 2))
        plan = h.ctl.prepare("args", "Deployment", NS, "vllm", changes="--bad-flag")
    elif case == "ImagePullBackOff":
        emu.fail_image("*:does-not-exist")
        emu.add_deployment(NS, "vllm", replicas=1, image="vllm/vllm-openai:does-not-exist")
        # the first pod must exist (and be failing) before the restart, whatever the load
        emu.wait_until(lambda: "ImagePullBackOff" in str(h.pods("vllm")))
        plan = h.ctl.prepare("restart", "Deployment", NS, "vllm")
    else:
        emu.add_deployment(NS, "vllm", replicas=2, gpu_per_pod=4)
        emu.wait_until(lambda: ready(emu, "vllm", 2))
        plan = h.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=6)  # 16 GPUs, 4 each: 4 fit
    outcome = h.ctl.execute(plan, h.record)
    assert outcome.result == "stuck" and case in outcome.message, outcome
    assert h.outcomes()[-1]["result"] == "stuck"


def test_rollout_restart_replaces_every_pod(emu, h):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    old = {p["metadata"]["name"] for p in h.pods("vllm")}
    plan = h.ctl.prepare("restart", "Deployment", NS, "vllm")
    assert h.ctl.execute(plan, h.record).ok
    pods = h.pods("vllm")
    assert not old & {p["metadata"]["name"] for p in pods}
    assert {p["metadata"]["annotations"][RESTARTED_AT] for p in pods} == {plan.params["restarted_at"]}


def test_statefulset_scale_hpa_bounds_configmap_cordon(emu, h):
    emu.add_statefulset(NS, "engine", replicas=1)
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4)
    emu.add_configmap(NS, "gateway", {"weights": "realtime=4,batch=2,background=1"})
    emu.wait_until(lambda: ready(emu, "engine", 1))
    assert h.ctl.execute(h.ctl.prepare("scale", "StatefulSet", NS, "engine", replicas=3)).ok
    assert [p["metadata"]["name"] for p in h.pods("engine")] == ["engine-0", "engine-1", "engine-2"]
    outcome = h.ctl.execute(h.ctl.prepare("hpa", "HorizontalPodAutoscaler", NS, "vllm", min_replicas=2,
                                          max_replicas=8))
    assert outcome.ok and outcome.message.startswith("min 1 → 2, max 4 → 8")
    spec = emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 8)
    assert h.ctl.execute(h.ctl.prepare("configmap", "ConfigMap", NS, "gateway", key="weights",
                                       value="realtime=8,batch=1,background=1")).ok
    assert emu.get("configmaps", "gateway", NS)["data"]["weights"] == "realtime=8,batch=1,background=1"
    assert h.ctl.execute(h.ctl.prepare("cordon", "Node", None, "gpu-b")).ok
    assert emu.get("nodes", "gpu-b")["spec"]["unschedulable"] is True
    # the node controller then adds its taint (a new resourceVersion): read after it, or the uncordon is a 409
    emu.wait_until(lambda: any(t["key"] == "node.kubernetes.io/unschedulable"
                               for t in emu.get("nodes", "gpu-b")["spec"].get("taints") or []))
    assert h.ctl.execute(h.ctl.prepare("uncordon", "Node", None, "gpu-b")).ok
    assert not emu.get("nodes", "gpu-b")["spec"].get("unschedulable")
    actions = [(e["action"], e["result"]) for e in h.outcomes()]
    assert actions == [("kube.scale", "ok"), ("kube.hpa", "ok"), ("kube.configmap", "ok"), ("kube.cordon", "ok"),
                       ("kube.uncordon", "ok")]
    assert all(e["diff"] for e in h.outcomes())


def test_delete_pod_waits_until_it_is_gone(emu, h):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    victim = h.pods("vllm")[0]["metadata"]["name"]
    plan = h.ctl.prepare("delete_pod", "Pod", NS, victim)
    assert plan.summary == f"delete pod {victim} (deployment vllm creates a replacement)"
    assert h.ctl.dry_run(plan).ok and victim in {p["metadata"]["name"] for p in h.pods("vllm")}
    assert h.ctl.execute(plan, h.record) == Outcome("ok", f"pod {victim} deleted")
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    assert victim not in {p["metadata"]["name"] for p in emu.list("pods", NS)}
    assert h.outcomes()[-1]["action"] == "kube.delete_pod"


# ------------------------------------------------------- safety rails

def test_dry_run_failure_is_reported_and_nothing_changes(emu, h):
    emu.add_configmap(NS, "gateway", {"weights": "1"})
    emu.add_deployment(NS, "vllm", replicas=1)
    plan = h.ctl.prepare("configmap", "ConfigMap", NS, "gateway", key="bad key!", value="2")
    rv = emu.store.resource_version
    dry = h.ctl.dry_run(plan)
    assert not dry.ok and dry.status == 422
    assert dry.message.startswith('422 Invalid: ConfigMap "gateway" is invalid: data: Invalid value: "bad key!"')
    h.ctl.record_dry_run_failure(plan, dry)
    emu.set_rules([("*", "*", "*", ""), ("get", "apps", "deployments/scale")])  # no patch on scale
    scale = h.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=3)
    dry = h.ctl.dry_run(scale)
    assert not dry.ok and dry.status == 403 and dry.message.startswith("403 Forbidden: deployments.apps \"vllm\"")
    assert emu.store.resource_version == rv
    assert emu.get("configmaps", "gateway", NS)["data"] == {"weights": "1"}
    (entry,) = h.outcomes()
    assert entry["result"] == "failed" and entry["dry_run"] is True and "bad key!" in entry["diff"]


def test_a_changed_spec_is_a_conflict_never_retried_blindly(emu, h):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    plan = h.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=3)
    emu.patch("deployments", "vllm", {"spec": {"replicas": 1}}, NS)  # someone else scaled meanwhile
    outcome = h.ctl.execute(plan)
    assert outcome.result == "conflict" and outcome.status == 409
    assert "spec.replicas 2 → 1" in outcome.message and "nothing was sent" in outcome.message
    assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 1
    assert emu.count_requests("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/vllm/scale",
                              lambda r: "dryRun" not in r.query) == 0  # nothing sent
    fresh = h.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=3)  # re-read → a new plan to confirm
    assert fresh.summary == "replicas 1 → 3"
    assert h.ctl.execute(fresh).ok
    assert [e["result"] for e in h.outcomes()] == ["conflict", "ok"]


def test_a_change_elsewhere_in_the_object_is_no_conflict(emu, h):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    plan = h.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=3)
    emu.patch("deployments", "vllm", {"metadata": {"labels": {"touched": "by-someone-else"}}}, NS)
    assert h.ctl.execute(plan).ok
    assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 3
    assert emu.count_requests("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/vllm/scale",
                              lambda r: "dryRun" not in r.query) == 1


def test_access_reviews_say_what_may_be_done(emu, h):
    emu.set_rules([("patch", "apps", "deployments/scale", None, NS), ("patch", "", "configmaps"),
                   (["get", "list", "watch"], "*", "*")])
    perms = check_permissions(h.session)
    assert perms.allows("scale") is True
    assert perms.allows("scale", NS, "Deployment") is True and perms.allows("scale", NS, "StatefulSet") is False
    assert perms.allows("configmap") is True
    for action in ("hpa", "args", "restart", "delete_pod", "drain_pod", "cordon", "drain_node"):
        assert perms.allows(action) is False, action
    perms.deny("configmap", NS)
    assert perms.allows("configmap") is False
    assert emu.count_requests("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews") == 10


# ------------------------------------------------------------- drains

@pytest.fixture
def engine():
    sim = SimCluster(1, seed=11, load="none", realtime=False).start()
    yield sim
    sim.stop()


def busy(sim: SimCluster, n: int) -> None:
    eng = sim.engines[0]
    with eng.lock:
        for _ in range(n):
            eng.core.submit(SimRequest(prompt_tokens=100, max_tokens=60))
    sim.advance(0.2)


def test_pod_drain_waits_for_in_flight_to_reach_zero_then_deletes(emu, h, engine):
    emu.set_pod_endpoint("vllm-*", "127.0.0.1", engine.engines[0].port)
    emu.add_deployment(NS, "vllm", replicas=1, labels={"app": "vllm"})
    emu.add_service(NS, "vllm", {"app": "vllm"})
    emu.wait_until(lambda: ready(emu, "vllm", 1))
    pod = h.pods("vllm")[0]["metadata"]["name"]
    busy(engine, 6)
    plan = h.ctl.prepare("drain_pod", "Pod", NS, pod)
    assert h.ctl.dry_run(plan).ok
    t, out = h.start(plan)
    emu.wait_until(lambda: sum(p.text.startswith("in flight: 6") for p in h.progress) >= 3,
                   message="the drain watches the engine")
    live = emu.get("pods", pod, NS)
    assert "app" not in live["metadata"]["labels"]  # out of the Service …
    assert not live["metadata"].get("deletionTimestamp")  # … but not deleted while requests are in flight
    assert not out
    engine.advance(30.0)  # the engine finishes its requests
    t.join(20)
    assert out == [Outcome("ok", f"pod {pod} drained (0 in flight) and deleted; it had been taken out of vllm")]
    assert pod not in {p["metadata"]["name"] for p in emu.list("pods", NS)}
    fractions = [p.fraction for p in h.progress if p.fraction is not None]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(p.text.startswith("in flight: 0") for p in h.progress)
    entry = h.outcomes()[-1]
    assert entry["action"] == "kube.drain_pod" and entry["result"] == "ok" and "-    app: vllm" in entry["diff"]


def test_pod_drain_abort_puts_the_label_back(emu, h, engine):
    emu.set_pod_endpoint("vllm-*", "127.0.0.1", engine.engines[0].port)
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_service(NS, "vllm", {"app": "vllm"})
    emu.wait_until(lambda: ready(emu, "vllm", 1))
    pod = h.pods("vllm")[0]["metadata"]["name"]
    busy(engine, 3)
    abort = threading.Event()
    t, out = h.start(h.ctl.prepare("drain_pod", "Pod", NS, pod), abort)
    emu.wait_until(lambda: any(p.text.startswith("in flight: 3") for p in h.progress))
    abort.set()
    t.join(10)
    assert out[0].result == "aborted" and "labels restored (app=vllm): back in service" in out[0].message
    meta = emu.get("pods", pod, NS)["metadata"]
    assert meta["labels"]["app"] == "vllm" and DRAINED_FROM not in (meta.get("annotations") or {})
    assert not meta.get("deletionTimestamp")
    assert h.outcomes()[-1]["result"] == "aborted"


def test_pod_drain_then_scale_down_a_statefulset(emu, h, engine):
    emu.set_pod_endpoint("engine-*", "127.0.0.1", engine.engines[0].port)
    emu.add_statefulset(NS, "engine", replicas=2)
    emu.add_service(NS, "engine", {"app": "engine"})
    emu.wait_until(lambda: ready(emu, "engine", 2))
    plan = h.ctl.prepare("drain_pod", "Pod", NS, "engine-1", then="scale-down")
    assert plan.steps[-1] == "scale StatefulSet engine 2 → 1"
    assert h.ctl.dry_run(plan).ok
    outcome = h.ctl.execute(plan, h.record)
    assert outcome.ok and "StatefulSet engine scaled down" in outcome.message
    assert emu.get("statefulsets", "engine", NS)["spec"]["replicas"] == 1
    emu.wait_until(lambda: [p["metadata"]["name"] for p in h.pods("engine")] == ["engine-0"])
    emu.patch("statefulsets", "engine", {"spec": {"replicas": 2}}, NS)
    emu.wait_until(lambda: ready(emu, "engine", 2))
    with pytest.raises(PlanError, match=r"scales down from its highest ordinal \(engine-1\), not engine-0"):
        h.ctl.prepare("drain_pod", "Pod", NS, "engine-0", then="scale-down")


def test_node_drain_waits_out_a_blocking_pdb_then_succeeds(emu, h):
    emu.add_deployment(NS, "vllm", replicas=2)  # one pod per node (round-robin)
    emu.add_pdb(NS, "vllm", {"app": "vllm"}, min_available=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    victim = next(p["metadata"]["name"] for p in h.pods("vllm") if p["spec"]["nodeName"] == "gpu-a")
    plan = h.ctl.prepare("drain_node", "Node", None, "gpu-a")
    assert plan.summary == "drain node gpu-a: cordon, evict 1 pod(s)"
    dry = h.ctl.dry_run(plan)
    assert dry.ok and "blocked by a PodDisruptionBudget" in dry.message
    assert not emu.get("nodes", "gpu-a")["spec"].get("unschedulable")  # the dry run cordoned nothing
    t, out = h.start(plan)
    emu.wait_until(lambda: sum("blocked by a disruption budget" in p.text for p in h.progress) >= 3,
                   message="retries with a countdown")
    blocked = [p for p in h.progress if "blocked" in p.text]
    assert all(p.countdown_s is not None and p.countdown_s > 0 for p in blocked)
    assert "The disruption budget vllm needs 2 healthy pods and has 2 currently" in blocked[0].text
    assert emu.get("nodes", "gpu-a")["spec"]["unschedulable"] is True and not out
    emu.patch("deployments", "vllm", {"spec": {"replicas": 3}}, NS)  # a third pod (on gpu-b): the PDB allows one
    t.join(20)
    assert out and out[0].ok and out[0].message.startswith("node gpu-a cordoned and drained: 1 pod(s) evicted after")
    assert victim not in {p["metadata"]["name"] for p in emu.list("pods", NS)}
    emu.wait_until(lambda: ready(emu, "vllm", 3))
    assert all(p["spec"]["nodeName"] == "gpu-b" for p in h.pods("vllm"))
    assert h.outcomes()[-1]["action"] == "kube.drain_node" and h.outcomes()[-1]["result"] == "ok"


def test_node_drain_times_out_when_the_pdb_never_allows(emu, tmp_path):
    h = Harness(emu, tmp_path, node_drain_timeout_s=0.5)
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_pdb(NS, "vllm", {"app": "vllm"}, min_available=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    outcome = h.ctl.execute(h.ctl.prepare("drain_node", "Node", None, "gpu-a"), h.record)
    assert outcome.result == "timeout" and "blocked" in outcome.message and "stays cordoned" in outcome.message
    assert emu.get("nodes", "gpu-a")["spec"]["unschedulable"] is True
    assert len(h.pods("vllm")) == 2
    h.session.close()


def test_a_pod_drain_checks_before_confirmation_that_in_flight_is_readable(emu, h, engine):
    emu.set_pod_endpoint("vllm-*", "127.0.0.1", engine.engines[0].port)
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_deployment(NS, "blind", replicas=1)  # its pod's engine cannot be reached from here
    emu.set_pod_endpoint("blind-*", "127.0.0.1", free_port())
    emu.add_service(NS, "vllm", {"app": "vllm"})
    emu.wait_until(lambda: ready(emu, "vllm", 1) and ready(emu, "blind", 1))
    busy(engine, 2)
    dry = h.ctl.dry_run(h.ctl.prepare("drain_pod", "Pod", NS, h.pods("vllm")[0]["metadata"]["name"]))
    assert dry.ok and dry.message.endswith("in flight now: 2") and dry.warnings == ()
    dry = h.ctl.dry_run(h.ctl.prepare("drain_pod", "Pod", NS, h.pods("blind")[0]["metadata"]["name"]))
    assert dry.ok and dry.message.endswith("in flight: unreadable")
    (warning,) = dry.warnings
    assert warning.startswith("the pod's in-flight requests cannot be read now (")
    assert "waits up to 30 s" in warning and "puts the labels back" in warning


def test_permissions_say_which_check_denies(emu, h):
    emu.set_rules([("*", "*", "*"), ("patch", "apps", "statefulsets/scale")])
    perms = check_permissions(h.session)
    assert perms.denied("scale", NS, "Deployment") == "forbidden: patch deployments/scale in default"
    assert perms.denied("scale", NS, "StatefulSet") is None
    assert perms.denied("drain_node") == "forbidden: create pods/eviction"


def test_the_follow_reads_the_informers_and_never_ends_on_a_stale_object(kube_emulator, tmp_path):
    from infertop.sources.kube import ClusterWatcher

    emu = kube_emulator(TOKEN, reconcile_interval=0.02, ready_delay=0.5)  # new pods take 0.5 s to be ready
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    h = Harness(emu, tmp_path)
    watcher = ClusterWatcher(h.session, KubeConfig()).start()
    try:
        assert watcher.wait_synced(10)
        ctl = KubeControl(h.session, h.audit, h.ctl.cfg, poll_s=0.02, watcher=watcher)
        plan = ctl.prepare("scale", "Deployment", NS, "vllm", replicas=4)
        emu.clear_requests()
        outcome = ctl.execute(plan, h.record)
        assert outcome == Outcome("ok", "replicas 2 → 4: 4/4 ready") and ready(emu, "vllm", 4)
        reads = emu.count_requests("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/vllm")
        polls = len(h.progress)
        # GETs only before the write (its pods; the guarded write's re-read) and while the watch lags behind it
        assert reads <= 3 and polls >= 10
        assert emu.count_requests("GET", f"/api/v1/namespaces/{NS}/pods") <= 2
    finally:
        watcher.stop()
        h.session.close()


def test_an_unwritable_audit_log_refuses_and_sends_nothing(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    h = Harness(emu, tmp_path)
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    ctl = KubeControl(h.session, AuditLog(blocked / "audit.jsonl"), h.ctl.cfg, poll_s=0.02)
    plan = ctl.prepare("scale", "Deployment", NS, "vllm", replicas=3)
    outcome = ctl.execute(plan)
    assert outcome.result == "refused" and outcome.message.startswith("nothing was sent: audit log ")
    assert emu.count_requests("PATCH") == 0
    h.session.close()
