"""Recording fleet states while the UI (or the headless recorder) runs.

:class:`StateLog` keeps the last minutes of states (for an incident bundle)
and, with a path, appends every tick to a flight recording. Both happen on a
background thread, so neither compressing a block nor packing a state stalls
the UI. A write error is kept and reported, never raised into the caller.

A state held as objects costs about 3 KiB per engine (180 KiB per tick at 64
engines: 160 MiB for 15 minutes). So ticks are packed in blocks: the newest
ones stay objects until their block is full (:data:`BLOCK_TICKS` ticks, at
most :data:`BLOCK_S` of them and about :data:`BLOCK_BYTES` of pickles: 10
ticks at 6 engines, 2 at 64); then the background thread pickles each tick
on its own (one tick unpacks without the others), compresses the block in
one zlib call (level 1: fast, and only ever read back by this process) and
writes it as one record to an unlinked temporary file (:mod:`.spill`).
Packed, a tick is ~1.3 KiB at 6 engines and ~16 KiB at 64 engines (15 MiB
for 15 minutes, on disk); memory keeps ~100 bytes per tick (the block, its
times, where it lies). A block that cannot be written stays packed in memory.

Per tick that is 0.4x the CPU of packing each tick alone at 6 engines, 0.6x
at 64 (``benchmarks/bench_state_log.py``: 0.18 vs 0.48 ms, 1.2 vs 2.0 ms):
pickle's generic path for slotted dataclasses walks ``fields()`` in
Python for every object, the reducers here read the fields with one C
``attrgetter``; and one zlib call and one hand-off to the thread per block.
The log holds fewer gc-tracked objects: two per packed block instead of two
per tick, plus the states waiting in the newest block (at most, sampled: ~670
against ~1800 at 6 engines, ~1400 against ~1900 at 64).
"""

from __future__ import annotations

import copyreg
import dataclasses
import io
import operator
import pickle
import queue
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from .spill import SpillFile, Spilled

DEFAULT_RETENTION_S = 7 * 86400
BUNDLE_S = 15 * 60  # an incident bundle holds the last 15 minutes
BLOCK_S = 10.0  # a block holds at most this much time …
BLOCK_TICKS = 10  # … this many ticks …
BLOCK_BYTES = 128 * 1024  # … and about this many bytes of pickles (64 engines: 2 ticks, ~0.25 MiB as objects)


# -- packing -------------------------------------------------------------------------------------------------

class _Reducers(dict):
    """Pickle reducers by class, made on first sight: a frozen slotted dataclass is reduced to what its own
    ``__getstate__`` gives (the same pickle), its field values read by one C ``attrgetter`` instead of the
    generic path's Python-level ``fields()`` walk per object. Any other class: pickle's usual way."""

    def __missing__(self, cls: type) -> Callable[[Any], tuple]:
        reducer = _fast_reducer(cls)
        if reducer is None:
            raise KeyError(cls)  # not ours: the pickler falls back to the class's own reduction
        self[cls] = reducer
        return reducer


def _fast_reducer(cls: type) -> Callable[[Any], tuple] | None:
    own = (getattr(cls.__dict__.get(m), "__module__", None) for m in ("__getstate__", "__setstate__"))
    if not (dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__ and all(m == "dataclasses" for m in own)
            and not any(m in cls.__dict__ for m in ("__reduce__", "__reduce_ex__", "__getnewargs__",
                                                     "__getnewargs_ex__"))):
        return None
    names = [f.name for f in dataclasses.fields(cls)]
    if not names:
        return None
    get = operator.attrgetter(*names)
    one = len(names) == 1
    newobj, args = copyreg.__newobj__, (cls,)  # type: ignore[attr-defined]  # in copyreg, not in its stub
    return (lambda o: (newobj, args, (get(o),))) if one else (lambda o: (newobj, args, get(o)))


_REDUCERS = _Reducers()


def _pickler(buf: io.BytesIO) -> pickle.Pickler:
    p = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    p.dispatch_table = _REDUCERS
    return p


def pack_block(items: list[Any]) -> tuple[bytes, tuple[int, ...], dict[int, Any] | None]:
    """(zlib of the ticks' pickles one after the other, where each pickle ends, {index: tick} of the ticks
    that cannot be pickled — kept as they are). Each tick is pickled alone: unpacked alone too."""
    buf = io.BytesIO()
    p = _pickler(buf)
    ends: list[int] = []
    loose: dict[int, Any] | None = None
    for i, item in enumerate(items):
        end = ends[-1] if ends else 0
        try:
            p.dump(item)
            p.clear_memo()
        except Exception:  # noqa: BLE001 — an unpicklable state stays as it is
            buf.seek(end)
            buf.truncate()
            p = _pickler(buf)
            loose = loose or {}
            loose[i] = item
        ends.append(buf.tell())
    return zlib.compress(buf.getbuffer(), 1), tuple(ends), loose


