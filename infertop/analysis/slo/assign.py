"""Which class holds an engine, by the first rule that names it (each rule over the classes in config
order): its engine name (``engines``, or ``match``), its Deployment (``deployments``: namespace/name,
joined through the cluster's pods), its model (``models``, or ``match``), a gateway class in front of it
(``gateway_classes``: an infertop gateway's class, an endpoint picker's band, an InferenceObjective of
its InferencePool); else the tightest class its own healthy history fits — the median, over the ticks
it was healthy (up, fresh, serving, no verdict on it), of each percentile within that class's target.
Each answer says which rule gave it ("by Deployment infer/llama")."""

from __future__ import annotations

import statistics
from collections import deque
from fnmatch import fnmatchcase

from ...format import seconds_human
from .targets import STAGE_LABEL, STAGES, SloClass, tightness

MIN_HEALTHY_TICKS = 10  # ticks of healthy history before a fit is trusted
KEEP_TICKS = 600
REFIT_EVERY = 30  # a fit is recomputed every this many healthy ticks (medians of 600 values, 500 engines)


class Assigner:
    def __init__(self, classes: tuple[SloClass, ...]) -> None:
        self.classes = classes
        self.by_fit = tuple(sorted(classes, key=tightness))
        self._history: dict[str, deque] = {}
        self._fit: dict[str, tuple[SloClass, str, int]] = {}  # engine → (class, why, healthy ticks when fitted)
        self._seen: dict[str, int] = {}  # engine → healthy ticks seen

    def matched(self, name: str, model: str | None, deployment: str | None = None,
                gateway_classes: tuple[str, ...] = ()) -> tuple[SloClass, str] | None:
        """The class a configured rule gives, in precedence: engine > Deployment > model > gateway class."""
        for c in self.classes:
            for pat in c.engines:
                if _hit(name, pat):
                    return c, f"by engine {name}" + _glob(pat)
            for pat in c.match:
                if _hit(name, pat):
                    return c, f"matches {pat!r} (engine name)"
        if deployment:
            for c in self.classes:
                for pat in c.deployments:
                    if _hit(deployment, pat):
                        return c, f"by Deployment {deployment}" + _glob(pat)
        if model:
            for c in self.classes:
                for pat in c.models:
                    if _hit(model, pat):
                        return c, f"by model {model}" + _glob(pat)
                for pat in c.match:
                    if _hit(model, pat):
                        return c, f"matches {pat!r} (model)"
        for c in self.classes:
            for pat in c.gateway_classes:
                for g in gateway_classes:
                    if _hit(g, pat):
                        more = f"; in front of it also {', '.join(x for x in gateway_classes if x != g)}" \
                            if len(gateway_classes) > 1 else ""
                        return c, f"by gateway class {g}" + _glob(pat) + more
        return None

    def assign(self, stats, healthy: bool, deployment: str | None = None,
               gateway_classes: tuple[str, ...] = ()) -> tuple[SloClass, str]:
        got = self.matched(stats.name, stats.model, deployment, gateway_classes)
        if got is not None:
            return got
        hist = self._history.get(stats.name)
        if hist is None:
            hist = self._history[stats.name] = deque(maxlen=KEEP_TICKS)
            self._seen[stats.name] = 0
        if healthy and (stats.requests_per_s or 0) > 0:
            hist.append(tuple(getattr(stats, attr) for _, _, attr in STAGES.values()))
            self._seen[stats.name] += 1
        seen = self._seen[stats.name]
        fit = self._fit.get(stats.name)
        if len(hist) >= MIN_HEALTHY_TICKS and (fit is None or seen - fit[2] >= REFIT_EVERY):
            fit = self._fit[stats.name] = (*self._fitted(hist), seen)
        if fit is not None:
            return fit[0], fit[1]
        n = len(hist)
        loosest = self.by_fit[-1]
        return loosest, (f"no class matches it and it has {n} of {MIN_HEALTHY_TICKS} healthy ticks: "
                         f"{loosest.name} (the loosest) until its history says which it fits")

    def _fitted(self, hist) -> tuple[SloClass, str]:
        medians = {}
        for i, stage in enumerate(STAGES):
            vals = [h[i] for h in hist if h[i] is not None]
            medians[stage] = statistics.median(vals) if vals else None
        known = {s: v for s, v in medians.items() if v is not None}
        for c in self.by_fit:
            if known and all(v <= c.target_s(s) for s, v in known.items()):
                said = ", ".join(f"{STAGE_LABEL[s]} {seconds_human(v)} ≤ {seconds_human(c.target_s(s))}"
                                 for s, v in known.items())
                return c, f"no class matches it; its healthy history fits {c.name} ({said}; medians of {len(hist)} ticks)"
        loosest = self.by_fit[-1]
        worst = max(known, key=lambda s: known[s] / loosest.target_s(s)) if known else "e2e"
        return loosest, (f"no class matches it and its healthy history fits none ({STAGE_LABEL[worst]} median "
                         f"{seconds_human(known.get(worst))}): {loosest.name}, the loosest")

    @property
    def by_cluster(self) -> bool:
        """Whether a rule needs the cluster's pods or the gateways (joined only then: 500 engines a tick)."""
        return any(c.deployments or c.gateway_classes for c in self.classes)

    def forget_except(self, names: set[str]) -> None:
        for gone in [n for n in self._history if n not in names]:
            del self._history[gone]
            self._fit.pop(gone, None)
            self._seen.pop(gone, None)


