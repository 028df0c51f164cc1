"""Whose queue is it: the Prometheus queue series attributed to workloads, for the advisor.

The Prometheus fleet source's entry of the ``queues`` slot lists every series of
its queue query (``series``: kind, labels, depth; see ``prometheus.queue_promql``).
Each series goes to at most one workload, the first of:

1. a ``workload`` label: ``Kind/namespace/name``, ``namespace/name``, or a name
   (in the series' ``namespace`` when it has one);
2. a ``deployment`` label (in the series' ``namespace`` when it has one);
3. a ``pod`` or ``model_server_pod`` label: that pod's owner in the cluster read;
4. an ``instance`` label that is a watched engine's address: that engine's workload
   (engine → pod by address, as the cluster join does);
5. a ``target_model_name`` or ``model_name`` label served only by one workload's
   engines (an endpoint picker's queue per model).

There is no InferencePool in the cluster read, so a pool label alone attributes
nothing. A series none of these names stays fleet-wide: listed as such, never
added to a workload. Of a workload's series, the depth is the sum over the queue
nearest the client that has any (the gateway's, else the endpoint picker's, else
one's own query's, else vLLM's waiting): the one queue its target is set against,
as with a Queue source. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...domain.kube import ClusterSnapshot, WorkloadView
from ...sources.prometheus.fleet_map import queue_rank

#: how a queue kind reads in a reason or on screen
QUEUE_NAMES = {"gateway": "gateway queue", "epp": "endpoint-picker queue", "vllm": "vLLM waiting",
               "promql": "queue_promql"}
POD_LABELS = ("pod", "model_server_pod")
MODEL_LABELS = ("target_model_name", "model_name")
SHOWN_LABELS = 3  # label sets listed per source in the view


def prom_queue_doc(queues: Iterable[Any]) -> Mapping[str, Any] | None:
    """The Prometheus fleet source's entry of a state's ``queues`` slot (None without one)."""
    return next((q for q in queues if isinstance(q, Mapping) and q.get("source") == "prometheus"
                 and isinstance(q.get("series"), list)), None)


def queue_name(kind: str) -> str:
    return QUEUE_NAMES.get(kind, kind)


@dataclass(slots=True)
class QueueAttribution:
    """The queue series of one read, by workload, and those no workload owns."""

    by_workload: dict[str, list[dict]] = field(default_factory=dict)  # workload key → its series
    fleet_wide: list[dict] = field(default_factory=list)
    sampled_at: float | None = None  # wall clock of the read
    error: str | None = None  # the last read failed: the series are the previous read's

    def fleet_doc(self) -> dict[str, Any]:
        """The fleet-wide rest, as the views show it: depth per queue kind, never in a workload's."""
        by_kind: dict[str, float] = {}
        for s in self.fleet_wide:
            by_kind[s["queue"]] = by_kind.get(s["queue"], 0.0) + s["depth"]
        return {"series": len(self.fleet_wide), "depth_by_queue": by_kind,
                "labels": [dict(s["labels"]) for s in self.fleet_wide[:SHOWN_LABELS]]}


