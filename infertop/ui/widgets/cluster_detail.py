"""The Cluster pane's detail lines of the selected object, one function per kind: what is wrong with it
(the reason in red), what holds its autoscaler back, whether it receives traffic, and its newest events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text

from ...domain.kube import (ClusterSnapshot, ConfigMapView, EventView, HpaView, InferenceObjectiveView,
                            InferencePoolView, NodeView, PdbView, PodView, ReplicaSetView, ServiceView, WorkloadView)
from ...format import DASH, count_human
from ...sources.kube.describe import cpu_text, memory_text

MAX_LINES = 12  # the room it needs (the box is at most 45% of the pane)


def clip(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters (with …)."""
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True)
class DetailContext:
    """What the detail of one object reads besides the object: the snapshot, the autoscalers explained
    for its workloads, pod loads, and the pane's own word on what is wrong with a workload."""

    snap: ClusterSnapshot
    explained: Sequence[Any] = ()
    loads: dict = field(default_factory=dict)  # pod key → its engine's load
    workload_problem: Callable[[WorkloadView], str | None] = lambda w: None

    def warn_lines(self, lines: list[Text], kind: str, name: str, ns: str | None, n: int = 2) -> None:
        """The newest ``n`` events of the object (warnings marked)."""
        for e in self.snap.events_for(kind, name, ns)[:n]:
            lines.append(Text(f"{'⚠ ' if e.warning else ''}{e.reason}: {clip(e.message, 160)}",
                              style="yellow" if e.warning else "dim"))


