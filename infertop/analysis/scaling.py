"""The scaling advisor's policy: pure, no I/O and no clock of its own (time is an argument).

Per workload (a Deployment or StatefulSet)::

    ratio   = max(queue_depth / target_queue_depth, p99 / target_p99)
    formula = ceil(max(current, 1) × ratio)
    wanted  = clamp(formula, min, max)       (current when |ratio − 1| ≤ tolerance)

then, like the HPA controller, every ``wanted`` is remembered and the one
acted on is stabilised: a scale-up goes to the *lowest* value wanted during
the last ``scale_up_window_s`` (a burst must last before replicas are
added), a scale-down to the *highest* value wanted during the last
``scale_down_window_s`` (one quiet minute never removes replicas). The
first time a workload is seen its current count counts as wanted, so
neither happens before a window has passed since infertop started. After
each change of the replica count (applied here, or made by anyone else) no
change is recommended for ``cooldown_s``.

The guard: an input that is stale (older than ``max_input_age_s`` or its
source not answering) refuses the decision; a missing input (no value, e.g.
no request finished in the window) allows a scale-up on the other input
but never a scale-down — as the HPA treats a missing metric.

Each evaluation is a :class:`DecisionRecord`: its inputs with values,
targets and freshness, the formula's and the clamped result, the rule that
bound it, the action and a one-line reason such as
``2 → 4: queue depth 12.3 > 5, P99 2450 ms > 2000 ms``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

OFF, RECOMMEND, AUTO = "off", "recommend", "auto"
MODES = (OFF, RECOMMEND, AUTO)

# the rule that bound a decision ("" when the formula alone decided)
COOLDOWN, MAX, MIN, TOLERANCE, STALE, STABILISATION = (
    "cooldown", "max", "min", "tolerance", "stale data", "stabilisation")
# the action taken
NONE, RECOMMENDED, APPLIED, REFUSED = "none", "recommended", "applied", "refused"
# what the decision log says of an auto decision until its apply's outcome is known, and after
APPLYING, SENT, NOT_APPLIED = "applying", "sent", "not applied"

FRESH, STALE_STATUS, MISSING = "fresh", "stale", "missing"


# what the targets dialog accepts: a value outside is a typo (a TTFT target of 1 ms), not a policy
QUEUE_TARGET_RANGE = (0.1, 10_000.0)  # requests waiting
P99_TARGET_RANGE_MS = (10.0, 3_600_000.0)  # 10 ms .. 1 h
MAX_REPLICAS_LIMIT = 1000


def check_targets(queue_depth: float | None, p99_ms: float | None, min_replicas: object, max_replicas: object
                  ) -> str | None:
    """Why these targets and bounds cannot be applied (one line naming the limit), or None."""
    lo_q, hi_q = QUEUE_TARGET_RANGE
    if queue_depth is None or not lo_q <= queue_depth <= hi_q:
        return f"queue depth target must be a number from {lo_q:g} to {hi_q:g}"
    lo_p, hi_p = P99_TARGET_RANGE_MS
    if p99_ms is None or not lo_p <= p99_ms <= hi_p:
        return f"p99 target must be from {lo_p:g} to {hi_p:g} ms"
    if not isinstance(min_replicas, int) or not isinstance(max_replicas, int) or min_replicas < 0 \
            or not 1 <= max_replicas <= MAX_REPLICAS_LIMIT:
        return f"min must be a whole number ≥ 0 and max from 1 to {MAX_REPLICAS_LIMIT}"
    if min_replicas > max_replicas:
        return "min must not exceed max"
    return None


@dataclass(frozen=True, slots=True)
class Policy:
    """Targets, bounds and windows (config ``advisor:``)."""

    target_queue_depth: float = 5.0
    target_p99_s: float = 2.0
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = 0.10
    cooldown_s: float = 60.0
    scale_up_window_s: float = 30.0
    scale_down_window_s: float = 300.0
    max_input_age_s: float = 15.0


@dataclass(frozen=True, slots=True)
class Signal:
    """One input: its value now, its target, and how fresh it is."""

    name: str  # "queue depth", "P99"
    value: float | None
    target: float
    unit: str = ""  # "s" for latencies (shown in ms)
    status: str = FRESH  # fresh, stale, missing
    age_s: float | None = None
    why: str | None = None  # why stale or missing

    def text(self) -> str:
        """``queue depth 12.3 > 5`` / ``P99 2450 ms > 2000 ms`` / ``P99 n/a``."""
        if self.value is None:
            return f"{self.name} n/a"
        op = ">" if self.value > self.target else ("<" if self.value < self.target else "=")
        if self.unit == "s":
            return f"{self.name} {self.value * 1000:.0f} ms {op} {self.target * 1000:.0f} ms"
        return f"{self.name} {self.value:.1f} {op} {self.target:g}"

    def to_doc(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "target": self.target, "unit": self.unit,
                "status": self.status, "age_s": self.age_s, "why": self.why}

    @classmethod
    def from_doc(cls, d: dict[str, Any]) -> "Signal":
        return cls(str(d.get("name", "")), d.get("value"), float(d.get("target") or 0.0), str(d.get("unit", "")),
                   str(d.get("status", FRESH)), d.get("age_s"), d.get("why"))


@dataclass(frozen=True, slots=True)
class Inputs:
    """What one evaluation of one workload sees."""

    workload: str  # "Deployment/ns/name"
    current: int | None  # spec.replicas (what the scale action changes)
    queue_depth: Signal
    p99: Signal
    min_replicas: int | None = None  # bounds of this workload (an HPA's); None: the policy's
    max_replicas: int | None = None
    current_why: str | None = None  # why the replica count cannot be trusted now (cluster reads failing)

    @property
    def signals(self) -> tuple[Signal, ...]:
        return (self.queue_depth, self.p99)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One evaluation: inputs, the raw and clamped result, the rule that bound it, the action."""

    at: float  # the evaluation's time (the clock the caller gave)
    workload: str
    current: int | None
    inputs: tuple[Signal, ...]
    ratio: float | None  # max of value / target over the inputs used
    formula: int | None  # ceil(max(current, 1) × ratio), before bounds
    wanted: int | None  # within bounds (current inside the tolerance band)
    desired: int | None  # what should be set now (current while a rule holds it)
    min_replicas: int
    max_replicas: int
    rule: str  # "" or one of COOLDOWN, MAX, MIN, TOLERANCE, STALE, STABILISATION
    action: str  # NONE, RECOMMENDED, APPLIED, REFUSED
    reason: str  # one line
    hold_left_s: float | None = None  # cooldown or stabilisation remaining

    @property
    def change(self) -> bool:
        return self.action in (RECOMMENDED, APPLIED)

    def to_doc(self) -> dict[str, Any]:
        """Plain JSON-able data (lists, no tuples): the fleet state's ``autoscalers`` slot."""
        return {"at": self.at, "workload": self.workload, "current": self.current,
                "inputs": [s.to_doc() for s in self.inputs], "ratio": self.ratio, "formula": self.formula,
                "wanted": self.wanted, "desired": self.desired, "min_replicas": self.min_replicas,
                "max_replicas": self.max_replicas, "rule": self.rule, "action": self.action,
                "reason": self.reason, "hold_left_s": self.hold_left_s}

    @classmethod
    def from_doc(cls, d: dict[str, Any]) -> "DecisionRecord":
        return cls(float(d.get("at") or 0.0), str(d.get("workload", "")), d.get("current"),
                   tuple(Signal.from_doc(s) for s in d.get("inputs") or ()), d.get("ratio"), d.get("formula"),
                   d.get("wanted"), d.get("desired"), int(d.get("min_replicas") or 0),
                   int(d.get("max_replicas") or 0), str(d.get("rule", "")), str(d.get("action", NONE)),
                   str(d.get("reason", "")), d.get("hold_left_s"))


