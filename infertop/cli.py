"""Command line: argv -> Settings -> the TUI, or a headless subcommand.

    infertop [GLOBAL FLAGS] [COMMAND [FLAGS]]
    infertop [--config F] [--engine URL]... [--dcgm URL]... [--demo] [--read-only]
    infertop snapshot [--json] [--window S] [--engine URL]... [--dcgm URL]... [--demo]
    infertop sim [--engines N] ...
    infertop engine start|stop|restart|status|logs NAME; infertop engine set NAME max_num_seqs=N

Global flags go before or after the command (``infertop --config X snapshot``
is ``infertop snapshot --config X``): those before it are handed to the
command's own parser.  A command that takes only some of them (``engine``:
``--config``; ``sim``: none) refuses the others by name.  Every usage error is
one line and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from . import __version__
from .config_build import check_value, range_error
from .config import (
    Config,
    ConfigError,
    DEFAULT_LOCAL_URL,
    QueueEppConfig,
    QueueGatewayConfig,
    cross_checks,
    default_config_path,
    engine_name_from_url,
    load_config,
)
from .demo import DemoError
from .sources.sanitize import redact_url
from .sources.vllm import EngineEndpoint

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_REFUSED = 0, 1, 2, 3  # EXIT_CRASH (70) lives in crash.py
MAX_DEMO_ENGINES = 256


class _Parser(argparse.ArgumentParser):
    """A usage error is one line (no usage dump) and exit code 2."""

    def error(self, message: str):  # noqa: ANN201 — argparse's signature
        self.exit(EXIT_CONFIG, f"{self.prog}: {message}\n")


def _flag_number(check: Callable[[float], str | None], *, integer: bool = False) -> Callable[[str], float]:
    """An argparse type: a number that ``check`` finds nothing wrong with."""

    def parse(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if integer else 'a number'}, got {text!r}")
        why = check(value)
        if why:
            raise argparse.ArgumentTypeError(why)
        return value

    return parse


def _bounded(cls: type, name: str) -> Callable[[str], float]:
    """A flag that sets config field ``cls.name``: the file's own bounds."""
    return _flag_number(lambda v: check_value(cls, name, v))


def _number(lo: float, hi: float, *, integer: bool = False) -> Callable[[str], float]:
    return _flag_number(lambda v: range_error(v, lo, hi), integer=integer)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML config (default: {default_config_path()})")
    p.add_argument("--engine", metavar="URL", action="append", default=[],
                   help="watch the vLLM engine at URL (repeatable; adds to the config's engines)")
    p.add_argument("--dcgm", metavar="URL", action="append", default=[],
                   help="read GPUs from the dcgm-exporter at URL, e.g. http://node:9400/metrics "
                        "(repeatable; adds to the config's gpu.dcgm)")
    p.add_argument("--gateway", metavar="URL", action="append", default=[],
                   help="watch the infertop gateway at URL (its /metrics; repeatable; adds to queues.gateways)")
    p.add_argument("--epp", metavar="URL", action="append", default=[],
                   help="watch an endpoint picker's flow-control /metrics at URL (repeatable; adds to queues.epp)")
    p.add_argument("--prometheus", metavar="URL",
                   help="read the engines (and GPUs) from the Prometheus at URL instead of scraping each "
                        "engine (sets prometheus.url and prometheus.engines)")
    p.add_argument("--demo", action="store_true", help="start the bundled simulator and watch it")
    p.add_argument("--demo-engines", type=_number(1, MAX_DEMO_ENGINES, integer=True), default=6, metavar="N",
                   help=f"engines in --demo (1..{MAX_DEMO_ENGINES}, default 6)")
    p.add_argument("--refresh", type=_bounded(Config, "refresh_s"), metavar="S",
                   help="poll interval in seconds (0.1..600, default 1)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig for the Cluster pane (default: $KUBECONFIG or "
                                                        "~/.kube/config; sets kube.kubeconfig)")
    p.add_argument("--context", metavar="NAME", help="Kubernetes context to show and act on (sets kube.context)")
    p.add_argument("--namespace", metavar="NS", action="append", default=[],
                   help="Kubernetes namespace(s), repeatable or comma-separated (sets kube.namespaces)")


class Command(NamedTuple):
    help: str  # one line in `infertop --help`
    run: Callable[[list[str]], int]
    globals: frozenset[str] | None = None  # the global flags it takes (dest names); None: all of _common's


def _sim(argv: list[str]) -> int:
    from .sim.cli import main as sim_main

    return sim_main(argv)


def _gateway(argv: list[str]) -> int:
    from .gateway.cli import main as gateway_main

    return gateway_main(argv)


