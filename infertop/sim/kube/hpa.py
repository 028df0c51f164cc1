"""An HPA controller for the emulator, driven by a metrics source the emulator's owner provides.

Off unless :meth:`KubeEmulator.set_hpa_metrics` gives a source; then, every
``sync_s`` (the real controller: 15 s), each HPA whose status is not pinned by a
test is evaluated as kube-controller-manager does (autoscaling/v2):

- per metric, a proposal: ``ceil(ready pods × usage / target)`` for Pods metrics
  (AverageValue) and External metrics with an AverageValue target, ``ceil(value /
  target × current)`` for Value targets; none when the usage ratio is within the
  tolerance (±10 %); the largest proposal wins;
- a metric the source cannot give (``None``) sets ``ScalingActive=False``
  (FailedGetPodsMetric / FailedGetExternalMetric) with a Warning event of that
  reason and FailedComputeMetricsReplicas, and leaves the replicas alone;
- stabilisation (``spec.behavior``; defaults 0 s up, 300 s down): up takes the
  lowest, down the highest recommendation in its window, reported as
  ``AbleToScale=True`` ScaleUpStabilized / ScaleDownStabilized;
- clamped to min/max: ``ScalingLimited=True`` TooManyReplicas / TooFewReplicas;
- a change scales the target (``/scale``), stamps ``lastScaleTime`` and records
  SuccessfulRescale ("New size: N; reason: …").

Not emulated: rate policies (``behavior.*.policies``), Object/Resource metrics,
the missing-pods and unready-pods corrections of the real algorithm.
The source is ``fn(namespace, hpa_name, metric_spec, pods) -> float | list[float] | None``:
per-pod values (Pods), or one value (External); ``pods`` are the target's ready pods.
"""

from __future__ import annotations

__all__ = ["HpaController", "MetricSource"]

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .quantities import parse_quantity
from .resources import resource_type
from .util import set_condition

if TYPE_CHECKING:
    from .controllers import Controllers

HPAS = resource_type("horizontalpodautoscalers")
MetricSource = Callable[[str, str, dict, list[dict]], Any]

DEFAULT_TOLERANCE = 0.1
DEFAULT_UP_WINDOW_S = 0
DEFAULT_DOWN_WINDOW_S = 300
COMPONENT = "horizontal-pod-autoscaler"


def _quantity(value: Any) -> float | None:
    try:
        return parse_quantity(value) if value is not None else None
    except (ValueError, TypeError):
        return None


def _fmt(value: float) -> str:
    """A quantity as the API writes it: an integer, or milli-units."""
    if abs(value - round(value)) < 1e-9:
        return str(int(round(value)))
    return f"{int(round(value * 1000))}m"


