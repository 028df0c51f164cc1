"""The rules: what holds at one tick, each told apart from its look-alikes.

A rule is a function ``(state, active) -> list[Finding]``; ``active(kind, subject)`` says whether
that verdict is raised now, so a rule can clear at a lower threshold than it raises at
(hysteresis). Rules read only the fleet state: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from ...domain.engine import DOWN, UP
from ...domain.gpu import APP_XIDS
from ...format import count_human, pct_human, rate_human, seconds_human
from .slo_rules import capacity_why, slo_burn
from .types import CRITICAL, WARNING, Evidence, Finding, Remedy

Active = Callable[[str, str], bool]

KV_BOUND_AT_PCT, KV_CLEAR_BELOW_PCT = 95.0, 85.0
KV_HEADROOM_BELOW_PCT = 90.0  # below it a saturated engine is queue-bound, not KV-bound
CAPACITY_HEADROOM = 0.3  # Little's law concurrency plus 30 % (PRODUCT.md: 30–50 %)
GPU_BUSY_FROM_PCT = 5.0  # an idle GPU's clocks are held down for no one


def kv_bound(state, active: Active) -> list[Finding]:
    """KV cache near full and preempting: sequences are evicted and recomputed (ITL rises)."""
    out = []
    for e in _fresh_up(state):
        s = e.stats
        raise_at = KV_CLEAR_BELOW_PCT if active("kv-bound", s.name) else KV_BOUND_AT_PCT
        if s.kv_cache_pct is None or s.kv_cache_pct < raise_at or not s.preemptions_per_s:
            continue
        remedies = [Remedy("add replicas (the same load on more KV cache)", "S", s.name)]
        if s.max_num_seqs and s.max_num_seqs > 1:
            lower = max(1, math.floor(s.max_num_seqs * 0.75))
            remedies.insert(0, Remedy(f"lower max_num_seqs {s.max_num_seqs} → {lower} (fewer sequences share the cache)",
                                      "m", s.name, lower))
        out.append(Finding(
            "kv-bound", s.name, WARNING,
            f"{s.name} is KV-cache bound: the cache is {pct_human(s.kv_cache_pct)} full and it preempts "
            f"{rate_human(s.preemptions_per_s)} sequences a second.",
            (Evidence("KV cache", pct_human(s.kv_cache_pct), f"≥ {KV_BOUND_AT_PCT:.0f} % (clears < "
                                                                   f"{KV_CLEAR_BELOW_PCT:.0f} %)"),
             Evidence("preemptions", f"{rate_human(s.preemptions_per_s)}/s", "> 0", f"{s.window_s or 0:.0f} s")),
            tuple(remedies)))
    return out


def queue_bound(state, active: Active) -> list[Finding]:
    """Every slot busy, requests waiting, KV cache with room: out of capacity. The remedy's engine
    count is Little's law over the engines serving the same model: concurrency = arrival rate ×
    residence time (E2E p95), plus headroom, over max_num_seqs."""
    groups = defaultdict(list)
    for e in _fresh_up(state):
        groups[e.stats.model or "?"].append(e.stats)
    out = []
    for model, engines in groups.items():
        for s in engines:
            if not s.max_num_seqs or s.running is None or s.waiting is None:
                continue
            holding = active("queue-bound", s.name)
            full = s.running >= (0.9 if holding else 1.0) * s.max_num_seqs
            if not full or s.waiting < (0.5 if holding else 1.0):
                continue
            if (s.kv_cache_pct is not None and s.kv_cache_pct >= KV_HEADROOM_BELOW_PCT) or active("kv-bound", s.name):
                continue  # KV-bound (or about to be): the kv-bound rule speaks
            evidence = [Evidence("running / max_num_seqs", f"{s.running:.0f}/{s.max_num_seqs}", "= max"),
                        Evidence("waiting", count_human(s.waiting), "> 0")]
            if s.queue_p99_s is not None and s.ttft_p99_s:
                share = min(1.0, s.queue_p99_s / s.ttft_p99_s)
                evidence.append(Evidence("queue share of TTFT p99", f"{share * 100:.0f} %",
                                         f"queue {seconds_human(s.queue_p99_s)} of {seconds_human(s.ttft_p99_s)}"))
            if s.kv_cache_pct is not None:
                evidence.append(Evidence("KV cache", pct_human(s.kv_cache_pct),
                                         f"< {KV_HEADROOM_BELOW_PCT:.0f} % (room for more sequences)"))
            out.append(Finding("queue-bound", s.name, WARNING,
                               f"{s.name} is out of capacity: all {s.max_num_seqs} slots run and "
                               f"{count_human(s.waiting)} requests wait.",
                               tuple(evidence), _capacity_remedies(s, engines, model, state)))
    return out


def slo_capacity(report, names) -> tuple[dict, dict] | None:
    """(the SLO report's class doc, its capacity answer) of the class whose engines are exactly ``names``
    (the same pool: the answer is about those slots), None where the report has none."""
    if not isinstance(report, dict):
        return None
    names = set(names)
    for c in report.get("classes") or ():
        if isinstance(c, dict) and isinstance(c.get("capacity"), dict) and set(c.get("engines") or ()) == names:
            return c, c["capacity"]
    return None


def _capacity_remedies(s, engines, model: str, state=None) -> tuple[Remedy, ...]:
    out = []
    got = slo_capacity(getattr(state, "slo_report", None), (e.name for e in engines))
    if got is not None:
        remedies = _from_capacity(s, engines, model, *got)
        if remedies:
            return remedies
    arrival = sum(e.requests_per_s or 0.0 for e in engines)
    residence = max((e.e2e_p95_s or 0.0) for e in engines)
    seqs = min(e.max_num_seqs for e in engines if e.max_num_seqs)
    if arrival > 0 and residence > 0 and seqs:
        concurrency = arrival * residence * (1 + CAPACITY_HEADROOM)
        need = max(len(engines) + 1, math.ceil(concurrency / seqs))
        out.append(Remedy(f"scale {model} {len(engines)} → {need} engines: {rate_human(arrival)} req/s × "
                          f"{seconds_human(residence)} (E2E p95) = {arrival * residence:.0f} in flight, "
                          f"+{CAPACITY_HEADROOM * 100:.0f} % headroom, {seqs} per engine (Little's law)",
                          "S", s.name, need))
    if s.kv_cache_pct is not None and s.kv_cache_pct < 70.0 and s.max_num_seqs:
        more = min(2 * s.max_num_seqs, math.floor(s.max_num_seqs * KV_HEADROOM_BELOW_PCT / max(s.kv_cache_pct, 1.0)))
        if more > s.max_num_seqs:
            out.append(Remedy(f"raise max_num_seqs {s.max_num_seqs} → {more} (KV cache {pct_human(s.kv_cache_pct)})",
                              "m", s.name, more))
    return tuple(out)


def _from_capacity(s, engines, model: str, c: dict, cap: dict) -> tuple[Remedy, ...]:
    """The SLO class's capacity answer (M/M/c over its engines' slots) as the remedies' values: the
    replicas that hold its queue and TTFT p99 targets, and max_num_seqs at today's replicas."""
    try:
        hold, seqs = cap.get("replicas_to_hold"), cap.get("max_num_seqs_to_hold")
        hold, seqs = (int(hold) if hold else None), (int(seqs) if seqs else None)
        ttft = (c.get("targets") or {}).get("ttft")
        why = capacity_why(c, cap)
    except (AttributeError, TypeError, ValueError):
        return ()
    out = []
    if hold:
        value = max(len(engines) + 1, hold)  # queue-bound now: one more at the least
        out.append(Remedy(f"scale {model} {len(engines)} → {value} engines (class {c.get('name')}'s {why})",
                          "S", s.name, value))
    if seqs and s.max_num_seqs and seqs > s.max_num_seqs and (s.kv_cache_pct is None or s.kv_cache_pct < 70.0):
        out.append(Remedy(f"or raise max_num_seqs {s.max_num_seqs} → {seqs} at {len(engines)} engines "
                          f"(capacity model: holds TTFT p99 {seconds_human(ttft)}; KV cache "
                          f"{pct_human(s.kv_cache_pct) if s.kv_cache_pct is not None else 'unknown'})",
                          "m", s.name, seqs))
    return tuple(out)