def _engine(argv: list[str]) -> int:
    from .control.engines.cli import main as engine_main

    return engine_main(argv)


def _snapshot(argv: list[str]) -> int:
    return snapshot_main(argv)


def _record(argv: list[str]) -> int:
    """``infertop record FILE``: the headless flight recorder."""
    from .flight_cli import add_record_args, record_main

    p = _Parser(prog="infertop record", description="Append one fleet state per tick to FILE until stopped "
                                                    "(SIGINT/SIGTERM) or --duration is over.")
    _common(p)
    add_record_args(p)
    args = p.parse_args(argv)
    try:
        cfg, _ = resolve_config(args)
    except ConfigError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        with fleet_sources(args, cfg) as fleet:
            return record_main(args, cfg, fleet.endpoints, dcgm_urls=fleet.dcgm_urls,
                               engine_pods=fleet.engine_pods, mode=fleet.mode, prometheus=fleet.prometheus)
    except DemoError as e:
        print(f"infertop: demo: {e}", file=sys.stderr)
        return EXIT_FAILED


def _replay(argv: list[str]) -> int:
    """``infertop replay FILE``: the TUI over a recording or an incident bundle."""
    from .flight_cli import add_replay_args, open_replay, parse_at

    p = _Parser(prog="infertop replay", description="Play a recording or an incident bundle through the panes.")
    p.add_argument("--theme", help="theme name")
    add_replay_args(p)
    args = p.parse_args(argv)
    try:
        replay, span = open_replay(args.file)
    except ValueError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG  # a missing or damaged input file
    from .crash import run_tui
    from .state.fleet_types import FleetState
    from .state.recording.replay import Player
    from .ui.app import InfertopApp, Settings

    try:
        start = parse_at(args.at, span)
    except ValueError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    player = Player(replay, speed=args.speed, start_ts=start)
    first = replay.at(start if start is not None else span[0])
    cfg = Config()
    if first is not None:  # the recorded refresh, window and SLO targets, so the panes judge as they did
        st = FleetState.from_doc(first[1])
        cfg.refresh_s, cfg.window_s = st.refresh_s, st.window_s
        for name in ("ttft_p99_s", "itl_p95_s", "e2e_p99_s", "queue_p99_s", "kv_cache_pct"):
            setattr(cfg.slo, name, getattr(st.slo, name))
    if args.theme:
        cfg.theme = args.theme
    n = replay.count()
    notes = [f"Replay of {args.file}: {n} ticks from {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(span[0]))} "
             f"to {time.strftime('%H:%M:%S', time.localtime(span[1]))}. Space pauses, [ ] step, + - speed, g seeks."]
    try:
        from .state.recording.bundle import read_bundle_extras

        extras = read_bundle_extras(args.file)
        if extras is not None and extras.log_lines:
            notes.append(f"Incident bundle: {len(extras.log_lines)} log lines and {len(extras.audit_entries)} "
                         "audit entries recorded with it:")
            notes.extend(extras.log_lines[-200:])
    except Exception:  # noqa: BLE001 — a plain recording has no extras
        pass
    settings = Settings(config=cfg, endpoints=[], read_only=True, mode="replay", notes=notes, replay=player,
                        replay_path=args.file)
    try:
        return run_tui(InfertopApp(settings))
    finally:
        replay.close()


# The subcommands, in `infertop --help` order. A new one (record, replay) is one line here.
COMMANDS: dict[str, Command] = {
    "snapshot": Command("collect for a window, print a table or --json (for scripts)", _snapshot),
    "engine": Command("start, stop, restart, re-configure local vLLM engines (see: engine --help)", _engine,
                      frozenset({"config"})),
    "record": Command("append the fleet state to a flight recording each tick, headless (cron, systemd)", _record),
    "replay": Command("play a recording or an incident bundle through the panes", _replay, frozenset({"theme"})),
    "sim": Command("run simulated vLLM engines, GPUs and load (what --demo starts)", _sim, frozenset()),
    "gateway": Command("OpenAI-compatible priority proxy in front of the engines (see: gateway --help)",
                       _gateway, frozenset({"config"})),
}
_FLAG_NAMES = {"window_s": "--window"}  # dest -> flag where they differ


def _foreign_global(args: argparse.Namespace, cmd: Command) -> str | None:
    """The first global flag given before ``cmd`` that it does not take (the check is here,
    not in the command's parser, so the message names the flag instead of misreading its value)."""
    if cmd.globals is None:
        return None
    defaults = vars(build_parser().parse_args([]))
    for dest, value in vars(args).items():
        if dest not in ("command", "command_args") and dest not in cmd.globals and value != defaults.get(dest):
            return _FLAG_NAMES.get(dest, "--" + dest.replace("_", "-"))
    return None


