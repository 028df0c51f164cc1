"""A closed pipe ends a command quietly: ``infertop snapshot | head`` is not a crash."""

from __future__ import annotations

import os
import sys

EXIT_PIPE = 141  # 128 + SIGPIPE: what a command killed by the closed pipe would have returned


def closed_pipe() -> int:
    """Call on BrokenPipeError from writing stdout: point stdout at /dev/null (so the
    interpreter's last flush at exit cannot raise again) and return :data:`EXIT_PIPE`."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no stdout fd at all: nothing left to flush
        pass
    return EXIT_PIPE
