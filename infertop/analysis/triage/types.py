"""The verdict types (plain, frozen, JSON-able through state.codec)."""

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
class Finding:
    """What a rule sees at one tick: the condition holds for ``subject``."""

    kind: str  # "kv-bound", "queue-bound", "engine-down", …
    subject: str  # an engine, a GPU label, a source
    severity: str
    explanation: str  # one sentence
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[str, ...] = ()  # "m: lower max_num_seqs 16 → 12", "S: scale inference/vllm 5 → 7"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A finding that has held long enough: active since ``since`` (wall clock)."""

    kind: str
    subject: str
    severity: str
    since: float
    explanation: str
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.subject
