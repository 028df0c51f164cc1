"""What changed before a verdict's onset: the audited actions, rollouts and Kubernetes events of
the minutes before it, as lines ("max_num_seqs 8 → 16 on engine-2, 40 s before")."""

from __future__ import annotations

import math
from collections.abc import Iterable

CHANGES_WINDOW_S = 300.0  # the minutes before an onset that can explain it
MAX_CHANGES = 8  # the nearest ones; an event storm does not bury the verdict
MAX_LINE_CHARS = 200


def changes_before(onset: float, records: Iterable[tuple[float, str]], window_s: float = CHANGES_WINDOW_S,
                   limit: int = MAX_CHANGES, subject: str | None = None) -> tuple[str, ...]:
    """The records of ``(time, text)`` (wall clock) in the ``window_s`` before ``onset``, oldest first,
    each with how long before the onset it was; at most ``limit``: those that name ``subject`` (its
    last ``/`` part: an engine, a workload's name) first, then the nearest to the onset."""
    picked = []
    for rec in records:
        try:
            t, text = rec
            t = float(t)
        except (TypeError, ValueError):
            continue
        if not math.isfinite(t) or not isinstance(text, str) or not onset - window_s <= t <= onset:
            continue
        picked.append((t, " ".join(text.split())[:MAX_LINE_CHARS]))
    picked = [r for r in picked if r[1]]
    if len(picked) > limit:
        name = (subject or "").rsplit("/", 1)[-1]
        picked.sort(key=lambda r: (bool(name) and name in r[1], r[0]))  # named, then nearest, last
        picked = picked[-limit:]
    picked.sort(key=lambda r: r[0])
    return tuple(f"{text}, {_before(onset - t)}" for t, text in picked)


def _before(seconds: float) -> str:
    if seconds < 1:
        return "at the onset"
    if seconds < 120:
        return f"{seconds:.0f} s before"
    return f"{seconds / 60:.0f} min before"
