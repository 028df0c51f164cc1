"""One engine slower than the others serving the same model — unless its GPU is throttled (then
the gpu-throttled verdict speaks, and carries the engine's ITL against its peers)."""

from __future__ import annotations

from dataclasses import replace

from ...format import seconds_human
from .context import RuleContext
from .signals import too_few
from .types import WARNING, Evidence, Finding, Remedy

SLOW_X, SLOW_CLEARS_BELOW_X = 1.5, 1.25  # p50 over the peers' median
# p50 and the tail beside it: in a 60 s window the tail moves within seconds of a change, the median in 30 s.
# A ratio of small numbers is no slowdown (TTFT p50 52 ms against 32 ms is one engine's burst batching), so
# each needs a gap a user would notice, held to the default SLO targets (TTFT p99 2 s, ITL p95 100 ms) and
# over what a healthy engine's own burst does against its peers (the simulated day and bursty fleet, seeds
# 1, 3, 7, 11: TTFT p50 up to +33 ms, p99 up to +0.72 s, ITL p95 up to +30 ms, ITL p50 within ×1.25):
# - TTFT p50 +100 ms: where a slower first token starts to show in a chat (5 % of the TTFT target);
# - TTFT p99 +1 s: half the TTFT target — every burst's queue moves a tail by hundreds of ms;
# - ITL p50 +10 ms: a stream a third slower at 30 ms a token; a thermally throttled GPU's ~8 % (under a
#   millisecond) stays under it, and the gpu-throttled verdict speaks for that;
# - ITL p95 +35 ms: a third of the ITL target, over the ~30 ms a burst's long prefills sharing steps put on
#   a healthy engine's tail; a decode half as fast at 30 ms a token (+39 ms) is over it.
MIN_GAP_S = {"itl_p50_s": 0.010, "itl_p95_s": 0.035, "ttft_p50_s": 0.100, "ttft_p99_s": 1.000}
# a cause of its own on the engine, whose verdict explains the latency better — also for a minute after it
# cleared: the 60 s window's quantiles still hold the requests of the incident it recovers from (a
# long-prompt flood's last queued request reads a TTFT of minutes there)
EXPLAINED_BY = ("kv-bound", "queue-bound", "hung", "prefix-cache-collapse", "long-prompts")
EXPLAINED_FOR_S = 60.0
_LABEL = {"itl_p50_s": "ITL p50", "itl_p95_s": "ITL p95", "ttft_p50_s": "TTFT p50", "ttft_p99_s": "TTFT p99"}


def slower_than_peers(state, active, ctx: RuleContext) -> list[Finding]:
    slow: dict[str, list[tuple[str, float, float, int]]] = {}  # engine → (signal, value, median, peers)
    for signal, gap in MIN_GAP_S.items():
        for name, (median, peers) in ctx.peer_table(signal).items():
            value = ctx.signals[name].reliable(signal)  # its peers' too: too few requests compare with nothing
            # the clear level first: a fleet of thousands does the rest only for the few over it
            if median is None or value is None or median <= 0 or value < SLOW_CLEARS_BELOW_X * median \
                    or value - median < gap:
                continue
            if value >= SLOW_X * median or active("slower-than-peers", name):
                slow.setdefault(name, []).append((signal, value, median, peers))
    if not slow:
        return []
    throttled = _throttled_engines(state, ctx, active)
    out = []
    for name, over in slow.items():
        if name in throttled or ctx.found(name, EXPLAINED_BY) or any(active(k, name) for k in EXPLAINED_BY) \
                or ctx.cleared_within(name, EXPLAINED_BY, EXPLAINED_FOR_S):
            continue
        ev = tuple(Evidence(_LABEL[sig], seconds_human(v), f"median {seconds_human(m)} of {n} peers (×{v / m:.1f})",
                            "60 s window") for sig, v, m, n in over)
        words = ", ".join(f"{_LABEL[sig]} {seconds_human(v)} against their {seconds_human(m)}" for sig, v, m, _ in over)
        out.append(Finding(
            "slower-than-peers", name, WARNING,
            f"{name} is slower than the other engines serving {ctx.models.get(name) or 'its model'}: {words}.", ev,
            (Remedy("compare it with its peers: its GPU (GPUs pane), its node, its arguments and vLLM version; "
                    "its detail has the trends", "enter", name),
             Remedy("restart it if nothing tells it apart (an engine infertop started)", "r", name))))
    return out


def compare(ctx: RuleContext, name: str, signal: str) -> tuple[float, float, int] | None:
    """(the engine's value, its peers' median, how many peers), when both are known (on enough requests)."""
    value = ctx.signals[name].reliable(signal)
    median, peers = ctx.peers(name, signal)
    if value is None or median is None or median <= 0:
        return None
    return value, median, peers


def join_throttled(findings: list[Finding], state, ctx: RuleContext) -> list[Finding]:
    """Each gpu-throttled finding with the engine on that GPU and its ITL against its peers."""
    engine_of = {_gpu_subject(g): g.engine for g in state.gpus if g.engine}
    out = []
    for f in findings:
        name = engine_of.get(f.subject) if f.kind == "gpu-throttled" else None
        got = compare(ctx, name, "itl_p50_s") if name in ctx.signals else None
        if got is None and name in ctx.signals and not ctx.signals[name].enough("itl_p50_s"):
            f = replace(f, evidence=f.evidence + (Evidence(f"{name} ITL p50", too_few(ctx.signals[name], "itl_p50_s"),
                                                           "its peers' median", "60 s window"),))
        if got is not None:
            value, median, peers = got
            f = replace(f, explanation=f"{f.explanation[:-1]} (its ITL p50 {seconds_human(value)} against "
                                       f"{seconds_human(median)} on {peers} peers).",
                        evidence=f.evidence + (Evidence(f"{name} ITL p50", seconds_human(value),
                                                        f"median {seconds_human(median)} of {peers} peers "
                                                        f"(×{value / median:.2f})", "60 s window"),))
        out.append(f)
    return out


def _throttled_engines(state, ctx: RuleContext, active) -> set[str]:
    """The engines on a GPU found throttled this tick or under a gpu-throttled verdict (held between reads)."""
    engine_of = {_gpu_subject(g): g.engine for g in state.gpus if g.engine}
    return {engine_of[f.subject] for f in ctx.findings if f.kind == "gpu-throttled" and f.subject in engine_of} | {
        name for gpu, name in engine_of.items() if active("gpu-throttled", gpu)}


def _gpu_subject(g) -> str:
    return f"{g.host}:{g.label}" if g.host else g.label  # as rules.gpu_faults names a GPU
