"""Autoscaler verdicts over hand-made cluster snapshots and a fake clock: at max while the queue
builds, blind, blocked by Pending GPU pods, paused (with the chain) — each alone, each cleared."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infertop.analysis.triage import Triage
from infertop.analysis.triage.engine import TIMING
from infertop.domain.engine import UP, EngineStats
from infertop.domain.kube import (
    ClusterSnapshot,
    EventView,
    HpaView,
    KubeCondition,
    MetricView,
    PodView,
    ScaledObjectView,
    VariantAutoscalerView,
    WorkloadView,
)
from infertop.state.fleet import FRESH, ClusterState, EngineState, FleetState, Freshness, Slo

SLO = Slo(ttft_p99_s=2.0, itl_p95_s=0.04, e2e_p99_s=5.0, queue_p99_s=1.0, kv_cache_pct=90.0)
NS, T0 = "serving", 50_000.0
SUBJECT = "serving/Deployment/vllm"
WAITING = "vllm:num_requests_waiting"


def engines(n=4, waiting=0.0, running=10.0):
    out = []
    for i in range(n):
        s = EngineStats(name=f"vllm-{i}", url=f"http://127.0.0.1:80{i}0", state=UP, model="llama", max_num_seqs=16,
                        running=running, waiting=waiting, kv_cache_pct=40.0, requests_per_s=4.0, e2e_p95_s=3.0,
                        preemptions_per_s=0.0)  # no token count: the hung rule has nothing to read
        out.append(EngineState(s, Freshness(FRESH, s.url, 0.0, 0.0)))
    return tuple(out)


def pod(i, phase="Running", unschedulable=None):
    return PodView(NS, f"vllm-{i}", phase=phase, status=phase, ready=phase == "Running", owner_kind="Deployment",
                   owner_name="vllm", unschedulable_message=unschedulable, gpus=1)


def conds(active=("True", "ValidMetricFound"), limited=("False", "DesiredWithinRange")):
    return (KubeCondition("AbleToScale", "True", "ReadyForNewScale"), KubeCondition("ScalingActive", *active),
            KubeCondition("ScalingLimited", *limited))


def hpa(current=4, desired=4, top=4, metric="2", conditions=None, **kw):
    return HpaView(NS, kw.pop("name", "vllm"), "Deployment", "vllm", min_replicas=1, max_replicas=top,
                   current_replicas=current, desired_replicas=desired,
                   metrics=(MetricView(WAITING, "Pods", metric, "2"),),
                   conditions=conds() if conditions is None else conditions, **kw)


def cluster(hpas=(hpa(),), pods=tuple(pod(i) for i in range(4)), desired=4, ready=4, events=(), sos=(), vas=()):
    snap = ClusterSnapshot("kind-test", (NS,), T0, workloads=(WorkloadView("Deployment", NS, "vllm", desired=desired,
                                                                           current=desired, ready=ready),),
                           pods=tuple(pods), hpas=tuple(hpas), events=tuple(events), scaled_objects=tuple(sos),
                           variant_autoscalers=tuple(vas))
    return ClusterState(snap, Freshness(FRESH, "kind-test", T0, 0.0))


def fleet(c, eng=None, docs=()):
    return FleetState(tick=0, taken_at=T0, refresh_s=1.0, window_s=60.0, slo=SLO,
                      engines=engines() if eng is None else eng, cluster=c, autoscalers=tuple(docs))


AT_MAX = fleet(cluster(hpas=(hpa(metric="6", conditions=conds(limited=("True", "TooManyReplicas"))),)),
               engines(waiting=6.0))
AT_MAX_QUIET = replace(AT_MAX, engines=engines(waiting=0.0))  # at max and keeping up: nothing to say
# blind and at its maximum too: blind speaks (at max means nothing when it cannot see)
BLIND = fleet(cluster(hpas=(hpa(metric=None, conditions=conds(active=("False", "FailedGetPodsMetric"),
                                                               limited=("True", "TooManyReplicas"))),),
                      events=(EventView(NS, "Warning", "FailedGetPodsMetric", "unable to get metric " + WAITING,
                                        "HorizontalPodAutoscaler", "vllm", last_seen_ts=T0),)),
              engines(waiting=6.0))
GPU_MSG = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available."
BLOCKED = fleet(cluster(hpas=(hpa(current=4, desired=6, top=8, metric="3"),), desired=6, ready=4,
                        pods=(*(pod(i) for i in range(4)), pod(4, "Pending", GPU_MSG), pod(5, "Pending", GPU_MSG)),
                        events=(EventView(NS, "Normal", "NotTriggerScaleUp",
                                          "pod didn't trigger scale-up: 1 max node group size reached", "Pod", "vllm-4",
                                          last_seen_ts=T0),)),
                engines(waiting=6.0))
KEDA_HPA = hpa(name="keda-hpa-vllm", current=2, desired=2, top=10, owner_kind="ScaledObject", owner_name="vllm")
PAUSED_CHAIN = fleet(cluster(hpas=(KEDA_HPA,), desired=2, ready=2, pods=(pod(0), pod(1)),
                             sos=(ScaledObjectView(NS, "vllm", "Deployment", "vllm", min_replicas=1, max_replicas=10,
                                                   hpa_name="keda-hpa-vllm", paused=True, paused_replicas=2),),
                             vas=(VariantAutoscalerView(NS, "vllm-va", "Deployment", "vllm", current_replicas=2,
                                                        desired_replicas=7, max_replicas=10),)),
                     engines(2), docs=[{"workload": "Deployment/serving/vllm", "engines": ["vllm-0", "vllm-1"]}])
PAUSED_QUIET = fleet(cluster(hpas=(KEDA_HPA,), desired=2, ready=2, pods=(pod(0), pod(1)),
                             sos=(ScaledObjectView(NS, "vllm", "Deployment", "vllm", min_replicas=1, max_replicas=10,
                                                   hpa_name="keda-hpa-vllm", paused=True, paused_replicas=2),)),
                     engines(2))
HEALTHY = fleet(cluster(), engines())


def run(states, t0=T0):
    t = Triage()
    return [t.evaluate(replace(st, taken_at=t0 + i), t0 + i) for i, st in enumerate(states)]


def kinds(verdicts):
    return {(v.kind, v.subject) for v in verdicts}


@pytest.mark.parametrize("case,state,kind", [
    ("at max while the queue builds", AT_MAX, "autoscaler-at-max"),
    ("blind: ScalingActive False, FailedGetPodsMetric", BLIND, "autoscaler-blind"),
    ("blocked: Pending for lack of nvidia.com/gpu", BLOCKED, "autoscaler-blocked"),
    ("paused while the variant autoscaler wants more", PAUSED_CHAIN, "autoscaler-paused"),
])
def test_each_autoscaler_verdict_onsets_alone_and_clears(case, state, kind):
    for_s, clear_s = TIMING[kind]
    n_on = int(for_s) + 5
    out = run([HEALTHY] * 5 + [state] * n_on + [HEALTHY] * int(clear_s + 5))
    assert all(v == () for v in out[:5])
    first = next(i for i, v in enumerate(out) if (kind, SUBJECT) in kinds(v))
    assert first - 5 == for_s, case
    during = set().union(*map(kinds, out[5:5 + n_on]))
    assert {k for k in during if k[0].startswith("autoscaler-")} == {(kind, SUBJECT)}, (case, during)
    assert out[-1] == (), case


def test_at_max_proposes_a_higher_max_replicas_by_littles_law():
    (v,) = run([AT_MAX] * 20)[-1]
    (r,) = v.remedies
    # 4 engines × 4 req/s × 3 s (E2E p95) × 1.3 / 16 = 3.9 → 4 engines, and at least one more than the max
    assert (r.key, r.target, r.value) == ("H", "serving/HorizontalPodAutoscaler/vllm", 5)
    assert "raise maxReplicas of HPA vllm 4 → 5" in r.text
    assert any(e.signal == "waiting" and e.value == "24 on 4 engines" for e in v.evidence)


@pytest.mark.parametrize("state", [AT_MAX_QUIET, PAUSED_QUIET, HEALTHY])
def test_at_max_or_paused_with_nothing_waiting_is_no_verdict(state):
    assert run([state] * 60)[-1] == ()


def test_blocked_names_the_pending_pod_and_the_cluster_autoscaler():
    (v,) = [v for v in run([BLOCKED] * 20)[-1] if v.kind == "autoscaler-blocked"]
    assert v.severity == "critical" and "2 pod(s) Pending for lack of nvidia.com/gpu" in v.explanation
    assert any(e.signal == "cluster autoscaler" and "max node group size" in e.value for e in v.evidence)
    assert v.remedies[-1].target == "serving/Pod/vllm-4"


def test_paused_says_the_chain():
    (v,) = run([PAUSED_CHAIN] * 20)[-1]
    assert "variant autoscaler vllm-va wants 7, KEDA vllm paused at 2" in v.explanation


def test_pending_gpu_pods_while_the_engines_keep_up_are_no_verdict():
    """The HPA asks more pods than there are GPUs, but nothing waits: the Autoscaler pane shows the
    Pending pods; triage stays quiet (the healthy demo sat on a permanent critical verdict)."""
    quiet = replace(BLOCKED, engines=engines(waiting=0.5))
    assert not [v for v in run([quiet] * 30)[-1] if v.kind == "autoscaler-blocked"]
    assert [v.kind for v in run([BLOCKED] * 20)[-1] if v.kind == "autoscaler-blocked"] == ["autoscaler-blocked"]
