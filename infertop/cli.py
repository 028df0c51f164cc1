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
            from .snapshot import apply_demo_defaults

            apply_demo_defaults(cfg, notes)
        dcgm_urls = ([demo.dcgm_url] if demo is not None and demo.dcgm_url else []) + list(args.dcgm)
        settings = Settings(config=cfg, endpoints=endpoints, read_only=cfg.read_only,
                            mode="demo" if args.demo else "local", notes=notes, dcgm_urls=dcgm_urls,
                            engine_pods=demo.engine_pods if demo is not None else {})
        InfertopApp(settings).run()
    except DemoError as e:
        print(f"infertop: demo: {e}", file=sys.stderr)
        return 1
    finally:
        if demo is not None:
            demo.stop()
    return 0


def snapshot_main(argv: list[str]) -> int:
    """Collect for one window and print the fleet state; the exit code says whether all is well
    (see :mod:`infertop.snapshot`)."""
    from .snapshot import apply_demo_defaults, collect_state, exit_code, print_table, write_json

    args = build_snapshot_parser().parse_args(argv)
    try:
        cfg, _ = resolve_config(args)
    except ConfigError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    demo = None
    try:
        demo, endpoints = start_engines(args, cfg)
        if demo is not None:
            apply_demo_defaults(cfg)
        dcgm_urls = ([demo.dcgm_url] if demo is not None and demo.dcgm_url else []) + list(args.dcgm)
        state = asyncio.run(collect_state(endpoints, cfg, args.window, dcgm_urls=dcgm_urls,
                                          engine_pods=demo.engine_pods if demo is not None else None,
                                          mode="demo" if demo is not None else "live"))
    except DemoError as e:
        print(f"infertop: demo: {e}", file=sys.stderr)
        return 1
    finally:
        if demo is not None:
            demo.stop()
    if args.json:
        write_json(state, sys.stdout)
    else:
        print_table(state)
        for src in state.failing_sources():
            print(f"{src.name}: {src.error}", file=sys.stderr)
    return exit_code(state)


from .snapshot import collect_snapshot  # noqa: E402 — re-exported for scripts and tests


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
