"""SLO verdicts from the tick's SLO report (analysis.slo, carried as ``state.slo_report``): a fast burn (over
the fast pair of windows, 14.4× over 1 h and 5 min, scaled to the history there is) and 80 % of a week's
error budget used. The subject is the class (``slo:chat``); its remedy is the capacity answer."""

from __future__ import annotations

from ...format import seconds_human
from .types import CRITICAL, WARNING, Evidence, Finding, Remedy


def slo_burn(state, active) -> list[Finding]:
    report = getattr(state, "slo_report", None)
    if not isinstance(report, dict):
        return []
    out = []
    for c in report.get("classes") or ():
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            continue
        try:
            out += _class_findings(c, report)
        except (TypeError, ValueError, KeyError, AttributeError):
            continue  # a recorded report of the wrong shape says nothing
    return out


def _class_findings(c: dict, report: dict) -> list[Finding]:
    name, subject = c["name"], f"slo:{c['name']}"
    out = []
    fast = next((w for w in c.get("burn") or () if w.get("pair") == "fast"), None)
    remedies = _remedies(c)
    if c.get("fast_burn_firing") and fast is not None:
        ev = (Evidence("burn rate, long window", f"{fast['long_burn']:.1f}×", f"≥ {fast['threshold']:g}×",
                       f"last {seconds_human(fast['long_s'])}, {fast['long_requests']:.0f} requests"
                       f"{_from(fast, 'long')}"),
              Evidence("burn rate, short window", f"{fast['short_burn']:.1f}×", f"≥ {fast['threshold']:g}×",
                       f"last {seconds_human(fast['short_s'])}, {fast['short_requests']:.0f} requests"
                       f"{_from(fast, 'short')}"))
        scaled = " (windows scaled to the history there is)" if fast.get("scaled") else ""
        out.append(Finding(
            "slo-fast-burn", subject, CRITICAL,
            f"SLO class {name} burns its error budget {fast['long_burn']:.0f}× too fast over "
            f"{seconds_human(fast['long_s'])} and {fast['short_burn']:.0f}× over {seconds_human(fast['short_s'])}"
            f"{scaled}: {c.get('objective', '')} will not hold.", ev, remedies))
    used = c.get("week_budget_used_pct")
    if c.get("week_budget_spent") and used is not None:
        out.append(Finding(
            "slo-budget-spent", subject, WARNING,
            f"SLO class {name} has used {used:.0f} % of a week's error budget (over the last "
            f"{seconds_human(c.get('week_span_s'))}, the week's requests projected from it).",
            (Evidence("week's budget used", f"{used:.0f} %", f"≥ {report.get('week_budget_pct', 80):g} %",
                      f"last {seconds_human(c.get('week_span_s'))}"),), remedies))
    return out


def _from(w: dict, side: str) -> str:
    """", from Prometheus" / ", local" where the burn windows were also read from Prometheus."""
    if w.get("prometheus") is None:
        return ""
    return ", from Prometheus" if w.get(f"{side}_source") == "Prometheus" else ", local"


def _remedies(c: dict) -> tuple[Remedy, ...]:
    cap = c.get("capacity") or {}
    engines = c.get("engines") or []
    out = []
    worst = (c.get("worst") or {}).get(c.get("objective_stage") or "e2e") or {}
    if worst.get("broke"):
        out.append(Remedy(f"the stage that breaks it: {worst['broke']} on {worst.get('engine')} — {worst.get('text')}"))
    hold = cap.get("replicas_to_hold")
    why = capacity_why(c, cap)
    if hold and engines and hold > len(engines):
        out.append(Remedy(f"scale to {hold} replicas ({why})", "S", engines[0], int(hold)))
    seqs = cap.get("max_num_seqs_to_hold")
    if seqs and engines:
        out.append(Remedy(f"or raise max_num_seqs to {seqs} at {len(engines)} replicas", "m", engines[0], int(seqs)))
    return tuple(out)


def capacity_why(c: dict, cap: dict) -> str:
    """Why the capacity answer's replica count: "capacity model: holds queue p99 500 ms and TTFT p99 2 s at
    5; Little's law: 4.2 replicas of 16 at 30 % headroom" (what a plain field of it lacks is left out)."""
    targets = c.get("targets") or {}
    queue, ttft = targets.get("queue"), targets.get("ttft")
    hold = cap.get("replicas_to_hold")
    per = (cap.get("inputs") or {}).get("max_num_seqs")
    need, head = cap.get("concurrency_needed"), cap.get("headroom_pct")
    out = "capacity model"
    if hold and isinstance(queue, (int, float)) and isinstance(ttft, (int, float)):
        out += f": holds queue p99 {seconds_human(queue)} and TTFT p99 {seconds_human(ttft)} at {hold}"
    if isinstance(need, (int, float)) and isinstance(per, int) and per > 0 and isinstance(head, (int, float)):
        out += f"; Little's law: {need / per:.1f} replicas of {per} at {head:g} % headroom"
    return out
