"""``infertop snapshot``: collect for one window, build the one fleet state,
print it as a table or JSON, and say with the exit code whether all is well.

Exit codes: 0 every source fresh; 1 some source down or stale (the output
still carries everything known, with ages); 2 usage or config error; 4 a critical
verdict beyond a source being down; 5 an SLO class burns its error budget fast
(the fast pair of windows, scaled to the snapshot's window) and nothing worse.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from .config import Config
from .sources.vllm import EngineEndpoint
from .state.fleet_types import FRESH, FleetState
from .state.service import Fleet

EXIT_OK, EXIT_DEGRADED = 0, 1
EXIT_CRITICAL = 4  # a critical triage verdict on what answers (a hung engine, a lost GPU): the output names it
EXIT_FAST_BURN = 5  # an SLO class's error budget burns fast (slo-fast-burn) and nothing critical besides
_SOURCE_VERDICTS = frozenset({"engine-down", "metrics-stale"})  # a source down or stale: exit 1 says that


def apply_demo_defaults(cfg: Config, notes: list[str] | None = None) -> None:
    """The demo's SLO targets, the same for the TUI and ``snapshot``: the simulated
    requests are long (hundreds of tokens), so end-to-end latency is judged by a
    long-form budget and alerts point at the bursts."""
    if cfg.source is None:
        cfg.slo.e2e_p99_s = 20.0
        chat = cfg.slo_classes.classes.get("chat") if hasattr(cfg, "slo_classes") else None
        if chat is not None:
            chat.e2e_p99_s = max(chat.e2e_p99_s, 20.0)  # the demo's chat answers are long too
        if notes is not None:
            notes.append("Demo SLO: E2E p99 ≤ 20 s (long outputs); other targets are the chat defaults.")


async def collect_state(endpoints: list[EngineEndpoint], cfg: Config, window_s: float, *,
                        dcgm_urls: list[str] | None = None, engine_pods: dict[str, str] | None = None,
                        mode: str = "live", prometheus: bool = False) -> FleetState:
    """Poll for ``window_s`` seconds and join everything into one :class:`FleetState`
    (``prometheus``: one refresh of the engines from Prometheus, whose rates already span its window).
    The one composition root builds it (state/service.py): the same tick as the console's."""
    fleet = Fleet(cfg, endpoints=endpoints, mode=mode, engine_pods=engine_pods, dcgm_urls=dcgm_urls or (),
                  prometheus=prometheus, watch=False, window_s=max(window_s, cfg.refresh_s))
    try:
        await fleet.poll_window(window_s)
    finally:
        await fleet.close()
    return fleet.build()


async def collect_snapshot(endpoints: list[EngineEndpoint], cfg: Config, window_s: float, *,
                           dcgm_urls: list[str] | None = None) -> dict:
    """The fleet state of one window as plain data (``snapshot --json``)."""
    return (await collect_state(endpoints, cfg, window_s, dcgm_urls=dcgm_urls)).to_doc()


def exit_code(state: FleetState) -> int:
    """0 all fresh and nothing critical; 4 a critical verdict beyond a source being down (a hung
    engine answers /metrics, a GPU with XID 79 may still report); else 1 when a source is down or stale."""
    verdicts = verdicts_of(state)
    if any(v.severity == "critical" and v.kind not in _SOURCE_VERDICTS | {"slo-fast-burn"} for v in verdicts):
        return EXIT_CRITICAL
    if any(v.kind == "slo-fast-burn" for v in verdicts):
        return EXIT_FAST_BURN
    return EXIT_OK if state.all_fresh else EXIT_DEGRADED


def verdicts_of(state: FleetState) -> tuple:
    """The triage verdicts one state shows: conditions seen in this window (no minimum duration —
    a snapshot has one look), nothing that needs memory (crash loops)."""
    from .analysis.triage import Triage
    from .analysis.triage.engine import TIMING

    return Triage({kind: (0.0, 0.0) for kind in TIMING}).evaluate(state, state.taken_at)


def write_json(state: FleetState, out: TextIO) -> None:
    from .domain.codec import to_doc

    doc = state.to_doc()
    doc["verdicts"] = to_doc(list(verdicts_of(state)))
    json.dump(doc, out, indent=2, allow_nan=False)
    out.write("\n")


