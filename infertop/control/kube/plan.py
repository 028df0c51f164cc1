"""Kubernetes actions, the pure half: what a change is and what it would do.

The :class:`Plan` of one change (request, one-line summary, unified diff of the
object before/after), the results the executor reports (:class:`DryRun`,
:class:`Progress`, :class:`Outcome`), and every ``plan_*`` function: pure,
from an object read just before, no request made. Executed by
:class:`infertop.control.kube.execute.KubeControl`. No UI imports.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import difflib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from ...sources.kube import RESTARTED_AT, pick_container, pod_view
from .pdb import check_pdbs
from ..pipeline import ActionRefused, Outcome, Preflight, Progress, ProgressFn

__all__ = [
    "ACTION_TITLES",
    "DELETION_COST",
    "DRAINED_FROM",
    "MERGE",
    "RESOURCES",
    "STRATEGIC",
    "DryRun",
    "SpecChanged",
    "Outcome",
    "Plan",
    "PlanError",
    "Progress",
    "ProgressFn",
    "apply_arg_changes",
    "drainable_pods",
    "guard_changes",
    "object_diff",
    "plan_args",
    "plan_configmap",
    "plan_cordon",
    "plan_delete_pod",
    "plan_drain_node",
    "plan_drain_pod",
    "plan_hpa",
    "plan_restart",
    "plan_scale",
    "replica_owners",
    "trimmed",
    "with_gateway",
]

DRAINED_FROM = "infertop.io/drained-from"  # annotation: the labels a drain took away (restored on abort)
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

# Kind → (API group, resource) for access reviews and requests.
RESOURCES = {
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "HorizontalPodAutoscaler": ("autoscaling", "horizontalpodautoscalers"),
    "Pod": ("", "pods"),
    "Node": ("", "nodes"),
    "ConfigMap": ("", "configmaps"),
    "Service": ("", "services"),
}


class PlanError(ActionRefused):
    """The requested change is not possible or changes nothing (one line)."""


class SpecChanged(Exception):
    """Re-read just before the write: a field the plan was made from changed since (nothing was sent)."""

    status = 409


@dataclass(frozen=True)
class Plan:
    """One change, ready to be dry-run, confirmed and executed."""

    action: str  # scale, hpa, args, restart, delete_pod, drain_pod, cordon, uncordon, drain_node, configmap
    kind: str
    namespace: str | None
    name: str
    summary: str  # the exact change in one line: "replicas 3 → 5"
    diff: str  # unified diff of the object before → after
    body: Any = None  # the patch (or delete options)
    content_type: str = STRATEGIC
    subresource: str = ""
    resource_version: str | None = None  # as read at plan time (the write sends the one re-read just before)
    # (path, value at plan time): the fields the change was planned from. Just before writing, the object is
    # read again; if one of them differs, nothing is sent (re-plan, re-confirm). Anything else — status,
    # other metadata — may change meanwhile without a conflict.
    guard: tuple[tuple[tuple[str, ...], Any], ...] = ()
    old: Any = None  # compact before/after for the audit log
    new: Any = None
    steps: tuple[str, ...] = ()  # what happens, in order (multi-step actions)
    warnings: tuple[str, ...] = ()
    params: dict = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"{self.kind.lower()} {self.namespace}/{self.name}" if self.namespace else f"{self.kind.lower()} {self.name}"

    @property
    def title(self) -> str:
        return f"{ACTION_TITLES.get(self.action, self.action)}: {self.target}"


ACTION_TITLES = {
    "scale": "Scale", "hpa": "Edit HPA bounds", "args": "Patch engine args", "restart": "Rollout restart",
    "delete_pod": "Delete pod", "drain_pod": "Drain pod", "cordon": "Cordon node", "uncordon": "Uncordon node",
    "drain_node": "Drain node", "configmap": "Patch ConfigMap",
}


DryRun = Preflight  # a server dry run is the preflight of a Kubernetes action


# ------------------------------------------------------------------ diffs

_NOISE_META = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")


def trimmed(obj: dict | None, keep_status: bool = False) -> dict:
    """The object without server bookkeeping (status, managedFields, resourceVersion…)."""
    o = copy.deepcopy(obj or {})
    meta = o.get("metadata") or {}
    for k in _NOISE_META:
        meta.pop(k, None)
    if not keep_status:
        o.pop("status", None)
    return o


def object_diff(before: dict | None, after: dict | None, label: str, context: int = 3) -> str:
    """Unified diff of two objects as YAML (sorted keys); empty when equal."""
    a = yaml.safe_dump(trimmed(before), sort_keys=True, default_flow_style=False, width=200).splitlines()
    b = yaml.safe_dump(trimmed(after), sort_keys=True, default_flow_style=False, width=200).splitlines()
    lines = difflib.unified_diff(a, b, f"{label} (live)", f"{label} (after)", n=context, lineterm="")
    return "\n".join(lines)


def _rv(obj: dict) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _at(obj: dict | None, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (None where absent)."""
    cur: Any = obj
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def _guard(obj: dict, *paths: tuple[str, ...]) -> tuple[tuple[tuple[str, ...], Any], ...]:
    return tuple((p, copy.deepcopy(_at(obj, p))) for p in paths)


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, (dict, list)):
        return "(changed)"
    text = str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def guard_changes(plan: "Plan", live: dict) -> list[str]:
    """What changed in ``live`` among the fields ``plan`` was made from: ["spec.maxReplicas 8 → 10"]."""
    out = []
    for path, was in plan.guard:
        now = _at(live, path)
        if now != was:
            name = ".".join(path)
            both = (_shown(was), _shown(now))
            out.append(name if "(changed)" in both else f"{name} {both[0]} → {both[1]}")
    return out