class HpaController:
    """State the real controller keeps in memory: recommendations per HPA, last evaluation time."""

    def __init__(self, source: MetricSource, sync_s: float = 15.0, *, seed_current: bool = False) -> None:
        self.source = source
        self.sync_s = sync_s
        # as if the controller had been running: the first evaluation finds the current size among
        # the recent recommendations, so a scale-down waits for its window (a fresh controller would not)
        self.seed_current = seed_current
        self.recommendations: dict[tuple[str, str], list[tuple[float, int]]] = {}
        self.last_sync: dict[tuple[str, str], float] = {}

    def due(self, key: tuple[str, str], now: float) -> bool:
        last = self.last_sync.get(key)
        return last is None or now - last >= self.sync_s

    def sync(self, ctl: "Controllers", hpa: dict, target_rt, target: dict, pods: list[dict]) -> None:
        """Evaluate one HPA (status changed in place, the target scaled through the API)."""
        meta, spec = hpa["metadata"], hpa.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        key = (ns, name)
        now = ctl.now
        if not self.due(key, now):
            return
        self.last_sync[key] = now
        ts = ctl.ts()
        status = hpa.setdefault("status", {})
        conditions = status.setdefault("conditions", [])
        current = int((target.get("spec") or {}).get("replicas", 1))
        status["currentReplicas"] = int((target.get("status") or {}).get("replicas") or 0)
        ready = [p for p in pods if ctl.pod_ready(p)]
        proposals: list[tuple[int, str]] = []
        current_metrics = []
        failed: tuple[str, str] | None = None
        for m in spec.get("metrics") or []:
            mtype = m.get("type")
            body = m.get({"Pods": "pods", "External": "external"}.get(mtype, ""), None)
            if body is None:
                continue
            mname = (body.get("metric") or {}).get("name", "?")
            tgt = body.get("target") or {}
            value = self.source(ns, name, m, ready)
            if value is None or (isinstance(value, list) and not value):
                reason = "FailedGetPodsMetric" if mtype == "Pods" else "FailedGetExternalMetric"
                failed = (reason, f"unable to get metric {mname}: no metrics returned from "
                                  f"{'custom' if mtype == 'Pods' else 'external'} metrics API")
                current_metrics.append({"type": mtype, "pods" if mtype == "Pods" else "external": {
                    "metric": body.get("metric"), "current": {}}})
                continue
            if mtype == "Pods":
                values = value if isinstance(value, list) else [float(value)] * max(1, len(ready))
                usage = sum(values) / len(values)
                target_v = _quantity(tgt.get("averageValue")) or 1.0
                ratio = usage / target_v
                base = len(values)
                cur = {"averageValue": _fmt(usage)}
            else:
                total = float(value if not isinstance(value, list) else sum(value))
                if tgt.get("averageValue") is not None:
                    target_v = _quantity(tgt.get("averageValue")) or 1.0
                    usage = total / max(1, current)
                    ratio, base = usage / target_v, current
                    cur = {"averageValue": _fmt(usage)}
                else:
                    target_v = _quantity(tgt.get("value")) or 1.0
                    ratio, base = total / target_v, current
                    cur = {"value": _fmt(total)}
            field = "pods" if mtype == "Pods" else "external"
            current_metrics.append({"type": mtype, field: {"metric": body.get("metric"), "current": cur}})
            tol = self._tolerance(spec, "up" if ratio > 1 else "down")
            proposal = current if abs(ratio - 1.0) <= tol else int(math.ceil(ratio * base))
            proposals.append((proposal, mname))
        status["currentMetrics"] = current_metrics
        if failed is not None and not proposals:
            reason, message = failed
            set_condition(conditions, "ScalingActive", "False", reason,
                          f"the HPA was unable to compute the replica count: {message}", ts)
            set_condition(conditions, "AbleToScale", "True", "SucceededGetScale",
                          "the HPA controller was able to get the target's current scale", ts)
            ctl.api.events.record(HPAS, hpa, "Warning", reason, message,
                                  COMPONENT)
            ctl.api.events.record(HPAS, hpa, "Warning",
                                  "FailedComputeMetricsReplicas",
                                  f"invalid metrics (1 invalid out of {len(spec.get('metrics') or [])}), first error "
                                  f"is: failed to get {'pods' if reason == 'FailedGetPodsMetric' else 'external'} "
                                  f"metric value: {message}", COMPONENT)
            status["desiredReplicas"] = current
            return
        proposal, metric = max(proposals) if proposals else (current, "")
        set_condition(conditions, "ScalingActive", "True", "ValidMetricFound",
                      f"the HPA was able to successfully calculate a replica count from "
                      f"{'pods' if any(m.get('type') == 'Pods' for m in spec.get('metrics') or []) else 'external'}"
                      f" metric {metric}", ts)
        if self.seed_current and key not in self.recommendations:
            self.recommendations[key] = [(now - 1e-3, current)]
        recs = [(t, r) for t, r in self.recommendations.get(key, []) if now - t <= max(
            self._window(spec, "up"), self._window(spec, "down"))]
        recs.append((now, proposal))
        self.recommendations[key] = recs
        up = min([r for t, r in recs if now - t <= self._window(spec, "up")] or [proposal])
        down = max([r for t, r in recs if now - t <= self._window(spec, "down")] or [proposal])
        if current < up:
            desired = up
        elif down < current:
            desired = down
        else:
            desired = current
        if desired != proposal and desired == current:
            which = "ScaleDownStabilized" if proposal < current else "ScaleUpStabilized"
            set_condition(conditions, "AbleToScale", "True", which,
                          "recent recommendations were higher than current one, applying the highest recent "
                          "recommendation" if which == "ScaleDownStabilized" else
                          "recent recommendations were lower than current one, applying the lowest recent "
                          "recommendation", ts)
        else:
            set_condition(conditions, "AbleToScale", "True", "ReadyForNewScale",
                          "recommended size matches current size", ts)
        lo, hi = int(spec.get("minReplicas", 1)), int(spec["maxReplicas"])
        if desired > hi:
            set_condition(conditions, "ScalingLimited", "True", "TooManyReplicas",
                          "the desired replica count is more than the maximum replica count", ts)
            desired = hi
        elif desired < lo:
            set_condition(conditions, "ScalingLimited", "True", "TooFewReplicas",
                          "the desired replica count is less than the minimum replica count", ts)
            desired = lo
        else:
            set_condition(conditions, "ScalingLimited", "False", "DesiredWithinRange",
                          "the desired count is within the acceptable range", ts)
        status["desiredReplicas"] = desired
        if desired != current:
            ctl.api.subresources.update_scale(target_rt, ns, target["metadata"]["name"], {"spec": {"replicas": desired}})
            status["lastScaleTime"] = ts
            why = f"{'pods' if metric else 'All'} metric {metric} above target" if desired > current else \
                "All metrics below target"
            ctl.api.events.record(HPAS, hpa, "Normal", "SuccessfulRescale",
                                  f"New size: {desired}; reason: {why}", COMPONENT)

    @staticmethod
    def _rules(spec: dict, direction: str) -> dict:
        return ((spec.get("behavior") or {}).get("scaleUp" if direction == "up" else "scaleDown")) or {}

    def _window(self, spec: dict, direction: str) -> float:
        w = self._rules(spec, direction).get("stabilizationWindowSeconds")
        if w is None:
            return DEFAULT_UP_WINDOW_S if direction == "up" else DEFAULT_DOWN_WINDOW_S
        return float(w)

    def _tolerance(self, spec: dict, direction: str) -> float:
        t = _quantity(self._rules(spec, direction).get("tolerance"))
        return DEFAULT_TOLERANCE if t is None else t
