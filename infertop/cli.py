"""Command line: argv -> Settings -> the TUI, or a headless subcommand.

    infertop [--config F] [--engine URL]... [--dcgm URL]... [--demo] [--read-only]
    infertop snapshot [--json] [--window S] [--engine URL]... [--dcgm URL]... [--demo]
    infertop sim [--engines N] ...
    infertop engine start|stop|restart|status|logs NAME; infertop engine set NAME max_num_seqs=N
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict

from . import __version__
from .config import Config, ConfigError, default_config_path, engine_name_from_url, load_config, DEFAULT_LOCAL_URL
from .demo import DemoError
from .sources.vllm import EngineEndpoint

EXIT_CONFIG = 2


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML config (default: {default_config_path()})")
    p.add_argument("--engine", metavar="URL", action="append", default=[],
                   help="watch the vLLM engine at URL (repeatable; adds to the config's engines)")
    p.add_argument("--dcgm", metavar="URL", action="append", default=[],
                   help="read GPUs from the dcgm-exporter at URL, e.g. http://node:9400/metrics "
                        "(repeatable; adds to the config's gpu.dcgm)")
    p.add_argument("--demo", action="store_true", help="start the bundled simulator and watch it")
    p.add_argument("--demo-engines", type=int, default=6, metavar="N", help="engines in --demo (default 6)")
    p.add_argument("--refresh", type=float, metavar="S", help="poll interval in seconds (default 1)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig for the Cluster pane (default: $KUBECONFIG or "
                                                        "~/.kube/config; sets kube.kubeconfig)")
    p.add_argument("--context", metavar="NAME", help="Kubernetes context to show and act on (sets kube.context)")
    p.add_argument("--namespace", metavar="NS", action="append", default=[],
                   help="Kubernetes namespace(s), repeatable or comma-separated (sets kube.namespaces)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="infertop", description="Terminal control plane for LLM inference.")
    p.add_argument("--version", action="version", version=f"infertop {__version__}")
    _common(p)
    p.add_argument("--read-only", action="store_true", help="disable every action that changes anything")
    p.add_argument("--theme", help="theme name (infertop-dark, infertop-light, or any Textual theme)")
    p.add_argument("--window", type=float, metavar="S", help="sliding window for rates and percentiles (default 60)")
    return p


def build_snapshot_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="infertop snapshot", description="Collect for one window and print the stats.")
    _common(p)
    p.add_argument("--json", action="store_true", help="print JSON (default: a plain table)")
    p.add_argument("--window", type=float, default=5.0, metavar="S",
                   help="how long to collect before printing (default 5 s)")
    return p


def resolve_config(args: argparse.Namespace) -> tuple[Config, list[str]]:
    """Load the config and apply command-line overrides; returns (config, notes)."""
    notes: list[str] = []
    cfg = load_config(args.config)
    if getattr(args, "refresh", None):
        cfg.refresh_s = args.refresh
    if getattr(args, "theme", None):
        cfg.theme = args.theme
    if getattr(args, "read_only", False):
        cfg.read_only = True
    if getattr(args, "kubeconfig", None):
        cfg.kube.kubeconfig = args.kubeconfig
    if getattr(args, "context", None):
        cfg.kube.context = args.context
    if getattr(args, "namespace", None):
        cfg.kube.namespaces = [n.strip() for v in args.namespace for n in v.split(",") if n.strip()]
    if cfg.source is None:
        notes.append(f"No config file at {default_config_path()}: running on defaults. "
                     "Add engines with --engine URL or an 'engines:' list in that file (see README).")
    return cfg, notes


def endpoints_for(cfg: Config, extra_urls: list[str], *, default_local: bool) -> list[EngineEndpoint]:
    eps = [EngineEndpoint(e.name, e.url, e.max_num_seqs, e.timeout_s) for e in cfg.engines]
    names = {e.name for e in eps}
    for url in extra_urls:
        if not url.startswith(("http://", "https://")):
            url = "http://" + url
        name = engine_name_from_url(url)
        while name in names:
            name += "'"
        names.add(name)
        eps.append(EngineEndpoint(name, url))
    if not eps and default_local:
        eps.append(EngineEndpoint("local", DEFAULT_LOCAL_URL))
    return eps


def start_engines(args: argparse.Namespace, cfg: Config):
    """(demo or None, endpoints): the simulator's engines with --demo, plus
    the config's and --engine ones (127.0.0.1:8000 when there are none)."""
    if not args.demo:
        return None, endpoints_for(cfg, args.engine, default_local=True)
    from .demo import start_demo

    demo = start_demo(args.demo_engines)
    return demo, demo.endpoints + endpoints_for(cfg, args.engine, default_local=False)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sim":
        from .sim.cli import main as sim_main

        return sim_main(argv[1:])
    if argv and argv[0] == "snapshot":
        return snapshot_main(argv[1:])
    if argv and argv[0] == "engine":
        from .control.engine_cli import main as engine_main

        return engine_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        cfg, notes = resolve_config(args)
        if args.window:
            cfg.window_s = args.window
    except ConfigError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    from .ui.app import InfertopApp, Settings  # textual only for the TUI

    demo = None
    try:
        demo, endpoints = start_engines(args, cfg)
        if demo is not None:
            notes.append(f"Demo: {len(demo.endpoints)} simulated vLLM engines with bursty load (infertop sim).")
            if cfg.source is None:
                # The simulated requests are long (hundreds of tokens): judge end-to-end
                # latency by a long-form budget so alerts point at the bursts.
                cfg.slo.e2e_p99_s = 20.0
                notes.append("Demo SLO: E2E p99 ≤ 20 s (long outputs); other targets are the chat defaults.")
        dcgm_urls = ([demo.dcgm_url] if demo is not None and demo.dcgm_url else []) + list(args.dcgm)
        settings = Settings(config=cfg, endpoints=endpoints, read_only=cfg.read_only,
                            mode="demo" if args.demo else "local", notes=notes, dcgm_urls=dcgm_urls,
                            engine_pods=demo.engine_pods if demo is not None else {},
                            state_dir=demo.state_dir if demo is not None else None)
        InfertopApp(settings).run()
    except DemoError as e:
        print(f"infertop: demo: {e}", file=sys.stderr)
        return 1
    finally:
        if demo is not None:
            demo.stop()
    return 0


