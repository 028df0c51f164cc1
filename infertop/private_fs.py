"""Directories only their owner can read: the state directory, its ``demo/``, an audit log's folder.

``Path.mkdir(mode=0o700, parents=True)`` gives the mode to the last component only: the parents
it creates get 0777 less the umask (0755 here), which is how the state directory came out 0755.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def private_dir(path: str | Path, *, tighten: bool = True) -> Path:
    """Create ``path`` and every missing parent owner-only (0700); with ``tighten``, an existing
    ``path`` that others can read is made 0700 too (ours: never pass it for a folder the user chose)."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it first
            d.mkdir(mode=0o700)
    if tighten:
        with contextlib.suppress(OSError):
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o700)
    return path


def default_state_dir() -> Path:
    """Where infertop keeps its state (engines, audit log, recordings): $XDG_STATE_HOME/infertop."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "infertop"