# -- the plain table ----------------------------------------------------------------------------

def _clock(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%H:%M:%S", time.localtime(ts))


def _grid(rows: list[tuple], out: TextIO) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip(), file=out)


def print_table(state: FleetState, out: TextIO | None = None) -> None:
    """Everything JSON carries, as text: fleet line, engines, alerts, sources, GPUs, queues, cluster."""
    out = out if out is not None else sys.stdout  # the stream of now, not the one at import time
    from .format import age_human, count_human, pct_human, percentile_human, rate_human, seconds_human
    from .text import plain

    f = state.fleet
    print(f"infertop snapshot at {_clock(state.taken_at)} · window {state.window_s:g} s · "
          f"SLO TTFT p99 ≤{seconds_human(state.slo.ttft_p99_s)} ITL p95 ≤{seconds_human(state.slo.itl_p95_s)} "
          f"E2E p99 ≤{seconds_human(state.slo.e2e_p99_s)} queue p99 ≤{seconds_human(state.slo.queue_p99_s)} "
          f"KV ≤{pct_human(state.slo.kv_cache_pct)}", file=out)
    print(f"fleet: engines up {f.engines_up}/{f.engines} · running {count_human(f.running)} · "
          f"waiting {count_human(f.waiting)} · req/s {rate_human(f.requests_per_s)} · "
          f"gen tok/s {rate_human(f.generation_tokens_per_s)} · TTFT p50 {seconds_human(f.ttft_p50_s)} "
          f"p99 {seconds_human(f.ttft_p99_s)} · ITL p95 {seconds_human(f.itl_p95_s)} · "
          f"E2E p99 {seconds_human(f.e2e_p99_s)} · KV {pct_human(f.kv_cache_pct_mean)}/"
          f"{pct_human(f.kv_cache_pct_max)}", file=out)
    print(file=out)
    cols = ("engine", "state", "age", "run", "wait", "kv", "req/s", "gen t/s", "ttft p99", "itl p95", "e2e p99",
            "gpus", "model")
    rows: list[tuple] = [cols]
    for e in state.engines:
        s, fr = e.stats, e.freshness
        age = "—" if fr.age_s is None else ("now" if fr.status == FRESH else age_human(fr.age_s) + " ago")
        rows.append((plain(s.name), s.state, age, count_human(s.running), count_human(s.waiting),
                     pct_human(s.kv_cache_pct), rate_human(s.requests_per_s), rate_human(s.generation_tokens_per_s),
                     percentile_human(s, "ttft_p99_s"), percentile_human(s, "itl_p95_s"),
                     percentile_human(s, "e2e_p99_s"),
                     ",".join(plain(g) for g in e.gpus) or "—", plain(s.model or "—")))
    if state.engines:
        _grid(rows, out)
    else:
        print("engines: none configured (add --engine URL or an 'engines:' list in the config)", file=out)
    print(file=out)
    if state.alerts:
        print(f"alerts ({len(state.alerts)}):", file=out)
        for a in state.alerts:
            print(f"  {a.severity:<8} {plain(a.target)}: {plain(a.text)}", file=out)
    else:
        print("alerts: none — every engine within its SLO targets", file=out)
    verdicts = verdicts_of(state)
    if verdicts:
        print(f"\nverdicts ({len(verdicts)}):", file=out)
        for v in verdicts:
            print(f"  {v.severity:<8} {v.kind} {plain(v.subject)}: {plain(v.explanation, 400)}", file=out)
            for r in v.remedies:
                print(f"           → {plain(str(r), 400)}", file=out)
    print(file=out)
    print("sources:", file=out)
    for src in state.sources:
        if src.ok:
            word = "stale" if src.stale else "ok"
            detail = f"last read {age_human(src.age_s)} ago" if src.age_s is not None else ""
        else:
            word = "down"
            detail = f"since {_clock(src.since)}: {plain(src.error or '')}"
        print(f"  {src.kind:<10} {plain(src.name):<28} {word:<5} {detail}".rstrip(), file=out)
    _print_gpus(state, out)
    _print_queues(state, out)
    _print_cluster(state, out)
    _print_autoscalers(state, out)
    _print_slo(state, out)