def _label(kind: str, obj: dict) -> str:
    meta = _meta(obj)
    ns = meta.get("namespace")
    return f"{kind.lower()}/{ns + '/' if ns else ''}{meta.get('name')}"


# --------------------------------------------------------- planning (pure)

def replica_owners(kind: str, name: str, hpas: list[dict], scaled_objects: list[dict]) -> list[str]:
    """The autoscalers that set ``kind``/``name``'s replica count, as "HPA ns/x (min 1, max 9)"; the HPA a
    KEDA ScaledObject made is named through its ScaledObject."""
    def targets(obj: dict) -> bool:
        ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        return ref.get("name") == name and (ref.get("kind") or "Deployment") == kind

    def where(obj: dict) -> str:
        m = _meta(obj)
        return f"{m.get('namespace')}/{m.get('name')}"

    out, keda_hpas = [], set()
    for so in scaled_objects:
        if targets(so):
            spec = so.get("spec") or {}
            keda_hpas.add((so.get("status") or {}).get("hpaName") or f"keda-hpa-{_meta(so).get('name')}")
            out.append(f"KEDA ScaledObject {where(so)} (min {spec.get('minReplicaCount', 0)}, "
                       f"max {spec.get('maxReplicaCount', 100)})")
    for h in hpas:
        owned = any(r.get("kind") == "ScaledObject" for r in _meta(h).get("ownerReferences") or ())
        if targets(h) and not owned and _meta(h).get("name") not in keda_hpas:
            spec = h.get("spec") or {}
            out.append(f"HPA {where(h)} (min {spec.get('minReplicas', 1)}, max {spec.get('maxReplicas')})")
    return out


def plan_scale(kind: str, obj: dict, replicas: int, owners: list[str] | tuple[str, ...] = ()) -> Plan:
    """``owners``: the autoscalers that own the replica count (:func:`replica_owners`): they would set it
    back, which the review says, pointing at their bounds."""
    if kind not in ("Deployment", "StatefulSet"):
        raise PlanError(f"a {kind} cannot be scaled")
    if not isinstance(replicas, int) or replicas < 0:
        raise PlanError(f"replicas must be a whole number ≥ 0, not {replicas!r}")
    old = (obj.get("spec") or {}).get("replicas", 1)
    if old == replicas:
        raise PlanError(f"{_label(kind, obj)} already has {replicas} replicas")
    after = copy.deepcopy(obj)
    after.setdefault("spec", {})["replicas"] = replicas
    rv = _rv(obj)
    warnings = []
    if replicas == 0:
        warnings.append("scaling to 0 stops every engine of this workload")
    for owner in owners:
        warnings.append(f"{owner} owns the replica count: it sets it back at its next sync — change its "
                        "bounds instead (H on the Cluster pane)")
    return Plan("scale", kind, _meta(obj).get("namespace"), _meta(obj)["name"], f"replicas {old} → {replicas}",
                object_diff(obj, after, _label(kind, obj)),
                body={"spec": {"replicas": replicas}}, guard=_guard(obj, ("spec", "replicas")),
                content_type=MERGE, subresource="scale", resource_version=rv, old=old, new=replicas,
                warnings=tuple(warnings), params={"replicas": replicas, "from": old, "owners": list(owners)})