class PackedBlock:
    """A packed block as read back: unpacks one tick at a time (the block is decompressed once)."""

    __slots__ = ("_raw", "data", "ends")

    def __init__(self, data: bytes, ends: tuple[int, ...]) -> None:
        self.data, self.ends = data, ends
        self._raw: bytes | None = None

    def tick(self, i: int) -> Any:
        raw = self._raw
        if raw is None:
            raw = self._raw = zlib.decompress(self.data)
        return pickle.loads(memoryview(raw)[self.ends[i - 1] if i else 0: self.ends[i]])


class Packed:
    """One tick of a packed block (what :meth:`StateLog.window` gives for a packed tick)."""

    __slots__ = ("block", "index")

    def __init__(self, block: PackedBlock, index: int) -> None:
        self.block, self.index = block, index

    def unpack(self) -> Any:
        return self.block.tick(self.index)


class _Block:
    """Consecutive ticks: their times, and the states as objects until packed — then where the packed block
    lies (its :class:`Spilled` record, or its bytes when it could not be written), where each tick's pickle
    ends in it, and the ticks that could not be pickled. Once ``sealed`` it takes no more ticks and goes to
    the background thread, which sets ``ends`` and ``loose``, then swaps ``held`` in one assignment: a reader
    sees the objects or the packed block, never half of it."""

    __slots__ = ("ends", "held", "loose", "sealed", "ts")

    def __init__(self) -> None:
        self.ts: list[float] | tuple[float, ...] = []
        self.held: list[Any] | Spilled | bytes = []
        self.ends: tuple[int, ...] = ()
        self.loose: dict[int, Any] | None = None
        self.sealed = False


# -- the log --------------------------------------------------------------------------------------------------