def _print_gpus(state: FleetState, out: TextIO) -> None:
    from .format import DASH, pct_human
    from .domain.gpu import classify
    from .text import plain

    print(file=out)
    if not state.gpus:
        print("gpus: none (the GPU sources above say why; add --dcgm URL or gpu.dcgm in the config)", file=out)
        return

    def num(v, unit: str = "") -> str:
        return DASH if v is None else f"{v:.0f}{unit}"

    multi_host = len({g.host for g in state.gpus}) > 1
    rows: list[tuple] = [("gpu", "status", "util", "memory", "temp", "power", "sm clock", "throttle", "ecc", "xid",
                          "engine", "name")]

    def add(g, prefix: str = "") -> None:
        label = prefix + (f"{g.host}:{g.label}" if multi_host and not prefix and g.host else g.label)
        status = classify(g) + (f" ({g.error})" if g.error else "")
        mem = (DASH if g.mem_used_bytes is None or not g.mem_total_bytes
               else f"{g.mem_used_bytes / 2**30:.1f}/{g.mem_total_bytes / 2**30:.0f}G")
        power = (f"{num(g.power_w)}/{num(g.power_limit_w)}W" if g.power_limit_w else num(g.power_w, "W"))
        clock = num(g.sm_clock_mhz) + (f"/{num(g.sm_clock_max_mhz)}" if g.sm_clock_max_mhz else "")
        ecc = DASH if g.ecc_uncorrected is None else f"{num(g.ecc_corrected)}/{g.ecc_uncorrected}"
        engines = sorted({g.engine} if g.engine else {p.engine for p in g.processes or () if p.engine})
        rows.append((plain(label), plain(status), pct_human(g.util_pct), mem, num(g.temp_c, "°C"), power, clock,
                     g.throttle_words or DASH, ecc, num(g.last_xid), plain(",".join(engines) or g.pod or DASH),
                     plain(g.mig_profile or g.name or DASH)))
        for m in g.mig_devices or ():
            add(m, "└ ")

    for g in state.gpus:
        add(g)
    _grid(rows, out)


def _print_queues(state: FleetState, out: TextIO) -> None:
    """Per gateway / endpoint picker: its classes or bands, then the engines behind it."""
    from .format import age_human, count_human, pct_human, seconds_human
    from .text import plain

    from .state.queues import queue_sources

    for q in queue_sources(state.queues):
        print(file=out)
        fr = q.freshness
        head = f"queue {q.kind} {plain(q.name)} ({plain(q.url)}"
        head += ", via Prometheus)" if q.via == "prometheus" else ")"
        if fr.status == FRESH:
            head += " · fresh"
        elif fr.status == "stale":
            head += f" · STALE since {_clock(fr.since)} ({plain(fr.reason or '')}), last read {age_human(fr.age_s)} ago"
        else:
            head += f" · unavailable: {plain(fr.reason or '')}"
        head += f" · queued {count_human(q.queued)} · oldest {seconds_human(q.oldest_wait_s)}"
        if q.pool_saturation_pct is not None:
            head += f" · saturation {pct_human(q.pool_saturation_pct)}"
        if q.admin_error:
            head += f" · {plain(q.admin_error)}"
        if getattr(q, "note", None):  # "20000 classes, first 64 shown": the totals count them all
            head += f" · {plain(q.note)}"
        print(head, file=out)
        if q.classes:
            rows: list[tuple] = [("class", "prio", "depth", "oldest", "wait p50", "wait p99", "budget", "weight",
                                  "max wait", "share", "promoted")]
            for c in q.classes:
                rows.append((plain(c.name), "—" if c.priority is None else f"{c.priority:g}", count_human(c.depth),
                             "0" if c.oldest_wait_s == 0 else seconds_human(c.oldest_wait_s),
                             seconds_human(c.wait_p50_s),
                             seconds_human(c.wait_p99_s) + (" OVER" if c.over_budget else ""),
                             seconds_human(c.budget_s), "—" if c.weight is None else f"{c.weight:g}",
                             seconds_human(c.max_wait_s), pct_human(c.share_pct), count_human(c.promotions)))
            _grid([tuple("  " + str(r[0]) if i == 0 else v for i, v in enumerate(r)) for r in rows], out)
        if q.engines:
            rows = [("engine", "in flight", "cap", "saturation", "vllm waiting", "state")]
            for e in q.engines:
                word = ("draining" if e.draining else "serving") if e.draining is not None else "—"
                if e.up is False:
                    word = "down"
                rows.append((plain(e.name), count_human(e.in_flight), count_human(e.cap), pct_human(e.saturation_pct),
                             count_human(e.vllm_waiting), word))
            _grid([tuple("  " + str(r[0]) if i == 0 else v for i, v in enumerate(r)) for r in rows], out)