def _workload(obj: WorkloadView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    lines.append(Text(f"{obj.ref}: rollout {obj.rollout} — {obj.rollout_detail}; image {obj.image or DASH}"))
    problem = ctx.workload_problem(obj)
    if problem:
        lines.append(Text(f"why: {problem}", style="bold red"))
    mine = next((w for w in ctx.explained if w.key == obj.key), None)
    for a in (mine.autoscalers if mine is not None else ())[:2]:  # HPA / KEDA / llm-d: why not scaling
        lines.append(Text(a.line, style="yellow" if a.why_not else ""))
    ctx.warn_lines(lines, obj.kind, obj.name, obj.namespace)
    return lines


def _pod(obj: PodView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    snap = ctx.snap
    lines.append(Text(f"pod {obj.name} ({obj.owner_kind or 'no owner'} {obj.owner_name or ''}) on "
                      f"{obj.node or 'no node'}, IP {obj.ip or DASH}: {obj.status}; "
                      f"args: {' '.join(obj.args) or DASH}"))
    if obj.problem:
        lines.append(Text(f"why: {obj.problem}", style="bold red"))
    mine = [(v.name, e) for v in snap.services if v.namespace == obj.namespace for e in v.endpoints
            if e.pod == obj.name]
    if mine:
        lines.append(Text("traffic: " + "; ".join(
            f"Service {n} {'sends it traffic' if e.ready and not e.terminating else 'sends it none (not ready)'}"
            for n, e in mine), style="" if all(e.ready for _, e in mine) else "yellow"))
    load = ctx.loads.get(obj.key)
    if load is not None and load.error:
        lines.append(Text(f"metrics: {load.error}", style="dim"))
    ctx.warn_lines(lines, "Pod", obj.name, obj.namespace)
    return lines


def _node(obj: NodeView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    lines.append(Text(f"node {obj.name}: GPUs {obj.gpu_requested} requested by these pods / "
                      f"{count_human(obj.gpu_allocatable)} allocatable; "
                      f"{'cordoned' if obj.cordoned else 'schedulable'}; taints: {', '.join(obj.taints) or 'none'}"))
    lines.append(Text(f"requested by pods / allocatable / capacity: CPU {cpu_text(obj.cpu_requested)} / "
                      f"{cpu_text(obj.cpu_allocatable)} / {cpu_text(obj.cpu_capacity)}, memory "
                      f"{memory_text(obj.memory_requested_bytes)} / {memory_text(obj.memory_allocatable_bytes)}"
                      f" / {memory_text(obj.memory_capacity_bytes)}", style="dim"))
    for c in obj.conditions:
        if f"{c.type}={c.status}" in " ".join(obj.problems):
            lines.append(Text(f"{c.type}={c.status} {c.reason}: {c.message}", style="bold red"))
    ctx.warn_lines(lines, "Node", obj.name, None)
    return lines


def _hpa(obj: HpaView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    lines.append(Text(f"HPA {obj.name} → {obj.target_kind}/{obj.target_name}: min {obj.min_replicas}, "
                      f"max {obj.max_replicas}, current {count_human(obj.current_replicas)}, desired "
                      f"{count_human(obj.desired_replicas)}; last scale {obj.last_scale_time or DASH}"))
    a = next((a for w in ctx.explained for a in w.autoscalers
              if a.kind == "HorizontalPodAutoscaler" and a.namespace == obj.namespace and a.name == obj.name),
             None)
    if a is not None:
        lines.append(Text("why not: " + "; ".join(x.text for x in a.why_not), style="yellow") if a.why_not
                     else Text(f"{a.transition}: nothing holds it back", style="dim"))
        notes = ([f"managed by {a.managed_by}"] if a.managed_by else []) + list(a.notes)
        if notes:
            lines.append(Text("; ".join(notes), style="dim"))
    for c in obj.conditions if a is None else ():
        bad = (c.type == "ScalingLimited" and c.status == "True") or (c.type != "ScalingLimited"
                                                                     and c.status != "True")
        lines.append(Text(f"{c.type}={c.status} {c.reason}: {c.message}", style="yellow" if bad else "dim"))
    ctx.warn_lines(lines, "HorizontalPodAutoscaler", obj.name, obj.namespace, 1)
    return lines


def _replica_set(obj: ReplicaSetView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    lines.append(Text(f"ReplicaSet {obj.name} (revision {obj.revision or DASH} of Deployment "
                      f"{obj.owner_name or DASH}): {obj.ready} ready, {obj.current} current, "
                      f"{obj.desired} desired; image {obj.image or DASH}"))
    ctx.warn_lines(lines, "ReplicaSet", obj.name, obj.namespace)
    return lines


def _service(obj: ServiceView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    lines.append(Text(f"Service {obj.name} ({obj.type} {obj.cluster_ip or DASH}; {obj.ports or 'no ports'})"))
    if not obj.slices_read:
        lines.append(Text("its EndpointSlices cannot be read: which pods receive traffic is unknown",
                          style="yellow"))
    for e in obj.endpoints[:8]:
        state = "receives traffic" if e.ready and not e.terminating else (
            "terminating" if e.terminating else "not ready: receives no traffic")
        lines.append(Text(f"{e.pod or '(no pod)'} {e.ip}: {state}",
                          style="" if e.ready and not e.terminating else "yellow"))
    if obj.slices_read and obj.selector and not obj.endpoints:
        lines.append(Text("no pod matches its selector: it sends traffic nowhere", style="bold red"))
    return lines


def _pdb(obj: PdbView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    bound = (f"minAvailable {obj.min_available}" if obj.min_available is not None
             else f"maxUnavailable {obj.max_unavailable}")
    lines.append(Text(f"PDB {obj.name} over {obj.selector or 'no selector'}: {bound}"))
    if obj.disruptions_allowed is None:
        lines.append(Text("its controller has not counted its pods yet", style="dim"))
    else:
        lines.append(Text(f"{obj.disruptions_allowed} disruption(s) allowed now: {obj.current_healthy} "
                          f"healthy of {obj.expected_pods} pods, {obj.desired_healthy} required",
                          style="bold yellow" if obj.disruptions_allowed == 0 else ""))
    return lines


def _config_map(obj: ConfigMapView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    lines.append(Text(f"ConfigMap {obj.name}: {len(obj.keys)} key(s), {obj.size_bytes} bytes"))
    lines.append(Text(", ".join(obj.keys) or "(no keys)", style="dim"))
    return lines


def _inference_pool(obj: InferencePoolView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    snap = ctx.snap
    lines.append(Text(f"InferencePool {obj.name}: pods {obj.selector or 'none selected'} on port(s) "
                      f"{', '.join(map(str, obj.target_ports)) or DASH}, endpoint picker "
                      f"{obj.picker or DASH}; {obj.ready_endpoints} of {obj.endpoints} ready"))
    mine = sorted((o for o in snap.inference_objectives if o.namespace == obj.namespace and o.pool == obj.name),
                  key=lambda o: -(o.priority or 0))
    lines.append(Text("objectives: " + (", ".join(f"{o.name} (priority {DASH if o.priority is None else o.priority})"
                                                  for o in mine) or "none"), style="dim"))
    return lines


def _inference_objective(obj: InferenceObjectiveView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    snap = ctx.snap
    known = any(p.namespace == obj.namespace and p.name == obj.pool for p in snap.inference_pools)
    lines.append(Text(f"InferenceObjective {obj.name}: priority "
                      f"{DASH if obj.priority is None else obj.priority} for pool {obj.pool or DASH}"))
    if obj.pool and not known and "inferencepools" not in snap.absent:
        lines.append(Text(f"no InferencePool {obj.pool} in {obj.namespace}", style="yellow"))
    return lines


def _event(obj: EventView, ctx: DetailContext) -> list[Text]:
    lines: list[Text] = []
    lines.append(Text(f"{obj.type} {obj.reason} on {obj.kind}/{obj.name} ×{obj.count} "
                      f"(from {obj.component or '?'})"))
    lines.append(Text(obj.message))
    return lines

_BY_KIND: dict[type, Callable[[Any, DetailContext], list[Text]]] = {
    WorkloadView: _workload,
    PodView: _pod,
    NodeView: _node,
    HpaView: _hpa,
    ReplicaSetView: _replica_set,
    ServiceView: _service,
    PdbView: _pdb,
    ConfigMapView: _config_map,
    InferencePoolView: _inference_pool,
    InferenceObjectiveView: _inference_objective,
    EventView: _event,
}


def detail_text(obj: object, ctx: DetailContext) -> Text:
    """The detail of ``obj`` (a view of the Cluster pane's snapshot), at most MAX_LINES lines."""
    render = _BY_KIND.get(type(obj))
    lines = render(obj, ctx) if render is not None else []
    return Text("\n").join(lines[:MAX_LINES])
