"""The verdict types (plain, frozen, JSON-able through domain.codec)."""

from __future__ import annotations

from dataclasses import dataclass

CRITICAL, WARNING = "critical", "warning"


@dataclass(frozen=True, slots=True)
class Evidence:
    """One signal behind a verdict: its value, what it was compared with, over which window."""

    signal: str  # "KV cache", "running / max_num_seqs"
    value: str  # "97 %"
    against: str  # "> 95 % (clears < 85 %)", "baseline 62 %"
    window: str = "now"  # "now", "last 10 min"


@dataclass(frozen=True, slots=True)
class Remedy:
    """One way out, as a pre-filled action where there is one: ``key`` is the action's key in the
    action table ("m", "S", "r"; "" for advice only), ``target`` what it acts on (an engine, a
    "namespace/Deployment", a node), ``value`` the proposed new value (max_num_seqs, replicas)."""

    text: str  # "lower max_num_seqs 16 → 12 (fewer sequences share the cache)"
    key: str = ""
    target: str = ""
    value: int | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.text}" if self.key else self.text


@dataclass(frozen=True, slots=True)
class Finding:
    """What a rule sees at one tick: the condition holds for ``subject``."""

    kind: str  # "kv-bound", "queue-bound", "engine-down", …
    subject: str  # an engine, a GPU label, a source
    severity: str
    explanation: str  # one sentence
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[Remedy, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """A finding that has held long enough: active since ``since`` (wall clock)."""

    kind: str
    subject: str
    severity: str
    since: float
    explanation: str
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[Remedy, ...] = ()
    # what changed in the minutes before ``since`` (audited actions, rollouts, Kubernetes events):
    # "max_num_seqs 8 → 16 on engine-2, 40 s before" (:func:`.changes.changes_before`)
    changes: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.subject