def engine_down(state, active: Active) -> list[Finding]:
    """An engine that does not answer. Not when the monitoring path is what broke (metrics-stale), nor
    when its GPU reports a fatal XID: the engine died with its GPU, and the gpu-fault verdict says both."""
    broken = {f.subject for f in metrics_stale(state, active)}
    lost = {g.engine for g in state.gpus if g.engine and _fatal_xid(g)}
    out = []
    for e in state.engines:
        s = e.stats
        if s.state != DOWN or e.fresh or s.name in lost:
            continue
        if any(e.freshness.source and e.freshness.source.startswith(b) for b in broken):
            continue
        why = e.freshness.reason or s.error or "no answer"
        out.append(Finding("engine-down", s.name, CRITICAL, f"{s.name} does not answer: {why}.",
                           (Evidence("state", "down", "up", "now"),),
                           (Remedy("restart it (an engine infertop started)", "r", s.name),
                            Remedy("its pod and events (Cluster pane)", "5", s.name))))
    return out


def metrics_stale(state, active: Active) -> list[Finding]:
    """A Prometheus that does not answer: the values are old, the service may be fine."""
    out = []
    for src in state.sources:
        if src.kind != "prometheus" or src.ok or src.absent:
            continue
        out.append(Finding("metrics-stale", src.name, WARNING,
                           f"metrics stale: Prometheus {src.name} does not answer ({src.error or 'no data'}); "
                           "the last values are kept and marked stale — not an engine outage.",
                           (Evidence("Prometheus", src.error or "failing", "answering"),),
                           (Remedy("check the Prometheus server; the engines' own /metrics are not affected"),)))
    return out


