"""What the cluster's autoscalers decided and why not (``infertop/analysis/autoscaler/explain.py``),
from objects and events in the Kubernetes API emulator, read through the real client.

Each "why not scaling" case of issue 12 gets its objects (as the HPA controller, KEDA's
operator or llm-d's variant autoscaler would write them), one read, and an assertion on
the explanation's codes and words. Nothing is patched: the reads are HTTP to 127.0.0.1.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from infertop.analysis.autoscaler.explain import (
    AT_MAX,
    FALLBACK,
    INACTIVE,
    METRIC_UNAVAILABLE,
    NOT_APPLIED,
    PAUSED,
    PENDING_GPU,
    STABILISING,
    TARGET_MISSING,
    UNABLE_TO_SCALE,
    WITHIN_TOLERANCE,
    explain_workloads,
    parse_quantity,
)
from infertop.config import KubeConfig
from infertop.domain.kube import ClusterSnapshot
from infertop.sources.kube import ClusterWatcher, KubeSession, read_cluster
from infertop.domain.codec import from_doc, to_doc

TOKEN = "autoscaler-token"
NS = "serving"
WAITING = "vllm:num_requests_waiting"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=None)


def connect(emu, tmp_path) -> KubeSession:
    return KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)))


def read(emu, tmp_path, now: float | None = None, cfg: KubeConfig | None = None):
    emu.reconcile()
    session = connect(emu, tmp_path)
    try:
        snap = read_cluster(session, cfg)
    finally:
        session.close()
    return snap, {w.name: w for w in explain_workloads(snap, now=now)}


def pods_metric(value: str) -> list[dict]:
    return [{"type": "Pods", "pods": {"metric": {"name": WAITING}, "current": {"averageValue": value}}}]


def conds(able=("True", "ReadyForNewScale", "recommended size matches current size"),
          active=("True", "ValidMetricFound", "the HPA was able to successfully calculate a replica count"),
          limited=("False", "DesiredWithinRange", "the desired count is within the acceptable range")) -> list[dict]:
    return [{"type": t, "status": s, "reason": r, "message": m}
            for t, (s, r, m) in (("AbleToScale", able), ("ScalingActive", active), ("ScalingLimited", limited))]


def hpa_of(w):
    return next(a for a in w.autoscalers if a.kind == "HorizontalPodAutoscaler")


# ------------------------------------------------------------------ HPA cases

def test_at_max_replicas_says_so_with_the_metric_that_wants_more(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=4)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4, desired_replicas=4,
                current_metrics=pods_metric("12"),
                conditions=conds(limited=("True", "TooManyReplicas",
                                          "the desired replica count is more than the maximum replica count")))
    _, by_name = read(emu, tmp_path)
    a = hpa_of(by_name["vllm"])
    assert (a.current, a.desired, a.direction) == (4, 4, "hold")
    assert a.codes()[0] == AT_MAX
    assert a.reason == f"at maxReplicas 4 while {WAITING} 12 vs target 5 asks for more"
    assert a.line.startswith("HPA vllm 4 → 4: at maxReplicas 4")
    (m,) = a.metrics
    assert (m.current, m.target, m.ratio) == ("12", "5", pytest.approx(2.4))


def test_metric_unavailable_from_the_condition_and_the_warning_events(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_hpa(NS, "vllm", "vllm", max_replicas=8, desired_replicas=2, current_metrics=[],
                last_scale_time=time.time() - 3600,
                conditions=conds(active=("False", "FailedGetPodsMetric",
                                         f"the HPA was unable to compute the replica count: unable to get metric "
                                         f"{WAITING}: no metrics returned from custom metrics API")))
    emu.record_event("HorizontalPodAutoscaler", "vllm", NS, "Warning", "FailedGetPodsMetric",
                     f"unable to get metric {WAITING}: no metrics returned from custom metrics API",
                     "horizontal-pod-autoscaler")
    emu.record_event("HorizontalPodAutoscaler", "vllm", NS, "Warning", "FailedComputeMetricsReplicas",
                     "invalid metrics (1 invalid out of 1)", "horizontal-pod-autoscaler")
    snap, by_name = read(emu, tmp_path, now=time.time())
    a = hpa_of(by_name["vllm"])
    assert a.codes() == (METRIC_UNAVAILABLE,)
    assert a.reason.startswith("metric unavailable: ScalingActive is False (FailedGetPodsMetric): ")
    assert {e.split(":")[0] for e in a.events} == {"FailedGetPodsMetric", "FailedComputeMetricsReplicas"}
    # the events alone (a controller that has not updated the condition yet) say it too
    emu.set_hpa_status(NS, "vllm", conditions=conds(active=("True", "ValidMetricFound", "ok")),
                       current_metrics=pods_metric("3"))
    snap, by_name = read(emu, tmp_path, now=time.time() + 1)
    a = hpa_of(by_name["vllm"])
    assert a.codes() == (METRIC_UNAVAILABLE,)
    assert a.reason.startswith("metric unavailable: Failed")
    # ten minutes later the old warnings no longer explain the present
    _, by_name = read(emu, tmp_path, now=time.time() + 3600)
    assert METRIC_UNAVAILABLE not in hpa_of(by_name["vllm"]).codes()


def test_within_tolerance_names_the_ratio(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=3)
    emu.add_hpa(NS, "vllm", "vllm", max_replicas=8, desired_replicas=3, current_metrics=pods_metric("5200m"),
                conditions=conds())
    _, by_name = read(emu, tmp_path)
    a = hpa_of(by_name["vllm"])
    assert a.codes() == (WITHIN_TOLERANCE,)
    assert a.reason == f"within tolerance: {WAITING} 5.2 vs 5 (×1.04), inside ±10%"  # not "5200m"
    # 5.6 is outside the band: no tolerance reason, and nothing holds it back
    emu.set_hpa_status(NS, "vllm", current_metrics=pods_metric("5600m"), desired_replicas=4)
    _, by_name = read(emu, tmp_path)
    a = hpa_of(by_name["vllm"])
    assert a.codes() == () and a.direction == "up" and a.line == "HPA vllm 3 → 4"


def test_a_per_direction_tolerance_from_the_behaviour_is_used(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=3)
    emu.add_hpa(NS, "vllm", "vllm", max_replicas=8, desired_replicas=3, current_metrics=pods_metric("5600m"),
                conditions=conds(), behavior={"scaleUp": {"tolerance": "0.2"}})
    _, by_name = read(emu, tmp_path)
    a = hpa_of(by_name["vllm"])
    assert a.codes() == (WITHIN_TOLERANCE,) and "±20%" in a.reason


def test_inside_a_stabilisation_window_from_the_controller_condition(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=6)
    emu.add_hpa(NS, "vllm", "vllm", max_replicas=8, desired_replicas=6, current_metrics=pods_metric("1"),
                conditions=conds(able=("True", "ScaleDownStabilized",
                                       "recent recommendations were higher than current one, applying the highest "
                                       "recent recommendation")),
                behavior={"scaleDown": {"stabilizationWindowSeconds": 600,
                                        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}})
    _, by_name = read(emu, tmp_path)
    a = hpa_of(by_name["vllm"])
    assert a.codes() == (STABILISING,)
    assert a.reason.startswith("inside the scale-down stabilisation window (600 s): recent recommendations")
    assert "scale-down: window 600 s, at most 1 pods per 60 s" in a.notes


def test_inside_a_stabilisation_window_from_the_last_scale_time(emu, tmp_path):
    now = float(int(time.time()))  # lastScaleTime has whole seconds
    emu.add_deployment(NS, "vllm", replicas=6)
    # a controller that gives no reason of its own (SucceededGetScale, not ScaleDownStabilized)
    able = ("True", "SucceededGetScale", "the HPA controller was able to get the target's current scale")
    emu.add_hpa(NS, "vllm", "vllm", max_replicas=8, desired_replicas=6, current_metrics=pods_metric("1"),
                conditions=conds(able=able), last_scale_time=now - 100,
                behavior={"scaleDown": {"stabilizationWindowSeconds": 180}})
    _, by_name = read(emu, tmp_path, now=now)
    a = hpa_of(by_name["vllm"])
    assert a.codes() == (STABILISING,)
    assert a.reason == "inside the scale-down stabilisation window: last scaled 100 s ago, 80 s left of 180 s"
    _, by_name = read(emu, tmp_path, now=now + 200)  # the window has passed: nothing holds it any more
    assert STABILISING not in hpa_of(by_name["vllm"]).codes()
    # "recommended size matches current size": the controller says it is not holding anything back
    emu.set_hpa_status(NS, "vllm", conditions=conds())
    _, by_name = read(emu, tmp_path, now=now)
    assert STABILISING not in hpa_of(by_name["vllm"]).codes()
    # 6 pods at 4.35 vs 5 (×0.87, outside the tolerance) still need ceil(6 × 0.87) = 6: no window holds them
    emu.set_hpa_status(NS, "vllm", conditions=conds(able=able), current_metrics=pods_metric("4350m"))
    _, by_name = read(emu, tmp_path, now=now)
    assert STABILISING not in hpa_of(by_name["vllm"]).codes()


def test_able_to_scale_false_when_the_target_is_gone(emu, tmp_path):
    emu.add_hpa(NS, "ghost", "ghost", max_replicas=4)  # the emulator's HPA controller: FailedGetScale
    emu.record_event("HorizontalPodAutoscaler", "ghost", NS, "Warning", "FailedGetScale",
                     'deployments.apps "ghost" not found', "horizontal-pod-autoscaler")
    _, by_name = read(emu, tmp_path)
    w = by_name["ghost"]
    assert w.replicas is None
    a = hpa_of(w)
    assert a.codes()[:2] == (TARGET_MISSING, UNABLE_TO_SCALE)
    assert a.why_not[1].text.startswith("AbleToScale is False (FailedGetScale): the HPA controller was unable")


def test_pods_pending_for_lack_of_gpus(emu, tmp_path):
    emu.add_deployment(NS, "big", replicas=3, gpu_per_pod=6)  # two 8-GPU nodes: one pod does not fit
    emu.add_hpa(NS, "big", "big", max_replicas=6, desired_replicas=3, current_metrics=pods_metric("9"),
                conditions=conds())
    snap, by_name = read(emu, tmp_path)
    w = by_name["big"]
    assert (w.replicas, w.ready, w.pending_gpu) == (3, 2, 1)
    a = hpa_of(w)
    assert PENDING_GPU in a.codes()
    why = next(x for x in a.why_not if x.code == PENDING_GPU)
    assert why.text.startswith("3 wanted, 2 ready: 1 pod(s) Pending for lack of nvidia.com/gpu (")
    assert "Insufficient nvidia.com/gpu" in why.text


# ------------------------------------------------------------------ KEDA

def test_absent_custom_resources_are_no_error_and_a_403_is_shown(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    snap, _ = read(emu, tmp_path)
    assert snap.errors == () and snap.scaled_objects == () and snap.variant_autoscalers == ()
    emu.install("ScaledObject")
    emu.add_scaled_object(NS, "vllm", "vllm")
    # everything but listing the custom resources
    emu.set_rules([(("get", "list", "watch", "create"), ("", "apps", "autoscaling", "authorization.k8s.io", "policy", "discovery.k8s.io"), "*"),
                   ("get", ("keda.sh", "llmd.ai"), "*", "")])
    snap, _ = read(emu, tmp_path)
    assert snap.scaled_objects == ()
    assert snap.errors == (f"scaledobjects in {NS}: 403 Forbidden: scaledobjects.keda.sh is forbidden: User "
                           f"\"tester\" cannot list resource \"scaledobjects\" in API group \"keda.sh\" in the "
                           f"namespace \"{NS}\"",)


def test_keda_paused_at_a_replica_count(emu, tmp_path):
    emu.install("ScaledObject")
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_scaled_object(NS, "vllm", "vllm", max_replicas=10,
                          annotations={"autoscaling.keda.sh/paused-replicas": "2"},
                          hpa_status={"desiredReplicas": 2, "currentReplicas": 2, "conditions": conds()})
    snap, by_name = read(emu, tmp_path)
    (so,) = snap.scaled_objects
    assert (so.paused, so.paused_replicas, so.hpa_name) == (True, 2, "keda-hpa-vllm")
    w = by_name["vllm"]
    keda = next(a for a in w.autoscalers if a.kind == "ScaledObject")
    assert keda.codes()[0] == PAUSED
    assert keda.reason == "paused at 2 replicas (annotation autoscaling.keda.sh/paused-replicas)"
    hpa = hpa_of(w)
    assert hpa.name == "keda-hpa-vllm" and hpa.managed_by == "ScaledObject vllm"
    assert hpa.codes()[0] == PAUSED and hpa.reason == "paused by KEDA ScaledObject vllm: pinned at 2 replicas"


def test_keda_paused_without_replicas_and_inactive(emu, tmp_path):
    emu.install("scaledobjects")
    emu.add_deployment(NS, "a", replicas=1)
    emu.add_deployment(NS, "b", replicas=1)
    emu.add_scaled_object(NS, "a", "a", annotations={"autoscaling.keda.sh/paused": "true"})
    emu.add_scaled_object(NS, "b", "b", min_replicas=1, cooldown_period=120, status={"conditions": [
        {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ready"},
        {"type": "Active", "status": "False", "reason": "ScalerNotActive", "message": "no trigger active"}]})
    _, by_name = read(emu, tmp_path)
    a = next(x for x in by_name["a"].autoscalers if x.kind == "ScaledObject")
    assert a.reason == "paused (annotation autoscaling.keda.sh/paused): KEDA does not scale it"
    b = next(x for x in by_name["b"].autoscalers if x.kind == "ScaledObject")
    assert b.codes()[0] == INACTIVE
    assert b.reason == "no trigger active: scales to minReplicaCount 1 after the 120 s cooldown"


def test_keda_fallback_and_a_failing_trigger(emu, tmp_path):
    emu.install("ScaledObject")
    emu.add_deployment(NS, "vllm", replicas=3)
    emu.add_scaled_object(NS, "vllm", "vllm", fallback={"failureThreshold": 3, "replicas": 3}, status={
        "health": {"s0-prometheus": {"numberOfFailures": 5, "status": "Failing"}},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ready"},
            {"type": "Fallback", "status": "True", "reason": "FallbackExists",
             "message": "At least one trigger is falling back on this scaled object"}]})
    snap, by_name = read(emu, tmp_path)
    (so,) = snap.scaled_objects
    (trig,) = so.triggers
    assert (trig.type, trig.health, trig.failures, trig.metadata["threshold"]) == ("prometheus", "Failing", 5, "5")
    keda = next(a for a in by_name["vllm"].autoscalers if a.kind == "ScaledObject")
    assert keda.codes()[:2] == (FALLBACK, METRIC_UNAVAILABLE)
    assert keda.why_not[0].text == "falling back to 3 replicas: At least one trigger is falling back on this " \
                                   "scaled object"
    assert keda.why_not[1].text == "metric unavailable: trigger prometheus is Failing (5 failures)"
    assert "fallback: 3 replicas after 3 failures" in keda.notes
    assert any(n.startswith("prometheus trigger: sum(vllm:num_requests_waiting") for n in keda.notes)


def test_keda_at_max_through_the_hpa_it_owns(emu, tmp_path):
    emu.install("ScaledObject")
    emu.add_deployment(NS, "vllm", replicas=4)
    emu.add_scaled_object(NS, "vllm", "vllm", max_replicas=4, hpa_status={
        "desiredReplicas": 4, "currentReplicas": 4,
        "currentMetrics": [{"type": "External", "external": {"metric": {"name": "s0-prometheus"},
                                                             "current": {"averageValue": "20"}}}],
        "conditions": conds(limited=("True", "TooManyReplicas", "the desired replica count is more than the "
                                                                "maximum replica count"))})
    _, by_name = read(emu, tmp_path)
    keda = next(a for a in by_name["vllm"].autoscalers if a.kind == "ScaledObject")
    assert keda.codes() == (AT_MAX,) and keda.transition == "4 → 4"
    assert keda.reason == "at maxReplicas 4 while s0-prometheus 20 vs target 5 asks for more"


# ------------------------------------------------------------------ llm-d WVA

class MetricsServer:
    """A loopback /metrics with wva_desired_replicas, as the WVA controller exports it."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_variant_autoscaler_decision_not_followed_by_its_hpa(emu, tmp_path):
    emu.install("VariantAutoscaling")
    emu.add_deployment(NS, "llama", replicas=3)
    emu.add_variant_autoscaling(NS, "llama", "llama", current_replicas=3, desired_replicas=5, max_replicas=8)
    emu.add_hpa(NS, "llama-hpa", "llama", max_replicas=8, desired_replicas=3, metrics=[{
        "type": "External", "external": {"metric": {"name": "wva_desired_replicas",
                                                    "selector": {"matchLabels": {"variant_name": "llama"}}},
                                         "target": {"type": "AverageValue", "averageValue": "1"}}}],
        current_metrics=[{"type": "External", "external": {"metric": {"name": "wva_desired_replicas"},
                                                          "current": {"averageValue": "1"}}}],
        conditions=conds(able=("True", "ScaleUpStabilized", "recent recommendations were lower than current one")))
    metrics = MetricsServer('# TYPE wva_desired_replicas gauge\n'
                            f'wva_desired_replicas{{variant_name="llama",exported_namespace="{NS}",'
                            f'accelerator_type="H100"}} 4\n')
    try:
        snap, by_name = read(emu, tmp_path, cfg=KubeConfig(wva_metrics_url=metrics.url))
    finally:
        metrics.close()
    (va,) = snap.variant_autoscalers
    assert (va.current_replicas, va.desired_replicas, va.metric_desired_replicas, va.applied) == (3, 5, 4.0, True)
    w = by_name["llama"]
    wva = next(a for a in w.autoscalers if a.kind == "VariantAutoscaling")
    assert (wva.transition, wva.direction) == ("3 → 5", "up")
    assert wva.codes() == (NOT_APPLIED, NOT_APPLIED)
    assert wva.why_not[0].text == "wva_desired_replicas is 4, its status says 5: the metric is not published yet"
    assert wva.why_not[1].text.startswith("HPA llama-hpa wants 3, not 5: inside the scale-up stabilisation window")
    assert "applied through HPA llama-hpa (external metric wva_desired_replicas)" in wva.notes


