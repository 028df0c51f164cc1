"""Kubernetes actions: plan (pure) → dry-run → confirm → execute → follow → audit.

Every action starts from a fresh read of the object and a *pure* planning
function (``plan_*``) that returns a :class:`Plan`: the exact request, a
one-line summary ("replicas 3 → 5") and a unified diff of the object
before/after. :meth:`KubeControl.dry_run` sends the same request with
``dryRun=All`` (errors are shown before the operator is asked);
:meth:`KubeControl.execute` sends it for real — every write carries the
resourceVersion that was read, so an object that changed in between answers
409 and the caller re-reads and asks again (never a blind retry) — then
follows the change to completion (rollout, pods, drain) with progress
callbacks, and appends one line to the audit log.

All calls block: the TUI runs them in thread workers. No UI imports.
"""

from __future__ import annotations

import copy
import datetime as _dt
import difflib
import json
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..config import KubeConfig
from ..sources.kube import (
    RESTARTED_AT,
    KubeError,
    KubeSession,
    PodLoad,
    can_i,
    fetch_pod_load,
    pick_container,
    pod_view,
    rollout_status,
    selector_text,
)
from .audit import AuditLog

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

# What each action needs, for SelfSubjectAccessReviews: any of the
# alternatives, each a list of (verb, group, resource, subresource, cluster_scoped).
PERMISSIONS: dict[str, list[list[tuple[str, str, str, str, bool]]]] = {
    "scale": [[("patch", "apps", "deployments", "scale", False)], [("patch", "apps", "statefulsets", "scale", False)]],
    "hpa": [[("patch", "autoscaling", "horizontalpodautoscalers", "", False)]],
    "args": [[("patch", "apps", "deployments", "", False)], [("patch", "apps", "statefulsets", "", False)]],
    "restart": [[("patch", "apps", "deployments", "", False)], [("patch", "apps", "statefulsets", "", False)]],
    "delete_pod": [[("delete", "", "pods", "", False)]],
    "drain_pod": [[("patch", "", "pods", "", False), ("delete", "", "pods", "", False)]],
    "cordon": [[("patch", "", "nodes", "", True)]],
    "drain_node": [[("patch", "", "nodes", "", True), ("create", "", "pods", "eviction", True)]],
    "configmap": [[("patch", "", "configmaps", "", False)]],
}
KIND_ALTERNATIVE = {"Deployment": 0, "StatefulSet": 1}  # which alternative of scale/args/restart a kind needs


class PlanError(ValueError):
    """The requested change is not possible or changes nothing (one line)."""


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
    resource_version: str | None = None
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


@dataclass(frozen=True)
class DryRun:
    ok: bool
    message: str  # "server accepted the change (dry run)" or the one-line error
    status: int = 0
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Progress:
    """A step of a running action: ``fraction`` 0..1 when known, a line of text, an optional countdown."""

    text: str
    fraction: float | None = None
    countdown_s: float | None = None


@dataclass(frozen=True)
class Outcome:
    result: str  # ok, failed, aborted, stuck, timeout, conflict
    message: str
    status: int = 0  # HTTP status of a failure (409, 403, …)

    @property
    def ok(self) -> bool:
        return self.result == "ok"


ProgressFn = Callable[[Progress], None]


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


def _label(kind: str, obj: dict) -> str:
    meta = _meta(obj)
    ns = meta.get("namespace")
    return f"{kind.lower()}/{ns + '/' if ns else ''}{meta.get('name')}"


# --------------------------------------------------------- planning (pure)

