"""Command line: argv -> Settings -> the TUI, or a headless subcommand.

    infertop [--config F] [--engine URL]... [--demo] [--read-only]
    infertop snapshot [--json] [--window S] [--engine URL]... [--demo]
    infertop sim [--engines N] ...
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
from .sources.vllm import EngineEndpoint

EXIT_CONFIG = 2


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML config (default: {default_config_path()})")
    p.add_argument("--engine", metavar="URL", action="append", default=[],
                   help="watch the vLLM engine at URL (repeatable; adds to the config's engines)")
    p.add_argument("--demo", action="store_true", help="start the bundled simulator and watch it")
    p.add_argument("--demo-engines", type=int, default=6, metavar="N", help="engines in --demo (default 6)")
    p.add_argument("--refresh", type=float, metavar="S", help="poll interval in seconds (default 1)")


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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sim":
        from .sim.cli import main as sim_main

        return sim_main(argv[1:])
    if argv and argv[0] == "snapshot":
        return snapshot_main(argv[1:])
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
        if args.demo:
            from .demo import start_demo

            demo = start_demo(args.demo_engines)
            endpoints = demo.endpoints + endpoints_for(cfg, args.engine, default_local=False)
            notes.append(f"Demo: {len(demo.endpoints)} simulated vLLM engines with bursty load (infertop sim).")
            if cfg.source is None:
                # The simulated requests are long (hundreds of tokens): judge end-to-end
                # latency by a long-form budget so alerts point at the bursts.
                cfg.slo.e2e_p99_s = 20.0
                notes.append("Demo SLO: E2E p99 ≤ 20 s (long outputs); other targets are the chat defaults.")
        else:
            endpoints = endpoints_for(cfg, args.engine, default_local=True)
        settings = Settings(config=cfg, endpoints=endpoints, read_only=cfg.read_only,
                            mode="demo" if args.demo else "local", notes=notes)
        InfertopApp(settings).run()
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
        if args.demo:
            from .demo import start_demo

            demo = start_demo(args.demo_engines)
            endpoints = demo.endpoints + endpoints_for(cfg, args.engine, default_local=False)
        else:
            endpoints = endpoints_for(cfg, args.engine, default_local=True)
        doc = asyncio.run(collect_snapshot(endpoints, cfg, args.window))
    finally:
        if demo is not None:
            demo.stop()
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print_table(doc)
    return 0


async def collect_snapshot(endpoints: list[EngineEndpoint], cfg: Config, window_s: float) -> dict:
    """Poll for ``window_s`` seconds and return the derived stats as plain data."""
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
        ],
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
    for s in doc["sources"]:
        if not s["ok"]:
            print(f"{s['name']}: {s['error']}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
