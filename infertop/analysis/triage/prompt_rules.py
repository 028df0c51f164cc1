"""Prompt-side slowdowns against an engine's own healthy past: the prefix cache stopped hitting
(prompts the same size, hit rate collapsed) or prompts grew (prefill-bound). The two look alike
— TTFT up, ITL flat — and are told apart by the prompt size per request.

Both compare only signals with enough requests behind them (:meth:`Signals.enough`), raised and
held alike: a verdict whose data thins out (a night's trickle) or no longer shows its cause has no
support, finds nothing, and clears after its quiet time.
"""

from __future__ import annotations

from ...format import pct_human, seconds_human
from .context import RuleContext
from .signals import Signals, too_few
from .types import WARNING, Evidence, Finding, Remedy

COLLAPSE_BELOW = 0.3  # hit rate under 30 % of its baseline (62 % → 3 %) …
COLLAPSE_CLEARS_AT = 0.6  # … and back over 60 % of it to clear
# … and at least this many points under it: 40 % → 0 % is every shared prefix prefilled again; 6 % → 1 %
# is a handful of tokens a request, nothing a TTFT would show. 5 points to clear.
COLLAPSE_MIN_DROP_PTS, COLLAPSE_CLEARS_DROP_PTS = 10.0, 5.0
MIN_BASELINE_HIT_PCT = 15.0  # an engine that barely hit its cache cannot collapse (the simulator's mix: ~22 %)
# a KV cache full and preempting, or a flood of long prompts, evicts the shared prefixes (and a flood's
# backlog misses them for minutes): the hit rate falls with prompts the same size, and that verdict says why
EVICTED_BY = ("kv-bound", "long-prompts")
PROMPT_FLAT = (0.67, 1.5)  # prompt tokens per request within this factor of its baseline: "flat"
LONG_PROMPT_X, LONG_PROMPT_CLEARS_BELOW_X = 3.0, 2.0  # prompts ×3 over their baseline; cleared under ×2
# … and at least this many tokens longer: a template a few hundred tokens longer is not a flood (a chat
# prompt of 80 tokens ×3 costs a millisecond of prefill)
LONG_PROMPT_MIN_GROWTH_TOKENS = 500.0
TTFT_UP_X = 1.5  # TTFT p50 (or p99, which moves first in a 60 s window) this much over its baseline …
# … and by this much: 100 ms on the median is where a chat user starts to see a slower first token (and
# 5 % of the 2 s TTFT target); a batch's queue moves a 30 ms median by tens of ms, which is no flood.
# The p99 moves with every burst's queue (up to +0.7 s on the simulated healthy fleet): it needs half the
# TTFT target.
TTFT_UP_MIN_S = {"ttft_p50_s": 0.100, "ttft_p99_s": 1.000}
TTFT_HELD_X = 1.2  # a held long-prompt verdict needs its TTFT still this much up (and half the gap above)
# decode slowed too — ITL ×1.5 and 10 ms more (10 → 15 ms is chunked prefill's share of a step, not a
# slower GPU): another cause (KV, GPU) speaks
ITL_FLAT_BELOW_X, ITL_SLOWER_MIN_S = 1.5, 0.010


def prefix_collapse(state, active, ctx: RuleContext) -> list[Finding]:
    """Hit rate far under its own baseline while prompts are the same size: the prompts' shared prefix
    changed (a new system prompt, per-request text before it, routing). The hit rate is the cause
    measured; TTFT, what it costs, is evidence but no condition — on a fast engine whose shared prefix
    is a fifth of the prompt, a collapse costs tens of ms, under any floor that tells a slowdown."""
    out = []
    for name, sig in ctx.signals.items():
        base_hit = ctx.own(name, "prefix_hit_pct")
        base_prompt = ctx.own(name, "prompt_tokens_per_req")
        if base_hit is None or base_hit < MIN_BASELINE_HIT_PCT or base_prompt is None:
            continue
        if any(active(k, name) or ctx.found(name, (k,)) for k in EVICTED_BY):
            continue  # the shared prefixes were evicted: that verdict names the cause
        hit, prompt = sig.reliable("prefix_hit_pct"), sig.reliable("prompt_tokens_per_req")
        if hit is None or prompt is None:
            continue  # too few requests to tell: no support (a held verdict clears)
        holding = active("prefix-cache-collapse", name)
        below, drop = (COLLAPSE_CLEARS_AT, COLLAPSE_CLEARS_DROP_PTS) if holding else (COLLAPSE_BELOW,
                                                                                       COLLAPSE_MIN_DROP_PTS)
        if hit >= below * base_hit or base_hit - hit < drop:
            continue
        grown = prompt / base_prompt
        if not PROMPT_FLAT[0] <= grown <= PROMPT_FLAT[1]:
            continue  # prompts changed size: long prompts (or none), not the cache
        ev = [Evidence("prefix-cache hit rate", pct_human(hit), f"baseline {pct_human(base_hit)}", sig.hit_window),
              Evidence("prompt tokens / request", f"{prompt:.0f}", f"baseline {base_prompt:.0f} (×{grown:.1f}: flat)",
                       sig.prompt_window)]
        ev.append(_ttft_evidence(sig, ctx, name, "ttft_p50_s", "TTFT p50"))
        out.append(Finding(
            "prefix-cache-collapse", name, WARNING,
            f"{name}'s prefix cache stopped hitting: {pct_human(hit)} of prompt tokens against "
            f"{pct_human(base_hit)} before, with prompts the same size — every request prefills in full.",
            tuple(ev),
            (Remedy("find what changed in the prompt prefix: a new system prompt or template, text that varies "
                    "per request ahead of the shared part (a date, an id), or routing that no longer keeps "
                    "a conversation on one engine"),
             Remedy("its hit rate and TTFT around the onset", "enter", name))))
    return out


