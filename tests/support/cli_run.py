"""``infertop`` as a child process: ``run_cli(*args)`` runs ``python -m infertop`` with this
interpreter (stdin closed, output captured, a minute at most)."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cli(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "infertop", *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=60)
