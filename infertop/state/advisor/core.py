"""The scaling advisor over the one fleet state: inputs per workload, decisions, the ``autoscalers`` slot.

Per Deployment/StatefulSet of the cluster state that has engines (or is
named in ``advisor.workloads``):

* current replicas: its ``spec.replicas`` (what the scale action changes);
  untrusted while the cluster reads are stale;
* queue depth: the gateway / endpoint-picker queue in front of the workload
  when the fleet's ``queues`` slot has one (see :func:`_queue_from_slot`),
  else the Prometheus queue series attributed to it (``queues.py`` here),
  else the sum of vLLM ``waiting`` over the workload's engines; each view
  says which (``queue_source``) and what no workload owns (``queue_fleet_wide``);
* p99: the configured quantile (TTFT p99 by default) of its engines over the
  window — their histogram windows merged, as ``histogram_quantile(sum by
  (le))``, or the slowest engine's own p99 where no windows are at hand
  (replay);
* bounds: the min/max of the HPA that targets it, else the config's.

Engine → pod → workload: a pod whose ``ip:port`` is an engine's URL, a pod
named as an engine, or the demo's pod → engine map; the pod's owner is the
workload. :class:`Advisor` evaluates every tick (``FleetJoiner.autoscalers``),
keeps a short decision log per workload (repeats of one decision are merged)
and queues the changes ``auto`` mode must apply (:meth:`Advisor.take_applies`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...analysis.fleet import fleet_quantile
from ...analysis.triage.rules import slo_capacity
from ...analysis.triage.slo_rules import capacity_why
from ...analysis.scaling import (
    APPLIED,
    APPLYING,
    AUTO,
    MISSING,
    MODES,
    NOT_APPLIED,
    OFF,
    RECOMMEND,
    SENT,
    STALE_STATUS,
    DecisionRecord,
    Inputs,
    Policy,
    ScalingPolicy,
    Signal,
)
from ...domain.engine import DEGRADED, UP
from ...domain.kube import ClusterSnapshot, HpaView, WorkloadView
from ...sources.prometheus.fleet_map import queue_rank
from .queues import QueueAttribution, attribute, prom_queue_doc, queue_name, source_text, workload_depth
from ..cluster_join import pod_engines

P99_HISTOGRAMS = {"ttft_p99_s": ("ttft", 0.99, "P99"), "e2e_p99_s": ("e2e", 0.99, "E2E P99"),
                  "queue_p99_s": ("queue", 0.99, "queue P99")}
LOG_KEEP = 50  # decision log entries per workload
#: a queue (gateway, endpoint picker) whose series vanished from Prometheus this long ago is forgotten:
#: until then the workload's queue depth is missing (not vLLM's waiting in its place)
QUEUE_FORGET_S = 600.0
SERIES_KEEP = 120  # input samples per workload (the pane's sparklines)
#: outcomes of an apply whose change was sent (the replica count moved or may have): the cooldown stays
SENT_RESULTS = frozenset({"stuck", "timeout", "aborted", "unknown", "undone"})


def policy_from_config(cfg: Any, slo: Any) -> Policy:
    """The policy of config ``advisor:`` (``target_p99_s`` unset: the SLO's target of ``p99_metric``)."""
    target = cfg.target_p99_s if cfg.target_p99_s is not None else getattr(slo, cfg.p99_metric)
    return Policy(target_queue_depth=cfg.target_queue_depth, target_p99_s=target, min_replicas=cfg.min_replicas,
                  max_replicas=cfg.max_replicas, tolerance=cfg.tolerance, cooldown_s=cfg.cooldown_s,
                  scale_up_window_s=cfg.scale_up_window_s, scale_down_window_s=cfg.scale_down_window_s,
                  max_input_age_s=cfg.max_input_age_s)


@dataclass(frozen=True, slots=True)
class Apply:
    """A change ``auto`` mode hands to the Kubernetes scale action."""

    workload: str  # Deployment/ns/name
    kind: str
    namespace: str
    name: str
    current: int
    desired: int
    reason: str


def workload_engines(state: Any, snap: ClusterSnapshot,
                     engine_pods: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """Workload key → the names of its engines (engine → pod → owner; the pod's engine as
    :func:`~infertop.state.cluster_join.pod_engines` finds it)."""
    pods = [p for p in snap.pods if not p.terminating]
    engines = pod_engines(pods, state.engines, engine_pods)
    out: dict[str, list[str]] = {}
    for pod in pods:
        found = engines.get(pod.key)
        engine = found[-1].name if found else None
        w = snap.workload_of(pod) if engine is not None else None
        if w is not None and engine is not None and engine not in out.setdefault(w.key, []):
            out[w.key].append(engine)
    return out


def _wanted(cfg_workloads: Sequence[str], w: WorkloadView) -> bool:
    return w.name in cfg_workloads or f"{w.namespace}/{w.name}" in cfg_workloads


def _queue_from_slot(queues: Sequence[Any], w: WorkloadView, engines: Sequence[str]) -> tuple[Signal, dict] | None:
    """The gateway / endpoint-picker queue in front of ``w``, when the fleet's ``queues`` slot has one,
    and where it came from.

    A queue source (the Queue helper's ``QueueSource``: ``queued``, ``freshness``, ``engines`` each with the
    watched ``engine`` it is) counts for ``w`` when every engine behind it is one of ``w``'s: a gateway in
    front of several workloads cannot say whose its queue is. A plain dict entry names its workload
    (``workload`` = ``Deployment/ns/name``, or ``deployment`` + ``namespace``) with ``depth``."""
    mine = set(engines)
    for q in queues:
        if isinstance(q, dict):
            match = q.get("workload") == w.key or (
                q.get("deployment") == w.name and q.get("namespace", w.namespace) == w.namespace)
            depth = q.get("depth", q.get("queue_depth"))
            if match and (depth is None or isinstance(depth, (int, float))):
                status = str(q.get("status") or ("fresh" if depth is not None else MISSING))
                src = str(q.get("source") or "queues")
                return (Signal("queue depth", None if depth is None else float(depth), 0.0, status=status,
                               age_s=q.get("age_s"), why=q.get("why") or q.get("error")),
                        {"from": src, "text": f"{src}: {w.key}"})
            continue
        behind = {getattr(e, "engine", None) for e in getattr(q, "engines", None) or ()} - {None}
        if not mine or not behind or not behind <= mine:
            continue
        fr = getattr(q, "freshness", None)
        depth = getattr(q, "queued", None)
        status = getattr(fr, "status", "fresh") if depth is not None or fr is None else MISSING
        if status == MISSING and getattr(fr, "status", None) == STALE_STATUS:
            status = STALE_STATUS
        why = getattr(fr, "reason", None) or (getattr(q, "missing", None) or {}).get("queued")
        kind = str(getattr(q, "kind", "") or "queue")
        name = str(getattr(q, "name", "") or "?")
        return (Signal("queue depth", None if depth is None else float(depth), 0.0, status=status,
                       age_s=getattr(fr, "age_s", None), why=why),
                {"from": kind, "text": f"{kind} {name}" + (" (through Prometheus)"
                                                           if getattr(q, "via", "") == "prometheus" else "")})
    return None


def _queue_from_prometheus(att: QueueAttribution, w: WorkloadView, now: float,
                           seen: dict[str, tuple[str, float]] | None) -> tuple[Signal, dict] | None:
    """``w``'s queue depth from the Prometheus queue series attributed to it; missing (with the reason)
    while a nearer queue it had lately is gone from Prometheus; None: no series of its own."""
    d = workload_depth(att.by_workload.get(w.key, ()))
    before = (seen or {}).get(w.key)
    if before is not None and now - before[1] > QUEUE_FORGET_S:
        before = None
    if before is not None and before[0] != "vllm" and (d is None or queue_rank(before[0]) < queue_rank(d.kind)):
        why = f"no {queue_name(before[0])} series in Prometheus for {now - before[1]:.0f} s"
        return (Signal("queue depth", None, 0.0, status=MISSING, age_s=None, why=why),
                {"from": "prometheus", "queue": before[0], "series": 0, "text": f"Prometheus: {why}"})
    if d is None:
        return None
    if seen is not None and not att.error:
        seen[w.key] = (d.kind, now)
    age = None if att.sampled_at is None else max(0.0, now - att.sampled_at)
    status = STALE_STATUS if att.error else "fresh"
    problem = f"Prometheus queue query: {att.error}" if att.error else None
    labels = [dict(s.get("labels") or {}) for s in d.series]
    return (Signal("queue depth", d.depth, 0.0, status=status, age_s=age, why=problem),
            {"from": "prometheus", "queue": d.kind, "series": len(d.series), "labels": labels[:3],
             "also": [k for k in d.kinds if k != d.kind], "text": source_text(d.kind, len(d.series), labels)})


def workload_inputs(state: Any, w: WorkloadView, hpa: HpaView | None, engines: Sequence[str],
                    windows: Mapping[str, list], policy: Policy, p99_metric: str,
                    cluster_why: str | None, queues: QueueAttribution | None = None) -> Inputs:
    """The inputs of one evaluation of ``w`` from the fleet state."""
    return inputs_and_queue_source(state, w, hpa, engines, windows, policy, p99_metric, cluster_why, queues)[0]


def inputs_and_queue_source(state: Any, w: WorkloadView, hpa: HpaView | None, engines: Sequence[str],
                            windows: Mapping[str, list], policy: Policy, p99_metric: str,
                            cluster_why: str | None, queues: QueueAttribution | None = None,
                            seen: dict[str, tuple[str, float]] | None = None) -> tuple[Inputs, dict]:
    """The inputs of one evaluation of ``w``, and where its queue depth came from (``from``, ``text``;
    ``queues``: the Prometheus queue series attributed; ``seen``: workload → the queue kind it had, when)."""
    known = [e for e in (state.engine(n) for n in engines) if e is not None]
    # an engine never read yet (a pod just started) is not there yet; one that stopped answering is stale
    es = [e for e in known if e.freshness.status != MISSING]
    # stale for the advisor: its last poll failed, or its sample is older than the advisor accepts (the
    # fleet's own "stale" after 3 polls is stricter: a one-shot snapshot that reads a slow cluster is not stale)
    stale = [e for e in es if e.freshness.status != "fresh" and (
        e.stats.state not in (UP, DEGRADED) or (e.freshness.age_s or 0.0) > policy.max_input_age_s)]
    ages = [e.freshness.age_s for e in es if e.freshness.age_s is not None]
    age = max(ages) if ages else None
    if not es:
        status = MISSING
        why = "no engine of this workload is watched" if not known else f"{known[0].name}: no data yet"
    elif stale:
        e = stale[0]
        status, why = STALE_STATUS, f"{e.name}: {e.freshness.reason or e.freshness.status}"
    else:
        status, why = "fresh", None

    found = _queue_from_slot(state.queues, w, [e.name for e in known])
    if found is None and queues is not None:
        found = _queue_from_prometheus(queues, w, state.taken_at, seen)
    if found is None:
        waits = [e.stats.waiting for e in es if e.stats.waiting is not None]
        qv = float(sum(waits)) if waits and status != MISSING else None
        queue = Signal("queue depth", qv, 0.0, status=status if qv is not None or status != "fresh" else MISSING,
                       age_s=age, why=why or (None if qv is not None else "vLLM waiting not exported"))
        text = f"vLLM waiting of its engines ({len(waits)})"
        if queues is not None and queues.error and not queues.by_workload.get(w.key):
            text += f"; Prometheus queue query: {queues.error}"
        source = {"from": "engines", "text": text}
    else:
        queue, source = found
    queue = replace(queue, target=policy.target_queue_depth)

    hist, q, label = P99_HISTOGRAMS[p99_metric]
    p99: float | None = None
    wins = [win for e in es if e.fresh for win in windows.get(e.name, ())]
    if wins:
        p99 = fleet_quantile(wins, hist, q)
    else:
        vals = [getattr(e.stats, p99_metric) for e in es if getattr(e.stats, p99_metric) is not None]
        p99 = max(vals) if vals else None
    if p99 is not None and not math.isfinite(p99):
        p99 = None
    p_status = status if p99 is not None or status != "fresh" else MISSING
    p_why = why or (None if p99 is not None else "no request finished in the window")
    sig = Signal(label, p99, policy.target_p99_s, "s", p_status, age, p_why)
    lo = hpa.min_replicas if hpa is not None and hpa.min_replicas is not None else None
    hi = hpa.max_replicas if hpa is not None and hpa.max_replicas is not None else None
    return Inputs(w.key, w.desired, queue, sig, lo, hi, current_why=cluster_why), source


class Advisor:
    """Evaluates every workload each tick; its docs fill ``FleetState.autoscalers``."""

    def __init__(self, cfg: Any, slo: Any, *, engine_pods: Mapping[str, str] | None = None,
                 allow_auto: bool = True) -> None:
        self.cfg = cfg
        self.policy = ScalingPolicy(policy_from_config(cfg, slo))
        self.allow_auto = allow_auto  # --no-auto: auto is never on
        self.mode = cfg.mode if cfg.mode in MODES else RECOMMEND
        if self.mode == AUTO and not allow_auto:
            self.mode = RECOMMEND
        self.paused = False  # the kill switch: auto decisions are recommended only
        self.engine_pods = dict(engine_pods or {})
        self.p99_metric = cfg.p99_metric
        self.logs: dict[str, deque] = {}
        self.series: dict[str, deque] = {}  # workload → (time, queue depth, p99 s)
        self._applies: list[Apply] = []
        self.outcomes: dict[str, str] = {}  # workload → the last auto apply's outcome
        self._pending: dict[str, dict] = {}  # workload → its "applying" log entry, settled by note_applied
        self.queue_seen: dict[str, tuple[str, float]] = {}  # workload → (Prometheus queue kind it had, when)
        # the last tick's SLO report (Fleet.with_slo sets it; the advisor runs inside the join, before this
        # tick's report): its capacity answer is shown beside a proposal, never decides one
        self.slo_report: dict | None = None

    # -- settings --------------------------------------------------------------
    def set_mode(self, mode: str) -> str | None:
        """Switch mode; the reason it cannot, else None."""
        if mode not in MODES:
            return f"unknown mode {mode!r}"
        if mode == AUTO and not self.allow_auto:
            return "auto is disabled (--no-auto)"
        self.mode = mode
        return None

    def set_targets(self, *, queue_depth: float | None = None, p99_s: float | None = None,
                    min_replicas: int | None = None, max_replicas: int | None = None) -> None:
        """New targets (and the bounds of workloads no HPA targets) from the next evaluation on."""
        p = self.policy.policy
        self.policy.policy = replace(p, target_queue_depth=queue_depth or p.target_queue_depth,
                                     target_p99_s=p99_s or p.target_p99_s,
                                     min_replicas=p.min_replicas if min_replicas is None else min_replicas,
                                     max_replicas=p.max_replicas if max_replicas is None else max_replicas)

    def note_applied(self, workload: str, now: float, outcome: str) -> None:
        """An apply (auto or confirmed) ended; ``outcome`` starts with its result ("ok: …", "refused: …",
        "not applied: …"). Its log entry says what happened; the cooldown starts from the end of a change
        that was sent, and none starts from one that changed nothing."""
        self.outcomes[workload] = outcome
        result = outcome.split(":", 1)[0].strip()
        settled = APPLIED if result == "ok" else SENT if result in SENT_RESULTS else NOT_APPLIED
        entry = self._pending.pop(workload, None)
        if entry is not None:
            entry["action"] = settled
            entry["reason"] = f"{entry['reason']} — {outcome}"
        if settled != NOT_APPLIED:
            self.policy.note_change(workload, now)
        elif entry is not None:
            self.policy.undo_change(workload)  # the decision's own cooldown: nothing changed, decide again

    def take_applies(self) -> list[Apply]:
        out, self._applies = self._applies, []
        return out

    # -- each tick ---------------------------------------------------------------
    def __call__(self, state: Any, windows: Mapping[str, list]) -> list[dict]:
        return self.evaluate(state, windows)

    def evaluate(self, state: Any, windows: Mapping[str, list] | None = None) -> list[dict]:
        """Decide for every workload of ``state`` at ``state.taken_at``; the autoscalers slot."""
        c = state.cluster
        snap = c.snapshot if c is not None else None
        if snap is None:
            return []
        cluster_why = None if c.freshness.status == "fresh" else f"stale ({c.freshness.reason or 'reads failing'})"
        now = state.taken_at
        eng = workload_engines(state, snap, self.engine_pods)
        explained = _explanations(snap, now)
        doc = prom_queue_doc(state.queues)
        att = attribute(doc, snap, state.engines, eng) if doc is not None else None
        fleet_wide = att.fleet_doc() if att is not None else None
        out = []
        for w in snap.workloads:
            names = eng.get(w.key, [])
            if not names and not _wanted(self.cfg.workloads, w):
                continue
            hpa = snap.hpa_for(w)
            bounds = owner_bounds(snap, w, hpa)
            rec = None
            source = None
            if self.mode != OFF:
                inputs, source = inputs_and_queue_source(state, w, hpa, names, windows or {}, self.policy.policy,
                                                         self.p99_metric, cluster_why, att, self.queue_seen)
                if bounds is not None:
                    inputs = replace(inputs, min_replicas=bounds[0], max_replicas=bounds[1])
                rec = self.policy.evaluate(inputs, now, mode=self.mode, paused=self.paused)
                self._log(rec)
                self._sample(rec)
                if rec.action == APPLIED and rec.desired is not None and rec.current is not None:
                    self._applies.append(Apply(w.key, w.kind, w.namespace, w.name, rec.current, rec.desired,
                                               rec.reason))
            view = self._view(w, hpa, names, rec, now, explained.get((w.kind, w.namespace, w.name)), bounds)
            view["queue_source"], view["queue_fleet_wide"] = source, fleet_wide
            out.append(view)
        return out

    def _log(self, rec: DecisionRecord) -> None:
        log = self.logs.setdefault(rec.workload, deque(maxlen=LOG_KEEP))
        doc = rec.to_doc()
        if log:
            last = log[-1]
            same = all(last[k] == doc[k] for k in ("action", "rule", "current", "wanted", "desired"))
            if same and rec.action != APPLIED:  # one line per decision, not per tick
                doc["repeats"] = last.get("repeats", 1) + 1
                doc["first_at"] = last.get("first_at", last["at"])
                log[-1] = doc
                return
        doc["repeats"], doc["first_at"] = 1, rec.at
        if rec.action == APPLIED:  # decided, not done: note_applied says what happened
            doc["action"] = APPLYING
            self._pending[rec.workload] = doc
        log.append(doc)

    def _sample(self, rec: DecisionRecord) -> None:
        s = self.series.setdefault(rec.workload, deque(maxlen=SERIES_KEEP))
        q, p = (rec.inputs + (None, None))[:2]
        s.append((rec.at, q.value if q is not None else None, p.value if p is not None else None))

    def _view(self, w: WorkloadView, hpa: HpaView | None, engines: list[str], rec: DecisionRecord | None,
              now: float, explained: Any = None, bounds: tuple[int, int, str] | None = None) -> dict:
        p = self.policy.policy
        lo, hi, bounds_from = bounds if bounds is not None else (p.min_replicas, p.max_replicas, "config")
        log = list(reversed(self.logs.get(w.key, ())))[:10]
        lines = []
        if rec is not None:
            lines.append({"source": "infertop", "name": "advisor", "current": rec.current, "desired": rec.desired,
                          "min_replicas": rec.min_replicas, "max_replicas": rec.max_replicas,
                          "why": rec.reason + capacity_beside(self.slo_report, engines)})
        lines.extend(other_autoscalers(hpa, explained))
        return {
            "workload": w.key, "kind": w.kind, "namespace": w.namespace, "name": w.name,
            "engines": list(engines), "current": w.desired, "ready": w.ready,
            "min_replicas": lo, "max_replicas": hi, "bounds_from": bounds_from,
            "mode": self.mode, "paused": self.paused,
            "targets": {"queue_depth": p.target_queue_depth, "p99_s": p.target_p99_s, "p99_metric": self.p99_metric},
            "windows": {"cooldown_s": p.cooldown_s, "scale_up_s": p.scale_up_window_s,
                        "scale_down_s": p.scale_down_window_s, "tolerance": p.tolerance},
            "cooldown_left_s": self.policy.cooldown_left_s(w.key, now),
            "latest": dict(log[0]) if log else None,
            "decisions": log,
            "last_apply": self.outcomes.get(w.key),
            "autoscalers": lines,
        }


def capacity_beside(report: Any, engines: Sequence[str]) -> str:
    """"; capacity model (class chat): 5 replicas — holds queue p99 …" where the workload's engines are one
    SLO class with a capacity answer, else ""."""
    got = slo_capacity(report, engines) if engines else None
    if got is None or not got[1].get("replicas_to_hold"):
        return ""
    c, cap = got
    return f"; class {c.get('name')}'s {capacity_why(c, cap)}"


KEDA_DEFAULT_BOUNDS = (0, 100)  # minReplicaCount, maxReplicaCount when a ScaledObject leaves them out


def owner_bounds(snap: ClusterSnapshot, w: WorkloadView, hpa: HpaView | None) -> tuple[int, int, str] | None:
    """(min, max, where from) of the autoscaler that owns ``w``'s replica count — a KEDA ScaledObject
    (the HPA it made has the same bounds), else an HPA; None: no owner, the config's bounds apply."""
    so = next((o for o in snap.scaled_objects if o.namespace == w.namespace and o.target_name == w.name
               and (o.target_kind or "Deployment") == w.kind), None)
    if so is not None:
        lo = so.min_replicas if so.min_replicas is not None else KEDA_DEFAULT_BOUNDS[0]
        hi = so.max_replicas if so.max_replicas is not None else KEDA_DEFAULT_BOUNDS[1]
        return lo, hi, f"KEDA ScaledObject {so.namespace}/{so.name}"
    if hpa is not None:
        p_lo = hpa.min_replicas if hpa.min_replicas is not None else 1
        if hpa.max_replicas is None:
            return None
        return p_lo, hpa.max_replicas, f"HPA {hpa.namespace}/{hpa.name}"
    return None


_SHORT_KIND = {"HorizontalPodAutoscaler": "HPA", "ScaledObject": "KEDA", "VariantAutoscaling": "WVA"}


def _explanations(snap: ClusterSnapshot, now: float) -> dict:
    """(kind, namespace, name) → the autoscalers analysis of that workload, when that module is there."""
    try:
        from ...analysis.autoscaler.explain import explain_workloads  # the autoscalers helper's analysis
    except ImportError:
        return {}
    try:
        return {(x.kind, x.namespace, x.name): x for x in explain_workloads(snap, now)}
    except Exception:  # noqa: BLE001 — an explanation that fails must not stop the advisor: the HPA line stays
        return {}


def other_autoscalers(hpa: HpaView | None, explained: Any = None) -> list[dict]:
    """What the cluster's autoscalers that target a workload decided, one line each.

    With the autoscalers analysis (``analysis/autoscaler/explain.py``: HPA, KEDA
    ScaledObjects, llm-d variant autoscalers, "why not scaling" in words)
    every one of them; without it, the HPA object as the cluster state
    carries it (its conditions' explanation, else its metrics)."""
    if explained is not None and getattr(explained, "autoscalers", None):
        out = []
        for a in explained.autoscalers:
            why = "; ".join(w.text for w in getattr(a, "why_not", ()) or ()) or ", ".join(
                f"{m.name} {m.current or '?'}/{m.target or '?'}" for m in getattr(a, "metrics", ()) or ())
            out.append({"source": _SHORT_KIND.get(a.kind, a.kind), "name": f"{a.namespace}/{a.name}",
                        "current": a.current, "desired": a.desired, "min_replicas": a.min_replicas,
                        "max_replicas": a.max_replicas, "why": why})
        return out
    if hpa is None:
        return []
    return [{"source": "HPA", "name": f"{hpa.namespace}/{hpa.name}", "current": hpa.current_replicas,
             "desired": hpa.desired_replicas, "min_replicas": hpa.min_replicas, "max_replicas": hpa.max_replicas,
             "why": hpa.why_not_scaling or ", ".join(f"{m.name} {m.current or '?'}/{m.target or '?'}"
                                                     for m in hpa.metrics)}]


def decision(doc: Mapping[str, Any]) -> DecisionRecord:
    """A decision record back from the autoscalers slot (replay, snapshot JSON)."""
    return DecisionRecord.from_doc(dict(doc))