def plan_scale(kind: str, obj: dict, replicas: int) -> Plan:
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
    return Plan("scale", kind, _meta(obj).get("namespace"), _meta(obj)["name"], f"replicas {old} → {replicas}",
                object_diff(obj, after, _label(kind, obj)),
                body={"metadata": {"resourceVersion": rv}, "spec": {"replicas": replicas}},
                content_type=MERGE, subresource="scale", resource_version=rv, old=old, new=replicas,
                warnings=tuple(warnings), params={"replicas": replicas, "from": old})


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
                body={"metadata": {"resourceVersion": rv}, "spec": {"minReplicas": new_min, "maxReplicas": new_max}},
                content_type=MERGE, resource_version=rv, old={"min": old_min, "max": old_max},
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
                body={"metadata": {"resourceVersion": rv},
                      "spec": {"template": {"spec": {"containers": [{"name": main["name"], "args": new}]}}}},
                resource_version=rv, old=old, new=new,
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
                body={"metadata": {"resourceVersion": rv},
                      "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}},
                resource_version=rv, old=old, new=stamp,
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
    else:
        replicas = (owner.get("spec") or {}).get("replicas", 1)
        steps.append(f"scale {owner_kind} {_meta(owner)['name']} {replicas} → {replicas - 1}"
                     + (" and delete the pod" if owner_kind == "Deployment" else ""))
    summary = (f"take pod {meta['name']} out of {svc_names}, wait for in-flight requests to finish, then "
               + ("delete it" if then == "delete" else "scale down by one"))
    body = {"metadata": {"resourceVersion": rv,
                         "labels": {k: None for k in remove},
                         "annotations": {DRAINED_FROM: json.dumps(remove, sort_keys=True)}}} if remove else None
    return Plan("drain_pod", "Pod", meta.get("namespace"), meta["name"], summary,
                object_diff(view, view_after, f"pod/{meta.get('namespace')}/{meta['name']}"),
                body=body, resource_version=rv, old={"labels": labels}, new={"labels": after_labels},
                steps=tuple(steps), warnings=tuple(warnings),
                params={"removed": remove, "then": then, "uid": meta.get("uid"),
                        "owner_kind": owner_kind, "owner": _meta(owner).get("name") if owner else None,
                        "services": [_meta(s)["name"] for s in matching]})


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
                body={"metadata": {"resourceVersion": rv}, "spec": {"unschedulable": True if cordon else None}},
                resource_version=rv, old={"unschedulable": was}, new={"unschedulable": cordon})


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


def plan_drain_node(node: dict, pods: list[dict]) -> Plan:
    meta = _meta(node)
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    evict, skipped = drainable_pods(pods)
    after = copy.deepcopy(node)
    after.setdefault("spec", {})["unschedulable"] = True
    names = [f"{_meta(p).get('namespace')}/{_meta(p).get('name')}" for p in evict]
    steps = [] if cordoned else [f"cordon node {meta['name']}"]
    steps += [f"evict {n} (Eviction API: honours PodDisruptionBudgets, retries on 429)" for n in names]
    steps.append("wait until the evicted pods are gone")
    diff = object_diff(node, after, f"node/{meta['name']}") if not cordoned else ""
    diff += ("\n" if diff else "") + "\n".join(f"-pod {n}" for n in names)
    rv = _rv(node)
    return Plan("drain_node", "Node", None, meta["name"],
                f"drain node {meta['name']}: " + ("" if cordoned else "cordon, ") + f"evict {len(evict)} pod(s)",
                diff, body={"metadata": {"resourceVersion": rv}, "spec": {"unschedulable": True}} if not cordoned
                else None, resource_version=rv, old={"unschedulable": cordoned, "pods": names},
                new={"unschedulable": True, "pods": []}, steps=tuple(steps),
                warnings=tuple(f"skipped {s}" for s in skipped),
                params={"pods": [(_meta(p).get("namespace"), _meta(p).get("name"), _meta(p).get("uid"))
                                 for p in evict]})


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
                body={"metadata": {"resourceVersion": rv}, "data": {key: value}}, content_type=MERGE,
                resource_version=rv, old=old, new=value, params={"key": key},
                warnings=("pods that read this ConfigMap pick the change up on their own schedule "
                          "(a mounted file within ~1 min; environment variables only after a restart)",))


# ---------------------------------------------------------------- permissions

