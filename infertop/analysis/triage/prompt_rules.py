"""Prompt-side slowdowns against an engine's own healthy past: the prefix cache stopped hitting
(prompts the same size, hit rate collapsed) or prompts grew (prefill-bound). The two look alike
— TTFT up, ITL flat — and are told apart by the prompt size per request."""

from __future__ import annotations

from ...format import pct_human, seconds_human
from .context import RuleContext
from .signals import Signals
from .types import WARNING, Evidence, Finding, Remedy

COLLAPSE_BELOW = 0.3  # hit rate under 30 % of its baseline (62 % → 3 %) …
COLLAPSE_CLEARS_AT = 0.6  # … and back over 60 % of it to clear
MIN_BASELINE_HIT_PCT = 20.0  # an engine that barely hit its cache cannot collapse
PROMPT_FLAT = (0.67, 1.5)  # prompt tokens per request within this factor of its baseline: "flat"
LONG_PROMPT_X, LONG_PROMPT_CLEARS_BELOW_X = 3.0, 2.0  # prompts ×3 over their baseline; cleared under ×2
TTFT_UP_X = 1.5  # TTFT p50 (or p99, which moves first in a 60 s window) this much over its baseline
ITL_FLAT_BELOW_X = 1.5  # decode keeps its pace: it is the prefill that is slow


def prefix_collapse(state, active, ctx: RuleContext) -> list[Finding]:
    """Hit rate far under its own baseline while prompts are the same size and TTFT rose: the
    prompts' shared prefix changed (a new system prompt, per-request text before it, routing)."""
    out = []
    for name, sig in ctx.signals.items():
        base_hit = ctx.own(name, "prefix_hit_pct")
        base_prompt = ctx.own(name, "prompt_tokens_per_req")
        if sig.prefix_hit_pct is None or base_hit is None or base_hit < MIN_BASELINE_HIT_PCT:
            continue
        holding = active("prefix-collapse", name)
        if sig.prefix_hit_pct >= (COLLAPSE_CLEARS_AT if holding else COLLAPSE_BELOW) * base_hit:
            continue
        grown = _ratio(sig.prompt_tokens_per_req, base_prompt)
        if grown is None or not PROMPT_FLAT[0] <= grown <= PROMPT_FLAT[1]:
            continue  # prompts changed size: long prompts (or none), not the cache
        ttft = _ttft_up(sig, ctx, name)
        if ttft is None and not holding:
            continue
        ev = [Evidence("prefix-cache hit rate", pct_human(sig.prefix_hit_pct), f"baseline {pct_human(base_hit)}",
                       sig.hit_window),
              Evidence("prompt tokens / request", f"{sig.prompt_tokens_per_req:.0f}",
                       f"baseline {base_prompt:.0f} (×{grown:.1f}: flat)", sig.prompt_window)]
        ev += [ttft] if ttft is not None else []
        out.append(Finding(
            "prefix-cache-collapse", name, WARNING,
            f"{name}'s prefix cache stopped hitting: {pct_human(sig.prefix_hit_pct)} of prompt tokens against "
            f"{pct_human(base_hit)} before, with prompts the same size — every request prefills in full.",
            tuple(ev),
            (Remedy("find what changed in the prompt prefix: a new system prompt or template, text that varies "
                    "per request ahead of the shared part (a date, an id), or routing that no longer keeps "
                    "a conversation on one engine"),
             Remedy("its hit rate and TTFT around the onset", "enter", name))))
    return out


def long_prompts(state, active, ctx: RuleContext) -> list[Finding]:
    """Prompt tokens per request ×3 over the engine's baseline, TTFT up, ITL flat: prefill-bound by
    long prompts (the cache may hit less too — new long prompts share nothing — but the size says it)."""
    out = []
    for name, sig in ctx.signals.items():
        base_prompt = ctx.own(name, "prompt_tokens_per_req")
        grown = _ratio(sig.prompt_tokens_per_req, base_prompt)
        holding = active("long-prompts", name)
        if grown is None or grown < (LONG_PROMPT_CLEARS_BELOW_X if holding else LONG_PROMPT_X):
            continue
        ttft = _ttft_up(sig, ctx, name)
        base_itl = ctx.own(name, "itl_p50_s")
        itl_x = _ratio(sig.itl_p50_s, base_itl)
        if not holding and (ttft is None or (itl_x is not None and itl_x >= ITL_FLAT_BELOW_X)):
            continue  # TTFT not up, or decode slowed too: another cause (KV, GPU) speaks
        ev = [Evidence("prompt tokens / request", f"{sig.prompt_tokens_per_req:.0f}",
                       f"baseline {base_prompt:.0f} (×{grown:.1f})", sig.prompt_window)]
        ev += [ttft] if ttft is not None else []
        if itl_x is not None:
            ev.append(Evidence("ITL p50", seconds_human(sig.itl_p50_s), f"baseline {seconds_human(base_itl)} "
                                                                         f"(×{itl_x:.2f}: flat)", "60 s window"))
        base_hit = ctx.own(name, "prefix_hit_pct")
        if sig.prefix_hit_pct is not None and base_hit is not None:
            ev.append(Evidence("prefix-cache hit rate", pct_human(sig.prefix_hit_pct),
                               f"baseline {pct_human(base_hit)}", sig.hit_window))
        out.append(Finding(
            "long-prompts", name, WARNING,
            f"{name} is prefill-bound by long prompts: {sig.prompt_tokens_per_req:.0f} prompt tokens per request, "
            f"×{grown:.0f} its usual {base_prompt:.0f}; decode keeps its pace.",
            tuple(ev),
            (Remedy("find who sends the long prompts (gateway class, API key); cap them (--max-model-len) or "
                    "route long prompts to engines of their own"),
             Remedy("keep decode steady under long prefills: chunked prefill with a lower "
                    "--max-num-batched-tokens"),
             Remedy("its prompt size and TTFT around the onset", "enter", name))))
    return out


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def _ttft_up(sig: Signals, ctx: RuleContext, name: str) -> Evidence | None:
    """Evidence that TTFT rose over its baseline (p50, else p99, which a 60 s window moves sooner), or None."""
    for signal, label in (("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99")):
        value, base = getattr(sig, signal), ctx.own(name, signal)
        x = _ratio(value, base)
        if x is not None and x >= TTFT_UP_X:
            return Evidence(label, seconds_human(value), f"baseline {seconds_human(base)} (×{x:.1f})", "60 s window")
    return None
