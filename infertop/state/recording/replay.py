"""Read a recording (or an incident bundle) and play it back.

:class:`Replay` answers time queries against the file: the tick at or
before a time, the next and previous tick, ranges. It opens the file
read-only, so it also follows a recording that another process is still
writing: every query sees the blocks committed so far.

:class:`Player` turns a Replay into playback for a UI timer: pause, resume,
step, seek, speed. It never reads a clock of its own accord — the clock is
injected — so tests drive it with a fake one.

Documents returned are shared with a small block cache: read them, don't
mutate them.
"""

from __future__ import annotations

import bisect
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from .recorder import RecordingError, connect, decode_block

Tick = tuple[float, dict]

# A tick of a file handed over shows at most this many engines and GPUs (20000 took 935 MB and never
# painted); the doc's "truncated" says how many there were.
MAX_REPLAY_ITEMS = {"engines": 4096, "gpus": 4096}
# Tick times are wall-clock seconds: a file's must lie in 2000–2100 (t0=-1e308 is not a time).
MIN_WALL_S, MAX_WALL_S = 946_684_800.0, 4_102_444_800.0

SPEEDS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
MIN_SPEED, MAX_SPEED = SPEEDS[0], SPEEDS[-1]


class Replay:
    """Time-indexed, read-only access to a recording."""

    def __init__(self, path: str, *, cache_blocks: int = 8) -> None:
        self.path = path
        self._conn = connect(path, readonly=True)
        self._cache: OrderedDict[tuple, tuple[list[float], list[dict]]] = OrderedDict()
        self._cache_blocks = cache_blocks

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- whole-file facts -------------------------------------------------------

    def span(self) -> tuple[float, float] | None:
        """(first tick ts, last tick ts), or None for an empty recording."""
        t0, t1 = self._query("SELECT min(t0), max(t1) FROM blocks").fetchone()
        return None if t0 is None else (t0, t1)

    def count(self) -> int:
        return self._query("SELECT coalesce(sum(n), 0) FROM blocks").fetchone()[0]

    # --- point queries --------------------------------------------------------------

    def at(self, ts: float) -> Tick | None:
        """The latest tick at or before ``ts`` (None before the first tick)."""
        block = self._block("WHERE t0 <= ? ORDER BY t0 DESC", ts)
        if block is None:
            return None
        times, docs = block
        i = bisect.bisect_right(times, ts) - 1
        return (times[i], docs[i]) if i >= 0 else None

    def after(self, ts: float) -> Tick | None:
        """The first tick strictly after ``ts``."""
        block = self._block("WHERE t1 > ? ORDER BY t1", ts)
        if block is None:
            return None
        times, docs = block
        i = bisect.bisect_right(times, ts)
        return (times[i], docs[i]) if i < len(times) else None

    def before(self, ts: float) -> Tick | None:
        """The last tick strictly before ``ts``."""
        block = self._block("WHERE t0 < ? ORDER BY t0 DESC", ts)
        if block is None:
            return None
        times, docs = block
        i = bisect.bisect_left(times, ts) - 1
        return (times[i], docs[i]) if i >= 0 else None

    # --- ranges -------------------------------------------------------------------------

    def iter(self, from_ts: float | None = None, to_ts: float | None = None) -> Iterator[Tick]:
        """Ticks with ``from_ts <= ts <= to_ts``, in order.

        Each block is looked up afresh, so iterating a recording that is
        being written also yields ticks committed after iteration began.
        """
        last = None  # ts of the last tick yielded; the next must be after it
        lo = float("-inf") if from_ts is None else from_ts
        while True:
            if last is None:
                block = self._block("WHERE t1 >= ? ORDER BY t1", lo)
            else:
                block = self._block("WHERE t1 > ? ORDER BY t1", last)
            if block is None:
                return
            times, docs = block
            i = bisect.bisect_left(times, lo) if last is None else bisect.bisect_right(times, last)
            for j in range(i, len(times)):
                if to_ts is not None and times[j] > to_ts:
                    return
                yield times[j], docs[j]
                last = times[j]
            if last is None:  # defensive: a block whose ticks all precede lo cannot match the query
                return

    def between(self, after_ts: float, upto_ts: float) -> list[Tick]:
        """Ticks with ``after_ts < ts <= upto_ts``, in order."""
        out = []
        for tick in self.iter(after_ts, upto_ts):
            if tick[0] > after_ts:
                out.append(tick)
        return out

    # --- blocks ------------------------------------------------------------------------------

    def _query(self, sql: str, *args):
        try:
            return self._conn.execute(sql, args)
        except Exception as e:  # sqlite3.Error: a damaged or vanished file
            raise RecordingError(f"{self.path}: cannot read the recording: {e}") from None

    def _block(self, where: str, *args) -> tuple[list[float], list[dict]] | None:
        row = self._query(f"SELECT id, n, t0, t1 FROM blocks {where} LIMIT 1", *args).fetchone()
        if row is None:
            return None
        key = tuple(row)  # a live writer rewrites its pending block under the same id with more ticks
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        data = self._query("SELECT codec, data FROM blocks WHERE id = ? AND n = ? AND t1 = ?",
                           row[0], row[1], row[3]).fetchone()
        if data is None:  # rewritten between the two queries: take the new version
            return self._block(where, *args)
        ticks = decode_block(data[1], data[0], MAX_REPLAY_ITEMS)
        block = ([t for t, _ in ticks], [d for _, d in ticks])
        _check_times(block[0], row)
        self._cache[key] = block
        if len(self._cache) > self._cache_blocks:
            self._cache.popitem(last=False)
        return block


