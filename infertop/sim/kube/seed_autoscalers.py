"""Seeding autoscalers: HPAs (with their status, or driven by the HPA controller from a
metrics source), KEDA ScaledObjects (and the HPA KEDA would own) and llm-d
VariantAutoscalings. :class:`AutoscalerSeeding` is a base of the emulator."""

from __future__ import annotations

from . import resources as R
from .emulator_state import EmulatorState
from .hpa import HpaController, MetricSource
from .resources import resource_type
from .util import format_time


class AutoscalerSeeding(EmulatorState):
    """Autoscaler builders and knobs, as methods of the emulator."""

    def add_hpa(self, namespace: str, name: str, target: str, *, target_kind: str = "Deployment",
                min_replicas: int = 1, max_replicas: int = 10, metrics: list | None = None,
                current_replicas: int | None = None, desired_replicas: int | None = None,
                current_metrics: list | None = None, conditions: list | None = None,
                last_scale_time: float | str | None = None, behavior: dict | None = None,
                owner: dict | None = None, labels: dict | None = None) -> dict:
        """An autoscaling/v2 HPA with a complete status (every field the client
        models declare, so a TUI can render it); explicitly given status
        fields are pinned (the reconcile loop leaves them alone)."""
        self._ensure_namespace(namespace)
        metric_name = "vllm:num_requests_waiting"
        metrics = metrics if metrics is not None else [{
            "type": "Pods",
            "pods": {"metric": {"name": metric_name}, "target": {"type": "AverageValue", "averageValue": "5"}},
        }]
        pinned = {field for field, value in (("currentReplicas", current_replicas),
                                             ("desiredReplicas", desired_replicas),
                                             ("conditions", conditions)) if value is not None}
        target_rt = resource_type(target_kind)
        target_obj = self.store.get(target_rt, namespace, target)
        actual = int(((target_obj or {}).get("status") or {}).get("replicas") or 0)
        if current_replicas is None:
            current = actual or ((target_obj or {}).get("spec") or {}).get("replicas", 0)
        else:
            current = current_replicas
        now = format_time(self.clock())
        if isinstance(last_scale_time, (int, float)):
            last_scale_time = format_time(last_scale_time)
        if current_metrics is None:
            current_metrics = []
            for m in metrics:
                if m.get("type") == "Pods":
                    current_metrics.append({"type": "Pods", "pods": {
                        "metric": m["pods"]["metric"], "current": {"averageValue": "0"}}})
                elif m.get("type") == "Resource":
                    current_metrics.append({"type": "Resource", "resource": {
                        "name": m["resource"]["name"], "current": {"averageUtilization": 0, "averageValue": "0"}}})
        if conditions is None:
            conditions = [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                 "message": "recommended size matches current size", "lastTransitionTime": now},
                {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
                 "message": "the HPA was able to successfully calculate a replica count from pods metric "
                            f"{metric_name}", "lastTransitionTime": now},
                {"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange",
                 "message": "the desired count is within the acceptable range", "lastTransitionTime": now},
            ]
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace, **({"labels": dict(labels)} if labels else {}),
                         **({"ownerReferences": [owner]} if owner else {})},
            "spec": {
                "scaleTargetRef": {"apiVersion": target_rt.api_version, "kind": target_rt.kind, "name": target},
                "minReplicas": min_replicas,
                "maxReplicas": max_replicas,
                "metrics": metrics,
                **({"behavior": behavior} if behavior else {}),
            },
            "status": {
                "currentReplicas": current,
                "desiredReplicas": desired_replicas if desired_replicas is not None else current,
                "currentMetrics": current_metrics,
                "conditions": conditions,
                "lastScaleTime": last_scale_time or now,
            },
        }
        self._hpa_pinned[(namespace, name)] = pinned
        return self.api.create(R.BY_KIND["HorizontalPodAutoscaler"], namespace, hpa, keep_status=True)

    def add_scaled_object(self, namespace: str, name: str, target: str, *, target_kind: str = "Deployment",
                          min_replicas: int = 1, max_replicas: int = 10, triggers: list | None = None,
                          annotations: dict | None = None, fallback: dict | None = None,
                          polling_interval: int = 30, cooldown_period: int = 300, status: dict | None = None,
                          with_hpa: bool = True, hpa_status: dict | None = None) -> dict:
        """A KEDA ScaledObject (install ``ScaledObject`` first) and, as KEDA's operator does, the HPA it
        owns (``keda-hpa-<name>``, one External metric per trigger: ``s<i>-<type>``). ``status`` is
        merged into the default (Ready/Active True, health Happy); ``hpa_status`` pins the HPA's."""
        self._ensure_namespace(namespace)
        triggers = triggers if triggers is not None else [{
            "type": "prometheus", "metadata": {
                "serverAddress": "http://prometheus.monitoring:9090", "threshold": "5",
                "query": f'sum(vllm:num_requests_waiting{{namespace="{namespace}"}})'}}]
        target_rt = resource_type(target_kind)
        metric_names = [f"s{i}-{t.get('type', 'x')}" for i, t in enumerate(triggers)]
        now = format_time(self.clock())
        hpa_name = f"keda-hpa-{name}"
        default_status = {
            "scaleTargetKind": f"{target_rt.api_version}.{target_rt.kind}",
            "scaleTargetGVKR": {"group": target_rt.group, "version": target_rt.version, "kind": target_rt.kind,
                                "resource": target_rt.plural},
            "originalReplicaCount": 1,
            "hpaName": hpa_name,
            "externalMetricNames": metric_names,
            "health": {m: {"numberOfFailures": 0, "status": "Happy"} for m in metric_names},
            "lastActiveTime": now,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
                 "message": "ScaledObject is defined correctly and is ready for scaling"},
                {"type": "Active", "status": "True", "reason": "ScalerActive",
                 "message": "Scaling is performed because triggers are active"},
                {"type": "Fallback", "status": "False", "reason": "NoFallbackFound",
                 "message": "No fallbacks are active on this scaled object"},
                {"type": "Paused", "status": "False", "reason": "ScaledObjectUnpaused",
                 "message": "pause annotation removed for ScaledObject"},
            ],
        }
        obj = {
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": namespace, **({"annotations": dict(annotations)}
                                                                  if annotations else {})},
            "spec": {"scaleTargetRef": {"name": target, "kind": target_kind, "apiVersion": target_rt.api_version},
                     "minReplicaCount": min_replicas, "maxReplicaCount": max_replicas,
                     "pollingInterval": polling_interval, "cooldownPeriod": cooldown_period,
                     "triggers": triggers, **({"fallback": fallback} if fallback else {})},
            "status": {**default_status, **(status or {})},
        }
        created = self.api.create(resource_type("ScaledObject"), namespace, obj, keep_status=True)
        if with_hpa:
            owner = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": name,
                     "uid": created["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
            metrics = [{"type": "External", "external": {
                "metric": {"name": m, "selector": {"matchLabels": {"scaledobject.keda.sh/name": name}}},
                "target": {"type": "AverageValue", "averageValue": str(t.get("metadata", {}).get("threshold", "1"))}}}
                for m, t in zip(metric_names, triggers)]
            hs = dict(hpa_status or {})
            self.add_hpa(namespace, hpa_name, target, target_kind=target_kind, min_replicas=min_replicas,
                         max_replicas=max_replicas, metrics=metrics, owner=owner,
                         labels={"app.kubernetes.io/managed-by": "keda-operator", "scaledobject.keda.sh/name": name},
                         current_replicas=hs.get("currentReplicas"), desired_replicas=hs.get("desiredReplicas"),
                         current_metrics=hs.get("currentMetrics"), conditions=hs.get("conditions"),
                         last_scale_time=hs.get("lastScaleTime"))
        return created

    def add_variant_autoscaling(self, namespace: str, name: str, target: str | None = None, *,
                                model_id: str = "meta-llama/Llama-3.1-8B-Instruct", current_replicas: int = 1,
                                desired_replicas: int | None = None, accelerator: str = "H100",
                                applied: bool | None = True, min_replicas: int | None = None,
                                max_replicas: int | None = None, conditions: list | None = None) -> dict:
        """An llm-d VariantAutoscaling (install ``VariantAutoscaling`` first) with its status:
        currentAlloc, desiredOptimizedAlloc, actuation and conditions (default: all True).
        ``target=None`` leaves out scaleTargetRef, as older versions (the Deployment of the same name)."""
        self._ensure_namespace(namespace)
        now = format_time(self.clock())
        spec: dict = {"modelID": model_id}
        if target is not None:
            spec["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}
        if min_replicas is not None:
            spec["minReplicas"] = min_replicas
        if max_replicas is not None:
            spec["maxReplicas"] = max_replicas
        status: dict = {
            "currentAlloc": {"numReplicas": current_replicas, "accelerator": accelerator},
            "desiredOptimizedAlloc": {"numReplicas": current_replicas if desired_replicas is None
                                      else desired_replicas, "accelerator": accelerator, "lastRunTime": now},
            "conditions": conditions if conditions is not None else [
                {"type": "TargetResolved", "status": "True", "reason": "TargetFound",
                 "message": f"scale target {target or name} found", "lastTransitionTime": now},
                {"type": "MetricsAvailable", "status": "True", "reason": "MetricsFound",
                 "message": "vLLM metrics are available", "lastTransitionTime": now},
            ],
        }
        if applied is not None:
            status["actuation"] = {"applied": applied}
        obj = {"apiVersion": "llmd.ai/v1alpha1", "kind": "VariantAutoscaling",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}
        return self.api.create(resource_type("VariantAutoscaling"), namespace, obj, keep_status=True)

    def set_hpa_metrics(self, source: MetricSource | None, sync_s: float = 15.0, *,
                        seed_current: bool = False) -> None:
        """Turn on the HPA controller (``None``: off): every ``sync_s`` each HPA whose status is not
        pinned is evaluated from ``source`` (see :mod:`.hpa`) and scales its target. ``seed_current``:
        act as a controller that has been running (a first scale-down waits for its window)."""
        self.hpa_controller = None if source is None else HpaController(source, sync_s, seed_current=seed_current)
        self._poke()

    def set_hpa_status(self, namespace: str, name: str, *, desired_replicas: int | None = None,
                       current_replicas: int | None = None, current_metrics: list | None = None,
                       conditions: list | None = None, last_scale_time: float | str | None = None,
                       scale_target: bool = False) -> dict:
        """Set HPA status fields (pinning them). ``scale_target=True`` also acts
        like the HPA controller: scales the target to ``desired_replicas``
        (clamped to min/max), stamps lastScaleTime and records a
        SuccessfulRescale event."""
        rt = R.BY_KIND["HorizontalPodAutoscaler"]
        pinned = self._hpa_pinned.setdefault((namespace, name), set())
        with self.store.lock:
            hpa = self.api.get_current(rt, namespace, name)
            status = hpa.setdefault("status", {"desiredReplicas": 0})
            if desired_replicas is not None:
                status["desiredReplicas"] = desired_replicas
                pinned.add("desiredReplicas")
            if current_replicas is not None:
                status["currentReplicas"] = current_replicas
                pinned.add("currentReplicas")
            if current_metrics is not None:
                status["currentMetrics"] = current_metrics
            if conditions is not None:
                status["conditions"] = conditions
                pinned.add("conditions")
            if last_scale_time is not None:
                status["lastScaleTime"] = (format_time(last_scale_time)
                                           if isinstance(last_scale_time, (int, float)) else last_scale_time)
            if scale_target and desired_replicas is not None:
                spec = hpa["spec"]
                n = max(spec.get("minReplicas", 1), min(spec["maxReplicas"], desired_replicas))
                ref = spec["scaleTargetRef"]
                target_rt = resource_type(ref["kind"])
                target = self.api.get_current(target_rt, namespace, ref["name"])
                old = target["spec"].get("replicas", 1)
                if old != n:
                    self.api.subresources.update_scale(target_rt, namespace, ref["name"], {"spec": {"replicas": n}})
                    status["lastScaleTime"] = format_time(self.clock())
                    self.api.events.record(rt, hpa, "Normal", "SuccessfulRescale",
                                           f"New size: {n}; reason: pods metric above target",
                                           "horizontal-pod-autoscaler")
            return self.store.put(rt, hpa)
