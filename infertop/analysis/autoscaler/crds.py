"""Why a KEDA ScaledObject or an llm-d VariantAutoscaling is or is not scaling its workload. Pure.
"""

from __future__ import annotations


from ...domain.kube import (
    ClusterSnapshot,
    ScaledObjectView,
    VariantAutoscalerView,
)
from .common import (
    AT_MAX,
    AutoscalerExplanation,
    FALLBACK,
    INACTIVE,
    METRIC_UNAVAILABLE,
    MetricLine,
    NOT_APPLIED,
    NOT_READY,
    PAUSED,
    TARGET_MISSING,
    UNABLE_TO_SCALE,
    WhyNot,
    _Workload,
    _cond_text,
    _direction,
    _event_line,
    _fmt_s,
    _parse_time,
    _pending_reason,
)


# ---------------------------------------------------------------- KEDA

def explain_scaled_object(so: ScaledObjectView, snap: ClusterSnapshot, wl: _Workload, now: float | None,
                          hpa: AutoscalerExplanation | None) -> AutoscalerExplanation:
    """One KEDA ScaledObject, through the HPA it owns."""
    current = hpa.current if hpa is not None else (wl.view.current if wl.view else None)
    desired = hpa.desired if hpa is not None else None
    why: list[WhyNot] = []
    notes: list[str] = []
    paused_cond = so.condition("Paused")
    if so.paused or (paused_cond is not None and paused_cond.status == "True"):
        if so.paused_replicas is not None:
            desired = so.paused_replicas
            why.append(WhyNot(PAUSED, f"paused at {so.paused_replicas} replicas "
                                      f"(annotation autoscaling.keda.sh/paused-replicas)"))
        else:
            desired = current
            why.append(WhyNot(PAUSED, "paused (annotation autoscaling.keda.sh/paused): KEDA does not scale it"))
    if wl.view is None:
        why.append(WhyNot(TARGET_MISSING, f"its target {so.target_kind} {so.target_name} is not there"))
    ready = so.condition("Ready")
    if ready is not None and ready.status == "False":
        why.append(WhyNot(NOT_READY, "not ready: " + (ready.message or ready.reason or "Ready is False")))
    fallback = so.condition("Fallback")
    if fallback is not None and fallback.status == "True":
        to = f" to {so.fallback_replicas} replicas" if so.fallback_replicas is not None else ""
        why.append(WhyNot(FALLBACK, f"falling back{to}: " + (fallback.message or "a trigger keeps failing")))
    failing = [t for t in so.triggers if t.health is not None and t.health != "Happy"]
    for t in failing:
        n = f" ({t.failures} failures)" if t.failures else ""
        why.append(WhyNot(METRIC_UNAVAILABLE, f"metric unavailable: trigger {t.name or t.type} is {t.health}{n}"))
    active = so.condition("Active")
    if active is not None and active.status == "False" and not so.paused:
        floor = so.min_replicas if so.min_replicas is not None else 0
        cool = f" after the {so.cooldown_period_s} s cooldown" if so.cooldown_period_s is not None else ""
        why.append(WhyNot(INACTIVE, f"no trigger active: scales to minReplicaCount {floor}{cool}"))
    if so.hpa_name and hpa is None and not so.paused:
        why.append(WhyNot(UNABLE_TO_SCALE, f"the HPA it owns ({so.hpa_name}) is not there"))
    if hpa is not None and not so.paused:
        for w in hpa.why_not:
            if w.code not in {x.code for x in why}:
                why.append(w)
    elif so.paused:
        pending = _pending_reason(wl, desired)
        if pending is not None:
            why.append(pending)
    metrics = []
    for t in so.triggers:
        target = t.metadata.get("threshold") or t.metadata.get("targetValue") or t.metadata.get("value")
        metrics.append(MetricLine(t.name or (t.metadata.get("metricName") or t.type), t.type, None, target, None))
    if hpa is not None:  # KEDA's HPA has the current values, as external metrics s0-…, s1-…
        metrics = [MetricLine(m.name, m.type, m.current, m.target, m.ratio) for m in hpa.metrics] or metrics
    if so.hpa_name:
        notes.append(f"owns HPA {so.hpa_name}")
    if so.polling_interval_s is not None:
        notes.append(f"polls every {so.polling_interval_s} s")
    if so.cooldown_period_s is not None:
        notes.append(f"cooldown {so.cooldown_period_s} s")
    if so.fallback_replicas is not None:
        notes.append(f"fallback: {so.fallback_replicas} replicas after "
                     f"{so.fallback_failure_threshold if so.fallback_failure_threshold is not None else '?'} failures")
    for t in so.triggers:
        q = t.metadata.get("query")
        if q:
            notes.append(f"{t.type} trigger: {q} > {t.metadata.get('threshold', '?')}")
    if so.last_active_time and now is not None and (la := _parse_time(so.last_active_time)) is not None:
        notes.append(f"last active {_fmt_s(now - la)} ago")
    events = sorted((e for e in snap.events if e.kind == "ScaledObject" and e.name == so.name
                     and e.namespace == so.namespace), key=lambda e: -(e.last_seen_ts or 0.0))
    return AutoscalerExplanation(
        kind="ScaledObject", namespace=so.namespace, name=so.name, current=current, desired=desired,
        min_replicas=so.min_replicas, max_replicas=so.max_replicas, direction=_direction(current, desired),
        why_not=tuple(why), metrics=tuple(metrics), notes=tuple(notes),
        events=tuple(_event_line(e, now) for e in events[:5]))


