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

import math
import re
from dataclasses import dataclass
from typing import Any

from ..domain.kube import (
    ClusterSnapshot,
    EventView,
    HpaView,
    KubeCondition,
    ScaledObjectView,
    ScalingRulesView,
    VariantAutoscalerView,
    WorkloadView,
    short_unschedulable,
)
from ..state.codec import to_doc

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

DEFAULT_TOLERANCE = 0.10  # the HPA controller's --horizontal-pod-autoscaler-tolerance
DEFAULT_UP_WINDOW_S = 0
DEFAULT_DOWN_WINDOW_S = 300
RECENT_EVENT_S = 600.0  # a warning event older than this no longer explains the present

# WhyNot codes (stable: the UI and snapshot --json key on them)
PAUSED = "paused"
UNABLE_TO_SCALE = "unable_to_scale"
TARGET_MISSING = "target_missing"
METRIC_UNAVAILABLE = "metric_unavailable"
FALLBACK = "fallback"
AT_MAX = "at_max"
AT_MIN = "at_min"
POLICY_LIMITED = "policy_limited"
STABILISING = "stabilising"
WITHIN_TOLERANCE = "within_tolerance"
PENDING_GPU = "pending_gpu"
NOT_READY = "not_ready"
NOT_APPLIED = "not_applied"
INACTIVE = "inactive"

METRIC_EVENT_REASONS = ("FailedGetPodsMetric", "FailedGetExternalMetric", "FailedGetObjectMetric",
                        "FailedGetResourceMetric", "FailedGetContainerResourceMetric", "FailedComputeMetricsReplicas")
SCALE_EVENT_REASONS = ("FailedGetScale", "FailedUpdateScale", "FailedRescale")
HPA_EVENT_REASONS = ("SuccessfulRescale", *SCALE_EVENT_REASONS, *METRIC_EVENT_REASONS)
PAUSED_ANNOTATIONS = ("autoscaling.keda.sh/paused", "autoscaling.keda.sh/paused-replicas")


# ---------------------------------------------------------------- results

@dataclass(frozen=True)
class WhyNot:
    """One reason an autoscaler does not (or cannot) move: a stable ``code`` and the words."""

    code: str
    text: str


@dataclass(frozen=True)
class MetricLine:
    """One metric an autoscaler scales on: its value against its target."""

    name: str
    type: str  # Pods, Resource, Object, External, ContainerResource; KEDA: the trigger type
    current: str | None = None
    target: str | None = None
    ratio: float | None = None  # current / target when both are numbers


@dataclass(frozen=True)
class AutoscalerExplanation:
    """One autoscaler's view of one workload."""

    kind: str  # HorizontalPodAutoscaler, ScaledObject, VariantAutoscaling
    namespace: str
    name: str
    current: int | None = None
    desired: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    direction: str = "unknown"  # up, down, hold, unknown
    why_not: tuple[WhyNot, ...] = ()
    metrics: tuple[MetricLine, ...] = ()
    notes: tuple[str, ...] = ()  # behaviour, windows, fallback, the HPA KEDA owns, …
    events: tuple[str, ...] = ()  # "SuccessfulRescale: New size: 4; …", newest first
    managed_by: str | None = None  # "ScaledObject serving/vllm" for the HPA KEDA made

    @property
    def short_kind(self) -> str:
        return {"HorizontalPodAutoscaler": "HPA", "ScaledObject": "KEDA", "VariantAutoscaling": "WVA"}.get(
            self.kind, self.kind)

    @property
    def transition(self) -> str:
        """``4 → 6``, ``4 → ?``: current → desired."""
        def n(v: int | None) -> str:
            return "?" if v is None else str(v)
        return f"{n(self.current)} → {n(self.desired)}"

    @property
    def reason(self) -> str | None:
        """The main reason in words, or None when nothing holds it back."""
        return self.why_not[0].text if self.why_not else None

    @property
    def line(self) -> str:
        """One line: ``HPA vllm 4 → 6: at maxReplicas 6 …``."""
        head = f"{self.short_kind} {self.name} {self.transition}"
        return f"{head}: {self.reason}" if self.reason else head

    def codes(self) -> tuple[str, ...]:
        return tuple(w.code for w in self.why_not)


