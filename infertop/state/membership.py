"""Which engines joined or left the fleet between two ticks, with the pod and workload they ran in.

An engine leaves the fleet state only when its pod was scaled away (see
:mod:`.cluster_join`) or its source stopped listing it (a Prometheus target
that went away); it joins when a new pod's engine appears, or a source lists a
new one. The Log pane says so once each: "vllm-4 scaled away (pod vllm-7d9f-x2,
deployment vllm)". The first state is the fleet as found: nothing is logged.

A new pod's engine can answer before the cluster read shows the pod at its
address (the watch lags): its "joined" line waits for the pod up to
``JOIN_POD_WAIT_S`` of state time, then says it without one.

An engine is its endpoint, not its served model: a model that changes keeps the
engine (and its name), and the Log says "vllm-0 model changed a → b"; a
histogram whose bucket bounds changed says "window restarted". Each of these is
told at most once per ``NOTE_EVERY_S`` of state time per engine, so one that
flaps every poll is one line a minute, with how many changes went untold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["JOIN_POD_WAIT_S", "NOTE_EVERY_S", "FleetMembership", "PodRef"]

JOIN_POD_WAIT_S = 10.0
NOTE_EVERY_S = 60.0  # a note that flaps (a model changing every poll) is told once a minute per engine


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


@dataclass(slots=True)
class _Told:
    """One engine's value as last told in the Log, and what happened since."""

    told: str  # the value the Log last said (or the first one seen)
    told_at: float  # state time it was told (-inf: never)
    seen: str  # the value at the last tick
    untold: int = 0  # changes seen since the last line

    def change(self, value: str, now: float) -> str | None:
        """The Log line's "a → b (…)" part when ``value`` should be told now, else None."""
        if value != self.seen:
            self.untold += 1
            self.seen = value
        if value == self.told or now - self.told_at < NOTE_EVERY_S:
            return None
        more = f" (changed {self.untold} times since the last note)" if self.untold > 1 else ""
        text = f"{self.told} → {value}{more}"
        self.told, self.told_at, self.untold = value, now, 0
        return text


class FleetMembership:
    """Remembers the engines of the last state and the pod each one was last seen in."""

    def __init__(self) -> None:
        self._names: set[str] | None = None
        self._pods: dict[str, PodRef] = {}  # engine name → the pod last seen serving it
        self._joining: dict[str, float] = {}  # engine name → state time it joined, its pod not read yet
        self._models: dict[str, _Told] = {}  # engine name → its served model, as told
        self._restarts: dict[str, _Told] = {}  # engine name → its histogram window restarts, as told

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
        lines += self._notes(state, names)
        return lines

    def _notes(self, state: Any, names: set[str]) -> list[str]:
        """Model changes and histogram window restarts, rate-limited per engine."""
        for table in (self._models, self._restarts):
            for gone in [n for n in table if n not in names]:
                del table[gone]
        now = state.taken_at
        lines = []
        for e in state.engines:
            s = e.stats
            if s.model:
                told = self._models.get(e.name)
                if told is None:
                    self._models[e.name] = _Told(s.model, -math.inf, s.model)
                elif (text := told.change(s.model, now)) is not None:
                    lines.append(f"{e.name} model changed {text}")
            restarts = (s.extra or {}).get("histogram_restarts")
            if restarts:
                told = self._restarts.get(e.name)
                if told is None:  # the count appears with the first restart
                    told = self._restarts[e.name] = _Told("0", -math.inf, "0")
                if told.change(restarts, now) is not None:
                    lines.append(f"{e.name}: histogram buckets changed: window restarted")
        return lines
