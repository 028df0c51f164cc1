"""Kubernetes reads, the pure half: API objects (JSON dicts) → the domain view.

One function per kind (:func:`pod_view`, :func:`workload_view`,
:func:`hpa_view`, :func:`node_view`, :func:`event_view`), rollout state, and
:func:`build_snapshot`, which turns a :class:`RawCluster` into the Cluster
pane's :class:`~infertop.domain.kube.ClusterSnapshot`. No request is made here.
This module never imports textual or rich.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...domain.kube import (
    ClusterSnapshot,
    EventView,
    HpaView,
    KubeCondition,
    MetricView,
    NodeView,
    PodView,
    WorkloadView,
)
from ...domain.quantity import parse_quantity
from .autoscalers import behavior_view, scaled_object_view, variant_view
from .clean import clean_view
from .session import CUSTOM_KINDS, NAMESPACED_KINDS, _one_line

from .rollout_view import (attribute_by_selector, configmap_view, inference_objective_view, inference_pool_view,
                                pdb_view, replicaset_view, service_view)

__all__ = [
    "GPU",
    "RESTARTED_AT",
    "absent_text",
    "pod_is_live",
    "pod_requests",
    "RawCluster",
    "build_snapshot",
    "event_view",
    "hpa_view",
    "node_view",
    "parse_time",
    "pick_container",
    "pod_owner",
    "pod_view",
    "rollout_status",
    "selector_matches",
    "selector_text",
    "workload_view",
]

GPU = "nvidia.com/gpu"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


# ---------------------------------------------------------- conversions

def parse_time(value: Any) -> float | None:
    """RFC 3339 timestamp → epoch seconds."""
    if not value or not isinstance(value, str):
        return None
    try:
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _conditions(raw: Any) -> tuple[KubeCondition, ...]:
    out = []
    for c in raw or []:
        if isinstance(c, dict) and c.get("type"):
            out.append(KubeCondition(str(c["type"]), str(c.get("status") or "Unknown"), str(c.get("reason") or ""),
                                     str(c.get("message") or ""), c.get("lastTransitionTime")))
    return tuple(out)


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _quantity_int(v: Any) -> int | None:
    """An integer quantity ("8", 8); fractional or suffixed values → None."""
    if v is None:
        return None
    try:
        return int(str(v))
    except ValueError:
        return None


def selector_text(selector: Any) -> str:
    labels = (selector or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def selector_matches(selector: Any, labels: dict | None) -> bool:
    """Whether a LabelSelector (matchLabels and matchExpressions) selects ``labels``; an empty or absent
    selector selects nothing here (a workload or PDB without one owns no pod we could name)."""
    sel = selector or {}
    want, exprs = sel.get("matchLabels") or {}, sel.get("matchExpressions") or []
    if not want and not exprs:
        return False
    have = labels or {}
    if any(have.get(k) != v for k, v in want.items()):
        return False
    for e in exprs:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and have.get(key) not in values:
            return False
        if op == "NotIn" and key in have and have[key] in values:
            return False
        if op == "Exists" and key not in have:
            return False
        if op == "DoesNotExist" and key in have:
            return False
    return True


def pick_container(containers: list[dict], wanted: str = "") -> dict | None:
    """The vLLM container: the named one, else one whose image or name says vllm, else the first."""
    if not containers:
        return None
    if wanted:
        for c in containers:
            if c.get("name") == wanted:
                return c
    for c in containers:
        if "vllm" in str(c.get("name", "")).lower() or "vllm" in str(c.get("image", "")).lower():
            return c
    return containers[0]


def _requests_of(c: dict) -> dict[str, float]:
    res = c.get("resources") or {}
    out = {k: v for k, v in ((k, parse_quantity(v)) for k, v in (res.get("requests") or {}).items()) if v is not None}
    for k, v in (res.get("limits") or {}).items():  # a limit without a request requests as much (API default)
        q = parse_quantity(v)
        if q is not None:
            out.setdefault(k, q)
    return out


def pod_requests(pod: dict) -> dict[str, float]:
    """What a pod requests, per resource (cpu in cores, memory in bytes): its containers summed, or its
    largest init container's request when that is larger (as the scheduler counts)."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests_of(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in _requests_of(c).items():
            if v > total.get(k, 0.0):
                total[k] = v
    return total