def gpu_faults(state, active: Active) -> list[Finding]:
    """A GPU with a fatal XID (lost, fallen off the bus), or held down by thermal/power limits while
    it works — joined to the engine on it. A throttled GPU is never a capacity problem."""
    engines = {e.name: e for e in state.engines}
    out = []
    for g in state.gpus:
        where = f"{g.host}:{g.label}" if g.host else g.label
        on = f", engine {g.engine} on it" if g.engine else ""
        node = f"the node {g.host}" if g.host else "its node"
        if _fatal_xid(g):
            ev = [Evidence("last XID", str(g.last_xid), "0 (app faults excepted)")]
            remedies = [Remedy(f"cordon and drain {node}; the engine moves to a healthy GPU", "N", g.host or "")]
            e = engines.get(g.engine) if g.engine else None
            if e is not None and e.stats.state == DOWN and not e.fresh:  # engine-down yields to this verdict
                why = e.freshness.reason or e.stats.error or "no answer"
                on = f", and engine {g.engine} on it is down with it ({why})"
                ev.append(Evidence(f"engine {g.engine}", "down", "up", "now"))
                remedies.append(Remedy("its pod and events (Cluster pane)", "5", g.engine))
            out.append(Finding("gpu-fault", where, CRITICAL, f"GPU {where} reports XID {g.last_xid}{on}.",
                               tuple(ev), tuple(remedies)))
            continue
        busy = g.util_pct is None or g.util_pct >= GPU_BUSY_FROM_PCT
        if g.slowdowns and busy:
            ev = [Evidence("throttle", g.throttle_words, "none")]
            if g.temp_c is not None:
                ev.append(Evidence("temperature", f"{g.temp_c:.0f} °C", "—"))
            if g.sm_clock_pct is not None:
                ev.append(Evidence("SM clock", f"{g.sm_clock_pct:.0f} % of max", "100 %"))
            out.append(Finding("gpu-throttled", where, WARNING,
                               f"GPU {where} is throttled ({g.throttle_words}){on}: its engine runs slower "
                               "than its peers; more replicas will not help it.", tuple(ev),
                               (Remedy(f"cordon and drain {node} (cooling, power)", "N", g.host or ""),)))
    return out


def _fatal_xid(g) -> bool:
    return bool(g.last_xid) and g.last_xid not in APP_XIDS


def _fresh_up(state):
    return [e for e in state.engines if e.fresh and e.stats.state == UP]


RULES = (metrics_stale, engine_down, kv_bound, queue_bound, gpu_faults, slo_burn)
