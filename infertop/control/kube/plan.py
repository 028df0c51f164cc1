"""Kubernetes actions, the pure half: what a change is and what it would do.

The :class:`Plan` of one change (request, one-line summary, unified diff of the
object before/after), the results the executor reports (:class:`DryRun`,
:class:`Progress`, :class:`Outcome`), and every ``plan_*`` function: pure,
from an object read just before, no request made (taking pods off — delete, drain, cordon — is
:mod:`.evictions`). Executed by
:class:`infertop.control.kube.execute.KubeControl`. No UI imports.
"""

from __future__ import annotations

import copy
import datetime as _dt
import difflib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from ...sources.kube import RESTARTED_AT, pick_container
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
    "guard_changes",
    "object_diff",
    "plan_args",
    "plan_configmap",
    "plan_hpa",
    "plan_restart",
    "plan_scale",
    "replica_owners",
    "trimmed",
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
