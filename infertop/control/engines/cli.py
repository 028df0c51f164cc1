"""``infertop engine …``: local engine lifecycle without the TUI.

    infertop engine start NAME [KEY=VALUE…] [--timeout S]
    infertop engine stop NAME [--grace S]
    infertop engine restart NAME [KEY=VALUE…] [--grace S] [--timeout S]
    infertop engine set NAME max_num_seqs=N [KEY=VALUE…] [--grace S] [--no-rollback]
    infertop engine status [NAME] [--json]
    infertop engine logs NAME [-n N]
    infertop engine forget NAME

NAME is a launch profile in the config (``profiles:``) for ``start``, and
the engine's name (the profile it was started from) afterwards.  Common
options, before or after the action: ``--config FILE``, ``--state-dir DIR``.

``--unaudited`` (mutating actions): act even when the audit log cannot be
written (otherwise such an action is refused).

Each mutating action runs through the one pipeline (:func:`~infertop.control.runner.run_blocking`,
confirmed by the command itself: :class:`~infertop.control.runner.CommandLine`), which writes its
audit lines.

Exit status: 0 done; 1 the action failed (the reason is printed, with the
engine's last log lines for a failed start); 2 configuration or usage
error (one line); 3 refused (read-only mode, the audit log cannot be
written, or the recorded PID is no longer the engine infertop started —
its state file is then kept aside as ``NAME.stale-<time>.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any, NoReturn

from ...config import ConfigError, default_config_path, load_config
from ...private_fs import default_state_dir
from ..audit import AuditLog, default_audit_path
from ..gateway.drain import GatewayDrain, find_gateway
from ..pipeline import ActionRun
from ..runner import CommandLine, run_blocking
from .command import DEFAULT_MODULE, parse_assignments
from .errors import AuditRefusedError, EngineError, InvalidArgsError, NotOurProcessError
from .manager import EngineManager
from .progress import EngineProgress
from .state import EngineRecord

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_REFUSED = 0, 1, 2, 3
MUTATING = ("start", "stop", "restart", "set", "forget")


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        raise _UsageError(f"{self.prog}: {message}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                   help=f"YAML config with profiles (default: {default_config_path()})")
    p.add_argument("--state-dir", metavar="DIR", default=argparse.SUPPRESS,
                   help=f"where engine state and logs live (default: {default_state_dir()})")
    p.add_argument("--module", default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # tests: a fake engine
    p.add_argument("--unaudited", action="store_true", default=argparse.SUPPRESS,
                   help="act even when the audit log cannot be written (otherwise refused)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="infertop engine", description="Start, stop and re-configure local vLLM engines.")
    _common(p)
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    sub.required = True

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        _common(sp)
        return sp

    sp = add("start", "start an engine from a launch profile and wait until /health answers")
    sp.add_argument("name", metavar="NAME", help="profile name (also the engine's name)")
    sp.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="override profile arguments")
    sp.add_argument("--timeout", type=float, metavar="S", help="health timeout (default: the profile's)")

    sp = add("stop", "SIGTERM (vLLM drains), SIGKILL after the grace period")
    sp.add_argument("name", metavar="NAME")
    sp.add_argument("--grace", type=float, metavar="S", help="seconds before SIGKILL (default: the profile's)")

    sp = add("restart", "stop, then start with the same (or changed) arguments")
    sp.add_argument("name", metavar="NAME")
    sp.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    sp.add_argument("--grace", type=float, metavar="S")
    sp.add_argument("--timeout", type=float, metavar="S")

    sp = add("set", "change arguments: drain, restart with them, verify they took effect")
    sp.add_argument("name", metavar="NAME")
    sp.add_argument("assignments", nargs="+", metavar="KEY=VALUE", help="e.g. max_num_seqs=8")
    sp.add_argument("--grace", type=float, metavar="S")
    sp.add_argument("--timeout", type=float, metavar="S")
    sp.add_argument("--no-rollback", action="store_true",
                    help="if the new arguments fail, leave the engine stopped")

    sp = add("status", "list engines started by infertop")
    sp.add_argument("name", nargs="?", metavar="NAME")
    sp.add_argument("--json", action="store_true")

    sp = add("logs", "print the end of an engine's log")
    sp.add_argument("name", metavar="NAME")
    sp.add_argument("-n", "--lines", type=int, default=50, metavar="N")

    sp = add("forget", "drop the state of an engine whose process is gone (signals nothing)")
    sp.add_argument("name", metavar="NAME")
    return p


def _printer(out=None):
    """Progress lines: each phase change at once, then at most one line every 2 s."""
    out = out or sys.stdout
    last = {"phase": None, "t": 0.0, "text": None}

    def progress(ev: EngineProgress) -> None:
        now = time.monotonic()
        text = ev.line()
        if ev.phase == last["phase"] and (now - last["t"] < 2.0 or text == last["text"]):
            return
        last.update(phase=ev.phase, t=now, text=text)
        print(text, file=out, flush=True)

    return progress


def _fmt_uptime(s: float) -> str:
    s = int(s)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def _record_json(r: EngineRecord) -> dict[str, Any]:
    d = asdict(r)
    d["uptime_s"] = round(r.uptime_s, 1)
    d["cmdline"] = list(r.cmdline)
    d["pids"] = list(r.pids)
    d["foreign"] = r.foreign
    return d


def _print_status(records: list[EngineRecord], as_json: bool) -> None:
    if as_json:
        print(json.dumps([_record_json(r) for r in records], indent=1, default=str))
        return
    if not records:
        print("no engines started by infertop")
        return
    rows = [("NAME", "PHASE", "PID", "PORT", "UPTIME", "MAX_SEQS", "RESTARTS", "URL")]
    for r in records:
        rows.append((r.name, r.phase, str(r.pid), str(r.port),
                     _fmt_uptime(r.uptime_s) if r.alive else "-",
                     str(r.max_num_seqs) if r.max_num_seqs is not None else "default",
                     str(r.restarts), r.url))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for r in records:
        if r.detail:
            print(f"{r.name}: {r.detail}")
        if r.foreign and r.owner_text:
            print(f"{r.name}: {r.owner_text}, still running")


def _fail(e: EngineError) -> int:
    print(f"error: {e.reason}", file=sys.stderr, flush=True)
    if e.log_tail:
        where = getattr(e, "log_path", None)
        print(f"last log lines{f' ({where})' if where else ''}:", file=sys.stderr)
        for line in e.log_tail:
            print(f"  {line}", file=sys.stderr)
    if isinstance(e, (NotOurProcessError, AuditRefusedError)):
        return EXIT_REFUSED
    return EXIT_FAILED


NO_GATEWAY = ("no infertop gateway in front of {name}: requests arriving while vLLM drains get HTTP 500 from "
              "vLLM 0.32; run `infertop gateway` in front of it (config `gateway:` lists it) and they wait in "
              "its queue instead")


def _gateway_for(cfg, mgr: EngineManager, name: str) -> GatewayDrain | None:
    """The infertop gateway fronting a running engine (config ``gateway:`` / ``queues.gateways``), said
    on stdout either way; None when there is none (or the engine is not running)."""
    rec = mgr.managed(name)
    if rec is None:
        return None
    gw, warnings = find_gateway(cfg, name, rec.url)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr, flush=True)
    if gw is None:
        print(f"note: {NO_GATEWAY.format(name=name)}", flush=True)
    else:
        print(f"{name}: drained at {gw.label} first (engine {gw.engine!r} there), undrained once done", flush=True)
    return gw


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as e:
        print(str(e), file=sys.stderr)
        return EXIT_CONFIG
    try:
        cfg = load_config(getattr(args, "config", None))
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    if cfg.read_only and args.action in MUTATING:
        print(f"refused: read-only mode (read_only: true in {cfg.source}); 'engine {args.action}' changes things",
              file=sys.stderr)
        return EXIT_REFUSED
    try:
        return _run(args, cfg)
    except BrokenPipeError:  # `engine status | head`: the reader went away, not an error of ours
        from ...pipes import closed_pipe

        return closed_pipe()
    except OSError as e:  # a filesystem error anywhere: one line, never a traceback
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        print(f"error: {e.strerror or e}{where}", file=sys.stderr)
        return EXIT_FAILED


def _run(args: argparse.Namespace, cfg) -> int:
    """The action, then the audit's word: an outcome that could not be written (the disk filled up
    during a restart) turns a success into exit 1 with one line saying what the log lacks."""
    audit_holder: list[AuditLog] = []
    rc = _act(args, cfg, audit_holder)
    unwritten = audit_holder[0].unwritten if audit_holder else []
    if unwritten and not getattr(args, "unaudited", False):  # --unaudited: acting without a record was asked for
        print(f"error: {'; '.join(unwritten[:3])} — what was done is above, but the audit log does not "
              "have its outcome", file=sys.stderr)
        return EXIT_FAILED if rc == EXIT_OK else rc
    return rc


def _pipeline(mgr: EngineManager, verb: str, name: str, *args: Any, unaudited: bool = False, **kw: Any) -> Any:
    """Run the action through the one pipeline, the command as its confirmation; the manager's result,
    or its error raised again (printed by the caller)."""
    kind = mgr.call(verb, name, *args, unaudited=unaudited, **kw)
    run_blocking(ActionRun(kind, kind.target), CommandLine(), audit=mgr.audit, unaudited=unaudited)
    return kind.returned()


def _act(args: argparse.Namespace, cfg, audit_holder: list) -> int:
    state_dir = getattr(args, "state_dir", None)
    audit = AuditLog(cfg.audit_log or ((state_dir and f"{state_dir}/audit.jsonl") or default_audit_path()))
    audit_holder.append(audit)
    unaudited = bool(getattr(args, "unaudited", False))
    mgr = EngineManager(state_dir, audit, module=getattr(args, "module", DEFAULT_MODULE),
                        profiles=cfg.profiles)
    progress = _printer()
    try:
        overrides = parse_assignments(getattr(args, "assignments", None) or [])
    except InvalidArgsError as e:
        print(f"infertop engine {args.action}: {e.reason}", file=sys.stderr)
        return EXIT_CONFIG

    try:
        if args.action == "start":
            profile = cfg.profiles.get(args.name)
            if profile is None:
                where = cfg.source or default_config_path()
                known = ", ".join(sorted(cfg.profiles)) or "none"
                print(f"config error: no profile {args.name!r} in {where} (profiles: {known})", file=sys.stderr)
                return EXIT_CONFIG
            rec = _pipeline(mgr, "start", args.name, profile, progress, overrides=overrides,
                            timeout_s=args.timeout, unaudited=unaudited)
            print(f"{rec.name}: running, pid {rec.pid}, {rec.url}, healthy after {rec.startup_s:.1f} s")
            return EXIT_OK
        if args.action == "stop":
            res = _pipeline(mgr, "stop", args.name, args.grace, progress, unaudited=unaudited,
                            gateway=_gateway_for(cfg, mgr, args.name))
            print(f"{res.name}: stopped ({res.reason})")
            return EXIT_OK
        if args.action == "restart":
            cur = mgr.status(args.name)
            profile = cfg.profiles.get(cur.profile_name) if cur is not None else None
            rec = _pipeline(mgr, "restart", args.name, overrides, profile=profile, progress=progress,
                            grace_s=args.grace, timeout_s=args.timeout, unaudited=unaudited,
                            gateway=_gateway_for(cfg, mgr, args.name))
            print(f"{rec.name}: restarted, pid {rec.pid}, healthy after {rec.startup_s:.1f} s")
            return EXIT_OK
        if args.action == "set":
            cur = mgr.status(args.name)
            profile = cfg.profiles.get(cur.profile_name) if cur is not None else None
            done = _pipeline(mgr, "set", args.name, overrides, progress, grace_s=args.grace,
                             timeout_s=args.timeout, rollback=not args.no_rollback, profile=profile,
                             unaudited=unaudited, gateway=_gateway_for(cfg, mgr, args.name))
            if not done.changed:
                print(f"{done.name}: unchanged ({', '.join(f'{k}={v}' for k, v in done.new.items())})")
                return EXIT_OK
            changes = ", ".join(f"{k}: {done.old.get(k)} → {v}" for k, v in done.new.items())
            print(f"{done.name}: {changes}; verified in /proc/{done.record.pid}/cmdline; "
                  f"{done.total_s:.1f} s end to end (healthy after {done.startup_s:.1f} s)")
            if done.stop is not None:
                print(f"{done.name}: drain: {done.stop.reason}")
                if done.stop.gateway:
                    print(f"{done.name}: gateway: {done.stop.gateway}")
            return EXIT_OK
        if args.action == "status":
            if args.name:
                found = mgr.status(args.name)
                if found is None:
                    print(f"error: no engine named {args.name!r}", file=sys.stderr)
                    return EXIT_FAILED
                _print_status([found], args.json)
            else:
                _print_status(mgr.list(), args.json)
            return EXIT_OK
        if args.action == "logs":
            lines = mgr.tail_log(args.name, max(0, args.lines))
            if not lines and not mgr.log_path(args.name).exists():
                print(f"error: no log for engine {args.name!r} ({mgr.log_path(args.name)})", file=sys.stderr)
                return EXIT_FAILED
            for line in lines:
                print(line)
            return EXIT_OK
        if args.action == "forget":
            if _pipeline(mgr, "forget", args.name):
                print(f"{args.name}: state dropped")
                return EXIT_OK
            print(f"error: no engine named {args.name!r}", file=sys.stderr)
            return EXIT_FAILED
    except InvalidArgsError as e:
        print(f"infertop engine {args.action}: {e.reason}", file=sys.stderr)
        return EXIT_CONFIG
    except EngineError as e:  # start failures carry the log tail; set failures say if rolled back
        return _fail(e)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
