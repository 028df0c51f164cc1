"""Per-engine signals over the last seconds, from consecutive ticks' cumulative counters.

The engines' rates are over the 60 s display window, which under-reports a change for its first
minute (a hit rate that fell from 62 % to 3 % reads 33 % half a minute later). Where an engine
carries its cumulative counters (``EngineStats.*_total``), the triage takes the hit rate and the
prompt size per request from them over the last :data:`SHORT_WINDOW_S` — or longer, up to
:data:`SAMPLE_WINDOW_S`, until the span holds :data:`MIN_SAMPLE_REQUESTS` finished requests:
a hit rate of three requests is noise, not a collapse. Otherwise it falls back to the window's
values. Latency quantiles are the window's (their buckets are not kept per tick): a rule reads
p99 beside p50, which moves within seconds of a step.

Every signal carries its sample (the requests behind it); :meth:`Signals.reliable` answers a value
only when that sample is large enough, and :func:`too_few` is what evidence says in place of a
ratio when it is not.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

SHORT_WINDOW_S = 10.0
SAMPLE_WINDOW_S = 60.0  # at a trickle, the hit rate and prompt size look this far back for their sample
MIN_SPAN_S = 2.0  # a rate over less than this is one scrape's noise
# Finished requests behind a hit rate or a prompt size per request before it is compared with anything:
# the simulator's mix (chat, code, RAG, batch) has a per-request spread of about 0.8 of its mean, so 20
# requests put the mean within ±20 % (one sigma) — far inside the ×3 a long-prompt verdict needs — and a
# token-weighted hit rate of 20 requests under a third of its baseline is no chance draw.
MIN_SAMPLE_REQUESTS = 20.0
MIN_QUERY_TOKENS = 2000.0  # prefix-cache lookups (tokens) behind a hit rate
# Requests in the 60 s window behind a latency quantile: a median of 20; a p99 of 100 (under that the
# "p99" is the slowest request's, one burst's queue).
MIN_WINDOW_REQUESTS = {"ttft_p50_s": 20.0, "ttft_p99_s": 100.0, "itl_p50_s": 20.0, "itl_p95_s": 20.0}
WINDOW_LABEL = "60 s window"
NEAR_FULL_KV_PCT, NEAR_FULL_SLOTS = 80.0, 0.85  # under the KV and capacity rules' clear levels (85 %, 90 %)
_SHORT_SIGNALS = ("prefix_hit_pct", "prompt_tokens_per_req")


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
    # the sample: finished requests (and prefix-cache lookups, tokens) behind the hit rate and the prompt
    # size, over sample_span_s; requests in the 60 s window behind the latency quantiles (None: unknown)
    sample_requests: float | None = None
    sample_query_tokens: float | None = None
    sample_span_s: float | None = None
    window_requests: float | None = None

    def sample(self, signal: str) -> float | None:
        """The requests behind ``signal`` (None: not known)."""
        return self.sample_requests if signal in _SHORT_SIGNALS else self.window_requests

    def enough(self, signal: str) -> bool:
        """Whether ``signal`` rests on enough requests to be compared with a baseline or with peers."""
        n = self.sample(signal)
        if n is None or n < min_requests(signal):
            return False
        if signal == "prefix_hit_pct":
            return self.sample_query_tokens is not None and self.sample_query_tokens >= MIN_QUERY_TOKENS
        return True

    def reliable(self, signal: str) -> float | None:
        """``signal``'s value when it rests on enough requests; None otherwise."""
        return getattr(self, signal) if self.enough(signal) else None

    def request_rate_per_s(self) -> float | None:
        """Finished requests a second behind the short signals (the window's where there are no counters)."""
        if self.sample_requests is not None and self.sample_span_s:
            return self.sample_requests / self.sample_span_s
        return None


def min_requests(signal: str) -> float:
    return MIN_SAMPLE_REQUESTS if signal in _SHORT_SIGNALS else MIN_WINDOW_REQUESTS.get(signal, MIN_SAMPLE_REQUESTS)


def too_few(sig: Signals, signal: str) -> str:
    """What evidence says of a signal without enough requests behind it: '3 requests (too few; 20 needed)'."""
    n = sig.sample(signal)
    got = "no count of requests" if n is None else f"{n:.0f} request{'' if round(n) == 1 else 's'}"
    return f"too few requests: {got}, {min_requests(signal):.0f} needed"


