"""Per-engine signals over the last seconds, from consecutive ticks' cumulative counters.

The engines' rates are over the 60 s display window, which under-reports a change for its first
minute (a hit rate that fell from 62 % to 3 % reads 33 % half a minute later). Where an engine
carries its cumulative counters (``EngineStats.*_total``), the triage takes the hit rate and the
prompt size per request over :data:`SHORT_WINDOW_S` from them; otherwise it falls back to the
window's values. Latency quantiles are the window's (their buckets are not kept per tick): a
rule reads p99 beside p50, which moves within seconds of a step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

SHORT_WINDOW_S = 10.0
MIN_SPAN_S = 2.0  # a rate over less than this is one scrape's noise
MIN_REQUESTS = 2.0  # prompt tokens per request needs this many finished requests in the span
WINDOW_LABEL = "60 s window"
NEAR_FULL_KV_PCT, NEAR_FULL_SLOTS = 80.0, 0.85  # under the KV and capacity rules' clear levels (85 %, 90 %)


@dataclass(frozen=True, slots=True)
class Signals:
    """What the prompt/prefix/latency rules and the baselines read of one engine at one tick."""

    prefix_hit_pct: float | None = None
    prompt_tokens_per_req: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    # rates over the short span (None: no counters, or under MIN_SPAN_S of them): what the rules read in
    # place of the window's requests_per_s / preemptions_per_s
    requests_per_s: float | None = None
    preemptions_per_s: float | None = None
    span_s: float | None = None
    hit_window: str = WINDOW_LABEL  # over which span the hit rate was taken
    prompt_window: str = WINDOW_LABEL  # … and the prompt size per request


# t, prompt, requests, hits, queries, preemptions
_Point = tuple[float, float | None, float | None, float | None, float | None, float | None]


class ShortWindow:
    """Remembers each engine's counters for :data:`SHORT_WINDOW_S` and answers its :class:`Signals`."""

    def __init__(self, window_s: float = SHORT_WINDOW_S) -> None:
        self.window_s = window_s
        self._points: dict[str, deque[_Point]] = {}

    def update(self, engines, now: float) -> dict[str, Signals]:
        """``engines``: the fresh, up :class:`EngineState` of this tick; an engine not among them is forgotten."""
        out = {}
        for e in engines:
            s = e.stats
            p: _Point = (now, s.prompt_tokens_total, s.requests_total, s.prefix_hits_total, s.prefix_queries_total,
                         s.preemptions_total)
            pts = self._points.get(s.name)
            if pts is None:
                pts = self._points[s.name] = deque()
            elif pts and _fell(pts[-1], p):
                pts.clear()  # a counter went down: the engine restarted, the span starts again
            pts.append(p)
            while len(pts) > 2 and now - pts[1][0] >= self.window_s:
                pts.popleft()
            out[s.name] = self._signals(s, pts)
        for gone in [n for n in self._points if n not in out]:
            del self._points[gone]
        return out

    def _signals(self, s, pts: deque[_Point]) -> Signals:
        hit, per_req = s.prefix_cache_hit_pct, None
        if s.prompt_tokens_per_s is not None and s.requests_per_s:
            per_req = s.prompt_tokens_per_s / s.requests_per_s
        hit_window = prompt_window = WINDOW_LABEL
        first, last = pts[0], pts[-1]
        span = last[0] - first[0]
        req_s = preempt_s = None
        if span >= MIN_SPAN_S:
            d_prompt, d_req, d_hits, d_queries, d_preempt = (
                _diff(first[1], last[1]), _diff(first[2], last[2]), _diff(first[3], last[3]),
                _diff(first[4], last[4]), _diff(first[5], last[5]))
            req_s = None if d_req is None else d_req / span
            preempt_s = None if d_preempt is None else d_preempt / span
            if d_queries and d_hits is not None:
                hit, hit_window = 100.0 * d_hits / d_queries, f"last {span:.0f} s"
            if d_prompt is not None and d_req is not None and d_req >= MIN_REQUESTS:
                per_req, prompt_window = d_prompt / d_req, f"last {span:.0f} s"
        return Signals(hit, per_req, s.ttft_p50_s, s.ttft_p99_s, s.itl_p50_s, s.itl_p95_s, req_s, preempt_s,
                       span if span >= MIN_SPAN_S else None, hit_window, prompt_window)


def with_short_rates(state, signals: dict[str, Signals]):
    """``state`` with each engine's request and preemption rates over the short span where its counters
    give them (and ``window_s`` that span): the rules read the last seconds, not the last minute."""
    from dataclasses import replace

    # only the rates a rule will read: those of the models with an engine near full (KV, slots) — the
    # KV and capacity rules and Little's law over its peers; a healthy fleet of thousands copies nothing
    near_full = {e.stats.model for e in state.engines if e.name in signals and (
        (e.stats.kv_cache_pct or 0.0) >= NEAR_FULL_KV_PCT
        or (e.stats.max_num_seqs and (e.stats.running or 0.0) >= NEAR_FULL_SLOTS * e.stats.max_num_seqs))}
    if not near_full:
        return state
    engines, changed = [], False
    for e in state.engines:
        sig = signals.get(e.name)
        if sig is None or e.stats.model not in near_full or sig.span_s is None or (
                sig.requests_per_s is None and sig.preemptions_per_s is None):
            engines.append(e)
            continue
        s = e.stats
        engines.append(replace(e, stats=replace(
            s, window_s=sig.span_s,
            requests_per_s=s.requests_per_s if sig.requests_per_s is None else sig.requests_per_s,
            preemptions_per_s=s.preemptions_per_s if sig.preemptions_per_s is None else sig.preemptions_per_s)))
        changed = True
    return replace(state, engines=tuple(engines)) if changed else state


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _fell(before: _Point, now: _Point) -> bool:
    for i in range(1, 6):
        a, b = before[i], now[i]
        if a is not None and b is not None and b < a:
            return True
    return False