class Attributor:
    """Label values → workload keys over one cluster read and the engines of one state."""

    def __init__(self, snap: ClusterSnapshot, engine_urls: Mapping[str, str], engine_workload: Mapping[str, str],
                 engine_models: Mapping[str, str | None]) -> None:
        self.keys = {w.key for w in snap.workloads}
        self.by_name: dict[str, list[WorkloadView]] = {}
        for w in snap.workloads:
            self.by_name.setdefault(w.name, []).append(w)
        self.pods: dict[str, list] = {}
        for p in snap.pods:
            self.pods.setdefault(p.name, []).append(p)
        self.snap = snap
        self.engine_urls = engine_urls  # normalised URL → engine name
        self.engine_workload = engine_workload  # engine name → workload key
        # model → the one workload whose engines serve it (None: several, or an engine no workload owns)
        self.model_workload: dict[str, str | None] = {}
        for name, model in engine_models.items():
            if model:
                wkey = engine_workload.get(name)
                self.model_workload[model] = wkey if self.model_workload.get(model, wkey) == wkey else None

    def _named(self, name: str, ns: str | None, kinds: tuple[str, ...] | None = None) -> str | None:
        found = [w for w in self.by_name.get(name, ()) if (ns is None or w.namespace == ns)
                 and (kinds is None or w.kind in kinds)]
        return found[0].key if len(found) == 1 else None

    def workload(self, labels: Mapping[str, str]) -> str | None:
        """The workload a series with these labels is the queue of, or None."""
        ns = labels.get("namespace") or None
        named = labels.get("workload")
        if named:
            parts = named.split("/")
            if len(parts) == 3 and named in self.keys:
                return named
            if len(parts) == 2:
                return self._named(parts[1], parts[0])
            if len(parts) == 1:
                return self._named(named, ns)
            return None
        if labels.get("deployment"):
            return self._named(labels["deployment"], ns, ("Deployment",))
        for label in POD_LABELS:
            name = labels.get(label)
            if name:
                pods = [p for p in self.pods.get(name, ()) if ns is None or p.namespace == ns or label != "pod"]
                owners = {w.key for w in (self.snap.workload_of(p) for p in pods) if w is not None}
                if len(owners) == 1:
                    return owners.pop()
                break  # a pod the cluster read does not know (yet): its address may still say
        instance = labels.get("instance")
        if instance:
            url = _norm(instance if "://" in instance else f"http://{instance}")
            engine = self.engine_urls.get(url)
            if engine is not None and engine in self.engine_workload:
                return self.engine_workload[engine]
        for label in MODEL_LABELS:
            model = labels.get(label)
            if model:
                return self.model_workload.get(model)
        return None


def _norm(url: str | None) -> str:
    return (url or "").strip().rstrip("/").lower()


def attribute(doc: Mapping[str, Any], snap: ClusterSnapshot, engines: Sequence[Any],
              workload_engines: Mapping[str, list[str]]) -> QueueAttribution:
    """Every series of ``doc`` (the Prometheus source's queues entry) to its workload or the fleet."""
    engine_workload = {e: w for w, names in workload_engines.items() for e in names}
    urls = {_norm(e.stats.url): e.name for e in engines if e.stats.url}
    models = {e.name: e.stats.model for e in engines}
    who = Attributor(snap, urls, engine_workload, models)
    out = QueueAttribution(sampled_at=doc.get("sampled_at"), error=doc.get("error"))
    for s in doc.get("series") or ():
        w = who.workload(s.get("labels") or {})
        if w is None:
            out.fleet_wide.append(s)
        else:
            out.by_workload.setdefault(w, []).append(s)
    return out


@dataclass(frozen=True, slots=True)
class WorkloadDepth:
    """A workload's queue depth from its attributed series."""

    kind: str  # the queue it is (gateway, epp, promql, vllm)
    depth: float
    series: tuple[Mapping[str, Any], ...]  # the series summed
    kinds: tuple[str, ...]  # every queue kind the workload has series of, nearest first


def workload_depth(series: Sequence[Mapping[str, Any]]) -> WorkloadDepth | None:
    """The depth of the queue nearest the client among a workload's series (None without any)."""
    if not series:
        return None
    kinds = tuple(sorted({s["queue"] for s in series}, key=queue_rank))
    mine = tuple(s for s in series if s["queue"] == kinds[0])
    return WorkloadDepth(kinds[0], float(sum(s["depth"] for s in mine)), mine, kinds)


def source_text(kind: str, n: int, labels: Sequence[Mapping[str, str]] = ()) -> str:
    """``Prometheus: endpoint-picker queue, 2 series (inference_pool=pool-a, …)``."""
    shown = ", ".join(f"{k}={v}" for k, v in (labels[0].items() if labels else ())
                      if k in ("inference_pool", "target_model_name", "model_name", "deployment", "workload",
                               "pod", "instance", "job"))
    return f"Prometheus: {queue_name(kind)}, {n} series" + (f" ({shown}{', …' if n > 1 else ''})" if shown else "")