def _epilog() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["commands (without one: the live TUI):"]
    lines += [f"  {name.ljust(width)}  {cmd.help}" for name, cmd in COMMANDS.items()]
    lines += ["", "Global flags go before or after the command; `infertop COMMAND --help` lists its flags.",
              "exit codes: 0 ok, 1 runtime failure, 2 usage or config error, 3 refused, 70 crash (see the log named)"]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="infertop", usage="%(prog)s [FLAGS] [COMMAND [FLAGS]]",
                description="Terminal control plane for LLM inference.", epilog=_epilog(),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"infertop {__version__}")
    _common(p)
    p.add_argument("--read-only", action="store_true", help="disable every action that changes anything")
    p.add_argument("--theme", help="theme name (infertop-dark, infertop-light, or any Textual theme)")
    p.add_argument("--window", dest="window_s", type=_bounded(Config, "window_s"), metavar="S",
                   help="sliding window for rates and percentiles (default 60; at least twice --refresh)")
    p.add_argument("--record", metavar="FILE", help="append every tick to a flight recording (infertop replay FILE)")
    p.add_argument("--no-auto", action="store_true",
                   help="the scaling advisor never applies a change by itself (advisor.mode auto becomes recommend)")
    p.add_argument("command", nargs="?", choices=list(COMMANDS), metavar="COMMAND", help=argparse.SUPPRESS)
    p.add_argument("command_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def build_snapshot_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="infertop snapshot", description="Collect for one window and print the stats.")
    _common(p)
    p.add_argument("--json", action="store_true", help="print JSON (default: a plain table)")
    p.add_argument("--window", type=_number(0, 86400), default=5.0, metavar="S",
                   help="how long to collect before printing (default 5 s)")
    return p


def resolve_config(args: argparse.Namespace) -> tuple[Config, list[str]]:
    """Load the config and apply command-line overrides; returns (config, notes).
    Raises ConfigError for the file and for flags that do not fit it (``--window`` below 2 × refresh)."""
    notes: list[str] = []
    cfg = load_config(args.config)
    if getattr(args, "refresh", None) is not None:
        cfg.refresh_s = args.refresh
    if getattr(args, "window_s", None) is not None:  # the TUI's --window (snapshot's is a duration)
        cfg.window_s = args.window_s
    if getattr(args, "theme", None):
        cfg.theme = args.theme
    if getattr(args, "read_only", False):
        cfg.read_only = True
    if getattr(args, "kubeconfig", None):
        cfg.kube.kubeconfig = args.kubeconfig
    if getattr(args, "context", None):
        cfg.kube.context = args.context
    for flag in ("engine", "dcgm"):  # a user:password in a flag's URL is shown nowhere either
        if getattr(args, flag, None):
            setattr(args, flag, [redact_url(u) for u in getattr(args, flag)])
    for url in getattr(args, "gateway", None) or []:
        cfg.queues.gateways.append(QueueGatewayConfig(url=_flag_url("--gateway", url)))
    for url in getattr(args, "epp", None) or []:
        cfg.queues.epp.append(QueueEppConfig(url=_flag_url("--epp", url)))
    if getattr(args, "namespace", None):
        cfg.kube.namespaces = [n.strip() for v in args.namespace for n in v.split(",") if n.strip()]
    if getattr(args, "prometheus", None):
        url = args.prometheus if "://" in args.prometheus else "http://" + args.prometheus
        if not url.startswith(("http://", "https://")):
            raise ConfigError("command line", None, "--prometheus", f"must be an http:// or https:// URL, got {url!r}")
        cfg.prometheus.url, cfg.prometheus.engines = redact_url(url), True
    # The TUI's window must hold two polls; snapshot (no window_s flag) collects for its own --window.
    checks = cross_checks(cfg.refresh_s, cfg.window_s, cfg.history_s) if hasattr(args, "window_s") else []
    for name, why in checks:
        flags = " / ".join(f for f, given in (("--refresh", getattr(args, "refresh", None)),
                                               ("--window", getattr(args, "window_s", None))) if given is not None)
        raise ConfigError("command line" if flags else cfg.source or "defaults", None,
                          f"{name} (with {flags})" if flags else name, why)
    if cfg.source is None:
        notes.append(f"No config file at {default_config_path()}: running on defaults. "
                     "Add engines with --engine URL or an 'engines:' list in that file (see README).")
    return cfg, notes


def _flag_url(flag: str, url: str) -> str:
    """A URL flag's value, http:// added when it has no scheme; raises ConfigError when unusable."""
    if "://" not in url:
        url = "http://" + url
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1].strip("/")) == 0:
        raise ConfigError("command line", None, flag, f"expected an http(s) URL, got {redact_url(url)!r}")
    return redact_url(url)


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


