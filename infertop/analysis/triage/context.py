"""What the rules that compare with a past or with peers read besides the fleet state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .baseline import Baselines, peer_medians
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
    now: float = 0.0
    cleared_at: dict = field(default_factory=dict)  # (kind, subject) → when its verdict last cleared (the Triage's)
    _peers: dict = field(default_factory=dict, repr=False)  # signal → this tick's peer medians
    _found: tuple = field(default=(-1, {}), repr=False)  # (findings indexed, subject → kinds)

    def own(self, name: str, signal: str) -> float | None:
        return self.baselines.own(name, signal)

    def peers(self, name: str, signal: str) -> tuple[float | None, int]:
        """(the median of ``signal`` over the others serving ``name``'s model, how many); computed once a tick."""
        return self.peer_table(signal).get(name, (None, 0))

    def peer_table(self, signal: str) -> dict[str, tuple[float | None, int]]:
        """Every engine's (peer median, peers) of ``signal`` this tick."""
        medians = self._peers.get(signal)
        if medians is None:
            medians = self._peers[signal] = peer_medians(self.signals, self.models, signal)
        return medians

    def cleared_within(self, subject: str, kinds: tuple[str, ...], seconds: float) -> bool:
        """Whether a verdict of one of ``kinds`` on ``subject`` cleared in the last ``seconds``."""
        return any(self.now - self.cleared_at.get((k, subject), float("-inf")) <= seconds for k in kinds)

    def found(self, subject: str, kinds: tuple[str, ...]) -> bool:
        """Whether a rule before found one of ``kinds`` on ``subject`` (indexed: findings only grow)."""
        n, index = self._found
        if n != len(self.findings):
            index = {}
            for f in self.findings:
                index.setdefault(f.subject, set()).add(f.kind)
            self._found = (len(self.findings), index)
        return not index.get(subject, set()).isdisjoint(kinds)


ContextRule = Callable[..., list[Finding]]  # (state, active, ctx) -> findings
