"""Hand-made cluster snapshots for the autoscaler verdicts' tests (domain values, a fake clock from
``T0``): a Deployment ``vllm`` in namespace ``NS`` with its ``engines``, ``pod``s and ``hpa``
(``conds``: its conditions), the ``cluster`` and ``fleet`` states around them under ``SLO``, and
``run`` (each state one tick of a Triage, the verdicts after each)."""

from __future__ import annotations

from dataclasses import replace

from infertop.analysis.triage import Triage
from infertop.domain.engine import UP, EngineStats
from infertop.domain.kube import ClusterSnapshot, HpaView, KubeCondition, MetricView, PodView, WorkloadView
from infertop.state.fleet_types import FRESH, ClusterState, EngineState, FleetState, Freshness, Slo


SLO = Slo(ttft_p99_s=2.0, itl_p95_s=0.04, e2e_p99_s=5.0, queue_p99_s=1.0, kv_cache_pct=90.0)


NS = "serving"


T0 = 50_000.0


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


def run(states, t0=T0):
    t = Triage()
    return [t.evaluate(replace(st, taken_at=t0 + i), t0 + i) for i, st in enumerate(states)]