def prometheus_engines(args: argparse.Namespace, cfg: Config) -> bool:
    """Engines come from Prometheus: --prometheus, ``prometheus.engines: true``, or a
    ``prometheus.url`` with no engine listed anywhere (``prometheus.engines`` unset)."""
    p = cfg.prometheus
    if not p.url or args.demo or p.engines is False:
        return False
    return p.engines is True or not (cfg.engines or args.engine)


def start_engines(args: argparse.Namespace, cfg: Config):
    """(demo or None, endpoints): the simulator's engines with --demo, plus
    the config's and --engine ones (127.0.0.1:8000 when there are none;
    none when the engines come from Prometheus)."""
    if not args.demo:
        if prometheus_engines(args, cfg):
            return None, []
        # With launch profiles the engines are the ones infertop starts (and re-adopts): no phantom
        # 127.0.0.1:8000 beside them ("✗ local down", "1/2 engines up" while tiny served).
        return None, endpoints_for(cfg, args.engine, default_local=not cfg.profiles)
    from .demo import start_demo

    demo = start_demo(args.demo_engines)
    return demo, demo.endpoints + endpoints_for(cfg, args.engine, default_local=False)


@dataclass
class Fleet:
    """What a command watches: the engines (the simulator's with --demo), dcgm URLs, pod → engine map."""

    endpoints: list[EngineEndpoint]
    dcgm_urls: list[str]
    engine_pods: dict[str, str]
    state_dir: str | None = None
    demo: bool = False
    prometheus: bool = False  # the engines come from cfg.prometheus (PromFleetSource)

    @property
    def mode(self) -> str:
        return "demo" if self.demo else "live"


def _watch_demo_gateway(cfg: Config, demo, notes: list[str] | None) -> None:
    """The demo's gateway goes into the config the Queue pane reads (``queues.gateways``)."""
    gw = getattr(demo, "gateway", None)
    queues = getattr(cfg, "queues", None)
    if gw is None:
        return
    if notes is not None:
        notes.append(f"Demo: the infertop gateway at {gw.url} (admin {gw.admin_url}) sends mixed-class load "
                     "(realtime / batch / background) to the engines.")
    if queues is not None:
        from .config import QueueGatewayConfig

        queues.gateways.append(QueueGatewayConfig(url=gw.url, name="demo-gateway", admin_url=gw.admin_url,
                                                  token_env=gw.token_env))


@contextmanager
def fleet_sources(args: argparse.Namespace, cfg: Config, notes: list[str] | None = None) -> Iterator[Fleet]:
    """Start the simulator with --demo (and apply the demo's SLO targets), yield the
    :class:`Fleet`, stop the simulator on the way out. Raises DemoError."""
    demo, endpoints = start_engines(args, cfg)
    try:
        if demo is not None:
            if notes is not None:
                notes.append(f"Demo: {len(demo.endpoints)} simulated vLLM engines with bursty load (infertop sim).")
            from .snapshot import apply_demo_defaults

            apply_demo_defaults(cfg, notes)
            _use_demo_cluster(demo, cfg, notes)
            _watch_demo_gateway(cfg, demo, notes)
        from_prom = prometheus_engines(args, cfg)
        if from_prom and notes is not None:
            skipped = f" ({len(cfg.engines) + len(args.engine)} listed engines are not scraped)" if (
                cfg.engines or args.engine) else ""
            notes.append(f"Engines from Prometheus {cfg.prometheus.url}, refreshed every "
                         f"{cfg.prometheus.interval_s:g} s{skipped}.")
        yield Fleet(endpoints=endpoints, prometheus=from_prom,
                    dcgm_urls=([demo.dcgm_url] if demo is not None and demo.dcgm_url else []) + list(args.dcgm),
                    engine_pods=dict(demo.engine_pods) if demo is not None else {},
                    state_dir=demo.state_dir if demo is not None else None, demo=demo is not None)
    finally:
        if demo is not None:
            demo.stop()