class Permissions:
    """Answers of SelfSubjectAccessReviews, per (verb, group, resource, subresource, namespace)."""

    def __init__(self, answers: dict[tuple[str, str, str, str, str], bool] | None = None,
                 namespaces: list[str] | None = None) -> None:
        self.answers = dict(answers or {})
        self.namespaces = list(namespaces or [])

    def _check(self, check: tuple[str, str, str, str, bool], namespace: str | None) -> bool | None:
        verb, group, resource, sub, cluster = check
        if cluster:
            return self.answers.get((verb, group, resource, sub, ""))
        if namespace is not None:
            return self.answers.get((verb, group, resource, sub, namespace))
        vals = [self.answers.get((verb, group, resource, sub, ns)) for ns in self.namespaces]
        if any(v is True for v in vals):
            return True
        return None if any(v is None for v in vals) or not vals else False

    def allows(self, action: str, namespace: str | None = None, kind: str | None = None) -> bool | None:
        """True/False, or None when not known (not asked yet)."""
        alts = PERMISSIONS.get(action)
        if alts is None:
            return True
        if kind is not None and kind in KIND_ALTERNATIVE and len(alts) > 1:
            alts = [alts[KIND_ALTERNATIVE[kind]]]
        unknown = False
        for alt in alts:
            vals = [self._check(c, namespace) for c in alt]
            if all(v is True for v in vals):
                return True
            if any(v is None for v in vals) and not any(v is False for v in vals):
                unknown = True
        return None if unknown else False

    def deny(self, action: str, namespace: str | None, kind: str | None = None) -> None:
        """Remember a 403 for ``action`` (the server said no even if a review said yes)."""
        alts = PERMISSIONS.get(action) or []
        if kind is not None and kind in KIND_ALTERNATIVE and len(alts) > 1:
            alts = [alts[KIND_ALTERNATIVE[kind]]]
        for alt in alts:
            for verb, group, resource, sub, cluster in alt:
                self.answers[(verb, group, resource, sub, "" if cluster else (namespace or ""))] = False
                if namespace is None and not cluster:
                    for ns in self.namespaces:
                        self.answers[(verb, group, resource, sub, ns)] = False


def check_permissions(session: KubeSession, namespaces: list[str] | None = None) -> Permissions:
    """Ask the server (SelfSubjectAccessReview) for every check of every action; unknown on errors."""
    nss = list(namespaces or session.namespaces)
    wanted: set[tuple[str, str, str, str, str]] = set()
    for alts in PERMISSIONS.values():
        for alt in alts:
            for verb, group, resource, sub, cluster in alt:
                if cluster:
                    wanted.add((verb, group, resource, sub, ""))
                else:
                    for ns in nss:
                        wanted.add((verb, group, resource, sub, ns))
    answers = {}
    for key in sorted(wanted):
        try:
            answers[key] = can_i(session, *key)
        except KubeError:
            continue  # unknown: the dry run will tell
    return Permissions(answers, nss)


def _new_revision(plan: Plan, pod: dict) -> bool:
    """Is ``pod`` made from the template this plan wrote (new args / new restartedAt)?"""
    if plan.action == "args":
        containers = (pod.get("spec") or {}).get("containers") or []
        c = next((c for c in containers if c.get("name") == plan.params.get("container")), None)
        return c is not None and [str(a) for a in c.get("args") or []] == list(plan.params.get("args") or [])
    if plan.action == "restart":
        return (_meta(pod).get("annotations") or {}).get(RESTARTED_AT) == plan.params.get("restarted_at")
    return True


# ---------------------------------------------------------------- execution

