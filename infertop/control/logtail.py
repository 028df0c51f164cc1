"""The last lines of a (possibly huge) file, read backwards from its end.

Part of :mod:`infertop.control.engines` (engine logs and histories).  No UI imports.
"""

from __future__ import annotations

import os
import stat


def tail_file(path: str | os.PathLike, n: int = 50, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
    """The last ``n`` lines of a file, reading backwards from its end.

    Reads blocks from the end until ``n`` line breaks are found (at most
    ``max_bytes``), so a multi-gigabyte log costs a few reads.  A carriage
    return inside a line (progress bars) keeps only what follows it.
    """
    if n <= 0:
        return []
    try:
        # not blocking on open (a FIFO put where the log was would wait for a writer), and a regular
        # file only: a FIFO or a device has no end to read back from
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return []
    with open(fd, "rb") as f:  # noqa: SIM115 — the fd checked above
        f.seek(0, os.SEEK_END)
        end = pos = f.tell()
        data = b""
        block = 8192
        while pos > 0 and data.count(b"\n") <= n and end - pos < max_bytes:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
            block = min(block * 2, 1024 * 1024)
    lines = data.split(b"\n")
    if pos > 0:
        lines = lines[1:]  # partial first line
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for raw in lines[-n:]:
        if b"\r" in raw:
            parts = [p for p in raw.split(b"\r") if p.strip()]
            raw = parts[-1] if parts else b""
        out.append(raw.decode("utf-8", "replace"))
    return out
