"""The incident bundle's packed ticks on disk instead of in memory.

At 64 engines a packed tick is ~16 KiB: 15 minutes of them held in memory
is ~14 MiB of RSS that keeps growing for those 15 minutes. Here they go to
unlinked temporary files (no path: nothing another user can open or
replace, nothing left on disk once closed) and only a small
:class:`Spilled` reference per record (a block of ticks) stays in memory.

Disk use is bounded by two segments used in turn: a segment takes records
for ``keep_s``, then the other one is truncated and takes over. Every tick
the reused segment held is older than the first tick of the segment just
left, which is at least ``keep_s`` older than the newest tick: the last
``keep_s`` always survive.
"""

from __future__ import annotations

import errno
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import IO


class Spilled:
    """Where one record (a packed block of ticks) lies: a segment, which use of it (``gen``), and a byte range."""

    __slots__ = ("gen", "length", "offset", "seg")

    def __init__(self, seg: int, gen: int, offset: int, length: int) -> None:
        self.seg, self.gen, self.offset, self.length = seg, gen, offset, length


class SpillFile:
    """Two alternating, unlinked temporary segments of records (packed blocks of ticks). Thread-safe."""

    def __init__(self, keep_s: float, directory: str | None = None,
                 open_segment: Callable[[], IO[bytes]] | None = None) -> None:
        self.keep_s = keep_s
        self.directory = directory
        self._open = open_segment or self._temporary
        self._files: list[IO[bytes] | None] = [None, None]
        self._gen = [0, 0]
        self._size = [0, 0]
        self._first_ts: list[float | None] = [None, None]
        self._active = 0
        self._closed = False
        self._lock = threading.Lock()

    def _temporary(self) -> IO[bytes]:
        # the state dir when it exists (a disk, where the system temp dir may be memory), else the temp dir
        if self.directory and os.path.isdir(self.directory):
            try:
                return tempfile.TemporaryFile(dir=self.directory)
            except OSError:
                pass
        return tempfile.TemporaryFile()

    def write(self, data: bytes, first_ts: float, last_ts: float) -> Spilled:
        """Append one record holding the ticks from ``first_ts`` to ``last_ts``; raises OSError when it
        cannot be written (nothing is kept then)."""
        with self._lock:
            if self._closed:
                raise OSError(errno.EBADF, "spill file closed")
            a = self._active
            first = self._first_ts[a]
            if first is not None and last_ts - first >= self.keep_s:
                a = self._active = 1 - a
                self._gen[a] += 1  # first: references into the old contents are void even if truncate fails
                self._size[a] = 0
                self._first_ts[a] = None
                f = self._files[a]
                if f is not None:
                    f.truncate(0)
            f = self._files[a]
            if f is None:
                f = self._files[a] = self._open()
            offset = self._size[a]
            n = os.pwrite(f.fileno(), data, offset)
            if n != len(data):
                raise OSError(errno.ENOSPC, f"short write ({n} of {len(data)} bytes)")
            self._size[a] = offset + n
            if self._first_ts[a] is None:
                self._first_ts[a] = first_ts
            return Spilled(a, self._gen[a], offset, n)

    def read(self, refs: Sequence[Spilled]) -> list[bytes | None]:
        """The bytes of each reference, None where its segment was reused (or closed) since.
        One read per segment: the range that covers all its references."""
        out: list[bytes | None] = [None] * len(refs)
        with self._lock:
            for seg in (0, 1):
                f = self._files[seg]
                mine = [i for i, r in enumerate(refs) if r.seg == seg and r.gen == self._gen[seg]]
                if f is None or not mine:
                    continue
                lo = min(refs[i].offset for i in mine)
                hi = max(refs[i].offset + refs[i].length for i in mine)
                block = os.pread(f.fileno(), hi - lo, lo)
                for i in mine:
                    r = refs[i]
                    piece = block[r.offset - lo : r.offset - lo + r.length]
                    out[i] = piece if len(piece) == r.length else None
        return out

    @property
    def nbytes(self) -> int:
        """Bytes on disk now."""
        return sum(self._size)

    def close(self) -> None:
        """Close both segments: being unlinked, they are gone from the disk."""
        with self._lock:
            self._closed = True
            for seg, f in enumerate(self._files):
                self._files[seg] = None
                self._gen[seg] += 1
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