def pod_is_live(pod: dict) -> bool:
    """Holds its node's resources: not finished, not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


# informer kind → the API resource named in "forbidden (list …)" / "not served (…)"
RESOURCE_NAMES = {"deployments": "deployments.apps/v1", "statefulsets": "statefulsets.apps/v1", "pods": "pods/v1",
                  "hpas": "horizontalpodautoscalers.autoscaling/v2", "events": "events/v1", "nodes": "nodes/v1",
                  "replicasets": "replicasets.apps/v1", "services": "services/v1",
                  "endpointslices": "endpointslices.discovery.k8s.io/v1",
                  "pdbs": "poddisruptionbudgets.policy/v1", "configmaps": "configmaps/v1",
                  "inferencepools": "inferencepools.inference.networking.k8s.io/v1",
                  "inferenceobjectives": "inferenceobjectives.inference.networking.x-k8s.io/v1alpha2"}


def absent_text(kind: str, status: int, *, all_namespaces: bool = False) -> str:
    """Why a kind is not shown: 403 → "forbidden (list pods)" ("…, all namespaces)" when listed across
    every namespace), 404 → "not served (…)"."""
    resource = RESOURCE_NAMES.get(kind, kind)
    if status == 403:
        where = ", all namespaces" if all_namespaces else ""
        return f"forbidden (list {resource.split('.')[0].split('/')[0]}{where})"
    return f"not served by this API server ({resource})"


def _first_port(container: dict | None) -> int | None:
    for p in (container or {}).get("ports") or []:
        if p.get("containerPort"):
            return int(p["containerPort"])
    return None


def pod_owner(pod: dict) -> tuple[str | None, str | None]:
    """The workload that owns a pod: a ReplicaSet is mapped to its Deployment."""
    meta = pod.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if not ref:
        return None, None
    kind, name = ref.get("kind"), ref.get("name")
    if kind == "ReplicaSet" and name:
        h = (meta.get("labels") or {}).get("pod-template-hash")
        if h and name.endswith("-" + h):
            return "Deployment", name[: -len(h) - 1]
        if "-" in name:
            return "Deployment", name.rsplit("-", 1)[0]
    return kind, name


def pod_view(pod: dict, container_name: str = "", port_override: int | None = None) -> PodView:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    main = pick_container(containers, container_name)
    statuses = status.get("containerStatuses") or []
    ready_n = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    main_status = next((cs for cs in statuses if main and cs.get("name") == main.get("name")),
                       statuses[0] if statuses else {})
    waiting = ((main_status or {}).get("state") or {}).get("waiting") or {}
    last_term = ((main_status or {}).get("lastState") or {}).get("terminated") or {}
    terminated_now = ((main_status or {}).get("state") or {}).get("terminated") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    if "Ready" in conds:
        ready = conds["Ready"].get("status") == "True"
    else:  # no Ready condition (yet, or a server that does not set one): the containers say it
        ready = bool(containers) and ready_n == len(containers)
    sched = conds.get("PodScheduled") or {}
    unsched = sched.get("message") if sched.get("status") == "False" else None
    phase = str(status.get("phase") or "Unknown")
    terminating = bool(meta.get("deletionTimestamp"))
    # kubectl's STATUS column, roughly: the waiting/terminated reason wins over the phase
    text = phase
    for cs in statuses:
        st = cs.get("state") or {}
        if st.get("waiting", {}).get("reason") and st["waiting"]["reason"] != "ContainerCreating" or (
                st.get("waiting") and phase != "Running"):
            text = st["waiting"].get("reason") or text
            break
        if st.get("terminated", {}).get("reason"):
            text = st["terminated"]["reason"]
            break
    if phase == "Pending" and unsched:
        text = "Pending"
    if terminating:
        text = "Terminating"
    gpus = 0
    for c in containers:
        res = c.get("resources") or {}
        gpus += _quantity_int((res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU)) or 0
    owner_kind, owner_name = pod_owner(pod)
    return PodView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        phase=phase,
        status=text,
        ready=ready,
        ready_text=f"{ready_n}/{len(containers)}",
        restarts=restarts,
        node=spec.get("nodeName"),
        created_ts=parse_time(meta.get("creationTimestamp")),
        ip=status.get("podIP"),
        port=port_override or _first_port(main) or (8000 if main else None),
        owner_kind=owner_kind,
        owner_name=owner_name,
        container=(main or {}).get("name"),
        image=(main or {}).get("image"),
        args=tuple(str(a) for a in (main or {}).get("args") or ()),
        waiting_reason=waiting.get("reason"),
        waiting_message=waiting.get("message"),
        last_termination_reason=last_term.get("reason") or terminated_now.get("reason"),
        unschedulable_message=unsched,
        terminating=terminating,
        gpus=gpus,
        labels=dict(meta.get("labels") or {}),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def rollout_status(kind: str, obj: dict) -> tuple[str, str]:
    """(state, detail) as ``kubectl rollout status`` judges it: complete, progressing, stuck, waiting."""
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    desired = spec.get("replicas", 1)
    gen, observed = meta.get("generation") or 0, st.get("observedGeneration") or 0
    if observed < gen:
        return "waiting", "waiting for the controller to see the new spec"
    updated = int(st.get("updatedReplicas") or 0)
    replicas = int(st.get("replicas") or 0)
    ready = int(st.get("readyReplicas") or 0)
    if kind == "Deployment":
        available = int(st.get("availableReplicas") or 0)
        for c in st.get("conditions") or []:
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
                return "stuck", f"progress deadline exceeded: {c.get('message') or ''}".strip()
        if spec.get("paused"):
            return "paused", "rollout paused"
        if updated < desired:
            return "progressing", f"{updated} of {desired} updated"
        if replicas > updated:
            return "progressing", f"{replicas - updated} old replica(s) terminating"
        if available < updated:
            return "progressing", f"{available} of {updated} updated available"
        return "complete", f"{available} of {desired} available"
    # StatefulSet
    if ready < desired:
        return "progressing", f"{ready} of {desired} ready"
    if st.get("updateRevision") and st.get("currentRevision") != st.get("updateRevision"):
        partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition") or 0
        if updated < desired - partition:
            return "progressing", f"{updated} of {desired} updated"
    if replicas > desired:
        return "progressing", f"{replicas - desired} extra replica(s) terminating"
    return "complete", f"{ready} of {desired} ready"


def workload_view(kind: str, obj: dict, container_name: str = "") -> WorkloadView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    tpl_spec = ((spec.get("template") or {}).get("spec") or {})
    main = pick_container(tpl_spec.get("containers") or [], container_name)
    state, detail = rollout_status(kind, obj)
    return WorkloadView(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        desired=_int(spec.get("replicas", 1)),
        current=_int(st.get("replicas") or 0),
        ready=int(st.get("readyReplicas") or 0),
        updated=int(st.get("updatedReplicas") or 0),
        available=int(st.get("availableReplicas") or (st.get("readyReplicas") if kind == "StatefulSet" else 0) or 0),
        generation=_int(meta.get("generation")),
        observed_generation=_int(st.get("observedGeneration")),
        rollout=state,
        rollout_detail=detail,
        conditions=_conditions(st.get("conditions")),
        selector=selector_text(spec.get("selector")),
        container=(main or {}).get("name"),
        image=(main or {}).get("image"),
        args=tuple(str(a) for a in (main or {}).get("args") or ()),
        labels=dict(meta.get("labels") or {}),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _metric_key(m: dict) -> tuple[str, str]:
    t = str(m.get("type") or "")
    body = m.get({"Pods": "pods", "Resource": "resource", "Object": "object", "External": "external",
                  "ContainerResource": "containerResource"}.get(t, ""), {}) or {}
    name = body.get("name") or (body.get("metric") or {}).get("name") or "?"
    return t, str(name)


def _metric_value(v: dict | None, pct_suffix: bool = True) -> str | None:
    if not v:
        return None
    if v.get("averageUtilization") is not None:
        return f"{v['averageUtilization']}%"
    for k in ("averageValue", "value"):
        if v.get(k) is not None:
            return str(v[k])
    return None


def hpa_view(obj: dict) -> HpaView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    refs = meta.get("ownerReferences") or []
    owner = next((r for r in refs if isinstance(r, dict) and r.get("controller")), refs[0] if refs else None) or {}
    current = {_metric_key(m): m for m in st.get("currentMetrics") or [] if isinstance(m, dict)}
    metrics = []
    for m in spec.get("metrics") or []:
        if not isinstance(m, dict):
            continue
        key = _metric_key(m)
        field_name = {"Pods": "pods", "Resource": "resource", "Object": "object", "External": "external",
                      "ContainerResource": "containerResource"}.get(key[0], "")
        target = (m.get(field_name) or {}).get("target")
        cur = (current.get(key, {}).get(field_name) or {}).get("current")
        metrics.append(MetricView(key[1], key[0], _metric_value(cur), _metric_value(target)))
    return HpaView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        target_kind=str(ref.get("kind") or ""),
        target_name=str(ref.get("name") or ""),
        min_replicas=_int(spec.get("minReplicas", 1)),
        max_replicas=_int(spec.get("maxReplicas")),
        current_replicas=_int(st.get("currentReplicas")),
        desired_replicas=_int(st.get("desiredReplicas")),
        metrics=tuple(metrics),
        conditions=_conditions(st.get("conditions")),
        last_scale_time=st.get("lastScaleTime"),
        resource_version=str(meta.get("resourceVersion") or ""),
        behavior=behavior_view(spec.get("behavior")),
        owner_kind=owner.get("kind"),
        owner_name=owner.get("name"),
    )


def node_view(obj: dict, gpu_requested: int = 0, requested: dict[str, float] | None = None) -> NodeView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conds = _conditions(st.get("conditions"))
    ready_c = next((c for c in conds if c.type == "Ready"), None)
    taints = tuple(f"{t.get('key')}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect')}"
                   for t in spec.get("taints") or [] if isinstance(t, dict))
    return NodeView(
        name=str(meta.get("name") or ""),
        gpu_capacity=_quantity_int((st.get("capacity") or {}).get(GPU)),
        gpu_allocatable=_quantity_int((st.get("allocatable") or {}).get(GPU)),
        gpu_requested=gpu_requested,
        gpu_product=(meta.get("labels") or {}).get("nvidia.com/gpu.product"),
        cordoned=bool(spec.get("unschedulable")),
        ready=None if ready_c is None else ready_c.status == "True",
        conditions=conds,
        taints=taints,
        resource_version=str(meta.get("resourceVersion") or ""),
        cpu_capacity=parse_quantity((st.get("capacity") or {}).get("cpu")),
        cpu_allocatable=parse_quantity((st.get("allocatable") or {}).get("cpu")),
        cpu_requested=(requested or {}).get("cpu", 0.0),
        memory_capacity_bytes=parse_quantity((st.get("capacity") or {}).get("memory")),
        memory_allocatable_bytes=parse_quantity((st.get("allocatable") or {}).get("memory")),
        memory_requested_bytes=(requested or {}).get("memory", 0.0),
    )


def event_view(obj: dict) -> EventView:
    inv = obj.get("involvedObject") or obj.get("regarding") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or (obj.get("series") or {}).get("lastObservedTime") \
        or obj.get("firstTimestamp") or (obj.get("metadata") or {}).get("creationTimestamp")
    return EventView(
        namespace=str((obj.get("metadata") or {}).get("namespace") or inv.get("namespace") or ""),
        type=str(obj.get("type") or "Normal"),
        reason=str(obj.get("reason") or ""),
        message=_one_line(str(obj.get("message") or obj.get("note") or ""), 400),
        kind=str(inv.get("kind") or ""),
        name=str(inv.get("name") or ""),
        count=int(obj.get("count") or (obj.get("series") or {}).get("count") or 1),
        last_seen_ts=parse_time(last),
        component=str((obj.get("source") or {}).get("component") or obj.get("reportingComponent") or ""),
    )


@dataclass
class RawCluster:
    """Objects as the API returned them, per resource kind."""

    items: dict[str, list[dict]] = field(
        default_factory=lambda: {k: [] for k in (*NAMESPACED_KINDS, "nodes", *CUSTOM_KINDS)})
    errors: list[str] = field(default_factory=list)
    wva_desired: dict[tuple[str, str], float] = field(default_factory=dict)  # (ns, variant) → wva_desired_replicas
    synced: bool = True
    stale_since: float | None = None  # reads failing since then: these are the last objects read
    stale_error: str | None = None
    absent: dict[str, str] = field(default_factory=dict)  # kind → "forbidden (list pods)" / "not served (…)"


def _name_of(o: Any) -> str:
    meta = o.get("metadata") if isinstance(o, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _views(kind: str, view: Any, items: dict[str, list], bad: dict[str, int]) -> list:
    """``view`` of each object of ``kind``; one with fields of the wrong type is counted in ``bad``, not shown."""
    out = []
    for o in items.get(kind) or ():
        try:
            if not isinstance(o, dict):
                raise TypeError("not an object")
            out.append(clean_view(view(o)))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError):
            bad[kind] = bad.get(kind, 0) + 1
    return out


def _malformed_errors(bad: dict[str, int]) -> list[str]:
    return [f"{kind}: {n} object(s) with fields of the wrong type not shown" for kind, n in sorted(bad.items())]


def build_snapshot(raw: RawCluster, *, context: str, namespaces: Iterable[str], user: str = "", server: str = "",
                   selector: str = "", container: str = "", metrics_port: int | None = None,
                   now: float | None = None, max_events: int = 300, all_namespaces: bool = False
                   ) -> ClusterSnapshot:
    """Pure: API objects → the Cluster pane's view; ``all_namespaces``: read across every namespace."""
    items = raw.items
    bad: dict[str, int] = {}
    workloads = _views("deployments", lambda o: workload_view("Deployment", o, container), items, bad)
    workloads += _views("statefulsets", lambda o: workload_view("StatefulSet", o, container), items, bad)
    workloads.sort(key=lambda w: (w.namespace, w.name, w.kind))
    pods = _views("pods", lambda o: pod_view(o, container, metrics_port), items, bad)
    pods = sorted(attribute_by_selector(pods, [d for d in items.get("deployments") or () if isinstance(d, dict)]),
                  key=lambda p: (p.namespace, p.owner_name or "", p.name))
    replicasets = sorted(_views("replicasets", replicaset_view, items, bad), key=lambda r: (r.namespace, r.name))
    slices_read = "endpointslices" not in raw.absent
    slices_by_ns: dict[str, list[dict]] = {}
    for sl in items.get("endpointslices") or ():
        if isinstance(sl, dict):
            slices_by_ns.setdefault((sl.get("metadata") or {}).get("namespace") or "", []).append(sl)
    services = sorted(_views("services", lambda o: service_view(
        o, slices_by_ns.get((o.get("metadata") or {}).get("namespace") or "", []), slices_read), items, bad),
        key=lambda s: (s.namespace, s.name))
    pdbs = sorted(_views("pdbs", pdb_view, items, bad), key=lambda o: (o.namespace, o.name))
    configmaps = sorted(_views("configmaps", configmap_view, items, bad), key=lambda o: (o.namespace, o.name))
    pools = sorted(_views("inferencepools", lambda o: inference_pool_view(o, pods), items, bad),
                   key=lambda o: (o.namespace, o.name))
    objectives = sorted(_views("inferenceobjectives", inference_objective_view, items, bad),
                        key=lambda o: (o.namespace, o.name))
    shown = {(w.kind, w.namespace, w.name) for w in workloads}
    hpas = _views("hpas", hpa_view, items, bad)
    if selector:
        hpas = [h for h in hpas if (h.target_kind, h.namespace, h.target_name) in shown]
    hpas.sort(key=lambda h: (h.namespace, h.name))
    scaled = sorted(_views("scaledobjects", scaled_object_view, items, bad),
                    key=lambda o: (o.namespace, o.name))
    variants = sorted(_views("variantautoscalings", lambda o: variant_view(o, raw.wva_desired), items, bad),
                      key=lambda o: (o.namespace, o.name))
    if selector:
        scaled = [o for o in scaled if (o.target_kind, o.namespace, o.target_name) in shown]
        variants = [o for o in variants if (o.target_kind, o.namespace, o.target_name) in shown]
    gpu_by_node: dict[str, int] = {}
    pod_nodes = set()
    for p in pods:
        if p.node:
            pod_nodes.add(p.node)
            if not p.terminating:
                gpu_by_node[p.node] = gpu_by_node.get(p.node, 0) + p.gpus
    nodes = []
    node_gpus = {id(o): gpu_by_node.get(_name_of(o), 0) for o in items.get("nodes", [])}
    requested: dict[str, dict[str, float]] = {}  # node → what its live pods request (cpu, memory)
    for o in items.get("pods") or ():
        try:
            node = (o.get("spec") or {}).get("nodeName")
            if node and pod_is_live(o):
                mine = requested.setdefault(node, {})
                for k, v in pod_requests(o).items():
                    mine[k] = mine.get(k, 0.0) + v
        except (AttributeError, TypeError, ValueError):
            pass  # a malformed pod: counted as such by its view
    for n in _views("nodes", lambda o: node_view(o, node_gpus.get(id(o), 0), requested.get(_name_of(o))), items,
                    bad):
        if n.gpu_capacity or n.name in pod_nodes:
            nodes.append(n)
    nodes.sort(key=lambda n: n.name)
    # events of the objects shown (and of the ReplicaSets behind the Deployments)
    names = {("Pod", p.namespace, p.name) for p in pods}
    names |= {(w.kind, w.namespace, w.name) for w in workloads}
    names |= {("HorizontalPodAutoscaler", h.namespace, h.name) for h in hpas}
    names |= {("ScaledObject", o.namespace, o.name) for o in scaled}
    names |= {("VariantAutoscaling", o.namespace, o.name) for o in variants}
    deploy_prefixes = {(w.namespace, w.name + "-") for w in workloads if w.kind == "Deployment"}
    node_names = {n.name for n in nodes}
    events = []
    for e in _views("events", event_view, items, bad):
        if (e.kind, e.namespace, e.name) in names or (e.kind == "Node" and e.name in node_names) or (
                e.kind == "ReplicaSet" and any(e.namespace == ns and e.name.startswith(pre)
                                               for ns, pre in deploy_prefixes)):
            events.append(e)
    events.sort(key=lambda e: (not e.warning, -(e.last_seen_ts or 0.0)))
    return clean_view(ClusterSnapshot(
        context=context,
        namespaces=tuple(namespaces),
        all_namespaces=all_namespaces,
        taken_at=time.time() if now is None else now,
        user=user,
        server=server,
        workloads=tuple(workloads),
        pods=tuple(pods),
        nodes=tuple(nodes),
        hpas=tuple(hpas),
        events=tuple(events[:max_events]),
        scaled_objects=tuple(scaled),
        variant_autoscalers=tuple(variants),
        replicasets=tuple(replicasets),
        services=tuple(services),
        pdbs=tuple(pdbs),
        configmaps=tuple(configmaps),
        inference_pools=tuple(pools),
        inference_objectives=tuple(objectives),
        errors=(*raw.errors, *_malformed_errors(bad)),
        absent=dict(raw.absent),
        synced=raw.synced,
        stale_since=raw.stale_since,
        stale_error=raw.stale_error,
    ), deep=False)