def test_variant_autoscaler_without_target_ref_and_without_metrics(emu, tmp_path):
    emu.install("VariantAutoscaling")
    emu.add_deployment(NS, "qwen", replicas=2)
    emu.add_variant_autoscaling(NS, "qwen", None, current_replicas=2, desired_replicas=2, applied=False,
                                conditions=[{"type": "MetricsAvailable", "status": "False",
                                             "reason": "MetricsMissing", "message": "no vLLM metrics for qwen"}])
    _, by_name = read(emu, tmp_path)
    wva = by_name["qwen"].autoscalers[0]  # the Deployment of the same name
    assert wva.kind == "VariantAutoscaling" and wva.codes() == (METRIC_UNAVAILABLE, NOT_APPLIED)
    assert wva.why_not[0].text == ("metric unavailable: MetricsAvailable is False (MetricsMissing): "
                                   "no vLLM metrics for qwen")


# ------------------------------------------------------------------ the emulator's HPA controller

def test_the_hpa_controller_scales_to_max_and_then_explains_itself(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.02)
    waiting = {"value": 20.0}
    emu.add_deployment(NS, "vllm", replicas=2, gpu_per_pod=1)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=5)
    emu.set_hpa_metrics(lambda ns, name, metric, pods: [waiting["value"]] * len(pods) if waiting["value"] is not None
                        else None, sync_s=0.05)
    emu.wait_until(lambda: emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 5, timeout=10)
    emu.wait_until(lambda: emu.events(NS, "vllm", "SuccessfulRescale"), timeout=5)
    session = connect(emu, tmp_path)
    watcher = ClusterWatcher(session, KubeConfig(namespaces=[NS])).start()
    try:
        assert watcher.wait_synced(10)
        emu.wait_until(lambda: any(AT_MAX in a.codes() for w in explain_workloads(watcher.snapshot())
                                   for a in w.autoscalers), timeout=10)
        a = hpa_of(explain_workloads(watcher.snapshot())[0])
        assert (a.current, a.desired) == (5, 5)
        assert a.reason == f"at maxReplicas 5 while {WAITING} 20 vs target 5 asks for more"
        assert any(e.startswith("SuccessfulRescale: New size: 5; reason: pods metric") for e in a.events)
        waiting["value"] = None  # the metrics pipeline breaks
        # The FailedGetPodsMetric event can reach the watcher before the HPA's ScalingActive condition does
        # (the reason then quotes the event): wait for the condition, the controller's own word.
        emu.wait_until(lambda: hpa_of(explain_workloads(watcher.snapshot())[0]).reason.startswith(
            "metric unavailable: ScalingActive is False (FailedGetPodsMetric)"), timeout=10)
        a = hpa_of(explain_workloads(watcher.snapshot())[0])
        assert METRIC_UNAVAILABLE in a.codes()
        assert emu.events(NS, "vllm", "FailedComputeMetricsReplicas")
    finally:
        watcher.stop()
        watcher.join()
        session.close()


