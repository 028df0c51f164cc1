"""Priority inversion at a gateway: a class waits over its queue budget while a class of lower
priority — itself within budget — holds most of the dispatches. Not a capacity problem (then every
class is over budget, and the engines' queue-bound verdict speaks): the weights serve the wrong one."""

from __future__ import annotations

import math

from ...format import seconds_human
from .types import WARNING, Evidence, Finding, Remedy

HOLDS_MOST_PCT, HOLDS_CLEARS_BELOW_PCT = 50.0, 40.0  # the lower class's share of dispatches
OVER_BUDGET_X, CLEARS_BELOW_X = 1.0, 0.8  # the higher class's wait p99 over its budget


def priority_inversion(state, active, ctx=None) -> list[Finding]:
    out = []
    for q in _queue_sources(state.queues):
        if not q.fresh:
            continue
        for c in q.classes:
            subject = f"{q.name}/{c.name}"
            holding = active("priority-inversion", subject)
            if c.priority is None or c.budget_s is None or c.wait_p99_s is None:
                continue
            if c.wait_p99_s <= (CLEARS_BELOW_X if holding else OVER_BUDGET_X) * c.budget_s:
                continue
            if not holding and c.depth is not None and c.depth <= 0:
                continue  # nothing of it waits now: the window's p99 is the past
            lower = [x for x in q.classes if x.priority is not None and x.priority < c.priority
                     and x.share_pct is not None and x.share_pct >= (HOLDS_CLEARS_BELOW_PCT if holding else HOLDS_MOST_PCT)
                     and not x.over_budget]
            if not lower:
                continue
            hog = max(lower, key=lambda x: x.share_pct or 0.0)
            ev = [Evidence(f"{c.name} wait p99", seconds_human(c.wait_p99_s), f"budget {seconds_human(c.budget_s)}",
                           "window"),
                  Evidence(f"{hog.name} share of dispatches", f"{hog.share_pct:.0f} %",
                           f"< {HOLDS_MOST_PCT:.0f} % for a lower priority ({hog.priority:g} < {c.priority:g})",
                           "window")]
            if c.weight is not None and hog.weight is not None:
                ev.append(Evidence("weights", f"{c.name} {c.weight:g}, {hog.name} {hog.weight:g}", "—"))
            out.append(Finding(
                "priority-inversion", subject, WARNING,
                f"priority inversion at {q.name}: {c.name} waits {seconds_human(c.wait_p99_s)} (p99, budget "
                f"{seconds_human(c.budget_s)}) while {hog.name}, of lower priority, holds {hog.share_pct:.0f} % "
                "of the dispatches.", tuple(ev), _remedies(q, c, hog, subject)))
    return out


def _remedies(q, c, hog, subject: str) -> tuple[Remedy, ...]:
    if q.kind != "gateway":  # an endpoint picker serves bands by strict priority: no weight to change
        return (Remedy(f"check the InferenceObjective priorities of {c.name} and {hog.name}"),)
    if c.weight is None:
        return (Remedy(f"raise the weight of {c.name} on {q.name}", "w", subject),)
    # served twice as often as the class holding the dispatches (or twice its own weight, if that is more)
    over_hog = hog.weight is not None and hog.weight > c.weight
    new = max(1, math.ceil(2 * (hog.weight if over_hog else c.weight)))
    return (Remedy(f"raise the weight of {c.name} {c.weight:g} → {new} on {q.name} (twice "
                   f"{'that of ' + hog.name if over_hog else 'its own'})", "w", subject, new),)


def _queue_sources(queues) -> list:
    """The gateways and endpoint pickers of a state's ``queues`` slot (state.queues.QueueSource, read
    by shape: analysis sits below state and imports nothing of it; the slot also holds plain mappings)."""
    return [q for q in queues if hasattr(q, "classes") and hasattr(q, "fresh")]
