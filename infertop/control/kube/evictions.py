"""Kubernetes actions, the pure half, for taking pods off: delete a pod, drain a pod (out of its Service's
endpoints, and at its gateway), cordon a node, drain a node (every eviction checked against the
PodDisruptionBudgets first). Each ``plan_*`` is pure, from objects read just before. No UI imports.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from ...sources.kube import pod_view
from .pdb import check_pdbs
from .plan import DRAINED_FROM, Plan, PlanError, _guard, _meta, _rv, object_diff


def _owner_summary(pod: dict) -> str:
    view = pod_view(pod)
    if view.owner_kind:
        return f"{view.owner_kind.lower()} {view.owner_name}"
    return ""


def plan_delete_pod(pod: dict) -> Plan:
    meta = _meta(pod)
    if meta.get("deletionTimestamp"):
        raise PlanError(f"pod {meta['name']} is already terminating")
    owner = _owner_summary(pod)
    warnings = [] if owner else ["this pod has no controller: nothing will replace it"]
    diff = "\n".join([f"--- pod/{meta.get('namespace')}/{meta['name']} (live)", "+++ (deleted)",
                      f"-pod {meta['name']} (uid {meta.get('uid')}, node {(pod.get('spec') or {}).get('nodeName')})"])
    return Plan("delete_pod", "Pod", meta.get("namespace"), meta["name"],
                f"delete pod {meta['name']}" + (f" ({owner} creates a replacement)" if owner else ""),
                diff, body={"preconditions": {"uid": meta.get("uid")}}, resource_version=_rv(pod),
                old=meta["name"], new=None, warnings=tuple(warnings), params={"uid": meta.get("uid")})


def _selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def plan_drain_pod(pod: dict, services: list[dict], owner: dict | None = None, owner_kind: str | None = None,
                   then: str = "delete") -> Plan:
    """Take the pod out of every Service that selects it (a label patch), wait until its engine has
    nothing in flight, then delete it (its controller replaces it) or scale its workload down by one."""
    meta = _meta(pod)
    if meta.get("deletionTimestamp"):
        raise PlanError(f"pod {meta['name']} is already terminating")
    if then not in ("delete", "scale-down"):
        raise PlanError(f"unknown follow-up {then!r}: delete or scale-down")
    labels = dict(meta.get("labels") or {})
    owner_selector = ((owner or {}).get("spec") or {}).get("selector", {}).get("matchLabels") or {}
    matching = [s for s in services if _selects((s.get("spec") or {}).get("selector") or {}, labels)]
    remove: dict[str, str] = {}
    warnings = []
    for svc in matching:
        sel = (svc.get("spec") or {}).get("selector") or {}
        if any(k in remove for k in sel):
            continue
        free = [k for k in sel if k not in owner_selector]
        key = free[0] if free else sorted(sel)[0]
        remove[key] = labels[key]
        if not free and owner:
            warnings.append(f"label {key} is also in the {owner_kind} selector: the pod leaves its controller, "
                            "which starts a replacement right away")
    if not matching:
        warnings.append("no Service selects this pod: there is no traffic to take away, the drain only waits "
                        "for what is in flight")
    if then == "scale-down":
        if owner is None:
            raise PlanError("scale-down needs a Deployment or StatefulSet that owns the pod")
        replicas = (owner.get("spec") or {}).get("replicas", 1)
        if replicas < 1:
            raise PlanError(f"{owner_kind} has no replica to scale down")
        if owner_kind == "StatefulSet":
            name = meta["name"]
            top = f"{_meta(owner)['name']}-{replicas - 1}"
            if name != top:
                raise PlanError(f"a StatefulSet scales down from its highest ordinal ({top}), not {name}: "
                                "drain that one, or choose delete")
    after = copy.deepcopy(pod)
    after_labels = {k: v for k, v in labels.items() if k not in remove}
    after["metadata"]["labels"] = after_labels
    if remove:
        after["metadata"].setdefault("annotations", {})[DRAINED_FROM] = json.dumps(remove, sort_keys=True)
    view = {"metadata": {k: meta.get(k) for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}}
    view_after = {"metadata": {k: after["metadata"].get(k) for k in ("name", "namespace", "labels", "annotations")
                               if after["metadata"].get(k)}}
    rv = _rv(pod)
    svc_names = ", ".join(_meta(s)["name"] for s in matching) or "none"
    steps = []
    if remove:
        steps.append(f"remove label(s) {', '.join(f'{k}={v}' for k, v in remove.items())}: "
                     f"out of Service(s) {svc_names}")
    steps.append("wait until vllm:num_requests_running + waiting reach 0 on the pod")
    if then == "delete":
        steps.append("delete the pod" + (f" ({owner_kind} {_meta(owner)['name']} replaces it)" if owner else ""))
    elif owner is not None:  # scale-down, whose owner was required above
        replicas = (owner.get("spec") or {}).get("replicas", 1)
        steps.append(f"scale {owner_kind} {_meta(owner)['name']} {replicas} → {replicas - 1}"
                     + (" and delete the pod" if owner_kind == "Deployment" else ""))
    summary = (f"take pod {meta['name']} out of {svc_names}, wait for in-flight requests to finish, then "
               + ("delete it" if then == "delete" else "scale down by one"))
    body = {"metadata": {"labels": {k: None for k in remove},
                         "annotations": {DRAINED_FROM: json.dumps(remove, sort_keys=True)}}} if remove else None
    return Plan("drain_pod", "Pod", meta.get("namespace"), meta["name"], summary,
                object_diff(view, view_after, f"pod/{meta.get('namespace')}/{meta['name']}"),
                body=body, resource_version=rv, old={"labels": labels}, new={"labels": after_labels},
                guard=_guard(pod, ("metadata", "uid"), ("metadata", "labels")),
                steps=tuple(steps), warnings=tuple(warnings),
                params={"removed": remove, "then": then, "uid": meta.get("uid"),
                        "owner_kind": owner_kind, "owner": _meta(owner).get("name") if owner else None,
                        "services": [_meta(s)["name"] for s in matching]})


def with_gateway(plan: Plan, gateway: Any, label: str | None, warnings: list[str] | tuple[str, ...] = ()) -> Plan:
    """The pod drain ``plan`` covering the gateway in front of the pod's engine as well: ``gateway`` (a
    :class:`~infertop.control.gateway.drain.GatewayDrain`, or None when no gateway fronts it) is drained
    after the label patch and undrained once the pod is gone (or on abort/timeout)."""
    notes = [w for w in plan.warnings if not (gateway is not None and w.startswith("no Service selects"))]
    notes += [str(w) for w in warnings]
    if gateway is None:
        if not plan.params.get("removed"):
            notes.append("nothing takes this pod out of traffic (no Service label, no gateway with admin "
                         "access in the config): in flight may never reach 0; the drain then times out")
        return dataclasses.replace(plan, warnings=tuple(notes))
    steps = list(plan.steps)
    at = 1 if plan.params.get("removed") else 0
    steps.insert(at, f"drain engine {gateway.engine} at {label}: it routes no new request there "
                     "(undrained once the pod is gone, or on abort)")
    svc = ", ".join(plan.params.get("services") or ())
    paths = f"{svc} and {label}" if svc else str(label)
    summary = plan.summary.replace(f"out of {svc or 'none'},", f"out of {paths},", 1)
    return dataclasses.replace(plan, steps=tuple(steps), warnings=tuple(notes), summary=summary,
                               params=plan.params | {"gateway": gateway, "gateway_label": label})


def plan_cordon(node: dict, cordon: bool = True) -> Plan:
    meta = _meta(node)
    was = bool((node.get("spec") or {}).get("unschedulable"))
    if was == cordon:
        raise PlanError(f"node {meta['name']} is already {'cordoned' if cordon else 'schedulable'}")
    after = copy.deepcopy(node)
    if cordon:
        after.setdefault("spec", {})["unschedulable"] = True
    else:
        after.setdefault("spec", {}).pop("unschedulable", None)
    rv = _rv(node)
    return Plan("cordon" if cordon else "uncordon", "Node", None, meta["name"],
                f"node {meta['name']}: " + ("schedulable → cordoned (no new pods)" if cordon
                                            else "cordoned → schedulable"),
                object_diff(node, after, f"node/{meta['name']}"),
                body={"spec": {"unschedulable": True if cordon else None}},
                guard=_guard(node, ("spec", "unschedulable")), resource_version=rv, old={"unschedulable": was},
                new={"unschedulable": cordon})


def drainable_pods(pods: list[dict]) -> tuple[list[dict], list[str]]:
    """Pods a node drain evicts, and why the others are skipped (DaemonSet, mirror, terminating)."""
    keep, skipped = [], []
    for p in pods:
        meta = _meta(p)
        refs = meta.get("ownerReferences") or []
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        if any(r.get("kind") == "DaemonSet" for r in refs):
            skipped.append(f"{name}: DaemonSet pod")
        elif "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            skipped.append(f"{name}: static (mirror) pod")
        elif meta.get("deletionTimestamp"):
            skipped.append(f"{name}: already terminating")
        else:
            keep.append(p)
    return keep, skipped


def plan_drain_node(node: dict, pods: list[dict], pdbs: list[dict] | None = None, pdbs_unread: str = "") -> Plan:
    """``pdbs``: the PodDisruptionBudgets of the namespaces of the pods (None: not read; ``pdbs_unread``
    says why, which the review repeats). Every eviction is counted against them together: evictions that break a budget between
    them are flagged here, before the drain is confirmed (each alone passes a dry run)."""
    meta = _meta(node)
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    evict, skipped = drainable_pods(pods)
    budget = check_pdbs(evict, pdbs or [])
    pdb_notes = list(budget.refusals)
    if pdbs is None and pdbs_unread and evict:
        pdb_notes.append(f"the PodDisruptionBudgets could not be read ({pdbs_unread}): an eviction "
                         "they refuse shows only when the drain sends it")
    after = copy.deepcopy(node)
    after.setdefault("spec", {})["unschedulable"] = True
    names = [f"{_meta(p).get('namespace')}/{_meta(p).get('name')}" for p in evict]
    steps = [] if cordoned else [f"cordon node {meta['name']}"]
    steps += [f"evict {n} (Eviction API: honours PodDisruptionBudgets, retries on 429)" for n in names]
    if pdbs is not None and evict and not budget.refusals:
        steps.append("every eviction fits its PodDisruptionBudget" + (f" ({'; '.join(budget.fits)})" if budget.fits
                                                                       else " (none selects these pods)"))
    steps.append("wait until the evicted pods are gone")
    diff = object_diff(node, after, f"node/{meta['name']}") if not cordoned else ""
    diff += ("\n" if diff else "") + "\n".join(f"-pod {n}" for n in names)
    rv = _rv(node)
    return Plan("drain_node", "Node", None, meta["name"],
                f"drain node {meta['name']}: " + ("" if cordoned else "cordon, ") + f"evict {len(evict)} pod(s)",
                diff, body={"spec": {"unschedulable": True}} if not cordoned else None,
                guard=_guard(node, ("spec", "unschedulable")), resource_version=rv,
                old={"unschedulable": cordoned, "pods": names},
                new={"unschedulable": True, "pods": []}, steps=tuple(steps),
                warnings=tuple(pdb_notes) + tuple(f"skipped {s}" for s in skipped),
                params={"pods": [(_meta(p).get("namespace"), _meta(p).get("name"), _meta(p).get("uid"))
                                 for p in evict], "pdb_refusals": list(budget.refusals)})
