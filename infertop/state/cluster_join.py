"""The cluster's side of the fleet join: which pod runs which engine, and which engines
a scale-down took away.

A pod runs an engine when its address (``podIP:containerPort``) is the engine's URL; the
map is read afresh from every cluster read, so after a rescale the GPU → pod → engine
join follows the new pods (a map taken once at start goes stale).

An engine whose pod was deleted is *gone*, not down: it leaves the state (no "down"
row, no failing source, no alert). It counts as gone when all of these hold:

- the cluster read is fresh (a stale read cannot say a pod is gone);
- the engine is a pod's engine: a read has shown a pod at its URL, or the static
  pod → engine map (``--demo``'s, from the simulator) names it;
- no pod serves its URL now, or the one that does is terminating;
- the engine is not answering (while it drains, it is shown).

An engine down while its pod is still there is an outage and stays on screen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..domain.kube import ClusterSnapshot, PodLoad, load_of

__all__ = ["ClusterJoin", "engine_urls", "norm_url", "pod_engines", "pod_loads_from_engines"]


def norm_url(url: str | None) -> str:
    """A URL as the join compares it: no surrounding space, no trailing slash, lower case."""
    return (url or "").strip().rstrip("/").lower()


def _collector_url(collector: Any) -> str:
    """The normalised URL a collector polls ("" when it has none)."""
    return norm_url(getattr(getattr(collector, "endpoint", None), "url", None))


def _engine_name(collector: Any) -> str:
    """The engine a collector's endpoint is (its one engine's name; the endpoint's for several)."""
    stats: Sequence[Any] = getattr(collector, "stats", None) or ()
    if len(stats) == 1:
        return stats[0].name
    return collector.endpoint.name


class ClusterJoin:
    """Pod → engine from each cluster read, and the engines scaled away; remembers which
    engine URLs have been pods' engines."""

    def __init__(self, static_pods: Mapping[str, str] | None = None) -> None:
        self.static_engines = set((static_pods or {}).values())  # engine names the static map gives a pod
        self._pod_urls: set[str] = set()  # engine URLs a read has shown a pod at

    def join(self, snap: ClusterSnapshot | None, fresh: bool,
             collectors: Iterable[Any]) -> tuple[dict[str, str], set[int]]:
        """(pod name → engine name for the pods serving a watched engine, ids of the
        collectors whose engine was scaled away)."""
        by_url: dict[str, Any] = {}
        for c in collectors:
            url = _collector_url(c)
            if url:
                by_url[url] = c
        pods: dict[str, str] = {}
        served: set[str] = set()  # URLs a pod that is not terminating serves
        for p in snap.pods if snap is not None else ():
            url = norm_url(p.engine_url)
            c = by_url.get(url)
            if c is None:
                continue
            self._pod_urls.add(url)
            pods[p.name] = _engine_name(c)
            if not p.terminating:
                served.add(url)
        if snap is None or not fresh or snap.stale or not snap.synced:
            return pods, set()
        gone = {id(c) for url, c in by_url.items()
                if url not in served and not c.health.ok
                and (url in self._pod_urls or _engine_name(c) in self.static_engines)}
        return pods, gone


def engine_urls(collectors: Iterable[Any]) -> set[str]:
    """The (normalised) URLs of the engines infertop polls itself."""
    return {u for c in collectors if (u := _collector_url(c))}


def pod_engines(pods: Iterable[Any], engines: Iterable[Any],
                engine_pods: Mapping[str, str] | None = None) -> dict[str, list[Any]]:
    """pod key → the fleet state's engines that pod runs: by address (its ``podIP:port`` is the engine's
    URL), else by the pod → engine map (a GPU's or Prometheus' ``pod`` label, ``--demo``'s), else an
    engine named as the pod — engines read through Prometheus have no pod address to match."""
    by_url: dict[str, list[Any]] = {}
    by_name: dict[str, list[Any]] = {}
    for e in engines:
        by_url.setdefault(norm_url(e.stats.url), []).append(e)
        by_name.setdefault(e.name, []).append(e)
    mapped = engine_pods or {}
    out: dict[str, list[Any]] = {}
    for p in pods:
        url = getattr(p, "engine_url", None)
        states = (by_url.get(norm_url(url)) if url else None) or by_name.get(mapped.get(p.name, p.name))
        if states:
            out[p.key] = states
    return out


def pod_loads_from_engines(pods: Iterable[Any], engines: Iterable[Any],
                           engine_pods: Mapping[str, str] | None = None) -> dict[str, Any]:
    """pod key → :class:`~infertop.domain.kube.PodLoad` for the pods that run an engine of the fleet
    state (:func:`pod_engines`): its running and waiting as that state shows them (the numbers of the
    Engines pane, not a second read of the same /metrics a moment apart); an engine not fresh gives its
    reason instead."""
    out: dict[str, Any] = {}
    for key, states in pod_engines(pods, engines, engine_pods).items():
        fresh = [e.stats for e in states if e.fresh]
        if not fresh:
            out[key] = PodLoad(error=states[0].freshness.reason or "no data")
            continue
        running = [s.running for s in fresh if s.running is not None]
        waiting = [s.waiting for s in fresh if s.waiting is not None]
        out[key] = load_of(sum(running) if running else None, sum(waiting) if waiting else None)
    return out
