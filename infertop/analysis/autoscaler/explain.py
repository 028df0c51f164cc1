"""What the cluster's autoscalers decided for each workload, and why they are not scaling.

Pure: a :class:`~infertop.domain.kube.ClusterSnapshot` (or the fleet state's
``ClusterState`` holding one) in, plain frozen dataclasses out. No I/O, no clock
of its own (``now`` is an argument). Every autoscaler that targets a workload
gets one :class:`AutoscalerExplanation`: current → desired and, when it does
not move (or cannot), the reasons in words (:class:`WhyNot`), most telling first.

Autoscalers read: HPAs (autoscaling/v2), KEDA ScaledObjects and llm-d
VariantAutoscaling objects. The signals, as the controllers report them:

- ``AbleToScale=False`` (FailedGetScale, FailedUpdateScale): the target cannot be scaled.
- ``ScalingActive=False`` (FailedGetPodsMetric, FailedGetExternalMetric, …) or
  warning events of those reasons, or a metric without a current value: metric unavailable.
- ``ScalingLimited=True`` TooManyReplicas (or desired at maxReplicas while a metric is
  above target): at maxReplicas; TooFewReplicas: at minReplicas.
- ``AbleToScale=True`` ScaleDownStabilized / ScaleUpStabilized, or a last scale inside
  the behaviour's window while the metrics point the other way: inside a stabilisation window.
- every metric within the tolerance (±10 % unless the behaviour says otherwise) of its
  target: within tolerance.
- pods of the workload Pending with "Insufficient nvidia.com/gpu": no GPU to scale onto.
- KEDA ``autoscaling.keda.sh/paused`` / ``paused-replicas`` (or ``Paused=True``): paused.

This module never imports textual or rich.
"""

from __future__ import annotations

from typing import Any

from ...domain.kube import (
    ClusterSnapshot,
    HpaView,
    ScaledObjectView,
    VariantAutoscalerView,
)
from .common import (
    AT_MAX,
    AT_MIN,
    AutoscalerExplanation,
    FALLBACK,
    INACTIVE,
    METRIC_UNAVAILABLE,
    MetricLine,
    NOT_APPLIED,
    NOT_READY,
    PAUSED,
    PENDING_GPU,
    POLICY_LIMITED,
    STABILISING,
    TARGET_MISSING,
    UNABLE_TO_SCALE,
    WITHIN_TOLERANCE,
    WhyNot,
    WorkloadAutoscalers,
    _Workload,
    _workload_context,
    parse_quantity,
)
from .crds import explain_scaled_object, explain_variant
from .hpa import explain_hpa

__all__ = [
    "AT_MAX",
    "AT_MIN",
    "METRIC_UNAVAILABLE",
    "NOT_APPLIED",
    "NOT_READY",
    "PAUSED",
    "PENDING_GPU",
    "POLICY_LIMITED",
    "STABILISING",
    "TARGET_MISSING",
    "UNABLE_TO_SCALE",
    "WITHIN_TOLERANCE",
    "FALLBACK",
    "INACTIVE",
    "AutoscalerExplanation",
    "MetricLine",
    "WhyNot",
    "WorkloadAutoscalers",
    "explain_workloads",
    "parse_quantity",
]


# ---------------------------------------------------------------- all of it

def _snapshot_of(cluster_state: Any) -> ClusterSnapshot | None:
    if cluster_state is None or isinstance(cluster_state, ClusterSnapshot):
        return cluster_state
    return getattr(cluster_state, "snapshot", None)  # the fleet state's ClusterState


def explain_workloads(cluster_state: Any, now: float | None = None) -> list[WorkloadAutoscalers]:
    """Every workload targeted by at least one autoscaler, with each autoscaler's explanation.

    ``cluster_state``: a ClusterSnapshot, or the fleet state's ClusterState (None: no cluster → []).
    ``now`` (epoch s) defaults to the snapshot's ``taken_at``. Workloads are sorted by namespace,
    name; an autoscaler whose target is not in the snapshot gets an entry with ``replicas=None``."""
    snap = _snapshot_of(cluster_state)
    if snap is None:
        return []
    now = snap.taken_at if now is None else now
    by_target: dict[tuple[str, str, str], list] = {}

    def target(kind: str, ns: str, name: str) -> list:
        return by_target.setdefault((kind or "Deployment", ns, name), [])

    for h in snap.hpas:
        target(h.target_kind, h.namespace, h.target_name).append(h)
    for so in snap.scaled_objects:
        target(so.target_kind, so.namespace, so.target_name).append(so)
    for va in snap.variant_autoscalers:
        target(va.target_kind, va.namespace, va.target_name).append(va)

    workloads = {(w.kind, w.namespace, w.name): w for w in snap.workloads}
    out = []
    for (kind, ns, name), objs in sorted(by_target.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        w = workloads.get((kind, ns, name))
        wl = _workload_context(snap, w) if w is not None else _Workload(None, 0, None)
        hpas = [o for o in objs if isinstance(o, HpaView)]
        sos = [o for o in objs if isinstance(o, ScaledObjectView)]
        vas = [o for o in objs if isinstance(o, VariantAutoscalerView)]
        owner_of = {so.hpa_name or f"keda-hpa-{so.name}": so for so in sos}
        hpa_lines: dict[str, AutoscalerExplanation] = {}
        for h in hpas:
            owner = owner_of.get(h.name) if h.owner_kind in (None, "ScaledObject") else None
            if h.owner_kind == "ScaledObject" and h.owner_name:
                owner = next((s for s in sos if s.name == h.owner_name), owner)
            line = explain_hpa(h, snap, wl, now, paused_by=owner if owner is not None and owner.paused else None)
            if owner is not None and line.managed_by is None:
                line = _with_manager(line, f"ScaledObject {owner.name}")
            hpa_lines[h.name] = line
        lines: list[AutoscalerExplanation] = []
        for so in sos:
            owned = hpa_lines.get(so.hpa_name or f"keda-hpa-{so.name}")
            lines.append(explain_scaled_object(so, snap, wl, now, owned))
        for va in vas:
            lines.append(explain_variant(va, snap, wl, now, list(hpa_lines.values())))
        lines.extend(hpa_lines.values())
        out.append(WorkloadAutoscalers(
            kind=kind, namespace=ns, name=name, replicas=w.desired if w is not None else None,
            ready=wl.ready, pending_gpu=wl.pending_gpu, pending_message=wl.pending_message,
            autoscalers=tuple(lines)))
    return out


def _with_manager(line: AutoscalerExplanation, manager: str) -> AutoscalerExplanation:
    from dataclasses import replace

    return replace(line, managed_by=manager)
