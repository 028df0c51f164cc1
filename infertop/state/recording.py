"""Recording fleet states while the UI (or the headless recorder) runs.

:class:`StateLog` keeps the last minutes of states in memory (for an
incident bundle) and, with a path, appends every tick to a flight
recording. Both happen on a background thread, so neither compressing a
block nor packing a state stalls the UI. A write error is kept and
reported, never raised into the caller.

A state held as objects costs about 2 KiB per engine (126 KiB per tick at 64
engines: 110 MiB for 15 minutes); packed (pickle, then zlib at level 1 — fast,
and only ever read back by this process) ~10 KiB per tick at 64 engines, still
9 MiB growing for 15 minutes. So packed ticks go to an unlinked temporary file
(:mod:`.spill`) and memory keeps ~200 bytes per tick; a tick that cannot be
written stays packed in memory. The newest ticks stay as objects until packed.
"""

from __future__ import annotations

import pickle
import queue
import threading
import zlib
from collections import deque
from collections.abc import Iterable
from typing import Any

from .spill import SpillFile, Spilled

DEFAULT_RETENTION_S = 7 * 86400
BUNDLE_S = 15 * 60  # an incident bundle holds the last 15 minutes


class Packed:
    """A state packed in memory (never written to disk: pickle is read back only by this process)."""

    __slots__ = ("data",)

    def __init__(self, item: Any) -> None:
        self.data = zlib.compress(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL), 1)

    @classmethod
    def of_bytes(cls, data: bytes) -> Packed:
        """The packed state of ``data`` (bytes this process packed, read back from its spill file)."""
        p = cls.__new__(cls)
        p.data = data
        return p

    def unpack(self) -> Any:
        return pickle.loads(zlib.decompress(self.data))


class StateLog:
    """The last ``keep_s`` of states (packed into a private temporary file), and optionally every state in a
    recording."""

    def __init__(self, path: str | None = None, *, refresh_s: float = 1.0, keep_s: float = BUNDLE_S,
                 retention_s: float | None = DEFAULT_RETENTION_S, spill_dir: str | None = None,
                 spill: SpillFile | None = None) -> None:
        self.path = path
        # [ts, state | document | Packed | Spilled]: a list, so the background thread can swap in the packed form
        self.recent: deque[list] = deque(maxlen=max(2, int(keep_s / max(refresh_s, 0.05)) + 1))
        self.error: str | None = None
        self.ticks = 0
        self._queue: queue.Queue[list | None] = queue.Queue(maxsize=10_000)
        self._thread: threading.Thread | None = None
        self._recorder: Any = None
        if path is not None:
            from .recorder import Recorder

            self._recorder = Recorder(path, retention_s=retention_s)
        self._pack = keep_s > 0
        self._spill = (spill or SpillFile(keep_s, spill_dir)) if self._pack else None
        self.spill_error: str | None = None
        if path is not None or self._pack:
            self._thread = threading.Thread(target=self._write, name="infertop-recorder", daemon=True)
            self._thread.start()

    def add(self, ts: float, doc: Any) -> None:
        """Keep this tick (and queue it for the recording). ``doc`` is a document or anything with
        ``to_doc()`` (a FleetState): it is turned into a document only when written, off this thread."""
        if self.recent and ts <= self.recent[-1][0]:
            return  # the same tick painted twice (a repaint): recorded once
        entry = [ts, doc]
        self.recent.append(entry)
        self.ticks += 1
        if self._thread is not None:
            try:
                self._queue.put_nowait(entry)
            except queue.Full:  # packing falls behind: the tick stays unpacked in memory
                if self._recorder is not None:
                    self.error = "recorder falling behind: ticks dropped"

    def _write(self) -> None:
        while True:
            entry = self._queue.get()
            try:
                if entry is None:
                    break
                self._handle(entry)
            finally:
                self._queue.task_done()

    def _handle(self, entry: list) -> None:
        ts, item = entry
        if self._recorder is not None:
            try:
                self._recorder.append(ts, _doc(item))
            except Exception as e:  # noqa: BLE001 — a recording problem must not stop the console
                self.error = f"recording {self.path}: {e}"
        if not self._pack:
            return
        try:
            packed = Packed(item)
        except Exception:  # noqa: BLE001 — an unpicklable state stays as it is
            return
        try:
            # one reference swap: a reader sees the object, or where it lies once it is written
            entry[1] = self._spill.write(ts, packed.data)
            return
        except Exception as e:  # noqa: BLE001 — a full or read-only disk must not stop the console
            if self.spill_error is None:  # said once
                self.spill_error = (f"incident bundle: cannot write the recent ticks to a temporary file ({e}); "
                                    "kept in memory")
                self.error = self.error or self.spill_error
        entry[1] = packed

    def window(self, seconds: float) -> list[tuple[float, Any]]:
        """The ticks of the last ``seconds`` kept, oldest first (states, documents or packed states:
        :func:`documents` turns them into documents, best in a worker thread). Ticks on disk are read
        back here (one read per segment), so the result stays valid when the spill rotates later; after
        :meth:`close` only the ticks still in memory are left."""
        if not self.recent:
            return []
        start = self.recent[-1][0] - seconds
        ticks = [(ts, doc) for ts, doc in list(self.recent) if ts >= start]
        spilled = [i for i, (_, doc) in enumerate(ticks) if isinstance(doc, Spilled)]
        if not spilled or self._spill is None:
            return ticks
        try:
            data = self._spill.read([ticks[i][1] for i in spilled])
        except OSError as e:
            data = [None] * len(spilled)
            self.error = self.error or f"incident bundle: cannot read the recent ticks back ({e})"
        for i, d in zip(spilled, data):
            ticks[i] = (ticks[i][0], None if d is None else Packed.of_bytes(d))
        return [t for t in ticks if t[1] is not None]

    def flush(self) -> None:
        """Wait until the background thread has handled every tick added so far."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        """Write what is queued and close the recording."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None
        if self._spill is not None:
            self._spill.close()
        if self._recorder is not None:
            try:
                self._recorder.close()
            except Exception as e:  # noqa: BLE001
                self.error = f"recording {self.path}: {e}"
            self._recorder = None


def _unpacked(item: Any) -> Any:
    return item.unpack() if isinstance(item, Packed) else item


def _doc(item: Any) -> dict:
    return item.to_doc() if hasattr(item, "to_doc") else item


def documents(ticks: Iterable[tuple[float, Any]]) -> list[tuple[float, dict]]:
    """(ts, document) for each (ts, state or document)."""
    return [(ts, _doc(_unpacked(item))) for ts, item in ticks]


def save_bundle(path: str, states: Iterable[tuple[float, dict]], log_lines: list[str], audit_entries: list[dict],
                config_text: str) -> str:
    """Write an incident bundle (replayable with ``infertop replay``); returns its path."""
    from .bundle import write_bundle

    write_bundle(path, documents(states), log_lines, audit_entries, config_text)
    return path
