"""``infertop record FILE`` (headless flight recorder) and ``infertop replay FILE``.

``record`` runs the same sources and the same fleet-state joiner as the TUI
and appends one state per tick to FILE until it is stopped (SIGINT/SIGTERM)
or ``--duration`` is over — for a cron job or a systemd unit. ``replay``
opens the TUI on a recording or an incident bundle: the same panes, fed by
the recorded states.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _duration(text: str) -> float:
    """Seconds from "90", "90s", "15m", "24h", "7d"."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    mult = units.get(t[-1:], None)
    try:
        v = float(t[:-1] if mult else t) * (mult or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 15m, 24h, 7d)") from None
    if not (v > 0 and v < 10 * 365 * 86400):
        raise argparse.ArgumentTypeError(f"duration out of range: {text!r}")
    return v


def add_record_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="recording to append to (created when missing)")
    p.add_argument("--retention", type=_duration, default=7 * 86400, metavar="DUR",
                   help="drop recorded ticks older than this (default 7d)")
    p.add_argument("--duration", type=_duration, default=None, metavar="DUR",
                   help="stop after this long (default: until SIGINT/SIGTERM)")


def add_replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a recording or an incident bundle")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed, 0.5 to 60 (default 1)")
    p.add_argument("--at", metavar="TIME", default=None,
                   help="start at this time of the recording: HH:MM[:SS] (local time), +5m from its start, "
                        "or --at=-5m from its end")


async def record_loop(endpoints, cfg, path: str, *, retention_s: float, duration_s: float | None,
                      dcgm_urls=None, engine_pods=None, mode: str = "live", stop: asyncio.Event | None = None,
                      prometheus: bool = False, on_tick=None) -> tuple[int, int, str | None]:
    """Poll like the TUI, append one fleet state per tick; returns (ticks seen, ticks written to the file,
    why the last write failed or None). ``on_tick(state)`` sees each state once it is appended. A failed
    write is said once on stderr and retried with the next block ("recording again" once it works)."""
    from .state.recording.state_log import StateLog
    from .state.service import Fleet

    # the one composition root: the same tick as the console's (SLO report, what changed, verdicts); the
    # cluster listed each kube.refresh_s (a recorder under cron keeps no informers); the advisor evaluates
    # in ``recommend`` at most: a recorder never scales
    fleet = Fleet(cfg, endpoints=endpoints, mode=mode, engine_pods=engine_pods, dcgm_urls=dcgm_urls or (),
                  prometheus=prometheus)
    log = StateLog(path, refresh_s=cfg.refresh_s, keep_s=0, retention_s=retention_s)
    stop = stop or asyncio.Event()
    polling = asyncio.create_task(fleet.run(stop, cluster=True))
    started = time.monotonic()
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=cfg.refresh_s)
            except TimeoutError:
                pass
            state = fleet.build()
            log.add(state.taken_at, state)
            if on_tick is not None:
                on_tick(state)
            _say(log.record_news)
            if log.error:
                print(f"infertop record: {log.error}", file=sys.stderr)
                break
            if duration_s is not None and time.monotonic() - started >= duration_s:
                break
    finally:
        stop.set()
        await asyncio.gather(polling, return_exceptions=True)
        await fleet.close()
        await asyncio.to_thread(log.close)
        _say(log.record_news)
    return log.ticks, log.ticks_written, log.record_error


def _say(news: list[str]) -> None:
    while news:
        print(f"infertop record: {news.pop(0)}", file=sys.stderr)


def record_main(args: argparse.Namespace, cfg, endpoints, *, dcgm_urls, engine_pods, mode: str,
                prometheus: bool = False) -> int:
    """Run the recorder until stopped; one line at the end says how many ticks."""
    async def run() -> tuple[int, int, str | None]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        return await record_loop(endpoints, cfg, args.file, retention_s=args.retention, duration_s=args.duration,
                                 dcgm_urls=dcgm_urls, engine_pods=engine_pods, mode=mode, stop=stop,
                                 prometheus=prometheus)

    try:
        seen, written, failing = asyncio.run(run())
    except Exception as e:  # noqa: BLE001 — one line, not a traceback (e.g. the file is not a recording)
        print(f"infertop record: {args.file}: {e}", file=sys.stderr)
        return EXIT_FAILED
    if written < seen:  # only what is in the file counts: ticks lost are a failure, with the reason
        print(f"infertop record: {written} of {seen} ticks written to {args.file}"
              f"{f': {failing}' if failing else ''}", file=sys.stderr)
        return EXIT_FAILED
    print(f"infertop record: {written} ticks appended to {args.file}", file=sys.stderr)
    return EXIT_OK


def parse_at(text: str | None, span: tuple[float, float]) -> float | None:
    """A start time in the recording: "+5m" from its start, "-5m" from its end, or HH:MM[:SS] local time."""
    if not text:
        return None
    t0, t1 = span
    if text[0] in "+-":
        off = _duration(text[1:])
        return t0 + off if text[0] == "+" else t1 - off
    parts = text.split(":")
    try:
        h, m, s = (int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) > 2 else 0)
    except (ValueError, IndexError):
        raise ValueError(f"not a time: {text!r} (HH:MM[:SS], +5m or -5m)") from None
    base = time.localtime(t0)
    ts = time.mktime((base.tm_year, base.tm_mon, base.tm_mday, h, m, s, 0, 0, -1))
    while ts < t0 - 1:
        ts += 86400
    return ts


def open_replay(path: str):
    """(Replay, span) or raises ValueError with one line for the operator."""
    import os

    from .state.recording.recorder import RecordingError
    from .state.recording.replay import Replay, check_span

    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file")
    try:
        replay = Replay(path)
        span = replay.span()
        if span is not None:
            check_span(path, span)
    except RecordingError as e:
        raise ValueError(str(e)) from None
    except Exception as e:  # noqa: BLE001 — sqlite errors too
        raise ValueError(f"{path}: not an infertop recording ({e})") from None
    if span is None:
        replay.close()
        raise ValueError(f"{path}: the recording is empty")
    try:
        _check_first_tick(replay, span)
    except ValueError:
        replay.close()
        raise
    return replay, span


def _check_first_tick(replay, span) -> None:
    """Decode the first tick as the panes will: a damaged file is one line here, not a crash in the TUI."""
    from .state.fleet_types import FleetState

    try:
        first = replay.at(span[0])
        if first is not None:
            FleetState.from_doc(first[1])
    except Exception as e:  # noqa: BLE001 — a file someone handed over: any shape, one line
        from .sources.sanitize import plain_text

        raise ValueError(plain_text(f"{replay.path}: damaged recording ({type(e).__name__}: {e})", 300)) from None