@dataclass(frozen=True)
class WorkloadAutoscalers:
    """A workload and every autoscaler that targets it."""

    kind: str
    namespace: str
    name: str
    replicas: int | None = None  # spec.replicas (None: the workload is not in the snapshot)
    ready: int = 0
    pending_gpu: int = 0  # pods Pending for lack of nvidia.com/gpu
    pending_message: str | None = None  # the scheduler's words for them
    autoscalers: tuple[AutoscalerExplanation, ...] = ()

    @property
    def key(self) -> str:
        """``Deployment/ns/name``, as :attr:`WorkloadView.key`."""
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def why_not(self) -> tuple[WhyNot, ...]:
        """Every distinct reason across the autoscalers, in order."""
        seen: dict[tuple[str, str], WhyNot] = {}
        for a in self.autoscalers:
            for w in a.why_not:
                seen.setdefault((w.code, w.text), w)
        return tuple(seen.values())

    def to_doc(self) -> dict:
        doc = to_doc(self)
        doc["key"] = self.key
        for a, d in zip(self.autoscalers, doc["autoscalers"]):
            d["line"] = a.line
        return doc


# ---------------------------------------------------------------- numbers

_SUFFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "E": 1e18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE%]?)\s*$")


def parse_quantity(text: Any) -> float | None:
    """A Kubernetes quantity (``500m``, ``5``, ``1Gi``, ``80%``) as a number; None when it is not one."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) if math.isfinite(float(text)) else None
    if not isinstance(text, str):
        return None
    m = _QUANTITY.match(text)
    if not m:
        return None
    value = float(m.group(1))
    suffix = m.group(2)
    return value if suffix == "%" else value * _SUFFIX[suffix]


def _ratio(current: str | None, target: str | None) -> float | None:
    c, t = parse_quantity(current), parse_quantity(target)
    if c is None or t is None or t <= 0:
        return None
    return c / t


def _fmt_s(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _parse_time(value: str | None) -> float | None:
    import datetime as _dt

    if not value:
        return None
    try:
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _cond_text(c: KubeCondition) -> str:
    head = f"{c.type} is {c.status}" + (f" ({c.reason})" if c.reason else "")
    return f"{head}: {c.message}" if c.message else head


def _direction(current: int | None, desired: int | None) -> str:
    if current is None or desired is None:
        return "unknown"
    return "up" if desired > current else "down" if desired < current else "hold"


# ---------------------------------------------------------------- context

@dataclass(frozen=True)
class _Workload:
    """What an explanation needs to know of the targeted workload."""

    view: WorkloadView | None
    pending_gpu: int
    pending_message: str | None

    @property
    def ready(self) -> int:
        return self.view.ready if self.view is not None else 0


def _workload_context(snap: ClusterSnapshot, w: WorkloadView) -> _Workload:
    pending = [p for p in snap.pods_of(w) if not p.terminating and p.phase == "Pending" and p.unschedulable_message
               and "nvidia.com/gpu" in p.unschedulable_message]
    message = short_unschedulable(pending[0].unschedulable_message or "") if pending else None
    if not pending:  # the pods may be gone from view, their FailedScheduling events are not
        for e in snap.events:
            if e.reason == "FailedScheduling" and "nvidia.com/gpu" in e.message and e.kind == "Pod" \
                    and e.namespace == w.namespace and e.name.startswith(w.name + "-") \
                    and any(p.name == e.name and p.phase == "Pending" for p in snap.pods):
                message = short_unschedulable(e.message)
                pending = [e]
                break
    return _Workload(w, len(pending), message)


def _recent(events: list[EventView], now: float | None) -> list[EventView]:
    if now is None:
        return events
    return [e for e in events if e.last_seen_ts is None or now - e.last_seen_ts <= RECENT_EVENT_S]


def _event_line(e: EventView, now: float | None) -> str:
    age = f" ({_fmt_s(now - e.last_seen_ts)} ago)" if now is not None and e.last_seen_ts is not None else ""
    count = f" ×{e.count}" if e.count > 1 else ""
    return f"{e.reason}{count}: {e.message}{age}"


def _pending_reason(wl: _Workload, desired: int | None) -> WhyNot | None:
    if wl.pending_gpu <= 0 or wl.view is None:
        return None
    if desired is not None and desired <= wl.ready:
        return None
    want = f"{desired} wanted, " if desired is not None else ""
    return WhyNot(PENDING_GPU, f"{want}{wl.ready} ready: {wl.pending_gpu} pod(s) Pending for lack of nvidia.com/gpu"
                               + (f" ({wl.pending_message})" if wl.pending_message else ""))


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


def _metric_text(m: MetricLine) -> str:
    return f"{m.name} {m.current if m.current is not None else 'n/a'} vs target {m.target or '?'}"


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
    if stabilised:
        d = "down" if able.reason == "ScaleDownStabilized" else "up"
        why.append(WhyNot(STABILISING, f"inside the scale-{d} stabilisation window ({_window_s(h, d)} s)"
                          + (f": {able.message}" if able.message else "")))
    elif current is not None and desired is not None and desired == current and now is not None \
            and metric_problem is None and not (able is not None and able.reason == "ReadyForNewScale"):
        # no word from the controller: the metrics would move it, and it scaled less than a window ago
        last = _parse_time(h.last_scale_time)
        d = "up" if above else "down" if below else None
        would = math.ceil(current * max(ratios)) if ratios else current
        if d is not None and would != current and last is not None and now - last < _window_s(h, d):
            left = _window_s(h, d) - (now - last)
            why.append(WhyNot(STABILISING, f"inside the scale-{d} stabilisation window: last scaled "
                                           f"{_fmt_s(now - last)} ago, {_fmt_s(left)} left of {_window_s(h, d)} s"))

    if (ratios and len(ratios) == len(metrics) and metric_problem is None and desired == current
            and all(1 - _tolerance(h, "down") <= r <= 1 + _tolerance(h, "up") for r in ratios)):
        tol = _tolerance(h, "up")
        why.append(WhyNot(WITHIN_TOLERANCE, "within tolerance: " + ", ".join(
            f"{m.name} {m.current} vs {m.target} (×{m.ratio:.2f})" for m in metrics if m.ratio is not None)
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
    metrics = ()
    if va.metric_desired_replicas is not None:
        metrics = (MetricLine("wva_desired_replicas", "External", f"{va.metric_desired_replicas:g}", None, None),)
    events = sorted((e for e in snap.events if e.kind == "VariantAutoscaling" and e.name == va.name
                     and e.namespace == va.namespace), key=lambda e: -(e.last_seen_ts or 0.0))
    return AutoscalerExplanation(
        kind="VariantAutoscaling", namespace=va.namespace, name=va.name, current=current, desired=desired,
        min_replicas=va.min_replicas, max_replicas=va.max_replicas, direction=_direction(current, desired),
        why_not=tuple(why), metrics=metrics, notes=tuple(notes),
        events=tuple(_event_line(e, now) for e in events[:5]))


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
            so = owner_of.get(h.name) if h.owner_kind in (None, "ScaledObject") else None
            if h.owner_kind == "ScaledObject" and h.owner_name:
                so = next((s for s in sos if s.name == h.owner_name), so)
            line = explain_hpa(h, snap, wl, now, paused_by=so if so is not None and so.paused else None)
            if so is not None and line.managed_by is None:
                line = _with_manager(line, f"ScaledObject {so.name}")
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