def test_the_hpa_controller_holds_a_scale_down_inside_the_window(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.02)
    waiting = {"value": 10.0}
    emu.add_deployment(NS, "vllm", replicas=2, gpu_per_pod=0)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=8,
                behavior={"scaleDown": {"stabilizationWindowSeconds": 3600}})
    emu.set_hpa_metrics(lambda ns, name, metric, pods: [waiting["value"]] * len(pods), sync_s=0.05)
    emu.wait_until(lambda: emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 4, timeout=10)
    waiting["value"] = 1.0  # load gone: the recommendation drops, the window holds the replicas
    emu.wait_until(lambda: (emu.get("horizontalpodautoscalers", "vllm", NS)["status"]["conditions"][0]
                            .get("reason") == "ScaleDownStabilized"), timeout=10)
    _, by_name = read(emu, tmp_path)
    a = hpa_of(by_name["vllm"])
    assert (a.current, a.desired) == (4, 4) and a.codes()[0] == STABILISING
    assert a.reason.startswith("inside the scale-down stabilisation window (3600 s)")


# ------------------------------------------------------------------ watcher, documents, numbers

def test_the_watcher_sees_custom_resources_appear_and_change(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.02, custom_resources=("ScaledObject", "VariantAutoscaling"))
    emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    metrics = MetricsServer(f'wva_desired_replicas{{variant_name="vllm",exported_namespace="{NS}"}} 2\n')
    session = connect(emu, tmp_path)
    watcher = ClusterWatcher(session, KubeConfig(namespaces=[NS], wva_metrics_url=metrics.url, refresh_s=0.1)).start()
    try:
        assert watcher.wait_synced(10)
        assert {inf.kind for inf in watcher.informers} >= {"scaledobjects", "variantautoscalings"}
        emu.add_scaled_object(NS, "vllm", "vllm")
        emu.wait_until(lambda: watcher.snapshot().scaled_objects, timeout=10)
        emu.patch("scaledobjects", "vllm", {"metadata": {"annotations": {"autoscaling.keda.sh/paused": "true"}}},
                  NS, patch_type="merge")
        emu.wait_until(lambda: watcher.snapshot().scaled_objects[0].paused, timeout=10)
        emu.add_variant_autoscaling(NS, "vllm", "vllm", current_replicas=1, desired_replicas=2)
        emu.wait_until(lambda: [v.metric_desired_replicas for v in watcher.snapshot().variant_autoscalers] == [2.0],
                       timeout=10)
        assert watcher.snapshot().errors == ()
        metrics.close()  # the metrics source goes away: said once, the objects stay
        emu.wait_until(lambda: watcher.snapshot().errors, timeout=10)
        (err,) = watcher.snapshot().errors
        prefix = f"wva_desired_replicas from {metrics.url}: "
        assert err.startswith(prefix)
        assert err[len(prefix):].split(":")[0] in ("ConnectError", "ReadError", "RemoteProtocolError")  # refused, reset
    finally:
        watcher.stop()
        watcher.join()
        session.close()


