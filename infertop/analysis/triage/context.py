"""What the rules that compare with a past or with peers read besides the fleet state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .baseline import Baselines, peer_median
from .signals import Signals
from .types import Finding


@dataclass
class RuleContext:
    """One tick's short-window signals (fresh, up engines), each engine's model, the baselines as they
    stood before this tick, and the findings of the rules that ran before (look-alikes to step aside for)."""

    signals: dict[str, Signals]
    models: dict[str, str]
    baselines: Baselines
    findings: list[Finding] = field(default_factory=list)
    memo: dict = field(default_factory=dict)  # the Triage's, kept across ticks (work done once per snapshot)

    def own(self, name: str, signal: str) -> float | None:
        return self.baselines.own(name, signal)

    def peers(self, name: str, signal: str) -> tuple[float | None, int]:
        return peer_median(self.signals, self.models, name, signal)

    def found(self, subject: str, kinds: tuple[str, ...]) -> bool:
        return any(f.subject == subject and f.kind in kinds for f in self.findings)


ContextRule = Callable[..., list[Finding]]  # (state, active, ctx) -> findings