def plan_hpa(obj: dict, min_replicas: int | None, max_replicas: int | None) -> Plan:
    spec = obj.get("spec") or {}
    old_min, old_max = spec.get("minReplicas", 1), spec.get("maxReplicas")
    new_min = old_min if min_replicas is None else min_replicas
    new_max = old_max if max_replicas is None else max_replicas
    if not isinstance(new_min, int) or new_min < 1:
        raise PlanError(f"min replicas must be ≥ 1, not {new_min!r}")
    if not isinstance(new_max, int) or new_max < 1:
        raise PlanError(f"max replicas must be ≥ 1, not {new_max!r}")
    if new_min > new_max:
        raise PlanError(f"min replicas ({new_min}) must not exceed max replicas ({new_max})")
    if (new_min, new_max) == (old_min, old_max):
        raise PlanError(f"the HPA already has min {old_min}, max {old_max}")
    after = copy.deepcopy(obj)
    after["spec"]["minReplicas"], after["spec"]["maxReplicas"] = new_min, new_max
    parts = []
    if new_min != old_min:
        parts.append(f"min {old_min} → {new_min}")
    if new_max != old_max:
        parts.append(f"max {old_max} → {new_max}")
    rv = _rv(obj)
    return Plan("hpa", "HorizontalPodAutoscaler", _meta(obj).get("namespace"), _meta(obj)["name"], ", ".join(parts),
                object_diff(obj, after, _label("HorizontalPodAutoscaler", obj)),
                body={"spec": {"minReplicas": new_min, "maxReplicas": new_max}},
                guard=_guard(obj, ("spec", "minReplicas"), ("spec", "maxReplicas")), content_type=MERGE,
                resource_version=rv, old={"min": old_min, "max": old_max},
                new={"min": new_min, "max": new_max}, params={"min": new_min, "max": new_max})


def _is_value(token: str) -> bool:
    return not token.startswith("-") or (len(token) > 1 and (token[1].isdigit() or token[1] == "."))


def _flag_spans(args: list[str]) -> dict[str, tuple[int, int]]:
    """flag → (start index, token count) for every ``--flag [value]`` / ``--flag=value`` in ``args``."""
    out: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            n = 1 if "=" in a else (2 if i + 1 < len(args) and _is_value(args[i + 1]) else 1)
            out.setdefault(name, (i, n))
            i += n
        else:
            i += 1
    return out


def apply_arg_changes(old: list[str], changes: str) -> list[str]:
    """Apply an operator's edit to a container's args.

    ``--max-num-seqs 32`` sets (or adds) a flag's value, ``--flag=value`` too,
    ``--enforce-eager`` adds a bare flag, ``!--enable-prefix-caching`` removes
    a flag (and its value); ``= …`` replaces the whole argument list.
    """
    text = changes.strip()
    if not text:
        raise PlanError("no change given")
    if text.startswith("="):
        try:
            return shlex.split(text[1:])
        except ValueError as e:
            raise PlanError(f"cannot parse the arguments: {e}") from None
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise PlanError(f"cannot parse the arguments: {e}") from None
    args = list(old)
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("!--"):
            name = t[1:].split("=", 1)[0]
            spans = _flag_spans(args)
            if name not in spans:
                raise PlanError(f"{name} is not in the current arguments")
            start, n = spans[name]
            del args[start:start + n]
            i += 1
            continue
        if not t.startswith("--"):
            raise PlanError(f"expected a --flag, got {t!r} (use '= …' to replace every argument)")
        if "=" in t:
            name, value = t.split("=", 1)
            new = [f"{name}={value}"]
            i += 1
        elif i + 1 < len(tokens) and _is_value(tokens[i + 1]) and not tokens[i + 1].startswith("!--"):
            name, value = t, tokens[i + 1]
            new = [name, value]
            i += 2
        else:
            name, value, new = t, None, [t]
            i += 1
        spans = _flag_spans(args)
        if name in spans:
            start, n = spans[name]
            if n == 1 and "=" in args[start] and value is not None and len(new) == 2:
                new = [f"{name}={value}"]  # keep the operator's existing --flag=value form
            args[start:start + n] = new
        else:
            args.extend(new)
    return args


