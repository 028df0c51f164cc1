"""Autoscaler verdicts, one per workload, each told apart from the others:

- **paused** (KEDA's paused annotations) while queues build or an autoscaler before it wants more —
  with the chain ("variant autoscaler va wants 7, KEDA so paused at 2");
- **blind**: an autoscaler cannot read its metric (ScalingActive False, FailedGetPodsMetric, a
  metric without a current value, a failing KEDA trigger);
- **blocked**: it scaled, and the new pods are Pending for lack of nvidia.com/gpu (the cluster
  autoscaler's NotTriggerScaleUp said beside it);
- **at max**: at maxReplicas while queues build — raise maxReplicas (H), by Little's law where the
  engines' rates say it.

In that order: a paused or blind autoscaler decides nothing worth judging; replicas that cannot be
scheduled make raising the maximum useless. The explanations are :func:`explain_workloads`' (the
Autoscaler pane's); the workload's engines come from the scaling advisor's ``state.autoscalers``
docs, else from the pods' engine URLs or names.
"""

from __future__ import annotations

import math

from .pod_rules import engine_of_pod
from ..autoscaler.common import AT_MAX, METRIC_UNAVAILABLE, PAUSED, AutoscalerExplanation
from ..autoscaler.explain import explain_workloads
from .context import RuleContext
from .types import CRITICAL, WARNING, Evidence, Finding, Remedy

QUEUE_BUILDS_AT, QUEUE_CLEARS_BELOW = 2.0, 1.0  # requests waiting over the workload's engines
METRIC_ABOVE_TARGET = 1.1  # no engines known: the autoscaler's own metric over its target (HPA tolerance)
HEADROOM = 0.3  # as the queue-bound rule's Little's law
_WORDS = {"VariantAutoscaling": "variant autoscaler", "ScaledObject": "KEDA", "HorizontalPodAutoscaler": "HPA"}


def _explained(ctx: RuleContext, snap, now: float) -> list:
    """explain_workloads of the snapshot, once per snapshot (the cluster is re-read seconds apart)."""
    got = ctx.memo.get("autoscalers")
    if got is None or got[0] is not snap:
        try:
            explained = explain_workloads(snap, now)
        except Exception:  # noqa: BLE001 — objects it cannot explain must not stop every other verdict
            explained = []
        got = ctx.memo["autoscalers"] = (snap, explained)
    return got[1]


def autoscaler_verdicts(state, active, ctx: RuleContext) -> list[Finding]:
    snap = state.cluster.snapshot if state.cluster is not None else None
    if snap is None:
        return []
    engines_of = _engines_of(state, snap)
    out = []
    for w in _explained(ctx, snap, state.taken_at):
        subject = f"{w.namespace}/{w.kind}/{w.name}"
        engines = set(engines_of.get(w.key, ()))
        lines = list(w.autoscalers)
        paused = _first(lines, PAUSED)
        blind = _first(lines, METRIC_UNAVAILABLE)
        at_max = _first(lines, AT_MAX)
        chain = _chain(lines, w)
        if paused is not None:
            holding = active("autoscaler-paused", subject)
            queue = _queue(state, engines, ctx, lines, holding)
            wants = [a for a in lines if a is not paused and a.kind == "VariantAutoscaling" and a.desired is not None
                     and paused.desired is not None and a.desired > paused.desired]
            if queue is not None or wants:
                out.append(_paused(subject, paused, queue, chain))
            continue  # a pause that hurts nothing is someone's decision; while it lasts nothing else scales
        if blind is not None:
            out.append(_blind(subject, blind, chain))
            continue
        if w.pending_gpu > 0:
            # Pending GPU pods while the engines keep up are the Autoscaler pane's to show, not an
            # incident: the healthy demo (its HPA asks 8 of 6 GPUs at 11 running per engine, 3 waiting
            # in all) sat on a permanent critical verdict. Blocked is a verdict while the load waits.
            if _pressed(state, engines, ctx, lines, active("autoscaler-blocked", subject)):
                out.append(_blocked(subject, w, snap, chain))
            continue
        if at_max is not None:
            queue = _queue(state, engines, ctx, lines, active("autoscaler-at-max", subject))
            if queue is not None:
                out.append(_at_max(subject, at_max, queue, state, engines, chain))
    return out


