"""What changed, for the triage's "what changed before this verdict": the actions this console ran,
Kubernetes events, and what the fleet state itself shows moving (an engine restarted with another
max_num_seqs — by this console, another one or ``infertop engine set``; a workload rescaled)."""

from __future__ import annotations

from collections import deque

KEEP_S = 900.0  # the triage looks 5 minutes before an onset; a verdict may hold a while before that
MAX_RECORDS = 2000  # an event storm cannot grow it without limit
MAX_SEEN = 4096
# Normal events that are a decision worth a line (an autoscaler's); the rest of a rollout's routine
# (SuccessfulCreate, ScalingReplicaSet, Scheduled, Pulled…) is said by the rescale line itself
NORMAL_REASONS = frozenset({"SuccessfulRescale", "ScaledObjectPaused", "Killing", "Evicted", "Preempted"})


class ChangeRecords:
    """``(wall clock, text)`` records, oldest first, the last :data:`KEEP_S` seconds."""

    def __init__(self, keep_s: float = KEEP_S, max_records: int = MAX_RECORDS) -> None:
        self.keep_s = keep_s
        self._records: deque[tuple[float, str]] = deque(maxlen=max_records)
        self._seen_events: dict[tuple, None] = {}  # ordered set: the events already recorded
        self._seqs: dict[str, int] = {}  # engine → max_num_seqs last seen
        self._replicas: dict[str, int] = {}  # workload → desired replicas last seen

    def add(self, at: float, text: str) -> None:
        self._records.append((at, text))

    def records(self, now: float) -> list[tuple[float, str]]:
        while self._records and self._records[0][0] < now - self.keep_s:
            self._records.popleft()
        return list(self._records)

    def note_state(self, state) -> None:
        """Record what ``state`` shows changed since the last one: engines' max_num_seqs, workloads'
        replicas, and the Kubernetes events not seen before (by object, reason and last time)."""
        now = state.taken_at
        for e in state.engines:
            seqs = e.stats.max_num_seqs
            if seqs is None or not e.fresh:
                continue
            before = self._seqs.get(e.name)
            self._seqs[e.name] = seqs
            if before is not None and before != seqs:
                self.add(now, f"max_num_seqs {before} → {seqs} on {e.name}")
        snap = state.cluster.snapshot if state.cluster is not None else None
        if snap is None:
            return
        for w in snap.workloads:
            key = f"{w.kind}/{w.namespace}/{w.name}"
            want = w.desired
            if want is None:
                continue
            before = self._replicas.get(key)
            self._replicas[key] = want
            if before is not None and before != want:
                self.add(now, f"{w.kind} {w.namespace}/{w.name} scaled {before} → {want}")
        for ev in snap.events:
            if ev.type != "Warning" and ev.reason not in NORMAL_REASONS:
                continue  # a rollout's routine steps: the rescale line above says the change itself
            seen = (ev.namespace, ev.kind, ev.name, ev.reason, ev.last_seen_ts, ev.count)
            if seen in self._seen_events:
                continue
            self._seen_events[seen] = None
            if len(self._seen_events) > MAX_SEEN:
                del self._seen_events[next(iter(self._seen_events))]
            at = ev.last_seen_ts if ev.last_seen_ts is not None else now
            self.add(at, f"{ev.type} {ev.reason} {ev.kind}/{ev.name}: {ev.message}")