# t, prompt, requests, hits, queries, preemptions
_Point = tuple[float, float | None, float | None, float | None, float | None, float | None]


class ShortWindow:
    """Remembers each engine's counters for :data:`SAMPLE_WINDOW_S` and answers its :class:`Signals`."""

    def __init__(self, window_s: float = SHORT_WINDOW_S, sample_window_s: float = SAMPLE_WINDOW_S) -> None:
        self.window_s = window_s
        self.sample_window_s = max(window_s, sample_window_s)
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
            while len(pts) > 2 and now - pts[1][0] >= self.sample_window_s:
                pts.popleft()
            out[s.name] = self._signals(s, pts, now)
        for gone in [n for n in self._points if n not in out]:
            del self._points[gone]
        return out

    def _signals(self, s, pts: deque[_Point], now: float) -> Signals:
        hit, per_req = s.prefix_cache_hit_pct, None
        if s.prompt_tokens_per_s is not None and s.requests_per_s:
            per_req = s.prompt_tokens_per_s / s.requests_per_s
        window_requests = None
        if s.requests_per_s is not None and s.window_s:
            window_requests = s.requests_per_s * s.window_s
        # without counters the hit rate and prompt size are the window's, and so is their sample
        sample_req, sample_queries, sample_span = window_requests, None, s.window_s
        if window_requests is not None and s.prompt_tokens_per_s is not None and s.window_s:
            sample_queries = s.prompt_tokens_per_s * s.window_s
        hit_window = prompt_window = WINDOW_LABEL
        last = pts[-1]
        rates = _rate_start(pts, now - self.window_s)
        span = last[0] - rates[0]
        req_s = preempt_s = None
        if span >= MIN_SPAN_S:
            d_req, d_preempt = _diff(rates[2], last[2]), _diff(rates[5], last[5])
            req_s = None if d_req is None else d_req / span
            preempt_s = None if d_preempt is None else d_preempt / span
            first = _sample_start(pts, now - self.window_s)
            sspan = last[0] - first[0]
            d_prompt, d_req, d_hits, d_queries = (_diff(first[1], last[1]), _diff(first[2], last[2]),
                                                  _diff(first[3], last[3]), _diff(first[4], last[4]))
            if d_req is not None:
                label = f"last {sspan:.0f} s, {d_req:.0f} request{'' if round(d_req) == 1 else 's'}"
                if d_queries and d_hits is not None:
                    hit, hit_window = 100.0 * d_hits / d_queries, label
                if d_prompt is not None and d_req > 0:
                    per_req, prompt_window = d_prompt / d_req, label
                elif d_prompt is not None:
                    per_req, prompt_window = None, label
                sample_req, sample_queries, sample_span = d_req, d_queries, sspan
        return Signals(hit, per_req, s.ttft_p50_s, s.ttft_p99_s, s.itl_p50_s, s.itl_p95_s, req_s, preempt_s,
                       span if span >= MIN_SPAN_S else None, hit_window, prompt_window,
                       sample_req, sample_queries, sample_span, window_requests)


def _rate_start(pts: deque[_Point], since: float) -> _Point:
    """The oldest point no older than ``since`` but one (the rates' span: the last SHORT_WINDOW_S)."""
    for i in range(len(pts) - 1, -1, -1):
        if pts[i][0] <= since:
            return pts[i]
    return pts[0]


def _sample_start(pts: deque[_Point], since: float) -> _Point:
    """The newest point at or before ``since`` whose span to now holds MIN_SAMPLE_REQUESTS finished requests
    (and MIN_QUERY_TOKENS of lookups): the last seconds under load, longer at a trickle, the oldest kept
    point (SAMPLE_WINDOW_S) when even that is too few. Counters only grow between resets: newest first."""
    last = pts[-1]
    for i in range(len(pts) - 1, -1, -1):
        p = pts[i]
        if p[0] > since:
            continue
        d_req, d_queries = _diff(p[2], last[2]), _diff(p[4], last[4])
        if d_req is None or (d_req >= MIN_SAMPLE_REQUESTS and (d_queries is None or d_queries >= MIN_QUERY_TOKENS)):
            return p
    return pts[0]


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