class Player:
    """Playback position over a :class:`Replay`, driven by an injected monotonic clock.

    The UI calls :meth:`due` on its timer and renders the ticks it returns
    (the last one is the state on screen). Playback stops at the last tick
    and follows the file when it grows (a recording in progress).
    """

    def __init__(self, replay: Replay, *, clock: Callable[[], float] = time.monotonic, speed: float = 1.0,
                 start_ts: float | None = None, max_batch: int = 600) -> None:
        self.replay = replay
        self.clock = clock
        self.speed = _clamp_speed(speed)
        self.paused = False
        self.max_batch = max_batch
        self._pos: float | None = start_ts  # recording time at self._anchor (monotonic)
        self._anchor = clock()
        self._shown: float | None = None  # ts of the last tick handed out
        self._jump = True  # the next due() hands out the tick at the position, not a range

    # --- where we are -------------------------------------------------------------------

    def position(self, now: float | None = None) -> float | None:
        """Recording time being shown at monotonic ``now`` (None while the recording is empty)."""
        now = self.clock() if now is None else now
        span = self.replay.span()
        if span is None:
            return None
        t0, t1 = span
        if self._pos is None:
            self._pos, self._anchor = t0, now
        pos = self._pos if self.paused else self._pos + (now - self._anchor) * self.speed
        if pos >= t1:
            # Hold at the end; re-anchored so that a growing file plays on from here, not in a burst.
            self._pos, self._anchor = t1, now
            return t1
        return max(t0, pos)

    @property
    def at_end(self) -> bool:
        span = self.replay.span()
        return span is not None and self._shown is not None and self._shown >= span[1]

    def current(self) -> Tick | None:
        """The tick at the current position (what the screen should show)."""
        pos = self.position()
        return None if pos is None else self.replay.at(pos)

    def due(self, now: float | None = None) -> list[Tick]:
        """Ticks that became due since the last call, oldest first (at most ``max_batch``)."""
        pos = self.position(now)
        if pos is None:
            return []
        if self._jump or self._shown is None:
            self._jump = False
            tick = self.replay.at(pos)
            if tick is None:
                return []
            self._shown = tick[0]
            return [tick]
        if pos <= self._shown:
            return []
        ticks = self.replay.between(self._shown, pos)
        if ticks:
            ticks = ticks[-self.max_batch:]
            self._shown = ticks[-1][0]
        return ticks

    # --- controls -------------------------------------------------------------------------

    def pause(self) -> None:
        if not self.paused:
            self._freeze()
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            self._anchor = self.clock()
            self.paused = False

    def toggle(self) -> bool:
        """Pause or resume; returns True when now paused."""
        self.resume() if self.paused else self.pause()
        return self.paused

    def step(self, ticks: int = 1) -> Tick | None:
        """Pause and move ``ticks`` ticks forward (negative: back); returns the tick now shown."""
        self.pause()
        # From the tick on screen, or from where a seek/step not yet shown has put us.
        ref = self.position() if self._jump or self._shown is None else self._shown
        if ref is None:
            return None
        tick = self.replay.at(ref)
        for _ in range(abs(ticks)):
            nxt = self.replay.after(ref) if ticks > 0 else self.replay.before(ref)
            if nxt is None:
                break
            tick, ref = nxt, nxt[0]
        if tick is not None:
            self._pos = tick[0]
            self._anchor = self.clock()
            self._jump = True
        return tick

    def seek(self, ts: float) -> None:
        """Jump to recording time ``ts`` (clamped to the recording); the next due() shows the tick there."""
        span = self.replay.span()
        if span is not None:
            ts = min(max(ts, span[0]), span[1])
        self._pos, self._anchor = ts, self.clock()
        self._jump = True

    def set_speed(self, speed: float) -> float:
        """Play at ``speed``× real time (clamped to 0.5–60); returns the speed set."""
        self._freeze()
        self.speed = _clamp_speed(speed)
        return self.speed

    def faster(self) -> float:
        return self.set_speed(next((s for s in SPEEDS if s > self.speed), MAX_SPEED))

    def slower(self) -> float:
        return self.set_speed(next((s for s in reversed(SPEEDS) if s < self.speed), MIN_SPEED))

    def _freeze(self) -> None:
        pos = self.position()
        if pos is not None:
            self._pos = pos
        self._anchor = self.clock()


def _check_times(ts: list, row: tuple) -> None:
    """A block's ticks are as many as its row says, increasing, from its t0 to its t1 (bisect and the
    player rely on it)."""
    _, n, t0, t1 = row
    if len(ts) != n or not ts or ts[0] != t0 or ts[-1] != t1:
        raise RecordingError(f"corrupt block: {len(ts)} ticks from {ts[:1]} to {ts[-1:]}, "
                             f"its index says {n} from {t0!r} to {t1!r}")
    if not all(a < b for a, b in zip(ts, ts[1:])):
        raise RecordingError("corrupt block: tick times do not increase")


def check_span(path: str, span: tuple[float, float]) -> None:
    """Refuse a recording whose times are no wall-clock times (:class:`RecordingError`, one line)."""
    t0, t1 = span
    for t in (t0, t1):
        if not (isinstance(t, (int, float)) and MIN_WALL_S <= t <= MAX_WALL_S):
            raise RecordingError(f"{path}: damaged recording (tick time {t!r} is not a wall-clock time "
                                 "between 2000 and 2100)")
    if t0 > t1:
        raise RecordingError(f"{path}: damaged recording (it starts at {t0!r}, after its end {t1!r})")


def _clamp_speed(speed: float) -> float:
    return min(MAX_SPEED, max(MIN_SPEED, float(speed)))