def test_the_explanations_and_the_snapshot_survive_a_document_round_trip(emu, tmp_path):
    emu.install("ScaledObject", "VariantAutoscaling")
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_scaled_object(NS, "vllm", "vllm", annotations={"autoscaling.keda.sh/paused-replicas": "2"})
    emu.add_variant_autoscaling(NS, "vllm", "vllm", current_replicas=2, desired_replicas=3)
    snap, _ = read(emu, tmp_path)
    doc = json.loads(json.dumps(snap.to_dict()))
    again = from_doc(ClusterSnapshot, doc)
    assert again.scaled_objects == snap.scaled_objects and again.variant_autoscalers == snap.variant_autoscalers
    assert again.hpas == snap.hpas  # behaviour and owner included
    now = snap.taken_at
    assert [w.to_doc() for w in explain_workloads(again, now)] == [w.to_doc() for w in explain_workloads(snap, now)]
    (w,) = explain_workloads(snap, now)
    d = json.loads(json.dumps(w.to_doc()))
    assert d["key"] == f"Deployment/{NS}/vllm"
    assert [a["kind"] for a in d["autoscalers"]] == ["ScaledObject", "VariantAutoscaling", "HorizontalPodAutoscaler"]
    assert d["autoscalers"][0]["line"].startswith("KEDA vllm 2 → 2: paused at 2 replicas")
    assert to_doc(w)["autoscalers"][0]["why_not"][0]["code"] == PAUSED


