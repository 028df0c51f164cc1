"""The SLO report as plain lines (``snapshot``'s table, the SLO pane's text): every name from outside goes
through :func:`infertop.text.plain`; a recorded report of the wrong shape reads as damaged, never raises."""

from __future__ import annotations

from ...format import age_human, count_human, pct_human, seconds_human
from ...text import plain
from .burn import window_text

STAGES = ("queue", "ttft", "tpot", "e2e")


def burn_text(w: dict) -> str:
    def x(v):
        return "—" if v is None else f"{v:.1f}×"

    fire = " FIRING" if w.get("firing") else ""
    long_ = f"{x(w.get('long_burn'))} over {seconds_human(w.get('long_s'))}"
    short = f"{x(w.get('short_burn'))} over {seconds_human(w.get('short_s'))}"
    if w.get("prometheus") is None:  # Prometheus not asked: the local history's windows
        scaled = " (scaled)" if w.get("scaled") else ""
        return f"{w['pair']} {long_} / {short}{scaled}, ≥{w['threshold']:g}×{fire}"
    tags = [_source(w, "long"), _source(w, "short")]
    if tags[0] == tags[1] or tags[0].startswith("local") and tags[1].startswith("local"):
        body = f"{long_} / {short} ({tags[0]})"
    else:
        body = f"{long_} ({tags[0]}) / {short} ({tags[1]})"
    why = f" · Prometheus: {plain(w['prometheus'], 160)}" if w.get("prometheus") else ""
    return f"{w['pair']} {body}, ≥{w['threshold']:g}×{fire}{why}"


def _source(w: dict, side: str) -> str:
    """"Prometheus", or "local, 4 min of 1 h held" where the local window is shorter than the practice's
    (the short one is scaled with the long one: "local, scaled")."""
    if w.get(f"{side}_source") == "Prometheus":
        return "Prometheus"
    asked = w.get(f"asked_{side}_s")
    if not isinstance(asked, (int, float)) or (w.get(f"{side}_s") or 0.0) >= asked:
        return "local"
    if side == "short":
        return "local, scaled"
    return f"local, {window_text(w.get('history_s') or 0.0)} of {window_text(asked)} held"


def class_lines(c: dict) -> list[str]:
    engines = c.get("engines") or []
    used = c.get("week_budget_used_pct")
    out = [f"{plain(c['name'], 40)}: {plain(c.get('objective') or '', 120)} · {len(engines)} engines · "
           f"{count_human(c.get('requests'))} requests, {count_human(c.get('bad'))} over target over "
           f"{seconds_human(c.get('history_s'))}"]
    out.append("  burn: " + " · ".join(burn_text(w) for w in c.get("burn") or ())
               + f" · week's budget used {pct_human(used)} (from {seconds_human(c.get('week_span_s'))})")
    if c.get("budget"):
        out.append("  " + budget_text(c["budget"]))
    worst = c.get("worst") or {}
    for stage in STAGES:
        w = worst.get(stage)
        if w:
            out.append(f"  {plain(w.get('text') or '', 200)}  [{plain(w.get('engine') or '', 60)}]")
    if not worst:
        out.append("  no engine with requests in this class")
    cap = c.get("capacity")
    if cap:
        out.append(f"  capacity: {plain(cap.get('text') or '', 300)}")
        for p in [cap.get("now"), *(cap.get("what_ifs") or ())]:
            if p:
                out.append("    " + prediction_text(p))
    return out


def span_text(s: float | None) -> str:
    """A window: 45 s, 12 min, 5 h, 30 d."""
    if s is not None and s >= 86400:
        return f"{s / 86400:.1f}".removesuffix(".0") + " d"
    return age_human(s)


def budget_text(b: dict) -> str:
    """"budget over 30 d (Prometheus): 12 % used, 34 of 290k requests over target" (the window used)."""
    asked = b.get("asked_s")
    short = (f" of the objective's {span_text(asked)}" if asked and (b.get("window_s") or 0) < asked - 60 else "")
    err = f" · Prometheus: {plain(b['error'], 160)}" if b.get("error") else ""
    return (f"budget over {span_text(b.get('window_s'))} ({plain(b.get('source') or '', 20)}{short}): "
            f"{pct_human(b.get('used_pct'))} used, {count_human(b.get('bad'))} of "
            f"{count_human(b.get('requests'))} requests over target{err}")


def prediction_text(p: dict) -> str:
    if p.get("queue_p99_s") is None:
        return f"{p['what']}: ρ {p['utilisation']:.2f} — the queue grows without bound"
    return (f"{p['what']}: ρ {p['utilisation']:.2f}, wait {pct_human(100 * p['wait_chance'])}, queue p99 "
            f"{seconds_human(p['queue_p99_s'])}, TTFT p99 {seconds_human(p['ttft_p99_s'])} "
            f"({p['replicas']} × {p['max_num_seqs']} slots)")


def cost_lines(cost: dict) -> list[str]:
    price = cost.get("price_per_gpu_hour")
    cur = plain(cost.get("currency") or "$", 4)
    head = (f"cost: {cur}{price:g}/GPU-hour" if price is not None else
            "cost: no price (set slo_classes.gpu_hour_price)")
    out = [f"{head} · idle GPUs {cost.get('idle_gpus')}/{cost.get('gpus')} ({plain(cost.get('idle_how') or '', 120)})"
           f" · idle {cost.get('idle_gpu_hours', 0):.2f} of {cost.get('gpu_hours', 0):.2f} GPU-hours watched"]
    for m in cost.get("models") or ():
        per_m = m.get("cost_per_million_tokens")
        money = f" · {cur}{per_m:.3f}/M tokens ({cur}{m['cost_per_million_generated']:.3f}/M generated)" \
            if per_m is not None and m.get("cost_per_million_generated") is not None else ""
        assumed = f", {m['gpus_assumed']} assumed" if m.get("gpus_assumed") else ""
        out.append(f"  {plain(m['model'], 60)}: {m['engines']} engines, {m['gpus']} GPUs{assumed} · "
                   f"{count_human(m['tokens_per_gpu_hour'])} tokens/GPU-hour{money}")
    return out


def engine_line(e: dict) -> str:
    over = [s for s in e.get("stages") or () if s.get("over")]
    said = "; ".join(plain(s.get("text") or "", 160) for s in over) or "every stage within budget"
    b = e.get("burn") or {}
    burn = f" · burn {b['long_burn']:.1f}× over {seconds_human(b.get('long_s'))}" if b.get("long_burn") is not None else ""
    return f"  · {plain(e['name'], 60)} → {plain(e['class'], 40)} ({plain(e.get('how') or '', 200)}){burn} · {said}"


def slo_lines(report) -> list[str]:
    if report is None:
        return ["slo: no report (the SLO analysis did not run for this state)"]
    try:
        out = ["slo classes:"]
        for c in report.get("classes") or ():
            out += ["  " + line for line in class_lines(c)]
        out.append("  (" + plain(report.get("count_how") or "", 300) + ")")
        engines = report.get("engines") or ()
        if engines:
            out.append("slo engines:")
            out += [engine_line(e) for e in engines]
        out += cost_lines(report.get("cost") or {})
        return out
    except (TypeError, KeyError, ValueError, AttributeError):
        return ["slo: the report is damaged (a recording of the wrong shape)"]
