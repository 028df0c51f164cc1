"""Which engines joined or left the fleet between two ticks, with the pod and workload they ran in.

An engine leaves the fleet state only when its pod was scaled away (see
:mod:`.cluster_join`) or its source stopped listing it (a Prometheus target
that went away); it joins when a new pod's engine appears, or a source lists a
new one. The Log pane says so once each: "vllm-4 scaled away (pod vllm-7d9f-x2,
deployment vllm)". The first state is the fleet as found: nothing is logged.

A new pod's engine can answer before the cluster read shows the pod at its
address (the watch lags): its "joined" line waits for the pod up to
``JOIN_POD_WAIT_S`` of state time, then says it without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["JOIN_POD_WAIT_S", "FleetMembership", "PodRef"]

JOIN_POD_WAIT_S = 10.0


def _norm(url: str | None) -> str:
    return (url or "").strip().rstrip("/").lower()


@dataclass(frozen=True, slots=True)
class PodRef:
    """The pod an engine ran in, and the workload that owns it (when known)."""

    pod: str
    owner_kind: str | None = None
    owner_name: str | None = None

    def text(self) -> str:
        owner = f", {self.owner_kind.lower()} {self.owner_name}" if self.owner_kind and self.owner_name else ""
        return f"pod {self.pod}{owner}"


class FleetMembership:
    """Remembers the engines of the last state and the pod each one was last seen in."""

    def __init__(self) -> None:
        self._names: set[str] | None = None
        self._pods: dict[str, PodRef] = {}  # engine name → the pod last seen serving it
        self._joining: dict[str, float] = {}  # engine name → state time it joined, its pod not read yet

    def pod_of(self, engine: str) -> PodRef | None:
        return self._pods.get(engine)

    def _learn_pods(self, state: Any) -> None:
        cluster = getattr(state, "cluster", None)
        snap = cluster.snapshot if cluster is not None else None
        if snap is None:
            return
        by_url = {_norm(e.stats.url): e.name for e in state.engines}
        seen: dict[str, Any] = {}
        for p in snap.pods:
            name = by_url.get(_norm(p.engine_url))
            if name is None:
                continue
            if name not in seen or seen[name].terminating and not p.terminating:  # the live pod wins
                seen[name] = p
        for name, p in seen.items():
            self._pods[name] = PodRef(p.name, p.owner_kind, p.owner_name)

    def changes(self, state: Any) -> list[str]:
        """One line per engine that left or joined since the last call (none on the first)."""
        names = {e.name for e in state.engines}
        before = self._names
        lines = []
        if before is not None:
            for name in sorted(before - names):
                if self._joining.pop(name, None) is not None:
                    continue  # came and went before its join was told: nothing to tell
                ref = self._pods.pop(name, None)  # if it comes back, it is in a new pod (or none known yet)
                lines.append(f"{name} scaled away ({ref.text()})" if ref is not None else f"{name} left the fleet")
            for name in sorted(names - before):
                self._joining[name] = state.taken_at
        self._learn_pods(state)  # a joining engine's new pod; one that left keeps none (popped above)
        for name, since in sorted(self._joining.items()):
            ref = self._pods.get(name)
            if ref is not None or state.taken_at - since >= JOIN_POD_WAIT_S:
                del self._joining[name]
                lines.append(f"{name} joined" + (f" ({ref.text()})" if ref is not None else ""))
        self._names = names
        return lines