def test_no_cluster_explains_nothing():
    assert explain_workloads(None) == []


def test_trigger_metadata_keeps_no_secret():
    from infertop.sources.kube.autoscalers import scaled_object_view

    so = scaled_object_view({"metadata": {"name": "x", "namespace": NS}, "spec": {"triggers": [{
        "type": "prometheus", "metadata": {"serverAddress": "http://admin:hunter2@prom:9090", "query": "up",
                                           "threshold": "5", "authModes": "basic", "password": "hunter2"}}]}})
    (t,) = so.triggers
    assert t.metadata == {"serverAddress": "http://prom:9090", "query": "up", "threshold": "5"}


@pytest.mark.parametrize("text, value", [("5", 5.0), ("500m", 0.5), ("1.5k", 1500.0), ("2Ki", 2048.0),
                                         ("80%", 80.0), ("1e3", 1000.0), (3, 3.0), ("x", None), ("", None),
                                         (None, None), ("5 apples", None)])
def test_quantities(text, value):
    assert parse_quantity(text) == value


def test_metric_values_read_as_numbers_not_milli_quantities():
    """An HPA reports averages as quantities ("21500m"); the why-not line says 21.5, as an operator reads it."""
    from infertop.analysis.autoscaler.hpa import MetricLine, _metric_text

    line = MetricLine("vllm:num_requests_running", "Pods", "21500m", "8", 21.5 / 8)
    assert _metric_text(line) == "vllm:num_requests_running 21.5 vs target 8"
    assert _metric_text(MetricLine("queue", "External", None, "500m", None)) == "queue n/a vs target 0.5"