# ---------------------------------------------------------------- llm-d WVA

def explain_variant(va: VariantAutoscalerView, snap: ClusterSnapshot, wl: _Workload, now: float | None,
                    hpas: list[AutoscalerExplanation]) -> AutoscalerExplanation:
    """One llm-d VariantAutoscaling: its decision, and where the chain decision → metric → HPA → Deployment stops."""
    current = va.current_replicas if va.current_replicas is not None else (wl.view.current if wl.view else None)
    desired = va.desired_replicas
    why: list[WhyNot] = []
    notes: list[str] = []
    if wl.view is None:
        why.append(WhyNot(TARGET_MISSING, f"its target {va.target_kind} {va.target_name} is not there"))
    for ctype in ("TargetResolved", "Ready"):
        c = va.condition(ctype)
        if c is not None and c.status == "False":
            why.append(WhyNot(NOT_READY, _cond_text(c)))
    metrics_c = va.condition("MetricsAvailable")
    if metrics_c is not None and metrics_c.status == "False":
        why.append(WhyNot(METRIC_UNAVAILABLE, "metric unavailable: " + _cond_text(metrics_c)))
    if va.max_replicas is not None and desired is not None and desired >= va.max_replicas:
        why.append(WhyNot(AT_MAX, f"at maxReplicas {va.max_replicas}"))
    if va.metric_desired_replicas is not None and desired is not None \
            and round(va.metric_desired_replicas) != desired:
        why.append(WhyNot(NOT_APPLIED, f"wva_desired_replicas is {va.metric_desired_replicas:g}, "
                                       f"its status says {desired}: the metric is not published yet"))
    consumer = next((h for h in hpas if any("wva_desired_replicas" in m.name for m in h.metrics)), None)
    if consumer is not None:
        notes.append(f"applied through HPA {consumer.name} (external metric wva_desired_replicas)")
        if desired is not None and consumer.desired is not None and consumer.desired != desired:
            why.append(WhyNot(NOT_APPLIED, f"HPA {consumer.name} wants {consumer.desired}, not {desired}"
                                           + (f": {consumer.reason}" if consumer.reason else "")))
    if va.applied is False:
        why.append(WhyNot(NOT_APPLIED, "decision not applied (status.actuation.applied is false)"))
    elif consumer is None and desired is not None and current is not None and desired != current:
        notes.append("no HPA consumes wva_desired_replicas: nothing applies this decision")
    pending = _pending_reason(wl, desired)
    if pending is not None:
        why.append(pending)
    if va.model_id:
        notes.append(f"model {va.model_id}")
    if va.accelerator:
        notes.append(f"accelerator {va.accelerator}")
    if va.last_run_time and now is not None and (t := _parse_time(va.last_run_time)) is not None:
        notes.append(f"optimised {_fmt_s(now - t)} ago")
    metrics: tuple[MetricLine, ...] = ()
    if va.metric_desired_replicas is not None:
        metrics = (MetricLine("wva_desired_replicas", "External", f"{va.metric_desired_replicas:g}", None, None),)
    events = sorted((e for e in snap.events if e.kind == "VariantAutoscaling" and e.name == va.name
                     and e.namespace == va.namespace), key=lambda e: -(e.last_seen_ts or 0.0))
    return AutoscalerExplanation(
        kind="VariantAutoscaling", namespace=va.namespace, name=va.name, current=current, desired=desired,
        min_replicas=va.min_replicas, max_replicas=va.max_replicas, direction=_direction(current, desired),
        why_not=tuple(why), metrics=metrics, notes=tuple(notes),
        events=tuple(_event_line(e, now) for e in events[:5]))