class StateLog:
    """The last ``keep_s`` of states (packed into a private temporary file), and optionally every state in a
    recording."""

    def __init__(self, path: str | None = None, *, refresh_s: float = 1.0, keep_s: float = BUNDLE_S,
                 retention_s: float | None = DEFAULT_RETENTION_S, spill_dir: str | None = None,
                 spill: SpillFile | None = None) -> None:
        self.path = path
        self.keep_ticks = max(2, int(keep_s / max(refresh_s, 0.05)) + 1)
        self._most_block_ticks = max(1, min(BLOCK_TICKS, int(BLOCK_S / max(refresh_s, 0.05)), self.keep_ticks))
        self.block_ticks = self._most_block_ticks  # fewer once the ticks packed show they are big
        self._blocks: deque[_Block] = deque()  # at least the newest keep_ticks ticks
        self._held_ticks = 0
        self._last_ts: float | None = None
        self._lock = threading.Lock()  # add() and flush() may seal the newest block from different threads
        self.error: str | None = None
        self.ticks = 0
        # why the recording's last write failed (None while writes succeed): the header says
        # "rec failing: <reason>" rather than "● rec"; record_news has "recording again" once it works
        self.record_error: str | None = None
        self.record_news: list[str] = []
        self._ticks_written = 0
        self._failed_at_blocks = 0
        self._queue: queue.Queue[tuple | None] = queue.Queue(maxsize=10_000)
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
        if self._last_ts is not None and ts <= self._last_ts:
            return  # the same tick painted twice (a repaint): recorded once
        self._last_ts = ts
        self.ticks += 1
        with self._lock:
            blocks = self._blocks
            if not blocks or blocks[-1].sealed:
                while blocks and self._held_ticks + 1 - len(blocks[0].ts) >= self.keep_ticks:  # with this tick
                    self._held_ticks -= len(blocks.popleft().ts)
                blocks.append(_Block())
            block = blocks[-1]
            held, times = block.held, block.ts
            if not isinstance(held, list) or not isinstance(times, list):
                raise RuntimeError("the open block was packed")  # never: only sealed blocks are packed
            held.append(doc)  # the item first: a reader pairs times with items up to the shorter list
            times.append(ts)
            self._held_ticks += 1
            full = len(block.ts) >= self.block_ticks
            if full:
                block.sealed = True
        if self._thread is None:
            return
        if self._recorder is not None:
            try:
                self._queue.put_nowait(("tick", ts, doc))
            except queue.Full:
                self.error = "recorder falling behind: ticks dropped"
        if full and self._pack:
            try:
                self._queue.put_nowait(("block", block))
            except queue.Full:  # packing falls behind: these ticks stay unpacked in memory
                pass

    def _write(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    break
                if job[0] == "tick":
                    self._record(job[1], job[2])
                else:
                    self._pack_block(job[1])
            finally:
                self._queue.task_done()

    @property
    def ticks_written(self) -> int:
        """Ticks of this run committed to the recording (not merely added)."""
        rec = self._recorder
        return rec.ticks_written if rec is not None else self._ticks_written

    def _record(self, ts: float, item: Any) -> None:
        try:
            self._recorder.append(ts, _doc(item))
        except Exception as e:  # noqa: BLE001 — a recording problem must not stop the console
            self._record_failed(e)
            return
        if self.record_error is not None and self._recorder.blocks_written > self._failed_at_blocks:
            self._record_ok()

    def _record_failed(self, e: Exception) -> None:
        reason = str(e).removeprefix(f"{self.path}: ") or type(e).__name__
        if reason != self.record_error:
            self.record_news.append(f"recording {self.path}: rec failing: {reason}")
        self.record_error = reason
        self._failed_at_blocks = self._recorder.blocks_written  # "again" once a block is written after this

    def _record_ok(self) -> None:
        self.record_error = None
        self.record_news.append(f"recording {self.path}: recording again ({self._recorder.ticks_written} ticks "
                                "written this run)")

    def _pack_block(self, block: _Block) -> None:
        items = block.held
        if not isinstance(items, list):
            return
        data, ends, loose = pack_block(items)
        if ends[-1]:  # big ticks (many engines): smaller blocks, so fewer states wait as objects
            self.block_ticks = max(1, min(self._most_block_ticks, BLOCK_BYTES * len(ends) // ends[-1]))
        block.ends, block.loose = ends, loose
        block.ts = tuple(block.ts)  # a tuple of floats: the garbage collector stops tracking it
        try:
            # one reference swap: a reader sees the objects, or where they lie once written
            if self._spill is not None:  # (always: blocks are packed only with a spill file)
                block.held = self._spill.write(data, block.ts[0], block.ts[-1])
                return
        except Exception as e:  # noqa: BLE001 — a full or read-only disk must not stop the console
            if self.spill_error is None:  # said once
                self.spill_error = (f"incident bundle: cannot write the recent ticks to a temporary file ({e}); "
                                    "kept in memory")
                self.error = self.error or self.spill_error
        block.held = data

    def window(self, seconds: float) -> list[tuple[float, Any]]:
        """The ticks of the last ``seconds`` kept, oldest first (states, documents or :class:`Packed` ticks:
        :func:`documents` turns them into documents, best in a worker thread). Blocks on disk are read
        back here (one read per segment), so the result stays valid when the spill rotates later; after
        :meth:`close` only the ticks still in memory are left."""
        if self._last_ts is None:
            return []
        start = self._last_ts - seconds
        taken = []  # (times, objects or where the packed block lies, ends, loose)
        for block in list(self._blocks):
            held = block.held  # read first, once: the thread sets ends and loose before it swaps held
            ts = list(block.ts)
            if ts and ts[-1] >= start:
                taken.append((ts, list(held) if isinstance(held, list) else held, block.ends, block.loose))
        spilled = [held for _, held, _, _ in taken if isinstance(held, Spilled)]
        data: dict[int, bytes | None] = {}
        if spilled and self._spill is not None:
            try:
                data = dict(zip(map(id, spilled), self._spill.read(spilled)))
            except OSError as e:
                self.error = self.error or f"incident bundle: cannot read the recent ticks back ({e})"
        ticks: list[tuple[float, Any]] = []
        for ts, held, ends, loose in taken:
            if isinstance(held, list):
                ticks += [(t, item) for t, item in zip(ts, held) if t >= start]
                continue
            raw = data.get(id(held)) if isinstance(held, Spilled) else held
            packed = PackedBlock(raw, ends) if raw is not None else None  # None: its segment was reused
            loose = loose or {}
            for i, t in enumerate(ts):
                if t < start:
                    continue
                if i in loose:
                    ticks.append((t, loose[i]))
                elif packed is not None:
                    ticks.append((t, Packed(packed, i)))
        return ticks

    def flush(self) -> None:
        """Wait until the background thread has handled every tick added so far: the newest block is
        sealed (the next tick starts a new one) and packed too."""
        if self._thread is None:
            return
        if self._pack:
            with self._lock:
                block = self._blocks[-1] if self._blocks else None
                seal = block is not None and not block.sealed
                if block is not None and seal:
                    block.sealed = True
            if seal:
                self._queue.put(("block", block))
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
                if self.record_error is not None and self._recorder.blocks_written > self._failed_at_blocks:
                    self._record_ok()
            except Exception as e:  # noqa: BLE001
                self._record_failed(e)
            self._ticks_written = self._recorder.ticks_written
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
