"""Step two of admission: the defaults the real API server fills in (Deployment
strategy, container imagePullPolicy, Service type ...) and the status it gives a
freshly created object. :func:`apply_defaults` is idempotent, so re-sending a
stored object changes nothing."""

from __future__ import annotations

from typing import Any

from .resources import ResourceType


def initial_status(rt: ResourceType, obj: dict) -> dict | None:
    """The status the real API server gives a freshly created object."""
    kind = rt.kind
    if kind == "Pod":
        return {"phase": "Pending", "qosClass": _qos_class(obj)}
    if kind == "Deployment":
        return {}
    if kind in ("StatefulSet", "ReplicaSet"):
        return {"replicas": 0, "availableReplicas": 0} if kind == "StatefulSet" else {"replicas": 0}
    if kind == "HorizontalPodAutoscaler":
        return {"currentReplicas": 0, "desiredReplicas": 0}
    if kind == "PodDisruptionBudget":
        return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    if kind == "Namespace":
        return {"phase": "Active"}
    if kind == "Service":
        return {"loadBalancer": {}}
    return None


def _qos_class(pod: dict) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {} if isinstance(c, dict) else {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if limits or requests:
            any_set = True
        if not limits or set(limits) < {"cpu", "memory"} or any(requests.get(k, v) != v for k, v in limits.items()):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _quantity_str(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _normalize_quantities(resources: Any) -> None:
    if not isinstance(resources, dict):
        return
    for field in ("limits", "requests", "capacity", "allocatable"):
        m = resources.get(field)
        if isinstance(m, dict):
            for k, v in list(m.items()):
                m[k] = _quantity_str(v)


def _default_container(c: dict, *, is_pod: bool) -> None:
    if not isinstance(c, dict):
        return
    image = c.get("image") or ""
    if "imagePullPolicy" not in c and isinstance(image, str):
        tag = image.rsplit("/", 1)[-1]
        c["imagePullPolicy"] = "Always" if (":" not in tag or tag.endswith(":latest")) and "@" not in tag \
            else "IfNotPresent"
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    if isinstance(c.get("resources"), dict):
        res = c["resources"]
        _normalize_quantities(res)
        if is_pod and isinstance(res.get("limits"), dict):
            requests = res.setdefault("requests", {})
            for k, v in res["limits"].items():
                requests.setdefault(k, v)
    else:
        c.setdefault("resources", {})


def default_pod_spec(spec: Any, *, is_pod: bool = False) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            _default_container(c, is_pod=is_pod)
    if is_pod:
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        tolerations = spec.setdefault("tolerations", [])
        if isinstance(tolerations, list):
            have = {t.get("key") for t in tolerations if isinstance(t, dict)}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
                if key not in have:
                    tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                        "tolerationSeconds": 300})


def _default_template(spec: dict) -> None:
    tpl = spec.get("template")
    if isinstance(tpl, dict):
        tpl.setdefault("metadata", {})
        default_pod_spec(tpl.get("spec"))


def apply_defaults(rt: ResourceType, obj: dict) -> None:
    kind = rt.kind
    spec = obj.get("spec")
    if kind in ("Deployment", "StatefulSet", "ReplicaSet") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        _default_template(spec)
        if kind == "Deployment":
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
            strategy = spec.setdefault("strategy", {})
            if isinstance(strategy, dict):
                strategy.setdefault("type", "RollingUpdate")
                if strategy["type"] == "RollingUpdate":
                    ru = strategy.setdefault("rollingUpdate", {})
                    if isinstance(ru, dict):
                        ru.setdefault("maxSurge", "25%")
                        ru.setdefault("maxUnavailable", "25%")
        elif kind == "StatefulSet":
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("podManagementPolicy", "OrderedReady")
            us = spec.setdefault("updateStrategy", {})
            if isinstance(us, dict):
                us.setdefault("type", "RollingUpdate")
                if us["type"] == "RollingUpdate":
                    ru = us.setdefault("rollingUpdate", {})
                    if isinstance(ru, dict):
                        ru.setdefault("partition", 0)
            spec.setdefault("persistentVolumeClaimRetentionPolicy",
                            {"whenDeleted": "Retain", "whenScaled": "Retain"})
    elif kind == "Pod":
        default_pod_spec(spec, is_pod=True)
    elif kind == "Service" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                if "port" in p:
                    p.setdefault("targetPort", p["port"])
    elif kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        labels = obj.setdefault("metadata", {}).setdefault("labels", {})
        if isinstance(labels, dict):
            labels["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")
    elif kind == "Node":
        if isinstance(obj.get("status"), dict):
            _normalize_quantities(obj["status"])
    elif kind == "HorizontalPodAutoscaler" and isinstance(spec, dict):
        spec.setdefault("minReplicas", 1)
    elif kind == "Event":
        obj.setdefault("type", "Normal")
        obj.setdefault("count", 1)
        obj.setdefault("involvedObject", {})