def _print_cluster(state: FleetState, out: TextIO) -> None:
    from .format import age_human
    from .text import plain

    c = state.cluster
    if c is None:
        return
    print(file=out)
    fr = c.freshness
    snap = c.snapshot
    head = f"cluster: {plain(fr.source or (snap.context if snap else ''))}"
    if fr.status == FRESH:
        head += " · fresh"
    elif fr.status == "stale":
        head += f" · STALE since {_clock(fr.since)} ({plain(fr.reason or '')}), last good read {age_human(fr.age_s)} ago"
    else:
        head += f" · unavailable: {plain(fr.reason or '')}"
    print(head, file=out)
    if snap is None:
        return
    for w in snap.workloads:
        hpa = snap.hpa_for(w)
        extra = f" · HPA {hpa.min_replicas}..{hpa.max_replicas}: {plain(hpa.why_not_scaling or '')}" if hpa else ""
        print(f"  {w.kind} {plain(w.namespace)}/{plain(w.name)}: {w.ready}/{w.desired} ready, "
              f"rollout {w.rollout}{extra}", file=out)
    bad = [p for p in snap.pods if p.problem]
    print(f"  pods: {len(snap.pods)} ({len(bad)} with problems) · nodes: {len(snap.nodes)} · "
          f"warnings: {len(snap.warnings)}", file=out)
    for p in bad[:5]:
        print(f"    {plain(p.namespace)}/{plain(p.name)}: {plain(p.problem)}", file=out)
    for err in snap.errors:
        print(f"  cannot read {plain(err)}", file=out)


def _print_autoscalers(state: FleetState, out: TextIO) -> None:
    """Each workload's autoscalers (the advisor's advice, the HPA) and the advisor's latest decisions."""
    from .text import plain

    if not state.autoscalers:
        return
    print(file=out)
    print("autoscalers:", file=out)
    for v in state.autoscalers:
        print(f"  {v['kind']} {plain(v['namespace'])}/{plain(v['name'])}: replicas {v.get('current')}, "
              f"bounds {v.get('min_replicas')}-{v.get('max_replicas')} ({plain(v.get('bounds_from'))}), "
              f"advisor mode {v.get('mode')}", file=out)
        for a in v.get("autoscalers") or ():
            arrow = f"{a.get('current', '?')} → {a.get('desired', '?')}"
            print(f"    {plain(a.get('source')):<9} {plain(a.get('name')):<24} {arrow:<8} {plain(a.get('why') or '')}",
                  file=out)
        for d in (v.get("decisions") or [])[:3]:
            print(f"    {_clock(d.get('at'))} {d.get('action', ''):<11} {plain(d.get('reason'))}", file=out)
        src, rest = v.get("queue_source"), v.get("queue_fleet_wide")
        if src:  # where the queue depth the advisor read came from (as the Autoscaler pane says it)
            print(f"    queue depth from: {plain(src.get('text'), 400)}", file=out)
        if rest and rest.get("series"):
            kinds = ", ".join(f"{plain(k)} {d:g}" for k, d in (rest.get("depth_by_queue") or {}).items())
            print(f"    fleet-wide, no workload's: {kinds} ({rest['series']} series)", file=out)


def _print_slo(state: FleetState, out: TextIO) -> None:
    """Per class: its objective, the worst engine's stage budgets, burn rates with their windows, the week's
    budget used and the capacity answer; per engine its class and why; cost."""
    from .analysis.slo.text import slo_lines

    print(file=out)
    for line in slo_lines(state.slo_report):
        print(line, file=out)