def long_prompts(state, active, ctx: RuleContext) -> list[Finding]:
    """Prompt tokens per request ×3 over the engine's baseline, TTFT up, ITL flat: prefill-bound by
    long prompts (the cache may hit less too — new long prompts share nothing — but the size says it).
    Held while prompts stay ×2 and TTFT stays up: prompts that look long against a baseline that no
    longer fits, with TTFT as ever, are no flood."""
    out = []
    for name, sig in ctx.signals.items():
        base_prompt = ctx.own(name, "prompt_tokens_per_req")
        prompt = sig.reliable("prompt_tokens_per_req")
        if base_prompt is None or base_prompt <= 0 or prompt is None:
            continue  # too few requests to tell: no support (a held verdict clears)
        grown = prompt / base_prompt
        holding = active("long-prompts", name)
        if grown < (LONG_PROMPT_CLEARS_BELOW_X if holding else LONG_PROMPT_X) or (
                not holding and prompt - base_prompt < LONG_PROMPT_MIN_GROWTH_TOKENS):
            continue
        ttft = _ttft_up(sig, ctx, name, held=holding)
        if ttft is None:
            continue  # the prompts grew and TTFT did not: nothing is slow for it
        base_itl = ctx.own(name, "itl_p50_s")
        itl = sig.reliable("itl_p50_s")
        itl_x = None
        if itl is not None and base_itl:
            itl_x = itl / base_itl
            if not holding and itl_x >= ITL_FLAT_BELOW_X and itl - base_itl >= ITL_SLOWER_MIN_S:
                continue  # decode slowed too: another cause (KV, GPU) speaks
        ev = [Evidence("prompt tokens / request", f"{prompt:.0f}", f"baseline {base_prompt:.0f} (×{grown:.1f})",
                       sig.prompt_window), ttft]
        if itl_x is not None:
            ev.append(Evidence("ITL p50", seconds_human(itl), f"baseline {seconds_human(base_itl)} "
                                                              f"(×{itl_x:.2f}: flat)", "60 s window"))
        base_hit = ctx.own(name, "prefix_hit_pct")
        if sig.prefix_hit_pct is not None and base_hit is not None:
            hit = sig.reliable("prefix_hit_pct")
            ev.append(Evidence("prefix-cache hit rate", pct_human(sig.prefix_hit_pct) if hit is not None
                               else too_few(sig, "prefix_hit_pct"), f"baseline {pct_human(base_hit)}", sig.hit_window))
        out.append(Finding(
            "long-prompts", name, WARNING,
            f"{name} is prefill-bound by long prompts: {prompt:.0f} prompt tokens per request, "
            f"×{grown:.0f} its usual {base_prompt:.0f}; decode keeps its pace.",
            tuple(ev),
            (Remedy("find who sends the long prompts (gateway class, API key); cap them (--max-model-len) or "
                    "route long prompts to engines of their own"),
             Remedy("keep decode steady under long prefills: chunked prefill with a lower "
                    "--max-num-batched-tokens"),
             Remedy("its prompt size and TTFT around the onset", "enter", name))))
    return out


def _ttft_up(sig: Signals, ctx: RuleContext, name: str, held: bool = False) -> Evidence | None:
    """Evidence that TTFT rose over its baseline by a ratio and a gap that matter (p50, else p99, which a
    60 s window moves sooner), or None; ``held``: the lower levels a raised verdict keeps to."""
    for signal, label in (("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99")):
        value, base = sig.reliable(signal), ctx.own(name, signal)
        if value is None or base is None or base <= 0:
            continue
        x, gap = value / base, TTFT_UP_MIN_S[signal] * (0.5 if held else 1.0)
        if x >= (TTFT_HELD_X if held else TTFT_UP_X) and value - base >= gap:
            return Evidence(label, seconds_human(value), f"baseline {seconds_human(base)} (×{x:.1f})", "60 s window")
    return None


def _ttft_evidence(sig: Signals, ctx: RuleContext, name: str, signal: str, label: str) -> Evidence:
    """A TTFT beside its baseline as it is — or that too few requests stand behind it to say."""
    base = ctx.own(name, signal)
    against = "no baseline yet" if base is None else f"baseline {seconds_human(base)}"
    value = sig.reliable(signal)
    if value is None:
        return Evidence(label, too_few(sig, signal), against, "60 s window")
    if base:
        against += f" (×{value / base:.1f})"
    return Evidence(label, seconds_human(value), against, "60 s window")
