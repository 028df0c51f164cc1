"""``infertop gateway [--config FILE] [--listen HOST:PORT] [--admin-listen HOST:PORT]``."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from ..event_loop import loop_factory
from .config import address_error

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    from ..cli import _Parser  # one-line usage errors, exit code 2, like every infertop command

    p = _Parser(prog="infertop gateway",
                description="OpenAI-compatible priority proxy in front of vLLM engines (the config's gateway: "
                            "section). Admin token: the variable named by admin_token_env, or admin_token_file.")
    p.add_argument("--config", metavar="FILE", help="YAML config with a gateway: section")
    p.add_argument("--listen", metavar="HOST:PORT", help="client address (default: gateway.listen, 127.0.0.1:8100)")
    p.add_argument("--admin-listen", metavar="HOST:PORT", help="admin API address, loopback only "
                                                               "(default: gateway.admin_listen, 127.0.0.1:8101)")
    p.add_argument("--engine", metavar="URL", action="append", default=[],
                   help="an upstream engine URL (repeatable; added to gateway.engines)")
    return p


def main(argv: list[str]) -> int:
    from ..config import ConfigError, load_config
    from .admin import read_token
    from .config import GatewayEngine
    from .runner import GatewayRunner, resolve_engines
    from .server import note

    args = build_parser().parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    gw = cfg.gateway
    for flag, key, loopback in (("--listen", "listen", False), ("--admin-listen", "admin_listen", True)):
        value = getattr(args, key)
        if value is not None:
            why = address_error(value, loopback=loopback)
            if why:
                print(f"infertop gateway: {flag}: {why}", file=sys.stderr)
                return EXIT_CONFIG
            setattr(gw, key, value)
    for url in args.engine:
        if not url.startswith(("http://", "https://")):
            print(f"infertop gateway: --engine: expected an http:// URL, got {url!r}", file=sys.stderr)
            return EXIT_CONFIG
        gw.engines.append(GatewayEngine(url=url, name=f"e{len(gw.engines)}"))
    try:
        upstreams = resolve_engines(gw, cfg.engines, cfg.profiles)
        token = read_token(gw.admin_token_env, gw.admin_token_file)
        if not upstreams:
            raise ValueError("gateway.engines is empty (or give --engine URL)")
    except ValueError as e:
        print(f"infertop gateway: {e}", file=sys.stderr)
        return EXIT_CONFIG
    if token is None:
        note(f"admin API off: set {gw.admin_token_env} or gateway.admin_token_file to turn it on")
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as loop_runner:
            return loop_runner.run(_serve(GatewayRunner(gw, upstreams, token), gw.drain_grace_s))
    except OSError as e:
        print(f"infertop gateway: cannot listen: {e.strerror or e}", file=sys.stderr)
        return EXIT_FAILED


async def _serve(runner, grace_s: float) -> int:
    from .server import note

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await runner.start()
    engines = ", ".join(f"{e.name}={e.url} cap {e.cap}" for e in runner.policy.engines.values())
    note(f"listening on {runner.url} (admin: {runner.admin_url or 'off'}); engines: {engines}")
    print(f"gateway {runner.url}" + (f" admin {runner.admin_url}" if runner.admin_url else ""), flush=True)
    try:
        await stop.wait()
        note(f"stopping: waiting up to {grace_s:g} s for requests in flight")
    finally:
        await runner.stop(grace_s)
    return EXIT_OK