def plan_args(kind: str, obj: dict, changes: str, container: str = "") -> Plan:
    if kind not in ("Deployment", "StatefulSet"):
        raise PlanError(f"a {kind} has no pod template")
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    main = pick_container(containers, container)
    if main is None:
        raise PlanError("the pod template has no container")
    old = [str(a) for a in main.get("args") or []]
    new = apply_arg_changes(old, changes)
    if new == old:
        raise PlanError("the arguments would not change")
    after = copy.deepcopy(obj)
    for c in after["spec"]["template"]["spec"]["containers"]:
        if c.get("name") == main["name"]:
            c["args"] = new
    rv = _rv(obj)
    return Plan("args", kind, _meta(obj).get("namespace"), _meta(obj)["name"],
                f"{main['name']} args: {shlex.join(old) or '(none)'} → {shlex.join(new)}",
                object_diff(obj, after, _label(kind, obj)),
                body={"spec": {"template": {"spec": {"containers": [{"name": main["name"], "args": new}]}}}},
                guard=_guard(obj, ("spec", "template")), resource_version=rv, old=old, new=new,
                steps=("patch the pod template (a rolling update replaces every pod)",
                       "follow the rollout until it completes or is stuck"),
                params={"container": main["name"], "args": new})


def plan_restart(kind: str, obj: dict, now: float) -> Plan:
    if kind not in ("Deployment", "StatefulSet"):
        raise PlanError(f"a {kind} cannot be restarted")
    stamp = _dt.datetime.fromtimestamp(now, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    after = copy.deepcopy(obj)
    tpl_meta = after.setdefault("spec", {}).setdefault("template", {}).setdefault("metadata", {})
    old = (tpl_meta.get("annotations") or {}).get(RESTARTED_AT)
    tpl_meta.setdefault("annotations", {})[RESTARTED_AT] = stamp
    rv = _rv(obj)
    return Plan("restart", kind, _meta(obj).get("namespace"), _meta(obj)["name"],
                f"pod template annotation {RESTARTED_AT}: {old or '(none)'} → {stamp}",
                object_diff(obj, after, _label(kind, obj)),
                body={"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}},
                guard=_guard(obj, ("spec", "template")), resource_version=rv, old=old, new=stamp,
                steps=("annotate the pod template (a rolling update replaces every pod)",
                       "follow the rollout until it completes or is stuck"),
                params={"restarted_at": stamp})


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


def plan_configmap(cm: dict, key: str, value: str) -> Plan:
    meta = _meta(cm)
    key = key.strip()
    if not key:
        raise PlanError("no key given")
    data = dict(cm.get("data") or {})
    old = data.get(key)
    if old == value:
        raise PlanError(f"{key} already has that value")
    after = copy.deepcopy(cm)
    after.setdefault("data", {})[key] = value
    rv = _rv(cm)
    shown_old = "(absent)" if old is None else (old if len(old) <= 40 else old[:39] + "…")
    shown_new = value if len(value) <= 40 else value[:39] + "…"
    return Plan("configmap", "ConfigMap", meta.get("namespace"), meta["name"],
                f"data.{key}: {shown_old} → {shown_new}", object_diff(cm, after, _label("ConfigMap", cm)),
                body={"data": {key: value}}, guard=_guard(cm, ("data", key)), content_type=MERGE,
                resource_version=rv, old=old, new=value, params={"key": key},
                warnings=("pods that read this ConfigMap pick the change up on their own schedule "
                          "(a mounted file within ~1 min; environment variables only after a restart)",))
