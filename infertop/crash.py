"""A crash is never silent, and never a traceback on the operator's terminal.

An unexpected exception ends the run with: the terminal restored (Textual
does that when the app exits), the traceback in a crash log under the state
directory (``crash-YYYYmmdd-HHMMSS.log``, mode 0600), one line on stderr naming
the error and the log, and exit code :data:`EXIT_CRASH`.

Textual catches an exception raised in a handler itself: it sets
``app.return_code`` to 1, keeps the exception as ``app._exception`` and, as the
app exits, prints a Rich traceback *with local variables* on
``app.error_console``.  :func:`run_tui` points that console at a buffer so
nothing reaches the terminal (locals can hold tokens), and writes the plain
traceback instead.
"""

from __future__ import annotations

import asyncio
import io
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TextIO

from . import __version__
from .private_fs import default_state_dir
from .config_load import one_line
from .event_loop import loop_factory

EXIT_CRASH = 70  # EX_SOFTWARE in sysexits.h: an internal error


def write_crash_log(exc: BaseException, directory: Path | None = None, *, now: float | None = None) -> Path:
    """Write ``exc``'s traceback to a new file in ``directory`` (the state directory,
    else the temp directory) readable by the owner only; returns its path. Raises
    OSError only when neither place can be written."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    text = _report(exc, stamp)
    places = [directory] if directory is not None else [default_state_dir(), Path(tempfile.gettempdir())]
    last: OSError | None = None
    for place in places:
        try:
            place.mkdir(parents=True, exist_ok=True, mode=0o700)
            return _write_new(place, f"crash-{stamp}", text)
        except OSError as e:
            last = e
    assert last is not None
    raise last


def _write_new(directory: Path, stem: str, text: str) -> Path:
    # O_EXCL + O_NOFOLLOW: never reuse or follow someone else's file (the fallback is /tmp).
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for n in range(1, 100):
        path = directory / (f"{stem}.log" if n == 1 else f"{stem}-{n}.log")
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
        return path
    raise FileExistsError(f"{directory}/{stem}*.log: too many crash logs this second")


def _report(exc: BaseException, stamp: str) -> str:
    try:
        from importlib.metadata import version

        textual = version("textual")
    except Exception:  # noqa: BLE001 — a crash report must not crash
        textual = "?"
    head = (f"infertop {__version__} crashed at {stamp}\n"
            f"python {platform.python_version()}, textual {textual}, {platform.platform()}\n\n")
    return head + "".join(traceback.format_exception(exc))


def report_crash(exc: BaseException, err: TextIO | None = None, directory: Path | None = None) -> int:
    """Log ``exc``, print one line about it, return :data:`EXIT_CRASH`."""
    err = err or sys.stderr
    what = f"{type(exc).__name__}: {one_line(str(exc), 160)}" if str(exc) else type(exc).__name__
    try:
        path = write_crash_log(exc, directory)
    except OSError as e:
        print(f"infertop: crashed: {what} (no crash log: {one_line(str(e), 120)})", file=err, flush=True)
    else:
        print(f"infertop: crashed: {what}; traceback in {path}", file=err, flush=True)
    return EXIT_CRASH


def _exit_on_hangup_and_term(app, loop: asyncio.AbstractEventLoop) -> None:
    """SIGTERM / SIGHUP end the app the way ``q`` does, so its driver leaves the alternate
    screen, turns the mouse off and shows the cursor; the exit code is still 128 + the signal.
    A second one (an exit that hangs) is the default action: the process ends at once."""
    def on_signal(signum: int) -> None:
        for s in (signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(s)
        app.exit(return_code=128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # no signals here (not the main thread)
            return


def run_tui(app, *, err: TextIO | None = None, directory: Path | None = None, **run_kwargs) -> int:
    """Run a Textual ``app``; its exit code, or :data:`EXIT_CRASH` after :func:`report_crash`."""
    err = err or sys.stderr
    held = io.StringIO()
    app.error_console.file = held  # where Textual prints a crash's traceback as the app exits
    try:
        # on uvloop's loop where installed (less CPU per poll and frame), closed as asyncio.run closes its own
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            _exit_on_hangup_and_term(app, runner.get_loop())
            app.run(loop=runner.get_loop(), **run_kwargs)
    except Exception as e:  # noqa: BLE001 — raised outside Textual's handlers (driver, startup)
        return report_crash(e, err, directory)
    exc = getattr(app, "_exception", None)
    if exc is not None:
        return report_crash(exc, err, directory)
    if held.getvalue():  # an intended exit message (app.exit(message=…)) still reaches the user
        err.write(held.getvalue())
    return app.return_code or 0
