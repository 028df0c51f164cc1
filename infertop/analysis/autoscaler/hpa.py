"""Why an HPA (autoscaling/v2) is or is not scaling its workload: metrics against targets,
conditions, behaviour windows and tolerance, its events. Pure.
"""

from __future__ import annotations

import math

from ...domain.kube import (
    ClusterSnapshot,
    HpaView,
    ScaledObjectView,
    ScalingRulesView,
)
from .common import (
    AT_MAX,
    AT_MIN,
    AutoscalerExplanation,
    DEFAULT_DOWN_WINDOW_S,
    DEFAULT_TOLERANCE,
    DEFAULT_UP_WINDOW_S,
    HPA_EVENT_REASONS,
    METRIC_EVENT_REASONS,
    METRIC_UNAVAILABLE,
    MetricLine,
    PAUSED,
    POLICY_LIMITED,
    SCALE_EVENT_REASONS,
    STABILISING,
    TARGET_MISSING,
    UNABLE_TO_SCALE,
    WITHIN_TOLERANCE,
    WhyNot,
    _Workload,
    _cond_text,
    _direction,
    _event_line,
    _fmt_s,
    _parse_time,
    _pending_reason,
    _ratio,
    _recent,
    parse_quantity,
)


# ---------------------------------------------------------------- HPA

def _rules_note(direction: str, rules: ScalingRulesView | None, default_window: int) -> str | None:
    if rules is None:
        return None
    parts = []
    window = rules.stabilization_window_s
    parts.append(f"window {window if window is not None else default_window} s"
                 + ("" if window is not None else " (default)"))
    if rules.select_policy:
        parts.append(f"select {rules.select_policy}")
    for p in rules.policies:
        unit = "%" if p.type == "Percent" else " pods"
        parts.append(f"at most {p.value}{unit} per {p.period_s} s")
    if rules.tolerance is not None:
        parts.append(f"tolerance {rules.tolerance:.0%}")
    return f"scale-{direction}: " + ", ".join(parts)


def _window_s(h: HpaView, direction: str) -> int:
    rules = (h.behavior.scale_up if direction == "up" else h.behavior.scale_down) if h.behavior else None
    if rules is not None and rules.stabilization_window_s is not None:
        return rules.stabilization_window_s
    return DEFAULT_UP_WINDOW_S if direction == "up" else DEFAULT_DOWN_WINDOW_S


def _tolerance(h: HpaView, direction: str) -> float:
    rules = (h.behavior.scale_up if direction == "up" else h.behavior.scale_down) if h.behavior else None
    return rules.tolerance if rules is not None and rules.tolerance is not None else DEFAULT_TOLERANCE


def _metric_lines(h: HpaView) -> tuple[MetricLine, ...]:
    return tuple(MetricLine(m.name, m.type, m.current, m.target, _ratio(m.current, m.target)) for m in h.metrics)


def _quantity_text(q: str | None) -> str:
    """A Kubernetes quantity as an operator reads it: "21500m" → "21.5"; as given when it is not a number."""
    v = parse_quantity(q)
    if v is None:
        return q or "?"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _metric_text(m: MetricLine) -> str:
    current = _quantity_text(m.current) if m.current is not None else "n/a"
    return f"{m.name} {current} vs target {_quantity_text(m.target) if m.target else '?'}"