def _use_demo_cluster(demo, cfg: Config, notes: list[str] | None) -> None:
    """Watch the simulator's Kubernetes API unless the user configured a cluster of their own."""
    if not demo.kubeconfig or cfg.kube.configured:
        return
    cfg.kube.kubeconfig, cfg.kube.context = demo.kubeconfig, demo.kube_context
    cfg.kube.namespaces = [demo.kube_namespace] if demo.kube_namespace else []
    cfg.kube.enabled = True
    if notes is not None:
        notes.append(f"Demo: a simulated Kubernetes cluster (context {demo.kube_context}): the engines are the pods "
                     f"of Deployment {demo.kube_namespace}/vllm, with an HPA.")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from .crash import report_crash

    try:
        if args.command is not None:
            # Global flags given before the command go to the command's parser, as if after it.
            cmd = COMMANDS[args.command]
            foreign = _foreign_global(args, cmd)
            if foreign:
                takes = ", ".join(f"--{g}" for g in sorted(cmd.globals or ())) or "none"
                print(f"infertop: {foreign} does not apply to '{args.command}' (global flags it takes: {takes})",
                      file=sys.stderr)
                return EXIT_CONFIG
            before = argv[: len(argv) - len(args.command_args) - 1]
            return cmd.run(before + args.command_args)
        return tui_main(args)
    except KeyboardInterrupt:
        print("infertop: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`, `| true`): nothing to report
        from .pipes import closed_pipe

        return closed_pipe()
    except Exception as e:  # noqa: BLE001 — never a traceback: a log file and one line
        return report_crash(e)


def tui_main(args: argparse.Namespace) -> int:
    try:
        cfg, notes = resolve_config(args)
    except ConfigError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    from .crash import run_tui
    from .ui.app import InfertopApp, Settings  # textual only for the TUI
    from .ui.themes import broken_theme

    problem = broken_theme(cfg.theme)
    if problem:  # the chosen theme would fail at its first paint (exit 70)
        print(f"infertop: {problem}", file=sys.stderr)
        return EXIT_CONFIG

    try:
        with fleet_sources(args, cfg, notes) as fleet:
            settings = Settings(config=cfg, endpoints=fleet.endpoints, read_only=cfg.read_only,
                                mode="demo" if fleet.demo else "local", notes=notes, dcgm_urls=fleet.dcgm_urls,
                                engine_pods=fleet.engine_pods, state_dir=fleet.state_dir, record_path=args.record,
                                prometheus=fleet.prometheus, no_auto=args.no_auto)
            return run_tui(InfertopApp(settings))
    except DemoError as e:
        print(f"infertop: demo: {e}", file=sys.stderr)
        return EXIT_FAILED


def managed_endpoints(cfg: Config, state_dir: str | None, known: set[str]) -> list[EngineEndpoint]:
    """The engines infertop itself started that still run (for ``snapshot``; the TUI adopts them
    itself), minus those already listed by name. Reads the state files; starts nothing."""
    from .private_fs import default_state_dir

    base = Path(state_dir) if state_dir else default_state_dir()
    if not (base / "engines").is_dir():
        return []  # nothing was ever started here: no manager, no /proc walk
    from .control.audit import AuditLog
    from .control.engines import EngineManager

    try:
        mgr = EngineManager(base, AuditLog(cfg.audit_log or str(base / "audit.jsonl")), profiles=cfg.profiles)
        records = [r for r in mgr.list() if r.alive and r.name not in known]
    except OSError:
        return []  # an unreadable state directory: the listed engines are still polled
    return [EngineEndpoint(r.name, r.url, r.max_num_seqs) for r in records]


def _backslash_unencodable(stream) -> None:
    """A character the stream cannot encode (a lone surrogate, anything under a strict
    ASCII locale) is written as a \\u escape, never a UnicodeEncodeError."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")


def snapshot_main(argv: list[str]) -> int:
    """Collect for one window and print the fleet state; the exit code says whether all is well
    (see :mod:`infertop.snapshot`)."""
    from .snapshot import collect_state, exit_code, print_table, write_json

    args = build_snapshot_parser().parse_args(argv)
    try:
        cfg, _ = resolve_config(args)
    except ConfigError as e:
        print(f"infertop: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        with fleet_sources(args, cfg) as fleet:
            endpoints = fleet.endpoints if fleet.prometheus else fleet.endpoints + managed_endpoints(
                cfg, fleet.state_dir, {e.name for e in fleet.endpoints})
            state = asyncio.run(collect_state(endpoints, cfg, args.window, dcgm_urls=fleet.dcgm_urls,
                                              engine_pods=fleet.engine_pods, mode=fleet.mode,
                                              prometheus=fleet.prometheus))
    except DemoError as e:
        print(f"infertop: demo: {e}", file=sys.stderr)
        return EXIT_FAILED
    _backslash_unencodable(sys.stdout)
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
