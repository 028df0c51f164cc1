"""The objects a rollout depends on, API object → domain view (pure): ReplicaSets, Services with the
endpoints of their EndpointSlices, PodDisruptionBudgets, ConfigMaps; and pods without ownerReferences
attributed to the Deployment whose selector selects them."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...domain.kube import (ConfigMapView, EndpointView, InferenceObjectiveView, InferencePoolView, PdbView, PodView,
                           ReplicaSetView, ServiceView)

__all__ = ["attribute_by_selector", "configmap_view", "inference_objective_view", "inference_pool_view", "pdb_view",
           "replicaset_view", "service_view"]


def _meta(o: dict) -> dict:
    return o.get("metadata") or {}


def _intstr(v: Any) -> str | None:
    return None if v is None else str(v)


def replicaset_view(o: dict) -> ReplicaSetView:
    from .view import parse_time  # view imports this module

    meta, spec, status = _meta(o), o.get("spec") or {}, o.get("status") or {}
    owner = next((r.get("name") for r in meta.get("ownerReferences") or () if r.get("kind") == "Deployment"), None)
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return ReplicaSetView(
        namespace=meta["namespace"], name=meta["name"], owner_name=owner,
        revision=str((meta.get("annotations") or {}).get("deployment.kubernetes.io/revision") or ""),
        desired=int(spec.get("replicas", 1) or 0), current=int(status.get("replicas") or 0),
        ready=int(status.get("readyReplicas") or 0), created_ts=parse_time(meta.get("creationTimestamp")),
        image=str(containers[0].get("image") or "") if containers else "")


def _ports(spec: dict) -> str:
    out = []
    for p in spec.get("ports") or ():
        name = f"{p['name']} " if p.get("name") else ""
        out.append(f"{name}{p.get('port')}→{p.get('targetPort', p.get('port'))}/{p.get('protocol', 'TCP')}")
    return ", ".join(out)


def service_view(o: dict, slices: list[dict], slices_read: bool = True) -> ServiceView:
    """``slices``: the namespace's EndpointSlices (those labelled with this Service's name are its own)."""
    meta, spec = _meta(o), o.get("spec") or {}
    eps = []
    for sl in slices:
        if (_meta(sl).get("labels") or {}).get("kubernetes.io/service-name") != meta["name"]:
            continue
        for e in sl.get("endpoints") or ():
            cond = e.get("conditions") or {}
            ref = e.get("targetRef") or {}
            eps.append(EndpointView(pod=ref.get("name") if ref.get("kind") == "Pod" else None,
                                    ip=", ".join(e.get("addresses") or ()),
                                    ready=cond.get("ready") is not False,  # absent means ready (the API's rule)
                                    terminating=bool(cond.get("terminating"))))
    eps.sort(key=lambda e: (e.pod or "", e.ip))
    return ServiceView(namespace=meta["namespace"], name=meta["name"], type=str(spec.get("type") or "ClusterIP"),
                       cluster_ip=str(spec.get("clusterIP") or ""), ports=_ports(spec),
                       selector=dict(spec.get("selector") or {}), endpoints=tuple(eps), slices_read=slices_read)


def pdb_view(o: dict) -> PdbView:
    from .view import selector_text

    meta, spec, status = _meta(o), o.get("spec") or {}, o.get("status") or {}
    counted = "disruptionsAllowed" in status

    def n(key: str) -> int | None:
        return int(status.get(key) or 0) if counted else None
    return PdbView(namespace=meta["namespace"], name=meta["name"], selector=selector_text(spec.get("selector")),
                   min_available=_intstr(spec.get("minAvailable")),
                   max_unavailable=_intstr(spec.get("maxUnavailable")),
                   disruptions_allowed=n("disruptionsAllowed"), current_healthy=n("currentHealthy"),
                   desired_healthy=n("desiredHealthy"), expected_pods=n("expectedPods"))


def configmap_view(o: dict) -> ConfigMapView:
    meta = _meta(o)
    data, binary = o.get("data") or {}, o.get("binaryData") or {}
    size = sum(len(str(v).encode()) for v in data.values()) + sum(len(str(v)) * 3 // 4 for v in binary.values())
    return ConfigMapView(namespace=meta["namespace"], name=meta["name"], keys=tuple(sorted({*data, *binary})),
                         size_bytes=size)


def attribute_by_selector(pods: list[PodView], deployments: list[dict]) -> list[PodView]:
    """Pods with no owner get the Deployment of their namespace whose selector selects them (the first by
    name when several do), as kubectl's owner-less pods adopted by label would be read."""
    from .view import selector_matches

    by_ns: dict[str, list[dict]] = {}
    for d in sorted(deployments, key=lambda d: _meta(d).get("name") or ""):
        by_ns.setdefault(_meta(d).get("namespace") or "", []).append(d)
    out = []
    for p in pods:
        if p.owner_kind is None:
            owner = next((d for d in by_ns.get(p.namespace, ())
                          if selector_matches((d.get("spec") or {}).get("selector"), p.labels)), None)
            if owner is not None:
                p = dataclasses.replace(p, owner_kind="Deployment", owner_name=_meta(owner).get("name"))
        out.append(p)
    return out


def inference_pool_view(o: dict, pods: list[PodView]) -> InferencePoolView:
    """``pods``: the snapshot's pods; those of its namespace its selector selects are its endpoints.
    v1 writes the selector as ``{matchLabels: …}``; the alpha API as a plain label map: both read."""
    from .view import selector_matches, selector_text

    meta, spec = _meta(o), o.get("spec") or {}
    sel = spec.get("selector") or {}
    if isinstance(sel, dict) and sel and "matchLabels" not in sel and "matchExpressions" not in sel:
        sel = {"matchLabels": sel}  # v1alpha2: selector is the label map itself
    ports = [p.get("number") for p in spec.get("targetPorts") or () if isinstance(p, dict)]
    if not ports and spec.get("targetPortNumber") is not None:  # v1alpha2
        ports = [spec.get("targetPortNumber")]
    ref = spec.get("endpointPickerRef") or spec.get("extensionRef") or {}
    port = (ref.get("port") or {}).get("number") if isinstance(ref.get("port"), dict) else ref.get("portNumber")
    picker = f"{ref.get('name')}:{port}" if ref.get("name") and port else str(ref.get("name") or "")
    mine = [p for p in pods if p.namespace == meta["namespace"] and sel and selector_matches(sel, p.labels)
            and not p.terminating]
    return InferencePoolView(namespace=meta["namespace"], name=meta["name"], selector=selector_text(sel),
                             target_ports=tuple(int(p) for p in ports if p is not None), picker=picker,
                             endpoints=len(mine), ready_endpoints=sum(1 for p in mine if p.ready))


def inference_objective_view(o: dict) -> InferenceObjectiveView:
    meta, spec = _meta(o), o.get("spec") or {}
    priority = spec.get("priority")
    return InferenceObjectiveView(namespace=meta["namespace"], name=meta["name"],
                                  pool=str((spec.get("poolRef") or {}).get("name") or ""),
                                  priority=int(priority) if priority is not None else None)
