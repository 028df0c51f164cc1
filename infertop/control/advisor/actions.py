"""The scaling advisor's own settings as actions: its mode (auto is a standing grant to scale without a
confirmation each time), its kill switch and its targets change what infertop may do by itself, so
each is reviewed and audited through the one pipeline like a scale or a restart."""

from __future__ import annotations

import threading
from typing import Any

from ..pipeline import Outcome, Preflight, ProgressFn, Review

AUTO = "auto"


class _AdvisorSetting:
    """Common shape: one object (the advisor), in memory, nothing to abort."""

    abortable = False
    timeout_s: float | None = 5.0
    object_key = "advisor"
    target = "advisor"

    def __init__(self, advisor: Any) -> None:
        self.advisor = advisor

    def preflight(self) -> Preflight:
        return Preflight(True, "this console's advisor: it takes effect from the next tick")


class AdvisorModeChange(_AdvisorSetting):
    action = "advisor.mode"

    def __init__(self, advisor: Any, mode: str) -> None:
        super().__init__(advisor)
        self.old, self.new = advisor.mode, mode

    def plan(self) -> Review:
        notes = []
        if self.new == AUTO:
            notes = ["! auto: each decision is applied without a confirmation (a scale through the Kubernetes API, "
                     "dry-run first, audited); X stops it at once",
                     "the decision's bounds are the HPA's/ScaledObject's, else the advisor's targets (T)"]
        elif self.old == AUTO:
            notes = ["nothing is applied by itself any more: decisions are recommended (p applies one)"]
        return Review(f"Advisor mode {self.old} → {self.new}", f"mode {self.old} → {self.new}", "", tuple(notes))

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        why = self.advisor.set_mode(self.new)
        if why:
            return Outcome("refused", why)
        return Outcome("ok", f"advisor mode {self.new}")

    def audit_details(self) -> dict[str, Any]:
        return {"old": {"mode": self.old}, "new": {"mode": self.new}, "summary": f"mode {self.old} → {self.new}"}


class AdvisorKillSwitch(_AdvisorSetting):
    """On: auto decisions are only recommended. Turning it on is never held up by a review (it is the
    brake); turning it off — auto applies again — is reviewed."""

    action = "advisor.kill_switch"

    def __init__(self, advisor: Any, on: bool) -> None:
        super().__init__(advisor)
        self.on = on

    def plan(self) -> Review:
        if self.on:
            return Review("Advisor kill switch ON", "kill switch on", "", ("auto decisions are only recommended",))
        auto = self.advisor.mode == AUTO
        notes = ("! auto mode: its decisions are applied again from the next tick",) if auto else ()
        return Review("Advisor kill switch off", "kill switch off", "", notes)

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        self.advisor.paused = self.on
        return Outcome("ok", "kill switch ON: nothing is applied automatically" if self.on
                       else "kill switch off" + (": auto applies again" if self.advisor.mode == AUTO else ""))

    def audit_details(self) -> dict[str, Any]:
        return {"old": {"paused": not self.on}, "new": {"paused": self.on},
                "summary": f"kill switch {'on' if self.on else 'off'}"}


class AdvisorTargetsChange(_AdvisorSetting):
    action = "advisor.targets"

    def __init__(self, advisor: Any, changes: list[str], *, queue_depth: float, p99_s: float | None,
                 min_replicas: int, max_replicas: int) -> None:
        super().__init__(advisor)
        self.changes = changes
        self.values = dict(queue_depth=queue_depth, p99_s=p99_s, min_replicas=min_replicas, max_replicas=max_replicas)
        p = advisor.policy.policy
        self.old = dict(queue_depth=p.target_queue_depth, p99_s=p.target_p99_s, min_replicas=p.min_replicas,
                        max_replicas=p.max_replicas)

    def plan(self) -> Review:
        return Review("Advisor targets", "; ".join(self.changes), "",
                      ("applies from the next tick, this session (the config's advisor: section keeps it)",))

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        self.advisor.set_targets(**self.values)
        return Outcome("ok", "; ".join(self.changes))

    def audit_details(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.values, "summary": "; ".join(self.changes)}