def _paused(subject, a: AutoscalerExplanation, queue, chain) -> Finding:
    ev = [Evidence(a.short_kind, a.reason or "paused", "scaling")] + ([queue] if queue else [])
    ev += [Evidence("chain", chain, "—")] if chain else []
    return Finding("autoscaler-paused", subject, WARNING,
                   f"{subject} cannot scale: {_WORDS.get(a.kind, a.kind)} {a.name} is paused"
                   + (f" ({chain})" if chain else "") + ".", tuple(ev),
                   (Remedy(f"remove the annotation autoscaling.keda.sh/paused (or paused-replicas) from "
                           f"{a.namespace}/{a.kind}/{a.name} when the pause is over"),
                    Remedy("its autoscalers and their events", "enter", subject)))


def _blind(subject, a: AutoscalerExplanation, chain) -> Finding:
    what = (a.reason or "metric unavailable").removeprefix("metric unavailable: ")
    ev = [Evidence(f"{a.short_kind} {a.name}", what, "a current value for every metric")]
    ev += [Evidence("chain", chain, "—")] if chain else []
    return Finding("autoscaler-blind", subject, WARNING,
                   f"{subject}'s {_WORDS.get(a.kind, a.kind)} {a.name} is blind: it cannot read its metric "
                   f"({what}), so it scales on nothing.", tuple(ev),
                   (Remedy("check the metrics pipeline it reads: the custom/external metrics API "
                           "(prometheus-adapter, KEDA's metrics server) and the metric's query"),
                    Remedy("its conditions and events", "enter", subject)))


def _blocked(subject, w, snap, chain) -> Finding:
    ev = [Evidence("pods Pending", str(w.pending_gpu), "0", "now"),
          Evidence("scheduler", w.pending_message or "Insufficient nvidia.com/gpu", "schedulable")]
    pending = [p for p in snap.pods if p.namespace == w.namespace and p.owner_kind == w.kind
               and p.owner_name == w.name and p.phase == "Pending" and not p.terminating]
    names = {p.name for p in pending}
    ca = next((e for e in snap.events if e.reason == "NotTriggerScaleUp" and e.kind == "Pod" and e.name in names), None)
    if ca is not None:
        ev.append(Evidence("cluster autoscaler", f"NotTriggerScaleUp: {ca.message}", "scale-up triggered"))
    pod = pending[0] if pending else None
    if pod is not None:  # the pod the remedy's e opens (namespace/name), its scheduler events say why
        ev.append(Evidence("pending pod", f"{pod.namespace}/{pod.name}", "scheduled"))
    ev += [Evidence("chain", chain, "—")] if chain else []
    remedies = [Remedy("add GPU capacity (the node pool's maximum, a GPU quota) or free GPUs held elsewhere"
                       + ("; the cluster autoscaler says why it did not" if ca is not None else ""))]
    if pod is not None:
        remedies.append(Remedy(f"the Pending pod {pod.name}'s events (why the scheduler and the cluster "
                               "autoscaler do not place it)", "e", f"{pod.namespace}/Pod/{pod.name}"))
    return Finding("autoscaler-blocked", subject, CRITICAL,
                   f"{subject} scaled but cannot grow: {w.pending_gpu} pod(s) Pending for lack of nvidia.com/gpu"
                   + (" and the cluster autoscaler did not add a node" if ca is not None else "") + ".",
                   tuple(ev), tuple(remedies))


def _at_max(subject, a: AutoscalerExplanation, queue, state, engines, chain) -> Finding:
    top = a.max_replicas
    need = _need(state, engines, a)
    ev = [Evidence(f"{a.short_kind} {a.name}", f"{a.current if a.current is not None else '?'} replicas",
                   f"maxReplicas {top}"), queue]
    ev += [Evidence("chain", chain, "—")] if chain else []
    remedies = []
    value = max(need or 0, (top or 0) + 1) if top is not None else need
    why = f" (Little's law: {need} engines hold the arrival rate)" if need else ""
    if a.kind == "HorizontalPodAutoscaler" and a.managed_by is None:
        remedies.append(Remedy(f"raise maxReplicas of HPA {a.name} {top} → {value}{why}", "H",
                               f"{a.namespace}/HorizontalPodAutoscaler/{a.name}", value))
    else:
        owner = a.managed_by or f"{a.kind} {a.name}"
        remedies.append(Remedy(f"raise the maximum on {owner} {top} → {value}{why} (an HPA it owns follows it)",
                               "", f"{a.namespace}/{a.kind}/{a.name}", value))
    return Finding("autoscaler-at-max", subject, WARNING,
                   f"{subject} is at its maximum of {top} replicas ({_WORDS.get(a.kind, a.kind)} {a.name}) "
                   f"while its queue builds.", tuple(ev), tuple(remedies))


