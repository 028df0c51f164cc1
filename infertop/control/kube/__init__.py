"""Kubernetes actions: plan (pure) → dry-run → confirm → execute → follow → audit.

Every action starts from a fresh read of the object and a *pure* planning
function (``plan_*``) that returns a :class:`Plan`: the exact request, a
one-line summary ("replicas 3 → 5") and a unified diff of the object
before/after. :meth:`KubeControl.dry_run` sends the same request with
``dryRun=All`` (errors are shown before the operator is asked);
:meth:`KubeControl.execute` sends it for real — a patch of only the fields
it changes, guarded: just before writing, the object is read again; if a
field the plan was made from (an HPA's bounds, the replicas, the pod
template…) changed since, nothing is sent and the outcome is ``conflict``
(re-plan, re-confirm the new diff); otherwise the patch carries *that*
read's resourceVersion, so a change in between still answers 409 — then it
is read and checked again, so a status-only change (an HPA sync, a
readiness flip) never fails the action — then
follows the change to completion (rollout, pods, drain) with progress
callbacks, and appends one line to the audit log.

All calls block: the TUI runs them in thread workers. No UI imports.

The parts: :mod:`.plan` (plans, results, diffs: pure),
:mod:`.perms` (access reviews), :mod:`.follow` (following rollouts
and drains); :mod:`.execute` (executing, and the pipeline's kind); :mod:`.pdb` (PodDisruptionBudgets).
The package exports their public names.
"""

from __future__ import annotations

from .follow import InformerCache, KubeFollower
from .perms import KIND_ALTERNATIVE, PERMISSIONS, Permissions, check_permissions
from .plan import (
    ACTION_TITLES,
    DELETION_COST,
    DRAINED_FROM,
    MERGE,
    RESOURCES,
    STRATEGIC,
    DryRun,
    Outcome,
    SpecChanged,
    Plan,
    PlanError,
    Progress,
    ProgressFn,
    apply_arg_changes,
    guard_changes,
    object_diff,
    plan_args,
    plan_configmap,
    plan_hpa,
    plan_restart,
    plan_scale,
    replica_owners,
    trimmed,
)
from .evictions import (
    drainable_pods,
    plan_cordon,
    plan_delete_pod,
    plan_drain_node,
    plan_drain_pod,
    with_gateway,
)
from .execute import KubeControl, KubeAction

__all__ = [
    "ACTION_TITLES",
    "DELETION_COST",
    "DRAINED_FROM",
    "KIND_ALTERNATIVE",
    "MERGE",
    "PERMISSIONS",
    "RESOURCES",
    "STRATEGIC",
    "DryRun",
    "SpecChanged",
    "InformerCache",
    "KubeAction",
    "KubeControl",
    "KubeFollower",
    "Outcome",
    "Permissions",
    "Plan",
    "PlanError",
    "Progress",
    "ProgressFn",
    "apply_arg_changes",
    "check_permissions",
    "drainable_pods",
    "guard_changes",
    "object_diff",
    "plan_args",
    "plan_configmap",
    "plan_cordon",
    "plan_delete_pod",
    "plan_drain_node",
    "plan_drain_pod",
    "plan_hpa",
    "plan_restart",
    "plan_scale",
    "trimmed",
]
