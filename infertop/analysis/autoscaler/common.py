"""The autoscalers analysis' shared parts: the words of each "why not", the result types,
Kubernetes quantities and times, and a workload's context (its pods, events, Pending reason).

Pure; never imports textual or rich.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...domain.quantity import parse_quantity  # noqa: F401 — re-exported (its home is the domain layer)
from ...domain.kube import (
    ClusterSnapshot,
    EventView,
    KubeCondition,
    WorkloadView,
    short_unschedulable,
)
from ...domain.codec import to_doc

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
    stuck = len(pending)
    if not pending:  # the pods may be gone from view, their FailedScheduling events are not
        for e in snap.events:
            if e.reason == "FailedScheduling" and "nvidia.com/gpu" in e.message and e.kind == "Pod" \
                    and e.namespace == w.namespace and e.name.startswith(w.name + "-") \
                    and any(p.name == e.name and p.phase == "Pending" for p in snap.pods):
                message = short_unschedulable(e.message)
                stuck = 1
                break
    return _Workload(w, stuck, message)


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
