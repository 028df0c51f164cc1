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

from collections.abc import Iterable, Mapping
from typing import Any

from ..domain.kube import ClusterSnapshot

__all__ = ["ClusterJoin"]


def _norm(url: str | None) -> str:
    return (url or "").strip().rstrip("/").lower()


def _engine_name(collector: Any) -> str:
    """The engine a collector's endpoint is (its one engine's name; the endpoint's for several)."""
    stats = getattr(collector, "stats", None) or ()
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
            url = _norm(getattr(getattr(c, "endpoint", None), "url", None))
            if url:
                by_url[url] = c
        pods: dict[str, str] = {}
        served: set[str] = set()  # URLs a pod that is not terminating serves
        for p in snap.pods if snap is not None else ():
            url = _norm(p.engine_url)
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