def explain_hpa(h: HpaView, snap: ClusterSnapshot, wl: _Workload, now: float | None,
                paused_by: ScaledObjectView | None = None) -> AutoscalerExplanation:
    """One HPA: current → desired and why it does not move."""
    current = h.current_replicas if h.current_replicas is not None else (wl.view.current if wl.view else None)
    desired = h.desired_replicas
    metrics = _metric_lines(h)
    events = sorted((e for e in snap.events if e.kind == "HorizontalPodAutoscaler" and e.name == h.name
                     and e.namespace == h.namespace and e.reason in HPA_EVENT_REASONS),
                    key=lambda e: -(e.last_seen_ts or 0.0))
    recent_warnings = [e for e in _recent(events, now) if e.warning]
    why: list[WhyNot] = []
    notes: list[str] = []

    if paused_by is not None:
        what = (f"pinned at {paused_by.paused_replicas} replicas" if paused_by.paused_replicas is not None
                else "scaling stopped")
        why.append(WhyNot(PAUSED, f"paused by KEDA ScaledObject {paused_by.name}: {what}"))
    if wl.view is None:
        why.append(WhyNot(TARGET_MISSING, f"its target {h.target_kind} {h.target_name} is not there"))

    able, active, limited = h.condition("AbleToScale"), h.condition("ScalingActive"), h.condition("ScalingLimited")
    if able is not None and able.status == "False":
        why.append(WhyNot(UNABLE_TO_SCALE, _cond_text(able)))
    elif any(e.reason in SCALE_EVENT_REASONS for e in recent_warnings):
        e = next(e for e in recent_warnings if e.reason in SCALE_EVENT_REASONS)
        why.append(WhyNot(UNABLE_TO_SCALE, f"{e.reason}: {e.message}"))

    metric_problem = None
    if active is not None and active.status == "False":
        metric_problem = _cond_text(active)
    else:
        ev = next((e for e in recent_warnings if e.reason in METRIC_EVENT_REASONS), None)
        if ev is not None and (active is None or active.reason != "ValidMetricFound"
                               or (ev.last_seen_ts or 0) >= (_parse_time(active.last_transition) or 0)):
            metric_problem = f"{ev.reason}: {ev.message}"
    missing = [m.name for m in metrics if m.current is None]
    if metric_problem is None and missing and metrics:
        metric_problem = f"no current value for {', '.join(missing)}"
    if metric_problem is not None:
        why.append(WhyNot(METRIC_UNAVAILABLE, f"metric unavailable: {metric_problem}"))

    ratios = [m.ratio for m in metrics if m.ratio is not None]
    above = [m for m in metrics if m.ratio is not None and m.ratio > 1 + _tolerance(h, "up")]
    below = bool(ratios) and all(r < 1 - _tolerance(h, "down") for r in ratios)

    if limited is not None and limited.status == "True" and limited.reason == "TooManyReplicas" or (
            h.max_replicas is not None and desired is not None and desired >= h.max_replicas and above):
        wants = f" while {_metric_text(above[0])} asks for more" if above else ""
        why.append(WhyNot(AT_MAX, f"at maxReplicas {h.max_replicas}{wants}"
                          + (f" ({limited.message})" if limited is not None and limited.status == "True"
                             and limited.message and not wants else "")))
    elif limited is not None and limited.status == "True" and limited.reason == "TooFewReplicas" or (
            h.min_replicas is not None and desired is not None and desired <= h.min_replicas and below
            and current is not None and current <= h.min_replicas):
        why.append(WhyNot(AT_MIN, f"at minReplicas {h.min_replicas}: the metrics are below target"))
    elif limited is not None and limited.status == "True" and limited.reason in ("ScaleUpLimit", "ScaleDownLimit"):
        why.append(WhyNot(POLICY_LIMITED, "limited by a scaling policy: " + (limited.message or limited.reason)))

    stabilised = able is not None and able.status == "True" and able.reason in ("ScaleDownStabilized",
                                                                                   "ScaleUpStabilized")
    if stabilised and able is not None:
        d = "down" if able.reason == "ScaleDownStabilized" else "up"
        why.append(WhyNot(STABILISING, f"inside the scale-{d} stabilisation window ({_window_s(h, d)} s)"
                          + (f": {able.message}" if able.message else "")))
    elif current is not None and desired is not None and desired == current and now is not None \
            and metric_problem is None and not (able is not None and able.reason == "ReadyForNewScale"):
        # no word from the controller: the metrics would move it, and it scaled less than a window ago
        last = _parse_time(h.last_scale_time)
        way = "up" if above else "down" if below else None
        would = math.ceil(current * max(ratios)) if ratios else current
        if way is not None and would != current and last is not None and now - last < _window_s(h, way):
            left = _window_s(h, way) - (now - last)
            why.append(WhyNot(STABILISING, f"inside the scale-{way} stabilisation window: last scaled "
                                           f"{_fmt_s(now - last)} ago, {_fmt_s(left)} left of {_window_s(h, way)} s"))

    if (ratios and len(ratios) == len(metrics) and metric_problem is None and desired == current
            and all(1 - _tolerance(h, "down") <= r <= 1 + _tolerance(h, "up") for r in ratios)):
        tol = _tolerance(h, "up")
        why.append(WhyNot(WITHIN_TOLERANCE, "within tolerance: " + ", ".join(
            f"{m.name} {_quantity_text(m.current)} vs {_quantity_text(m.target)} (×{m.ratio:.2f})"
            for m in metrics if m.ratio is not None)
            + f", inside ±{tol:.0%}"))

    pending = _pending_reason(wl, desired)
    if pending is not None:
        why.append(pending)

    for direction, rules, default in (("up", h.behavior.scale_up if h.behavior else None, DEFAULT_UP_WINDOW_S),
                                      ("down", h.behavior.scale_down if h.behavior else None, DEFAULT_DOWN_WINDOW_S)):
        note = _rules_note(direction, rules, default)
        if note:
            notes.append(note)
    if h.last_scale_time and now is not None and (last := _parse_time(h.last_scale_time)) is not None:
        notes.append(f"last scaled {_fmt_s(now - last)} ago")
    managed = f"ScaledObject {h.owner_name}" if h.owner_kind == "ScaledObject" and h.owner_name else None
    return AutoscalerExplanation(
        kind="HorizontalPodAutoscaler", namespace=h.namespace, name=h.name, current=current, desired=desired,
        min_replicas=h.min_replicas, max_replicas=h.max_replicas, direction=_direction(current, desired),
        why_not=tuple(why), metrics=metrics, notes=tuple(notes),
        events=tuple(_event_line(e, now) for e in events[:5]), managed_by=managed)