def snapshot_main(argv: list[str]) -> int:
    args = build_snapshot_parser().parse_args(argv)
    try:
        cfg, _ = resolve_config(args)
    except ConfigError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    demo = None
    try:
        demo, endpoints = start_engines(args, cfg)
        dcgm_urls = ([demo.dcgm_url] if demo is not None and demo.dcgm_url else []) + list(args.dcgm)
        doc = asyncio.run(collect_snapshot(endpoints, cfg, args.window, dcgm_urls=dcgm_urls))
    except DemoError as e:
        print(f"infertop: demo: {e}", file=sys.stderr)
        return 1
    finally:
        if demo is not None:
            demo.stop()
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print_table(doc)
    return 0


async def collect_snapshot(endpoints: list[EngineEndpoint], cfg: Config, window_s: float, *,
                           dcgm_urls: list[str] | None = None) -> dict:
    """Poll for ``window_s`` seconds and return the derived stats as plain data
    (GPUs from NVML / ``cfg.gpu.dcgm`` + ``dcgm_urls`` / Prometheus at the end of the window)."""
    from .gpu_snapshot import gpu_snapshot_async
    from .analysis.alerts import engine_alerts
    from .analysis.fleet import fleet_quantile, totals
    from .sources.vllm import FleetCollector

    collector = FleetCollector(endpoints, interval_s=cfg.refresh_s, window_s=max(window_s, cfg.refresh_s))
    started = time.monotonic()
    try:
        while True:
            tick = time.monotonic()
            await collector.poll_once()
            if tick - started >= window_s:
                break
            await asyncio.sleep(max(0.0, cfg.refresh_s - (time.monotonic() - tick)))
    finally:
        await collector.aclose()
    snap = collector.snapshot()
    gpu_doc = await gpu_snapshot_async(cfg, list(dcgm_urls or []))
    cluster_doc = None
    if cfg.kube.configured:  # the Kubernetes view, when a context is configured
        from .sources.kube import cluster_document

        cluster_doc = await asyncio.to_thread(cluster_document, cfg.kube)
    windows = [w for c in collector.collectors for w in c.windows.values()]
    now = time.monotonic()
    return {
        "taken_at": snap.taken_at,
        "window_s": window_s,
        "engines": [asdict(e) | {"running_ratio": e.running_ratio} for e in snap.engines],
        "fleet": asdict(totals(snap.engines)) | {
            "ttft_p50_s": fleet_quantile(windows, "ttft", 0.5),
            "ttft_p99_s": fleet_quantile(windows, "ttft", 0.99),
            "itl_p95_s": fleet_quantile(windows, "itl", 0.95),
            "e2e_p99_s": fleet_quantile(windows, "e2e", 0.99),
        },
        "alerts": [asdict(a) for a in engine_alerts(snap.engines, cfg.slo)],
        "sources": [
            {"name": h.name, "kind": h.kind, "ok": h.ok, "error": h.last_error,
             "age_s": h.age_s(now), "latency_s": h.latency_s}
            for h in collector.health()
        ] + gpu_doc["sources"],  # GPU sources: kind nvml / dcgm / prometheus ("gpu" when none is configured)
        "gpus": gpu_doc["gpus"],
        **({"cluster": cluster_doc} if cluster_doc is not None else {}),
    }


