"""Step three of admission: semantic validation (422 Invalid) — negative replicas,
containers without name or image, a selector that does not match the template
labels, immutable fields ...

The steps run in the real API server's order: :func:`typecheck.type_errors`
(JSON types), :func:`defaults.apply_defaults`, then :func:`validate`.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import Cause, duplicate, forbidden, invalid, not_supported, required
from .quantities import parse_quantity
from .resources import ResourceType
from .selectors import selector_from_label_selector

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
PERCENT = re.compile(r"^[0-9]+%$")


def _validate_intstr(path: str, value: Any, out: list[Cause]) -> None:
    if value is None:
        return
    if isinstance(value, str):
        if not PERCENT.match(value):
            out.append(invalid(path, value, "a valid percent string must be a numeric string followed by "
                                             "an ending '%' (e.g. '1%',  or '93%', regex used for "
                                             "validation is '[0-9]+%')"))
    elif value < 0:
        out.append(invalid(path, value, "must be greater than or equal to 0"))


def _validate_name(name: Any, path: str, rt: ResourceType, out: list[Cause]) -> None:
    pattern = DNS1123_LABEL if rt.kind in ("Namespace", "Service") else DNS1123_SUBDOMAIN
    limit = 63 if pattern is DNS1123_LABEL else 253
    if not name:
        out.append(required(path, "name or generateName is required"))
    elif not pattern.match(name) or len(name) > limit:
        what = "RFC 1123 label" if pattern is DNS1123_LABEL else "RFC 1123 subdomain"
        out.append(invalid(path, name, f"a lowercase {what} must consist of lower case alphanumeric "
                                       "characters, '-' or '.', and must start and end with an alphanumeric "
                                       "character"))


def _validate_labels(labels: Any, path: str, out: list[Cause]) -> None:
    if not isinstance(labels, dict):
        return
    for k, v in labels.items():
        name = k.split("/", 1)[-1]
        if not QUALIFIED_NAME.match(name) or len(name) > 63:
            out.append(invalid(path, k, "name part must consist of alphanumeric characters, '-', '_' or '.', "
                                        "and must start and end with an alphanumeric character"))
        if isinstance(v, str) and (len(v) > 63 or not LABEL_VALUE.match(v)):
            out.append(invalid(f"{path}", v, "a valid label must be an empty string or consist of alphanumeric "
                                             "characters, '-', '_' or '.', and must start and end with an "
                                             "alphanumeric character"))


def _validate_containers(spec: Any, path: str, out: list[Cause], *, template: bool) -> None:
    if not isinstance(spec, dict):
        out.append(required(path))
        return
    containers = spec.get("containers")
    if not containers:
        out.append(required(f"{path}.containers"))
        return
    seen: set = set()
    for i, c in enumerate(containers):
        cpath = f"{path}.containers[{i}]"
        if not isinstance(c, dict):
            out.append(invalid(cpath, c, "must be an object"))
            continue
        name = c.get("name")
        if not name:
            out.append(required(f"{cpath}.name"))
        elif not DNS1123_LABEL.match(name):
            out.append(invalid(f"{cpath}.name", name, "a lowercase RFC 1123 label must consist of lower case "
                                                      "alphanumeric characters or '-'"))
        elif name in seen:
            out.append(duplicate(f"{cpath}.name", name))
        seen.add(name)
        if not c.get("image"):
            out.append(required(f"{cpath}.image"))
        for j, p in enumerate(c.get("ports") or []):
            port = p.get("containerPort") if isinstance(p, dict) else None
            if port is None:
                out.append(required(f"{cpath}.ports[{j}].containerPort"))
            elif not 1 <= port <= 65535:
                out.append(invalid(f"{cpath}.ports[{j}].containerPort", port,
                                   "must be between 1 and 65535, inclusive"))
        res = c.get("resources") or {}
        for field in ("limits", "requests"):
            for rname, q in (res.get(field) or {}).items():
                try:
                    parse_quantity(q)
                except ValueError:
                    out.append(invalid(f"{cpath}.resources.{field}[{rname}]", q,
                                       "quantities must match the regular expression "
                                       "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
    restart = spec.get("restartPolicy")
    if template and restart not in (None, "Always"):
        out.append(not_supported(f"{path}.restartPolicy", restart, ["Always"]))
    elif restart not in (None, "Always", "OnFailure", "Never"):
        out.append(not_supported(f"{path}.restartPolicy", restart, ["Always", "OnFailure", "Never"]))


def _validate_workload(rt: ResourceType, spec: Any, out: list[Cause]) -> None:
    if not isinstance(spec, dict):
        out.append(required("spec"))
        return
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        out.append(invalid("spec.replicas", replicas, "must be greater than or equal to 0"))
    for field in ("minReadySeconds", "revisionHistoryLimit"):
        v = spec.get(field)
        if isinstance(v, int) and v < 0:
            out.append(invalid(f"spec.{field}", v, "must be greater than or equal to 0"))
    selector = spec.get("selector")
    if selector is None:
        out.append(required("spec.selector"))
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        out.append(invalid("spec.selector", selector,
                           f"empty selector is invalid for {rt.kind.lower()}"))
    template = spec.get("template")
    if not isinstance(template, dict):
        out.append(required("spec.template"))
        return
    labels = (template.get("metadata") or {}).get("labels") or {}
    _validate_labels(labels, "spec.template.metadata.labels", out)
    if selector and (selector.get("matchLabels") or selector.get("matchExpressions")):
        if not selector_from_label_selector(selector)(labels):
            out.append(invalid("spec.template.metadata.labels", labels,
                               "`selector` does not match template `labels`"))
    _validate_containers(template.get("spec"), "spec.template.spec", out, template=True)
    if rt.kind == "Deployment":
        strategy = spec.get("strategy") or {}
        stype = strategy.get("type")
        if stype not in (None, "RollingUpdate", "Recreate"):
            out.append(not_supported("spec.strategy.type", stype, ["Recreate", "RollingUpdate"]))
        ru = strategy.get("rollingUpdate")
        if stype == "Recreate" and ru:
            out.append(forbidden("spec.strategy.rollingUpdate", "may not be specified when strategy `type` "
                                                                "is 'Recreate'"))
        if isinstance(ru, dict):
            _validate_intstr("spec.strategy.rollingUpdate.maxSurge", ru.get("maxSurge"), out)
            _validate_intstr("spec.strategy.rollingUpdate.maxUnavailable", ru.get("maxUnavailable"), out)
            if _is_zero(ru.get("maxSurge")) and _is_zero(ru.get("maxUnavailable")):
                out.append(invalid("spec.strategy.rollingUpdate.maxUnavailable", ru.get("maxUnavailable"),
                                   "may not be 0 when `maxSurge` is 0"))
        pds = spec.get("progressDeadlineSeconds")
        if isinstance(pds, int) and pds <= (spec.get("minReadySeconds") or 0):
            out.append(invalid("spec.progressDeadlineSeconds", pds,
                               "must be greater than minReadySeconds"))
    if rt.kind == "StatefulSet":
        pmp = spec.get("podManagementPolicy")
        if pmp not in (None, "OrderedReady", "Parallel"):
            out.append(not_supported("spec.podManagementPolicy", pmp, ["OrderedReady", "Parallel"]))
        us = spec.get("updateStrategy") or {}
        if us.get("type") not in (None, "RollingUpdate", "OnDelete"):
            out.append(not_supported("spec.updateStrategy.type", us.get("type"), ["OnDelete", "RollingUpdate"]))
        partition = (us.get("rollingUpdate") or {}).get("partition")
        if isinstance(partition, int) and partition < 0:
            out.append(invalid("spec.updateStrategy.rollingUpdate.partition", partition,
                               "must be greater than or equal to 0"))


def _is_zero(value: Any) -> bool:
    return value in (0, "0%", "0")


def validate(rt: ResourceType, obj: dict, old: dict | None = None) -> list[Cause]:
    """Semantic validation; returns the causes of a 422 (empty: valid)."""
    out: list[Cause] = []
    meta = obj.get("metadata") or {}
    if rt.kind not in ("Scale", "SelfSubjectAccessReview"):
        _validate_name(meta.get("name"), "metadata.name", rt, out)
    _validate_labels(meta.get("labels"), "metadata.labels", out)
    spec = obj.get("spec")
    kind = rt.kind
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        _validate_workload(rt, spec, out)
    elif kind == "Pod":
        _validate_containers(spec, "spec", out, template=False)
    elif kind == "Service" and isinstance(spec, dict):
        ports = spec.get("ports") or []
        if spec.get("type", "ClusterIP") not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
            out.append(not_supported("spec.type", spec.get("type"),
                                     ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]))
        if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
            out.append(required("spec.ports"))
        names = set()
        for i, p in enumerate(ports):
            port = p.get("port")
            if port is None:
                out.append(required(f"spec.ports[{i}].port"))
            elif not 1 <= port <= 65535:
                out.append(invalid(f"spec.ports[{i}].port", port, "must be between 1 and 65535, inclusive"))
            if len(ports) > 1 and not p.get("name"):
                out.append(required(f"spec.ports[{i}].name"))
            elif p.get("name") in names:
                out.append(duplicate(f"spec.ports[{i}].name", p.get("name")))
            names.add(p.get("name"))
    elif kind == "ConfigMap":
        for k in (obj.get("data") or {}):
            if not CONFIG_KEY.match(k):
                out.append(invalid("data", k, "a valid config key must consist of alphanumeric characters, "
                                              "'-', '_' or '.'"))
    elif kind == "HorizontalPodAutoscaler":
        spec = spec if isinstance(spec, dict) else {}
        mx, mn = spec.get("maxReplicas"), spec.get("minReplicas")
        if mx is None:
            out.append(required("spec.maxReplicas"))
        elif mx < 1:
            out.append(invalid("spec.maxReplicas", mx, "must be greater than or equal to 1"))
        if isinstance(mn, int) and mn < 1:
            out.append(invalid("spec.minReplicas", mn, "must be greater than or equal to 1"))
        elif isinstance(mn, int) and isinstance(mx, int) and mn > mx:
            out.append(invalid("spec.minReplicas", mn, "must be less than or equal to maxReplicas"))
        ref = spec.get("scaleTargetRef") or {}
        if not ref.get("kind"):
            out.append(required("spec.scaleTargetRef.kind"))
        if not ref.get("name"):
            out.append(required("spec.scaleTargetRef.name"))
    elif kind == "PodDisruptionBudget":
        spec = spec if isinstance(spec, dict) else {}
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            out.append(invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
        _validate_intstr("spec.minAvailable", spec.get("minAvailable"), out)
        _validate_intstr("spec.maxUnavailable", spec.get("maxUnavailable"), out)
    if old is not None:
        out.extend(_validate_update(rt, obj, old))
    return out


_STS_MUTABLE = {"replicas", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds", "ordinals", "revisionHistoryLimit"}


def _validate_update(rt: ResourceType, new: dict, old: dict) -> list[Cause]:
    out: list[Cause] = []
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    if rt.kind in ("Deployment", "ReplicaSet") and ns.get("selector") != os_.get("selector"):
        out.append(invalid("spec.selector", ns.get("selector"), "field is immutable"))
    elif rt.kind == "StatefulSet":
        changed = {k for k in set(ns) | set(os_) if ns.get(k) != os_.get(k)} - _STS_MUTABLE
        if changed:
            out.append(forbidden("spec", "updates to statefulset spec for fields other than 'replicas', "
                                         "'ordinals', 'template', 'updateStrategy', "
                                         "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' "
                                         "are forbidden"))
    elif rt.kind == "Pod":
        def mask(spec: dict) -> dict:
            spec = dict(spec)
            spec["containers"] = [{**c, "image": ""} for c in spec.get("containers") or []
                                  if isinstance(c, dict)]
            for f in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
                spec.pop(f, None)
            if not os_.get("nodeName"):
                spec.pop("nodeName", None)
            return spec

        if mask(ns) != mask(os_):
            out.append(forbidden("spec", "pod updates may not change fields other than "
                                         "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                                         "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
                                         "to existing tolerations),`spec.terminationGracePeriodSeconds` "
                                         "(allow it to be set to 1 if it was previously negative)"))
    elif rt.kind == "Service":
        if os_.get("clusterIP") and ns.get("clusterIP") and ns.get("clusterIP") != os_.get("clusterIP"):
            out.append(invalid("spec.clusterIPs[0]", [ns.get("clusterIP")], "may not change once set"))
    return out
