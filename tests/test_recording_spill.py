"""The incident bundle's recent ticks spilled to unlinked temporary files: they come back equal, rotation keeps
exactly the last keep_s, a write that fails keeps the console running (and says so once), nothing is left on disk."""

from __future__ import annotations

import os

import pytest

from infertop.state.recording import Packed, StateLog, documents
from infertop.state.spill import SpillFile, Spilled


def _doc(i: int) -> dict:
    # a document the size of a few engines, different each tick
    return {"taken_at": 1_800_000_000.0 + i, "engines": [{"name": f"e{k}", "running": i * 7 + k,
                                                          "note": "x" * (k + i % 5)} for k in range(8)]}


def _fill(log: StateLog, n: int, first: int = 0) -> list[tuple[float, dict]]:
    """Ticks ``first`` .. ``first + n - 1``, one a second, waited for until spilled (or kept)."""
    added = []
    for i in range(first, first + n):
        d = _doc(i)
        log.add(d["taken_at"], d)
        added.append((d["taken_at"], d))
    log.flush()
    return added


def test_spilled_ticks_come_back_equal_in_a_bundle_and_memory_keeps_only_references(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=60, spill_dir=str(tmp_path))
    added = _fill(log, 30)
    held = [item for _, item in log.recent]
    assert all(isinstance(item, Spilled) for item in held)  # the packed bytes are not in memory
    assert log._spill.nbytes == sum(r.length for r in held) > 0
    kept = log.window(60)
    assert all(isinstance(item, Packed) for _, item in kept)
    assert documents(kept) == added
    assert log.error is None and log.spill_error is None
    log.close()


def test_rotation_keeps_exactly_the_last_keep_s_and_bounds_the_disk(tmp_path):
    keep_s = 20
    log = StateLog(None, refresh_s=1.0, keep_s=keep_s, spill_dir=str(tmp_path))
    sizes = []
    added = []
    for i in range(0, 130, 7):  # 130+ ticks: six rotations, looked at from every point of a segment
        added += _fill(log, 7, first=i)
        sizes.append(log._spill.nbytes)
        last = added[-1][0]
        want = [(ts, d) for ts, d in added if ts >= last - keep_s]
        assert len(want) == min(len(added), keep_s + 1)
        assert documents(log.window(keep_s)) == want
    one = max(len(Packed(d).data) for _, d in added)
    assert max(sizes) <= 2 * (keep_s + 1) * one  # two segments' worth at most, not all the ticks
    assert log.error is None
    log.close()


def test_the_window_taken_stays_whole_when_the_spill_rotates_before_the_bundle_is_written(tmp_path):
    log = StateLog(None, refresh_s=1.0, keep_s=10, spill_dir=str(tmp_path))
    added = _fill(log, 15)
    kept = log.window(10)
    _fill(log, 30, first=100)  # two rotations later: the ticks of ``kept`` are no longer on disk
    assert documents(kept) == added[-11:]
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
    added += _fill(log, 5, first=5)  # the console goes on; the message is not repeated or changed
    assert log.spill_error == first
    assert all(isinstance(item, Packed) for _, item in log.recent)
    assert documents(log.window(60)) == added
    log.close()
    assert opened and all(f.closed for f in opened)


def test_an_unusable_spill_dir_falls_back_to_the_system_temp_dir(tmp_path):
    missing = tmp_path / "not-there"
    log = StateLog(None, refresh_s=1.0, keep_s=60, spill_dir=str(missing))
    added = _fill(log, 3)
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
