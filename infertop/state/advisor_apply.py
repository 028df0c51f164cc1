"""``auto`` mode's apply: the advisor's change through the Kubernetes scale action, audited.

The same :class:`~infertop.control.kube.KubeAction` the ``S`` key runs —
fresh read, pure plan, server dry run, audit intent, patch of the scale
subresource, follow, audit outcome — without the confirmation (auto mode is
the operator's standing confirmation, within the advisor's bounds). The
audit line's summary carries the advisor's reason. A replica count that
changed since the decision refuses the apply (the next tick decides again).
Blocking: the TUI runs it in a thread worker.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

from ..control.audit import AuditUnavailable
from ..control.kube import KubeAction, KubeControl, Outcome, PlanError, Progress
from ..sources.kube import KubeError
from .advisor import Apply


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
                raise PlanError(f"{cur.target} has {cur.params.get('from')} replicas now, not "
                                f"{self.apply.current} as decided: not applied")
            self.current = dataclasses.replace(cur, summary=f"{cur.summary} ({self.by}: {self.apply.reason})")
        return review


def audit_not_applied(control: KubeControl, apply: Apply, why: str, *, by: str = "advisor auto") -> None:
    """One audit line for an advisor change that was decided and never sent (another action held the
    workload, the plan was refused): the log and the audit agree that nothing changed."""
    if control.audit is None:
        return
    target = f"{apply.kind.lower()} {apply.namespace}/{apply.name}"
    try:
        control.audit.record("kube.scale", target, "refused", old=apply.current, new=apply.desired,
                             reason=f"not applied: {why}", summary=f"replicas {apply.current} → {apply.desired} "
                             f"({by}: {apply.reason})", context=control.session.context)
    except AuditUnavailable:
        pass  # nothing was sent: there is no intent to reconcile


def apply_scale(control: KubeControl, apply: Apply, *, abort: threading.Event | None = None,
                progress: Callable[[Progress], None] | None = None) -> Outcome:
    """Plan, dry-run and execute (audited) one advisor change; one-line outcome, never an exception."""
    return run_unconfirmed(AdvisorScale(control, apply), abort=abort, progress=progress)


def run_unconfirmed(action: AdvisorScale, *, abort: threading.Event | None = None,
                    progress: Callable[[Progress], None] | None = None) -> Outcome:
    """The pipeline's steps without the confirmation: plan → dry run → audited execute."""
    try:
        action.plan()
    except (PlanError, KubeError) as e:
        audit_not_applied(action.control, action.apply, str(e), by=action.by)
        return Outcome("refused", str(e), getattr(e, "status", 0))
    dry = action.preflight()
    if not dry.ok:
        return Outcome("failed", f"dry run failed — nothing was changed: {dry.message}", dry.status)
    return action.execute(progress or (lambda p: None), abort or threading.Event())
