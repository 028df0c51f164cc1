"""Autoscaler verdicts over hand-made cluster snapshots and a fake clock: at max while the queue
builds, blind, blocked by Pending GPU pods, paused (with the chain) — each alone, each cleared."""

from __future__ import annotations

from dataclasses import replace

import pytest
from autoscaler_states import NS, T0, WAITING, cluster, conds, engines, fleet, hpa, pod, run

from infertop.analysis.triage.engine import TIMING
from infertop.domain.kube import EventView, ScaledObjectView, VariantAutoscalerView

SUBJECT = "serving/Deployment/vllm"


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
