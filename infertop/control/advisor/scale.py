"""``auto`` mode's apply: the advisor's change as the Kubernetes scale action, through the one pipeline.

The same :class:`~infertop.control.kube.KubeAction` the ``S`` key runs —
fresh read, pure plan, server dry run, audit intent, patch of the scale
subresource, follow, audit outcome — under auto mode's standing grant
(:class:`~infertop.control.runner.StandingGrant`: the operator's audited
switch to auto, within the advisor's bounds) instead of a confirmation each
time. The audit line's summary carries the advisor's reason. A replica count
that changed since the decision refuses the apply (the next tick decides again).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from ...state.advisor.core import Apply
from .. import runner
from ..kube import KubeAction, KubeControl, Outcome, PlanError, Progress
from ..pipeline import ActionBoard


class AdvisorScale(KubeAction):
    """The scale action of one advisor change: refuses a count that moved since the decision and
    carries the advisor's reason into the audit summary."""

    def __init__(self, control: KubeControl, apply: Apply, *, by: str = "advisor auto") -> None:
        super().__init__(control, "scale", apply.kind, apply.namespace, apply.name, replicas=apply.desired)
        self.apply = apply
        self.by = by  # "advisor auto", or "advisor, confirmed" (the operator applied a recommendation)

    def plan(self):
        review = super().plan()
        cur = self.current
        if cur is not None:
            if cur.params.get("from") != self.apply.current:
                self.current = None  # not this decision's plan: its audit line names the decision
                raise PlanError(f"{cur.target} has {cur.params.get('from')} replicas now, not "
                                f"{self.apply.current} as decided: not applied")
            self.current = dataclasses.replace(cur, summary=f"{cur.summary} ({self.by}: {self.apply.reason})")
        return review

    def audit_details(self) -> dict[str, Any]:
        if self.current is not None:
            return super().audit_details()
        # decided and never planned (another action holds the workload, the read failed): the decision
        a = self.apply
        return {"old": a.current, "new": a.desired, "context": self.control.session.context,
                "summary": f"replicas {a.current} → {a.desired} ({self.by}: {a.reason})"}


class GrantProgress(runner.StandingGrant):
    """The standing grant, with the follow's progress handed to a callback (headless callers)."""

    def __init__(self, progress: Callable[[Progress], None] | None) -> None:
        self.progress = progress

    def progressed(self, run: Any) -> None:
        if self.progress is not None and run.progress is not None:
            self.progress(run.progress)


def apply_scale(control: KubeControl, apply: Apply, *, abort: threading.Event | None = None,
                progress: Callable[[Progress], None] | None = None) -> Outcome:
    """Blocking (a thread, or headless): one advisor change through the pipeline under the standing
    grant — plan, dry run, audited execute; a one-line outcome, never an exception."""
    kind = AdvisorScale(control, apply)
    run = ActionBoard().begin(kind, kind.target)
    if abort is not None:
        run.abort = abort
    return asyncio.run(runner.run(run, GrantProgress(progress), audit=control.audit, preflight_name="dry run"))