def _queue(state, engines: set[str], ctx: RuleContext, lines, holding: bool) -> Evidence | None:
    """Evidence that the workload's queue builds, or None: its engines' waiting requests (or a
    queue-bound verdict on one), else — no engine known — its autoscaler's metric over target."""
    if engines:
        mine = [e for e in state.engines if e.name in engines and e.fresh]
        waiting = sum(e.stats.waiting or 0.0 for e in mine)
        bound = sorted({f.subject for f in ctx.findings if f.kind in ("queue-bound", "kv-bound")} & engines)
        if waiting >= (QUEUE_CLEARS_BELOW if holding else QUEUE_BUILDS_AT) or bound:
            return Evidence("waiting", f"{waiting:.0f} on {len(mine)} engines",
                            f"≥ {QUEUE_BUILDS_AT:.0f}" + (f" ({', '.join(bound)} out of capacity)" if bound else ""))
        return None
    for a in lines:
        for m in a.metrics:
            if m.ratio is not None and m.ratio > METRIC_ABOVE_TARGET:
                return Evidence(m.name, f"{m.current}", f"target {m.target} (×{m.ratio:.1f})")
    return None


def _pressed(state, engines: set[str], ctx: RuleContext, lines, holding: bool) -> bool:
    """The workload's load waits: an engine of it is out of capacity (queue- or KV-bound), or its
    engines hold :data:`QUEUE_BUILDS_AT` waiting requests each (clears under
    :data:`QUEUE_CLEARS_BELOW`); no engine known: its autoscaler's metric over target."""
    if not engines:
        return _queue(state, engines, ctx, lines, holding) is not None
    if {f.subject for f in ctx.findings if f.kind in ("queue-bound", "kv-bound")} & engines:
        return True
    mine = [e for e in state.engines if e.name in engines and e.fresh]
    per_engine = sum(e.stats.waiting or 0.0 for e in mine) / max(1, len(mine))
    return per_engine >= (QUEUE_CLEARS_BELOW if holding else QUEUE_BUILDS_AT)


def _need(state, engines: set[str], a: AutoscalerExplanation) -> int | None:
    """Replicas that hold the workload's arrival rate: rate × E2E p95 × (1 + headroom) / max_num_seqs."""
    stats = [e.stats for e in state.engines if e.name in engines and e.fresh]
    arrival = sum(s.requests_per_s or 0.0 for s in stats)
    residence = max((s.e2e_p95_s or 0.0 for s in stats), default=0.0)
    seqs = min((s.max_num_seqs for s in stats if s.max_num_seqs), default=None)
    if arrival <= 0 or residence <= 0 or not seqs:
        ratios = [m.ratio for m in a.metrics if m.ratio is not None]
        return math.ceil(a.current * max(ratios)) if ratios and a.current else None
    return math.ceil(arrival * residence * (1 + HEADROOM) / seqs)


def _chain(lines: list[AutoscalerExplanation], w) -> str:
    """"variant autoscaler va wants 7, KEDA so paused at 2, Deployment at 2" — where there is more than one link."""
    if len(lines) < 2:
        return ""
    order = {"VariantAutoscaling": 0, "ScaledObject": 1, "HorizontalPodAutoscaler": 2}
    parts = []
    for a in sorted(lines, key=lambda a: order.get(a.kind, 3)):
        if a.desired is None:
            continue
        verb = "paused at" if PAUSED in a.codes() and a.kind == "ScaledObject" else "wants"
        parts.append(f"{_WORDS.get(a.kind, a.kind)} {a.name} {verb} {a.desired}")
    if w.replicas is not None:
        parts.append(f"{w.kind} at {w.replicas}")
    return ", ".join(parts)


def _first(lines: list[AutoscalerExplanation], code: str) -> AutoscalerExplanation | None:
    return next((a for a in lines if code in a.codes()), None)


def _engines_of(state, snap) -> dict[str, list[str]]:
    """Workload key (Kind/ns/name) → its engines: the advisor's docs, else the pods' engine URLs."""
    out: dict[str, list[str]] = {}
    for doc in state.autoscalers:
        if isinstance(doc, dict) and doc.get("workload") and doc.get("engines"):
            out[str(doc["workload"])] = [str(n) for n in doc["engines"]]
    if out:
        return out
    # the join the advisor makes (state.advisor.workload_engines; analysis sits below state):
    # pod → its engine by URL, else by name → the pod's workload
    by_url = {(e.stats.url or "").rstrip("/"): e.name for e in state.engines if e.stats.url}
    names = {e.name for e in state.engines}
    for pod in snap.pods:
        engine = engine_of_pod(pod, by_url, names)
        w = snap.workload_of(pod) if engine is not None and not pod.terminating else None
        if w is not None and engine is not None and engine not in out.setdefault(w.key, []):
            out[w.key].append(engine)
    return out