@dataclass
class _Memory:
    """What the policy remembers of one workload between evaluations."""

    wanted: deque = field(default_factory=deque)  # (time, wanted) within the longest window
    last_change_at: float | None = None
    last_current: int | None = None
    change_before: float | None = None  # last_change_at before an auto decision (restored if it was not applied)


class ScalingPolicy:
    """The policy with its memory (recommendations for the windows, the last change for the cooldown)."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self._mem: dict[str, _Memory] = {}

    def forget(self, workload: str) -> None:
        self._mem.pop(workload, None)

    def note_change(self, workload: str, now: float) -> None:
        """The replica count of ``workload`` was changed at ``now``: the cooldown starts."""
        self._mem.setdefault(workload, _Memory()).last_change_at = now

    def undo_change(self, workload: str) -> None:
        """The auto decision's apply changed nothing: no cooldown from it (the next tick decides again)."""
        mem = self._mem.get(workload)
        if mem is not None:
            mem.last_change_at = mem.change_before

    def cooldown_left_s(self, workload: str, now: float) -> float | None:
        mem = self._mem.get(workload)
        if mem is None or mem.last_change_at is None:
            return None
        left = self.policy.cooldown_s - (now - mem.last_change_at)
        return left if left > 0 else None

    def evaluate(self, inputs: Inputs, now: float, *, mode: str = RECOMMEND, paused: bool = False) -> DecisionRecord:
        """Decide for one workload at ``now``. ``mode`` auto (and not ``paused``) marks a change
        ``applied`` (the caller applies it) and starts the cooldown; recommend marks it ``recommended``."""
        p = self.policy
        mem = self._mem.setdefault(inputs.workload, _Memory())
        lo = inputs.min_replicas if inputs.min_replicas is not None else p.min_replicas
        hi = inputs.max_replicas if inputs.max_replicas is not None else p.max_replicas
        hi = max(hi, lo)
        cur = inputs.current

        def record(**kw: Any) -> DecisionRecord:
            base: dict[str, Any] = dict(at=now, workload=inputs.workload, current=cur, inputs=inputs.signals,
                                        ratio=None, formula=None, wanted=None, desired=cur, min_replicas=lo,
                                        max_replicas=hi, rule="", action=NONE, reason="")
            base.update(kw)
            return DecisionRecord(**base)

        if cur is None or inputs.current_why:
            why = inputs.current_why or "unknown"
            return record(rule=STALE, action=REFUSED, reason=f"refused: current replicas {why}")
        if mem.last_current is None and not mem.wanted:
            # first sight: the count as it is counts as wanted now (as the HPA does), so a window must
            # pass after infertop starts before it acts on a burst or a lull
            mem.wanted.append((now, cur))
        if mem.last_current is not None and cur != mem.last_current:
            # changed by someone (HPA, operator, our own apply): the cooldown counts from now
            if mem.last_change_at is None or mem.last_change_at < now:
                mem.last_change_at = now
        mem.last_current = cur

        stale = [s for s in inputs.signals if s.status == STALE_STATUS
                 or (s.value is not None and s.age_s is not None and s.age_s > p.max_input_age_s)]
        if stale:
            why = ", ".join(f"{s.name} stale ({_stale_why(s, p)})" for s in stale)
            return record(rule=STALE, action=REFUSED, reason=f"refused: {why}")
        present = [s for s in inputs.signals if s.value is not None]
        missing = [s for s in inputs.signals if s.value is None]
        if not present:
            why = ", ".join(f"{s.name} missing ({s.why or 'no data'})" for s in missing)
            return record(rule=STALE, action=REFUSED, reason=f"refused: {why}")
        ratio = max(s.value / s.target for s in present if s.value is not None)  # (all of them: narrows)
        if missing and ratio <= 1 + p.tolerance + 1e-9:
            why = ", ".join(f"{s.name} missing ({s.why or 'no data'})" for s in missing)
            return record(ratio=ratio, rule=STALE, action=REFUSED,
                          reason=f"refused: {why}: no scale-down on partial inputs")
        signals_text = ", ".join(s.text() for s in inputs.signals)
        formula = math.ceil(max(cur, 1) * ratio - 1e-9)
        rule = ""
        wanted = formula
        if abs(ratio - 1) <= p.tolerance + 1e-9:  # 5.5 / 5 is 1.1000000000000001
            wanted, rule = cur, TOLERANCE
        if wanted > hi:
            wanted, rule = hi, MAX
        elif wanted < lo:
            wanted, rule = lo, MIN

        # stabilisation (HPA): up to the least wanted over the up window, down to the most over the down window
        mem.wanted.append((now, wanted))
        horizon = max(p.scale_up_window_s, p.scale_down_window_s)
        while mem.wanted and now - mem.wanted[0][0] >= horizon:
            mem.wanted.popleft()
        # a window holds what was wanted less than its length ago, and always the value wanted now
        up = [w for t, w in mem.wanted if now - t < p.scale_up_window_s] or [wanted]
        down = [w for t, w in mem.wanted if now - t < p.scale_down_window_s] or [wanted]
        desired = cur
        if desired < min(up):
            desired = min(up)
        if desired > max(down):
            desired = max(down)
        hold: float | None = None
        if desired != wanted:
            if wanted > cur:
                since = max(t for t, w in mem.wanted if now - t < p.scale_up_window_s and w < wanted)
                hold = since + p.scale_up_window_s - now
                window = f"scale-up window {p.scale_up_window_s:g} s"
            else:
                since = max(t for t, w in mem.wanted if now - t < p.scale_down_window_s and w > wanted)
                hold = since + p.scale_down_window_s - now
                window = f"scale-down window {p.scale_down_window_s:g} s"
            rule = STABILISATION
            head = f"{cur} → {desired}: wants {wanted}, held by the {window} ({_secs(hold)} left)"
            return self._finish(record, mem, now, mode, paused, ratio=ratio, formula=formula, wanted=wanted,
                                desired=desired, rule=rule, head=head, signals=signals_text, hold=hold)

        if desired == cur:
            if rule == TOLERANCE:
                head = f"{cur} → {cur}: within ±{p.tolerance * 100:g} % (×{ratio:.2f})"
            elif rule == MAX:
                head = f"{cur} → {cur}: at max {hi} (formula {formula})"
            elif rule == MIN:
                head = f"{cur} → {cur}: at min {lo} (formula {formula})"
            else:
                head = f"{cur} → {cur}"
            return record(ratio=ratio, formula=formula, wanted=wanted, rule=rule, reason=f"{head}: {signals_text}")
        head = f"{cur} → {desired}"
        if rule == MAX:
            head += f" (max {hi}; formula {formula})"
        elif rule == MIN:
            head += f" (min {lo}; formula {formula})"
        return self._finish(record, mem, now, mode, paused, ratio=ratio, formula=formula, wanted=wanted,
                            desired=desired, rule=rule, head=head, signals=signals_text, hold=None)

    def _finish(self, record, mem: _Memory, now: float, mode: str, paused: bool, *, ratio: float, formula: int,
                wanted: int, desired: int, rule: str, head: str, signals: str, hold: float | None) -> DecisionRecord:
        """A change the windows allow: held by the cooldown, else recommended or applied."""
        cur = record().current
        if desired == cur:
            return record(ratio=ratio, formula=formula, wanted=wanted, rule=rule, reason=f"{head}: {signals}",
                          hold_left_s=hold)
        if mem.last_change_at is not None and now - mem.last_change_at < self.policy.cooldown_s:
            left = self.policy.cooldown_s - (now - mem.last_change_at)
            return record(ratio=ratio, formula=formula, wanted=wanted, rule=COOLDOWN, hold_left_s=left,
                          reason=f"{cur} → {cur}: cooldown {_secs(left)} left (wants {desired}): {signals}")
        if mode == AUTO and not paused:
            mem.change_before, mem.last_change_at = mem.last_change_at, now
            return record(ratio=ratio, formula=formula, wanted=wanted, desired=desired, rule=rule, action=APPLIED,
                          reason=f"{head}: {signals}", hold_left_s=hold)
        note = " (auto paused: kill switch)" if mode == AUTO else ""
        return record(ratio=ratio, formula=formula, wanted=wanted, desired=desired, rule=rule, action=RECOMMENDED,
                      reason=f"{head}: {signals}{note}", hold_left_s=hold)


def _secs(s: float) -> str:
    return f"{max(0.0, s):.0f} s"


def _stale_why(s: Signal, p: Policy) -> str:
    if s.status == STALE_STATUS and s.why:
        return s.why
    if s.age_s is not None:
        return f"{s.age_s:.0f} s old > {p.max_input_age_s:g} s"
    return s.why or "stale"
