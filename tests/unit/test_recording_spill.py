"""The incident bundle's recent ticks, packed in blocks and spilled to unlinked temporary files: they come back
equal and in order (the newest, not yet packed, as they are), rotation keeps exactly the last keep_s, a write
that fails keeps the console running (and says so once), a reader never sees half a block, nothing is left on
disk."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import pytest

from infertop.domain.engine import EngineStats
from infertop.state.fleet_types import FRESH, EngineState, FleetState, FleetView, Freshness, Slo
from infertop.state.recording.state_log import _REDUCERS, Packed, PackedBlock, StateLog, _fast_reducer, documents, pack_block
from infertop.state.recording.spill import SpillFile, Spilled


def _doc(i: int) -> dict:
    # a document the size of a few engines, different each tick
    return {"taken_at": 1_800_000_000.0 + i, "engines": [{"name": f"e{k}", "running": i * 7 + k,
                                                          "note": "x" * (k + i % 5)} for k in range(8)]}


def _add(log: StateLog, n: int, first: int = 0) -> list[tuple[float, dict]]:
    """Ticks ``first`` .. ``first + n - 1``, one a second."""
    added = []
    for i in range(first, first + n):
        d = _doc(i)
        log.add(d["taken_at"], d)
        added.append((d["taken_at"], d))
    return added


def _fill(log: StateLog, n: int, first: int = 0) -> list[tuple[float, dict]]:
    """As :func:`_add`, then waited for until every tick is packed and spilled (or kept)."""
    added = _add(log, n, first)
    log.flush()
    return added


def _held(log: StateLog) -> list:
    """What memory holds for each block: its objects (a list) or where the packed block lies."""
    return [b.held for b in log._blocks]


@dataclass(frozen=True, slots=True)
class _Point:
    x: float
    label: str = ""


@dataclass(frozen=True, slots=True)
class _Custom:
    x: float

    def __reduce__(self):  # its own reduction: kept (it stores x doubled, read back halved)
        return (_halved, (self.x * 2,))


def _halved(x2: float) -> _Custom:
    return _Custom(x2 / 2)


def test_packing_gives_back_equal_states_through_each_class_own_reduction_where_it_has_one():
    state = FleetState(tick=3, taken_at=1_800_000_000.5, refresh_s=1.0, window_s=60.0,
                       slo=Slo(2.0, 0.05, 10.0, 1.0, 90.0),
                       engines=(EngineState(EngineStats(name="e0", url="http://127.0.0.1:1", running=3.0),
                                            Freshness(FRESH, "u", 1.0, 0.1), {"waiting": "not exported"}),),
                       fleet=FleetView(engines=1, engines_up=1, running=3.0))
    items = [state, _Point(1.5, "a"), _Custom(4.0), {"plain": [1, 2.5, None]}]
    data, ends, loose = pack_block(items)
    assert loose is None and len(ends) == 4
    block = PackedBlock(data, ends)
    assert [block.tick(i) for i in (3, 0, 2, 1)] == [items[3], state, items[2], items[1]]  # any order
    assert EngineStats in _REDUCERS and _Point in _REDUCERS and _Custom not in _REDUCERS  # the fast path ran
    assert _fast_reducer(EngineStats) and _fast_reducer(_Point) and _fast_reducer(_Custom) is None
    assert _fast_reducer(dict) is None


def test_spilled_ticks_come_back_equal_in_a_bundle_and_memory_keeps_only_references(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=60, spill_dir=str(tmp_path))
    assert log.block_ticks == 10
    added = _fill(log, 30)
    held = _held(log)
    assert len(held) == 3 and all(isinstance(h, Spilled) for h in held)  # packed bytes are not in memory
    assert log._spill.nbytes == sum(h.length for h in held) > 0
    kept = log.window(60)
    assert all(isinstance(item, Packed) for _, item in kept)
    assert documents(kept) == added
    assert log.error is None and log.spill_error is None
    log.close()


def test_the_newest_ticks_stay_objects_until_their_block_is_full_and_come_back_as_they_are(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=60, spill_dir=str(tmp_path))
    added = _add(log, 25)
    log._queue.join()  # the two full blocks are packed; the newest is not full
    held = _held(log)
    assert [type(h) for h in held] == [Spilled, Spilled, list] and len(held[-1]) == 5
    kept = log.window(60)
    assert [ts for ts, _ in kept] == [ts for ts, _ in added]
    assert all(isinstance(item, Packed) for _, item in kept[:20])
    assert all(item is d for (_, item), (_, d) in zip(kept[20:], added[20:]))  # the very objects added
    assert documents(kept) == added
    # a block takes at most 10 s of ticks: at a 2 s refresh, 5 ticks
    slow = StateLog(None, refresh_s=2.0, keep_s=60, spill_dir=str(tmp_path))
    assert slow.block_ticks == 5
    slow.close()
    log.close()


def test_memory_holds_the_last_keep_s_and_big_ticks_wait_in_smaller_blocks(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=30, spill_dir=str(tmp_path))
    added = _fill(log, 100)
    assert log.block_ticks == 10
    held_ticks = sum(len(b.ts) for b in log._blocks)
    assert log.keep_ticks == 31 and 31 <= held_ticks <= 31 + log.block_ticks  # old blocks dropped whole
    assert documents(log.window(30)) == added[-31:]
    # ~32 KiB of pickle a tick (a fleet of ~45 engines): a block is 4 ticks, so fewer states wait as objects
    for i in range(100, 125):
        d = dict(_doc(i), blob=f"{i:08x}" * 4000)
        log.add(d["taken_at"], d)
        added.append((d["taken_at"], d))
        if i == 109:  # a first block of 10 big ticks: packed, it tells the size of the next ones
            log._queue.join()
            assert log.block_ticks == 4
    log._queue.join()
    assert [len(b.ts) for b in list(log._blocks)[-5:]] == [10, 4, 4, 4, 3] and isinstance(log._blocks[-1].held, list)
    assert documents(log.window(30)) == added[-31:]
    log.close()


def test_rotation_keeps_exactly_the_last_keep_s_and_bounds_the_disk(tmp_path):
    keep_s = 20
    log = StateLog(None, refresh_s=1.0, keep_s=keep_s, spill_dir=str(tmp_path))
    sizes = []
    added = []
    for i in range(0, 130, 7):  # 130+ ticks: six rotations, looked at from every point of a segment and block
        added += _add(log, 7, first=i)
        log._queue.join()  # full blocks packed, the newest block still open
        sizes.append(log._spill.nbytes)
        last = added[-1][0]
        want = [(ts, d) for ts, d in added if ts >= last - keep_s]
        assert len(want) == min(len(added), keep_s + 1)
        assert documents(log.window(keep_s)) == want
    one = max(len(pack_block([d])[0]) for _, d in added)  # a tick packed alone
    assert max(sizes) <= 2 * (keep_s + 1) * one  # two segments' worth at most, not all the ticks
    assert log.error is None
    log.close()


def test_the_window_taken_stays_whole_when_the_spill_rotates_before_the_bundle_is_written(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=10, spill_dir=str(tmp_path))
    added = _add(log, 15)
    log._queue.join()
    kept = log.window(10)  # part of a packed block, and the newest ticks as objects
    _fill(log, 30, first=100)  # rotations later: the ticks of ``kept`` are no longer on disk
    assert documents(kept) == added[-11:]
    log.close()


def test_a_tick_that_cannot_be_pickled_stays_as_it_is_and_its_block_packs_the_others(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=60, spill_dir=str(tmp_path))
    added = _add(log, 4)
    odd = {"taken_at": 1_800_000_004.0, "hook": lambda: None}  # a lambda: pickle refuses it
    log.add(odd["taken_at"], odd)
    added += [(odd["taken_at"], odd)] + _fill(log, 10, first=5)
    kept = log.window(60)
    assert [ts for ts, _ in kept] == [ts for ts, _ in added]
    assert kept[4][1] is odd and all(isinstance(item, Packed) for i, (_, item) in enumerate(kept) if i != 4)
    assert documents(kept) == added
    assert log.error is None
    log.close()


def test_a_reader_never_sees_half_a_block(tmp_path):
    """window() from another thread while blocks are packed and swapped: always every tick, in order."""
    log = StateLog(None, refresh_s=1.0, keep_s=30, spill_dir=str(tmp_path))
    by_ts = {}
    bad: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            kept = log.window(30)
            ts = [t for t, _ in kept]
            if ts != sorted(ts) or (ts and len(ts) != min(31, int(ts[-1] - ts[0]) + 1)):
                bad.append(f"ticks {ts[:3]}…{ts[-3:]}")
            for (t, d) in documents(kept):
                if d != by_ts[t]:
                    bad.append(f"tick {t} changed")

    reader = threading.Thread(target=read)
    for i in range(40):  # a first view before the reader starts
        by_ts[_doc(i)["taken_at"]] = _doc(i)
    _add(log, 40)
    reader.start()
    try:
        for i in range(40, 400):
            d = _doc(i)
            by_ts[d["taken_at"]] = d
            log.add(d["taken_at"], d)
            if i % 25 == 0:
                log.flush()  # seals blocks of every size
    finally:
        done.set()
        reader.join(timeout=60)
    assert not bad, bad[:5]
    log.close()


def test_a_failing_write_keeps_the_ticks_in_memory_and_says_so_once(tmp_path):
    """/dev/full: every write fails with 'no space left on device', as on a full disk."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    opened = []

    def full_disk():
        f = open("/dev/full", "r+b")  # noqa: SIM115 — closed by the spill
        opened.append(f)
        return f

    log = StateLog(None, refresh_s=1.0, keep_s=60, spill=SpillFile(60, open_segment=full_disk))
    added = _fill(log, 5)
    assert log.spill_error is not None and "kept in memory" in log.spill_error
    assert "No space left" in log.spill_error
    assert log.error == log.spill_error
    first = log.spill_error
    added += _fill(log, 15, first=5)  # the console goes on; the message is not repeated or changed
    assert log.spill_error == first
    assert all(isinstance(h, bytes) for h in _held(log))  # packed, in memory
    assert documents(log.window(60)) == added
    log.close()
    assert opened and all(f.closed for f in opened)


def test_an_unusable_spill_dir_falls_back_to_the_system_temp_dir(tmp_path):
    missing = tmp_path / "not-there"
    log = StateLog(None, refresh_s=1.0, keep_s=60, spill_dir=str(missing))
    added = _fill(log, 3)
    assert isinstance(_held(log)[0], Spilled)
    assert documents(log.window(60)) == added and log.error is None
    assert not missing.exists()  # never created: the state dir is not made by a console that only runs
    log.close()


def test_nothing_is_left_on_disk_during_or_after_the_run(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=60, spill_dir=str(tmp_path))
    _fill(log, 20)
    assert os.listdir(tmp_path) == []  # unlinked from the start: no path anyone could open
    files = [f for f in log._spill._files if f is not None]
    assert files and all(os.fstat(f.fileno()).st_nlink == 0 for f in files)
    log.close()
    assert all(f.closed for f in files) and os.listdir(tmp_path) == []
    assert log.window(60) == []  # closed: the spilled ticks are gone with their files


def test_the_headless_recorder_log_opens_no_spill(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=0, spill_dir=str(tmp_path))
    log.add(1.0, _doc(0))
    log.close()
    assert log._spill is None and not isinstance(log.window(60)[0][1], (Packed, Spilled))