def print_table(doc: dict) -> None:
    from .format import count_human, pct_human, rate_human, seconds_human

    cols = ("engine", "state", "run", "wait", "kv", "gen t/s", "ttft p99", "itl p95", "e2e p99")
    rows = [cols]
    for e in doc["engines"]:
        rows.append((e["name"], e["state"], count_human(e["running"]), count_human(e["waiting"]),
                     pct_human(e["kv_cache_pct"]), rate_human(e["generation_tokens_per_s"]),
                     seconds_human(e["ttft_p99_s"]), seconds_human(e["itl_p95_s"]), seconds_human(e["e2e_p99_s"])))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(cols))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    print_gpu_table(doc.get("gpus"))
    for s in doc["sources"]:
        if not s["ok"]:
            print(f"{s['name']}: {s['error']}", file=sys.stderr)


def print_gpu_table(gpus: list[dict] | None) -> None:
    """The GPU section of the plain snapshot: one line per GPU, MIG devices under their parent."""
    if gpus is None:
        return
    print()
    if not gpus:
        print("gpus: none (the GPU sources below say why; add --dcgm URL or gpu.dcgm in the config)")
        return
    from .format import DASH, pct_human

    def num(v, unit: str = "") -> str:
        return DASH if v is None else f"{v:.0f}{unit}"

    def mem(g: dict) -> str:
        u, t = g.get("mem_used_bytes"), g.get("mem_total_bytes")
        return DASH if u is None or not t else f"{u / 2**30:.1f}/{t / 2**30:.0f}G"

    multi_host = len({g.get("host") for g in gpus}) > 1
    cols = ("gpu", "status", "util", "memory", "temp", "power", "sm clock", "throttle", "ecc", "xid", "engine", "name")
    rows = [cols]

    def add(g: dict, prefix: str = "") -> None:
        label = prefix + (f"{g['host']}:{g['label']}" if multi_host and not prefix and g.get("host") else g["label"])
        status = g["status"] + (f" ({g['error']})" if g.get("error") else "")
        power = (f"{num(g.get('power_w'))}/{num(g.get('power_limit_w'))}W" if g.get("power_limit_w")
                 else num(g.get("power_w"), "W"))
        clock = num(g.get("sm_clock_mhz")) + (f"/{num(g.get('sm_clock_max_mhz'))}" if g.get("sm_clock_max_mhz") else "")
        ecc = DASH if g.get("ecc_uncorrected") is None else f"{num(g.get('ecc_corrected'))}/{g['ecc_uncorrected']}"
        engine = g.get("engine") or g.get("pod") or DASH
        rows.append((label, status, pct_human(g.get("util_pct")), mem(g), num(g.get("temp_c"), "°C"), power, clock,
                     g.get("throttle") or DASH, ecc, num(g.get("last_xid")), engine, g.get("mig_profile") or g.get("name") or DASH))
        for m in g.get("mig_devices") or []:
            add(m, "└ ")

    for g in gpus:
        add(g)
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(cols))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