def _hit(value: str, pat: str) -> bool:
    return fnmatchcase(value.lower(), pat.lower())


def _glob(pat: str) -> str:
    return f" (matches {pat!r})" if any(ch in pat for ch in "*?[") else ""


def engine_context(state) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """(engine → its Deployment "namespace/name", engine → the gateway classes in front of it) of a
    fleet state: pods join engines by their URL, else by an engine named as the pod; gateway classes
    are each queue source's classes over its engines, and each InferenceObjective over the pods its
    InferencePool selects."""
    names = {e.name for e in state.engines}
    by_url = {(e.stats.url or "").rstrip("/"): e.name for e in state.engines if e.stats.url}
    deployment: dict[str, str] = {}
    gateway: dict[str, list[str]] = {}
    snap = state.cluster.snapshot if state.cluster is not None else None
    engine_of: dict[tuple[str, str], str] = {}
    for pod in getattr(snap, "pods", ()) or ():
        eng = by_url.get((pod.engine_url or "").rstrip("/")) or (pod.name if pod.name in names else None)
        if eng is None:
            continue
        engine_of[(pod.namespace, pod.name)] = eng
        if pod.owner_kind == "Deployment" and pod.owner_name:
            deployment.setdefault(eng, f"{pod.namespace}/{pod.owner_name}")
    for q in state.queues or ():
        classes = [c.name for c in getattr(q, "classes", ()) or ()]
        for qe in getattr(q, "engines", ()) or ():
            if qe.engine:
                got = gateway.setdefault(qe.engine, [])
                got.extend(c for c in classes if c not in got)
    pools = {(p.namespace, p.name): _selector(p.selector) for p in getattr(snap, "inference_pools", ()) or ()}
    for obj in getattr(snap, "inference_objectives", ()) or ():
        sel = pools.get((obj.namespace, obj.pool))
        if not sel:
            continue
        for pod in getattr(snap, "pods", ()) or ():
            eng = engine_of.get((pod.namespace, pod.name))
            if eng is not None and pod.namespace == obj.namespace and all(pod.labels.get(k) == v for k, v in sel):
                got = gateway.setdefault(eng, [])
                if obj.name not in got:
                    got.append(obj.name)
    return deployment, {k: tuple(v) for k, v in gateway.items()}


def _selector(text: str) -> tuple[tuple[str, str], ...]:
    """"app=vllm,tier=gpu" → ((app, vllm), (tier, gpu)); a selector of any other form selects nothing."""
    out = []
    for part in (text or "").split(","):
        k, sep, v = part.strip().partition("=")
        if not sep or not k or v.startswith("="):
            return ()
        out.append((k.strip(), v.strip()))
    return tuple(out)
