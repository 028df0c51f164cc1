"""The queues of the fleet state: per gateway (or endpoint picker), its classes
or priority bands and the engines behind it, with how fresh they are.

:func:`join_queues` turns the queue collectors' latest views into the
:class:`QueueSource` entries of one tick: a source whose poll fails keeps its
last good values, marked stale (since when, why); one never read is missing.
Each engine behind a gateway is matched to a watched vLLM engine (by URL, else
by name) for vLLM's own waiting count. ``None`` is "no data", never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..domain.freshness import FRESH, MISSING, STALE, Freshness
from ..domain.queues import QueueSource
from .fleet_types import EngineState

def queue_sources(queues: Iterable[Any]) -> list[QueueSource]:
    """The gateways and endpoint pickers of a state's ``queues`` slot (it may also hold plain mappings,
    e.g. the Prometheus engine source's fleet queue depth)."""
    return [q for q in queues if isinstance(q, QueueSource)]


def queue_totals(queues: Iterable[Any]) -> tuple[float | None, float | None]:
    """(requests queued, oldest wait in seconds) over the fresh sources; None when none says."""
    fresh = [q for q in queue_sources(queues) if q.fresh]
    depths = [q.queued for q in fresh if q.queued is not None]
    oldest = [q.oldest_wait_s for q in fresh if q.oldest_wait_s is not None]
    return (sum(depths) if depths else None), (max(oldest) if oldest else None)


def _norm(url: str | None) -> str:
    return (url or "").rstrip("/").replace("localhost", "127.0.0.1")


def match_engines(view: QueueSource, engines: Sequence[EngineState]) -> QueueSource:
    """Each engine behind ``view`` with vLLM's own waiting count, when it is a watched engine."""
    if not view.engines or not engines:
        return view
    by_url = {_norm(e.stats.url): e for e in engines}
    by_name = {e.name: e for e in engines}
    out = []
    for qe in view.engines:
        e = by_url.get(_norm(qe.url)) if qe.url else None
        e = e or by_name.get(qe.name)
        if e is None:
            out.append(qe)
            continue
        waiting = e.stats.waiting if e.fresh and e.stats.waiting is not None else qe.vllm_waiting
        out.append(replace(qe, engine=e.name, vllm_waiting=waiting))
    return replace(view, engines=tuple(out))


def join_queues(collectors: Sequence[Any], engines: Sequence[EngineState], now: float, mono: float,
                stale_after_s: float) -> tuple[QueueSource, ...]:
    """One :class:`QueueSource` per collector (its ``view``, ``health`` and ``down_since``)."""
    out = []
    for c in collectors:
        h = c.health
        view: QueueSource | None = c.view
        age = None if h.last_ok_at is None else max(0.0, mono - h.last_ok_at)
        sampled = None if age is None else now - age
        if view is None:
            reason = h.last_error or "not polled yet"
            since = c.down_since_wall(now, mono)
            out.append(QueueSource(c.name, c.kind, c.url, c.via, freshness=Freshness(MISSING, c.url, None, None,
                                                                                       since, reason)))
            continue
        if h.ok and age is not None and age <= stale_after_s:
            fresh = Freshness(FRESH, c.url, sampled, age)
        else:
            reason = (h.last_error if not h.ok else None) or f"no new sample for {age or 0:.0f} s"
            fresh = Freshness(STALE, c.url, sampled, age, c.down_since_wall(now, mono) or sampled, reason)
        out.append(match_engines(replace(view, freshness=fresh), engines))
    return tuple(out)