class KubeControl:
    """Reads, dry-runs, executes and follows :class:`Plan` s against one session."""

    def __init__(self, session: KubeSession, audit: AuditLog | None = None, cfg: KubeConfig | None = None, *,
                 poll_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.session = session
        self.audit = audit
        self.cfg = cfg or KubeConfig()
        self.poll_s = self.cfg.follow_poll_s if poll_s is None else poll_s
        self.clock = clock
        self.wall = wall

    # ----- reads
    def _fn(self, verb: str, kind: str, subresource: str = "") -> Callable[..., Any]:
        s = self.session
        table: dict[tuple[str, str, str], Callable[..., Any]] = {
            ("read", "Deployment", ""): s.apps.read_namespaced_deployment,
            ("read", "StatefulSet", ""): s.apps.read_namespaced_stateful_set,
            ("read", "HorizontalPodAutoscaler", ""): s.autoscaling.read_namespaced_horizontal_pod_autoscaler,
            ("read", "Pod", ""): s.core.read_namespaced_pod,
            ("read", "Node", ""): s.core.read_node,
            ("read", "ConfigMap", ""): s.core.read_namespaced_config_map,
            ("patch", "Deployment", ""): s.apps.patch_namespaced_deployment,
            ("patch", "Deployment", "scale"): s.apps.patch_namespaced_deployment_scale,
            ("patch", "StatefulSet", ""): s.apps.patch_namespaced_stateful_set,
            ("patch", "StatefulSet", "scale"): s.apps.patch_namespaced_stateful_set_scale,
            ("patch", "HorizontalPodAutoscaler", ""): s.autoscaling.patch_namespaced_horizontal_pod_autoscaler,
            ("patch", "Pod", ""): s.core.patch_namespaced_pod,
            ("patch", "Node", ""): s.core.patch_node,
            ("patch", "ConfigMap", ""): s.core.patch_namespaced_config_map,
            ("delete", "Pod", ""): s.core.delete_namespaced_pod,
        }
        return table[(verb, kind, subresource)]

    def read(self, kind: str, namespace: str | None, name: str) -> dict:
        fn = self._fn("read", kind)
        return self.session.raw(fn, name, namespace) if namespace is not None else self.session.raw(fn, name)

    def _list(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> list[dict]:
        return list(self.session.raw(fn, *args, **kw).get("items") or [])

    def pods_of(self, kind: str, workload: dict) -> list[dict]:
        ns = _meta(workload).get("namespace")
        sel = selector_text((workload.get("spec") or {}).get("selector"))
        return self._list(self.session.core.list_namespaced_pod, ns, label_selector=sel)

    def services(self, namespace: str) -> list[dict]:
        return self._list(self.session.core.list_namespaced_service, namespace)

    def configmaps(self, namespace: str) -> list[str]:
        return sorted(_meta(o).get("name") for o in self._list(self.session.core.list_namespaced_config_map,
                                                               namespace))

    def pods_on_node(self, node: str) -> list[dict]:
        try:
            return self._list(self.session.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")
        except KubeError as e:
            if e.status != 403:
                raise
        out = []  # only namespaced rights: the namespaces infertop watches
        for ns in self.session.namespaces:
            out += self._list(self.session.core.list_namespaced_pod, ns, field_selector=f"spec.nodeName={node}")
        return out

    # ----- prepare: fresh read + pure plan
    def prepare(self, action: str, kind: str, namespace: str | None, name: str, **params: Any) -> Plan:
        """Read the object now and plan ``action`` on it; raises KubeError or PlanError."""
        if action == "scale":
            return plan_scale(kind, self.read(kind, namespace, name), int(params["replicas"]))
        if action == "hpa":
            return plan_hpa(self.read("HorizontalPodAutoscaler", namespace, name), params.get("min_replicas"),
                            params.get("max_replicas"))
        if action == "args":
            return plan_args(kind, self.read(kind, namespace, name), params["changes"],
                             params.get("container") or self.cfg.vllm_container)
        if action == "restart":
            return plan_restart(kind, self.read(kind, namespace, name), self.wall())
        if action == "delete_pod":
            return plan_delete_pod(self.read("Pod", namespace, name))
        if action == "drain_pod":
            pod = self.read("Pod", namespace, name)
            view = pod_view(pod)
            owner = None
            if view.owner_kind in ("Deployment", "StatefulSet") and view.owner_name:
                try:
                    owner = self.read(view.owner_kind, namespace, view.owner_name)
                except KubeError as e:
                    if e.status != 404:
                        raise
            return plan_drain_pod(pod, self.services(namespace or "default"), owner,
                                  view.owner_kind if owner else None, params.get("then") or self.cfg.drain_then)
        if action in ("cordon", "uncordon"):
            return plan_cordon(self.read("Node", None, name), action == "cordon")
        if action == "drain_node":
            return plan_drain_node(self.read("Node", None, name), self.pods_on_node(name))
        if action == "configmap":
            return plan_configmap(self.read("ConfigMap", namespace, name), params["key"], params["value"])
        raise PlanError(f"unknown action {action!r}")

    # ----- requests
    def _send(self, plan: Plan, *, dry_run: bool, body: Any = None) -> dict:
        body = plan.body if body is None else body
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        if plan.action in ("scale", "hpa", "args", "restart", "configmap", "cordon", "uncordon"):
            fn = self._fn("patch", plan.kind, plan.subresource)
            if plan.content_type == MERGE:
                kw["_content_type"] = MERGE
            if plan.namespace is not None:
                return self.session.raw(fn, plan.name, plan.namespace, body, **kw)
            return self.session.raw(fn, plan.name, body, **kw)
        if plan.action == "delete_pod":
            return self._delete_pod(plan.namespace, plan.name, plan.params.get("uid"), dry_run=dry_run)
        raise PlanError(f"{plan.action} is not a single request")

    def _delete_pod(self, namespace: str | None, name: str, uid: str | None, *, dry_run: bool = False) -> dict:
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        body = V1DeleteOptions(preconditions=V1Preconditions(uid=uid)) if uid else None
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return self.session.raw(self._fn("delete", "Pod"), name, namespace, body=body, **kw)

    def _evict(self, namespace: str, name: str, *, dry_run: bool = False) -> dict:
        from kubernetes.client import V1Eviction, V1ObjectMeta

        body = V1Eviction(metadata=V1ObjectMeta(name=name, namespace=namespace))
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return self.session.raw(self.session.core.create_namespaced_pod_eviction, name, namespace, body, **kw)

    def dry_run(self, plan: Plan) -> DryRun:
        """Send the change with dryRun=All: server-side validation, admission and authorization, no effect."""
        try:
            if plan.action == "drain_pod":
                if plan.body is not None:
                    self._send_patch_pod(plan, plan.body, dry_run=True)
                if plan.params.get("then") == "scale-down":
                    owner = self.read(plan.params["owner_kind"], plan.namespace, plan.params["owner"])
                    n = (owner.get("spec") or {}).get("replicas", 1)
                    fn = self._fn("patch", plan.params["owner_kind"], "scale")
                    self.session.raw(fn, plan.params["owner"], plan.namespace, {"spec": {"replicas": n - 1}},
                                     dry_run="All", _content_type=MERGE)
                self._delete_pod(plan.namespace, plan.name, plan.params.get("uid"), dry_run=True)
                return DryRun(True, "the server accepts the label patch and the deletion (dry run)")
            if plan.action == "drain_node":
                if plan.body is not None:
                    self.session.raw(self._fn("patch", "Node"), plan.name, plan.body, dry_run="All")
                blocked = []
                for ns, name, _ in plan.params.get("pods") or []:
                    try:
                        self._evict(ns, name, dry_run=True)
                    except KubeError as e:
                        if e.status == 429:
                            blocked.append(f"{ns}/{name} is blocked now: {e}")
                        elif e.status != 404:
                            raise
                msg = "the server accepts the cordon and the evictions (dry run)"
                if blocked:
                    msg = (f"dry run: {len(blocked)} eviction(s) blocked by a PodDisruptionBudget for now; "
                           "the drain will wait and retry")
                return DryRun(True, msg, warnings=tuple(blocked))
            self._send(plan, dry_run=True)
            return DryRun(True, "the server accepts the change (dry run)")
        except KubeError as e:
            return DryRun(False, str(e), e.status)

    def _send_patch_pod(self, plan: Plan, body: dict, *, dry_run: bool = False) -> dict:
        kw = {"dry_run": "All"} if dry_run else {}
        return self.session.raw(self._fn("patch", "Pod"), plan.name, plan.namespace, body, **kw)

    # ----- audit
    def record(self, plan: Plan, outcome: Outcome, *, dry_run: bool = False, **extra: Any) -> None:
        if self.audit is None:
            return
        self.audit.record(f"kube.{plan.action}", plan.target, outcome.result, old=plan.old, new=plan.new,
                          diff=plan.diff, reason=None if outcome.ok else outcome.message, dry_run=dry_run,
                          summary=plan.summary, message=outcome.message, context=self.session.context,
                          kube_user=self.session.user, server=self.session.server, **extra)

    def record_dry_run_failure(self, plan: Plan, result: DryRun) -> None:
        self.record(plan, Outcome("failed", result.message, result.status), dry_run=True)

    # ----- execute
    def execute(self, plan: Plan, progress: ProgressFn | None = None,
                abort: threading.Event | None = None) -> Outcome:
        """Do it, follow it, audit it. A 409 returns ``Outcome("conflict")``: re-read, re-plan, re-confirm."""
        progress = progress or (lambda p: None)
        abort = abort or threading.Event()
        try:
            outcome = self._execute(plan, progress, abort)
        except KubeError as e:
            outcome = Outcome("conflict" if e.status == 409 else "failed", str(e), e.status)
        except PlanError as e:
            outcome = Outcome("failed", str(e))
        self.record(plan, outcome)
        return outcome

    def _execute(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        a = plan.action
        if a == "drain_pod":
            return self._drain_pod(plan, progress, abort)
        if a == "drain_node":
            return self._drain_node(plan, progress, abort)
        before: set[str] = set()
        if a == "scale":  # the pods there were: problems of new ones tell why a scale-up is stuck
            before = {_meta(p).get("uid") for p in self.pods_of(plan.kind, self.read(plan.kind, plan.namespace,
                                                                                     plan.name))}
        progress(Progress("sending the change…", 0.0))
        result = self._send(plan, dry_run=False)
        if a in ("scale",):
            return self._follow_workload(plan, progress, abort, rollout=False,
                                         is_new=lambda p: _meta(p).get("uid") not in before)
        if a in ("args", "restart"):
            gen = (_meta(result).get("generation")) or 0
            return self._follow_workload(plan, progress, abort, rollout=True, generation=gen,
                                         is_new=lambda p: _new_revision(plan, p))
        if a == "delete_pod":
            return self._follow_pod_gone(plan, progress, abort)
        if a == "hpa":
            return Outcome("ok", f"{plan.summary}; the autoscaler applies it at its next sync")
        if a == "configmap":
            return Outcome("ok", f"{plan.summary}")
        if a in ("cordon", "uncordon"):
            return Outcome("ok", f"node {plan.name} " + ("cordoned" if a == "cordon" else "uncordoned"))
        return Outcome("ok", plan.summary)

    # ----- following
    def _wait(self, abort: threading.Event, seconds: float | None = None) -> bool:
        """Sleep until the next poll; True when aborted."""
        return abort.wait(self.poll_s if seconds is None else seconds)

    def _pod_problems(self, pods: list[dict]) -> list[str]:
        out = []
        for p in pods:
            v = pod_view(p, self.cfg.vllm_container)
            if v.problem and not v.terminating:
                out.append(f"pod {v.name} {v.problem}")
        return out

    def _follow_workload(self, plan: Plan, progress: ProgressFn, abort: threading.Event, *, rollout: bool,
                         generation: int = 0, is_new: Callable[[dict], bool] = lambda p: True) -> Outcome:
        kind, ns, name = plan.kind, plan.namespace, plan.name
        deadline = self.clock() + self.cfg.rollout_timeout_s
        stuck_since: float | None = None
        start_ready: int | None = None
        start_pods: int | None = None
        while True:
            obj = self.read(kind, ns, name)
            meta, spec, st = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
            desired = spec.get("replicas", 1)
            pods = [p for p in self.pods_of(kind, obj) if not _meta(p).get("deletionTimestamp")]
            ready = int(st.get("readyReplicas") or 0)
            if start_ready is None:
                start_ready, start_pods = ready, len(pods)
            state, detail = rollout_status(kind, obj)
            observed = (st.get("observedGeneration") or 0) >= max(generation, meta.get("generation") or 0)
            if rollout:
                updated = int(st.get("updatedReplicas") or 0)
                frac = (min(updated, desired) + min(ready, desired)) / (2 * desired) if desired else 1.0
                text = f"rollout: {detail}"
                done = observed and state == "complete"
            else:
                up = desired >= start_ready
                now_n = ready if up else len(pods)
                start_n = start_ready if up else (start_pods if start_pods is not None else len(pods))
                frac = 1.0 if desired == start_n else (now_n - start_n) / (desired - start_n)
                text = f"{ready}/{desired} ready, {len(pods)} pod(s)"
                done = observed and ready >= desired and len(pods) == desired and int(st.get("replicas") or 0) == desired
            if done:
                progress(Progress(f"done: {detail}" if rollout else f"done: {ready}/{desired} ready", 1.0))
                return Outcome("ok", f"{plan.summary}: " + (f"rollout complete ({detail})" if rollout
                                                            else f"{ready}/{desired} ready"))
            problems = self._pod_problems([p for p in pods if is_new(p)])
            if state == "stuck":
                problems = [detail] + problems
            if problems:
                stuck_since = stuck_since if stuck_since is not None else self.clock()
                text += f" — {problems[0]}"
                if state == "stuck" or self.clock() - stuck_since >= self.cfg.stuck_after_s:
                    progress(Progress(f"stuck: {problems[0]}", max(0.0, min(1.0, frac))))
                    return Outcome("stuck", f"{plan.summary}: stuck — {problems[0]}")
            else:
                stuck_since = None
            progress(Progress(text, max(0.0, min(0.95, frac))))  # 1.0 only when done
            if self.clock() >= deadline:
                return Outcome("timeout", f"{plan.summary}: not done after {self.cfg.rollout_timeout_s:g} s ({text})")
            if self._wait(abort):
                return Outcome("aborted", f"stopped following: {text} (the change itself stays applied)")

    def _pod_gone(self, namespace: str | None, name: str, uid: str | None) -> bool:
        try:
            pod = self.read("Pod", namespace, name)
        except KubeError as e:
            if e.status == 404:
                return True
            raise
        return bool(uid) and _meta(pod).get("uid") != uid

    def _follow_pod_gone(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        deadline = self.clock() + self.cfg.rollout_timeout_s
        while not self._pod_gone(plan.namespace, plan.name, plan.params.get("uid")):
            progress(Progress(f"pod {plan.name} terminating…", 0.5))
            if self.clock() >= deadline:
                return Outcome("timeout", f"pod {plan.name} still terminating after {self.cfg.rollout_timeout_s:g} s")
            if self._wait(abort):
                return Outcome("aborted", f"stopped following: pod {plan.name} is terminating")
        progress(Progress(f"pod {plan.name} is gone", 1.0))
        return Outcome("ok", f"pod {plan.name} deleted")

    # ----- inference-aware pod drain
    def pod_load(self, pod: dict) -> PodLoad:
        view = pod_view(pod, self.cfg.vllm_container, self.cfg.metrics_port)
        if not view.engine_url:
            return PodLoad(error="the pod has no IP/port to read /metrics from")
        return fetch_pod_load(view.engine_url, min(2.0, self.cfg.timeout_s))

    def _restore_labels(self, plan: Plan) -> str:
        removed = plan.params.get("removed") or {}
        if not removed:
            return ""
        body = {"metadata": {"labels": dict(removed), "annotations": {DRAINED_FROM: None}}}
        try:
            self._send_patch_pod(plan, body)
        except KubeError as e:
            return f"; restoring the labels FAILED: {e}"
        return f"; labels restored ({', '.join(f'{k}={v}' for k, v in removed.items())}): back in service"

    def _drain_pod(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        ns, name = plan.namespace, plan.name
        removed = plan.params.get("removed") or {}
        if plan.body is not None:
            progress(Progress("taking the pod out of its Service(s)…", 0.0))
            self._send_patch_pod(plan, plan.body)  # 409 here: nothing changed yet, re-confirm
        deadline = self.clock() + self.cfg.drain_timeout_s
        initial: float | None = None
        zeros = 0
        last = ""
        while True:
            if abort.is_set():
                return Outcome("aborted", f"drain of {name} aborted{self._restore_labels(plan)}")
            try:
                pod = self.read("Pod", ns, name)
            except KubeError as e:
                if e.status == 404:
                    return Outcome("failed", f"pod {name} disappeared during the drain")
                raise
            if _meta(pod).get("uid") != plan.params.get("uid"):
                return Outcome("failed", f"pod {name} was replaced during the drain")
            load = self.pod_load(pod)
            if load.in_flight is None:
                last = f"cannot read the engine's in-flight requests: {load.error}"
                zeros = 0
            else:
                n = load.in_flight
                initial = n if initial is None else max(initial, n)
                zeros = zeros + 1 if n == 0 else 0
                last = f"in flight: {n:g} (running {load.running or 0:g}, waiting {load.waiting or 0:g})"
                frac = 1.0 if not initial else max(0.0, 1.0 - n / initial)
                if zeros >= 2:
                    progress(Progress("in flight: 0 — the engine is idle", 0.9))
                    break
                progress(Progress(last, frac * 0.9))
            if load.in_flight is None:
                progress(Progress(last, None))
            if self.clock() >= deadline:
                return Outcome("timeout", f"drain of {name} timed out after {self.cfg.drain_timeout_s:g} s "
                                          f"({last}){self._restore_labels(plan)}")
            if self._wait(abort):
                return Outcome("aborted", f"drain of {name} aborted ({last}){self._restore_labels(plan)}")
        # in-flight reached 0: remove it
        then = plan.params.get("then") or "delete"
        if then == "scale-down":
            kind, owner = plan.params["owner_kind"], plan.params["owner"]
            wl = self.read(kind, ns, owner)
            n = (wl.get("spec") or {}).get("replicas", 1)
            if kind == "Deployment":
                # delete first (a replacement, if the controller makes one, is the newest and not ready:
                # the ReplicaSet removes it first when the scale-down lands)
                self._delete_pod(ns, name, plan.params.get("uid"))
            fn = self._fn("patch", kind, "scale")
            self.session.raw(fn, owner, ns, {"spec": {"replicas": max(0, n - 1)}}, _content_type=MERGE)
            progress(Progress(f"scaled {kind} {owner} {n} → {n - 1}; waiting for pod {name} to go", 0.95))
        else:
            self._delete_pod(ns, name, plan.params.get("uid"))
            progress(Progress(f"pod {name} deleted; waiting for it to terminate", 0.95))
        deadline = self.clock() + self.cfg.rollout_timeout_s
        while not self._pod_gone(ns, name, plan.params.get("uid")):
            if self.clock() >= deadline:
                return Outcome("timeout", f"pod {name} drained but still terminating")
            if self._wait(abort):
                return Outcome("aborted", f"pod {name} drained and deleted; stopped waiting for it to terminate")
        progress(Progress(f"pod {name} drained and gone", 1.0))
        tail = f", {plan.params['owner_kind']} {plan.params['owner']} scaled down" if then == "scale-down" else ""
        return Outcome("ok", f"pod {name} drained (0 in flight) and deleted{tail}"
                       + (f"; it had been taken out of {', '.join(plan.params.get('services') or [])}"
                          if removed else ""))

    # ----- node drain
    def _drain_node(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        node = plan.name
        if plan.body is not None:
            progress(Progress(f"cordoning {node}…", 0.0))
            self.session.raw(self._fn("patch", "Node"), node, plan.body)
        pods = list(plan.params.get("pods") or [])
        total = len(pods) or 1
        deadline = self.clock() + self.cfg.node_drain_timeout_s
        pending = list(pods)
        evicted: list[tuple[str, str, str]] = []
        retries = 0
        while pending:
            blocked: list[tuple[tuple[str, str, str], str]] = []
            for ns, name, uid in list(pending):
                if abort.is_set():
                    return Outcome("aborted", f"drain of node {node} aborted: {len(evicted)} evicted, "
                                              f"{len(pending)} left; the node stays cordoned")
                try:
                    self._evict(ns, name)
                    evicted.append((ns, name, uid))
                    pending.remove((ns, name, uid))
                    progress(Progress(f"evicted {ns}/{name}", len(evicted) / total * 0.8))
                except KubeError as e:
                    if e.status == 404:
                        pending.remove((ns, name, uid))
                        evicted.append((ns, name, uid))
                    elif e.status == 429:
                        blocked.append(((ns, name, uid), str(e)))
                    else:
                        return Outcome("failed", f"evicting {ns}/{name}: {e}; {len(evicted)} evicted, the node "
                                                 "stays cordoned", e.status)
            if not pending:
                break
            retries += 1
            wait = self.cfg.eviction_retry_s
            (ns, name, _), why = blocked[0]
            end = self.clock() + wait
            while True:
                left = end - self.clock()
                if left <= 0:
                    break
                if self.clock() >= deadline:
                    return Outcome("timeout", f"drain of node {node} timed out after "
                                              f"{self.cfg.node_drain_timeout_s:g} s: {len(pending)} pod(s) blocked "
                                              f"({ns}/{name}: {why}); the node stays cordoned")
                progress(Progress(f"{len(pending)} pod(s) blocked by a disruption budget ({ns}/{name}: {why}); "
                                  f"retry {retries} in {left:.0f} s", len(evicted) / total * 0.8, countdown_s=left))
                if abort.wait(min(1.0, left)):
                    return Outcome("aborted", f"drain of node {node} aborted: {len(evicted)} evicted, "
                                              f"{len(pending)} left; the node stays cordoned")
        # wait until the evicted pods are gone
        while True:
            left = [f"{ns}/{name}" for ns, name, uid in evicted if not self._pod_gone(ns, name, uid)]
            if not left:
                break
            progress(Progress(f"waiting for {len(left)} pod(s) to terminate: {', '.join(left[:3])}",
                              0.8 + 0.2 * (1 - len(left) / total)))
            if self.clock() >= deadline:
                return Outcome("timeout", f"drain of node {node}: {len(left)} pod(s) still terminating")
            if self._wait(abort):
                return Outcome("aborted", f"drain of node {node}: evictions done, stopped waiting for "
                                          f"{len(left)} pod(s) to terminate")
        progress(Progress(f"node {node} drained", 1.0))
        extra = f" after {retries} retr{'y' if retries == 1 else 'ies'} on disruption budgets" if retries else ""
        return Outcome("ok", f"node {node} cordoned and drained: {len(evicted)} pod(s) evicted{extra}")
