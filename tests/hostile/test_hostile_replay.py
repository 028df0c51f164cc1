"""Issue 29, replay side: a recording or bundle is a file someone may hand over."""

from __future__ import annotations

from pilot_wait import until

from infertop.domain.engine import EngineStats
from infertop.domain.gpu import GpuStats
from infertop.domain.codec import from_doc, to_doc


def test_text_from_a_document_is_escaped_not_sent_to_the_terminal():
    doc = to_doc(EngineStats(name="e\x1b]2;pwned\x07", url="http://127.0.0.1:1",
                             error="\x1b]52;c;AAAA\x07 log"))
    e = from_doc(EngineStats, doc)
    assert "\x1b" not in e.name and "\x07" not in e.name
    assert e.name == "e\\x1b]2;pwned\\x07"
    assert e.error.startswith("\\x1b]52;c;")


def test_numbers_from_a_document_are_finite_and_bounded():
    doc = to_doc(EngineStats(name="e", url="http://127.0.0.1:1"))
    field = next(k for k, v in doc.items() if k not in ("name", "url") and v is None
                 and k in {f for f in EngineStats.__dataclass_fields__}
                 and "float" in str(EngineStats.__dataclass_fields__[k].type))
    doc[field] = float("inf")
    assert getattr(from_doc(EngineStats, doc), field) is None
    doc[field] = 10**400
    assert getattr(from_doc(EngineStats, doc), field) is None


def test_a_gpu_name_with_escapes_is_escaped():
    g = from_doc(GpuStats, {"index": 0, "name": "H200\x1b[2J", "host": "h", "source": "nvml"})
    assert g.name == "H200\\x1b[2J"


async def test_a_bundle_log_line_that_looks_like_markup_is_shown_as_text():
    """Item 3: a bundle's Log lines ('foo[/x] 1' from an engine) are replay notes; they raised MarkupError."""
    from infertop.config import Config, GpuConfig
    from infertop.sources.gpu import GpuCollector
    from infertop.ui.app import InfertopApp, Settings

    settings = Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], notes=["engine served foo[/x] 1"])
    app = InfertopApp(settings, poll=False, gpu_collector=GpuCollector(GpuConfig(nvml=False)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: any(line.endswith("engine served foo[/x] 1") for line in app.log_lines),
                    "the bundle's note in the Log")
        assert app.is_running
        assert any(line.endswith("engine served foo[/x] 1") for line in app.log_lines)


def test_a_huge_queue_value_is_recorded_not_an_overflow():
    """Item 8: a class priority of 1e308 made every block fail ('cannot convert float infinity')."""
    from infertop.state.recording.recorder import decode_block, encode_block

    ticks = [(1.0, {"queues": [{"class_priority": 1e308, "w": 0.5}]}),
             (2.0, {"queues": [{"class_priority": 2.5, "w": 1e308}]}),
             (3.0, {"queues": [{"class_priority": 1e308, "w": 1e-5}]})]
    back = decode_block(encode_block(ticks), "lzma")
    assert [t for t, _ in back] == [1.0, 2.0, 3.0]
    assert back[0][1]["queues"][0]["class_priority"] == 1e308
    assert back[1][1]["queues"][0] == {"class_priority": 2.5, "w": 1e308}


def _rss_kib_after(code: str) -> tuple[int, str]:
    import subprocess
    import sys

    # VmHWM, the peak of this process's own memory since its exec: getrusage's ru_maxrss is kept across
    # exec, so a child forked from a large pytest (460 MiB after the loopback tier) reported the parent's peak
    script = code + ("\nprint(next(line.split()[1] for line in open('/proc/self/status')"
                     " if line.startswith('VmHWM:')))")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    *out, rss = p.stdout.strip().splitlines()
    return int(rss), "\n".join(out)


def test_a_block_of_gigabytes_of_zeros_is_refused_in_bounded_memory():
    """Item 4: a 1 GiB-of-zeros lzma block unpacked whole (GBs of RSS, then MemoryError)."""
    rss_kib, out = _rss_kib_after(
        "import lzma\n"
        "from infertop.state.recording.recorder import decode_block, RecordingError\n"
        "c = lzma.LZMACompressor()\n"
        "data = b''.join(c.compress(bytes(2**24)) for _ in range(64)) + c.flush()\n"
        "try:\n    decode_block(data, 'lzma')\nexcept RecordingError as e:\n    print(e)\n")
    assert "more than 64 MiB" in out
    assert rss_kib < 400 * 1024


def test_a_block_with_a_huge_list_index_is_an_error_not_a_memory_bomb():
    import json
    import lzma

    import pytest

    from infertop.state.recording.recorder import RecordingError, decode_block

    header = json.dumps({"ts": [1.0], "p": [["engines", 300_000_000]], "c": [{"k": 1}]}).encode()
    data = lzma.compress(len(header).to_bytes(4, "big") + header)
    with pytest.raises(RecordingError, match="list index 300000000"):
        decode_block(data, "lzma")
    with pytest.raises(RecordingError, match="corrupt block"):
        decode_block(data[: len(data) // 2], "lzma")


def test_recordings_and_bundles_are_written_0600(tmp_path):
    import os
    import stat

    from infertop.state.recording.bundle import write_bundle
    from infertop.state.recording.recorder import Recorder

    old_mask = os.umask(0o022)  # the usual umask: files came out 0644, readable by every local user
    try:
        rec_path, bundle_path = tmp_path / "r.db", tmp_path / "b.db"
        with Recorder(str(rec_path), retention_s=None) as rec:
            rec.append(1.0, {"engines": [{"name": "e"}]})
        write_bundle(str(bundle_path), [(1.0, {"engines": [{"name": "e"}]})], ["a log line"], [], "")
    finally:
        os.umask(old_mask)
    for p in (rec_path, bundle_path):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p


def test_a_damaged_recording_is_one_line_and_exit_2(tmp_path):
    """Item 4: a tick of the wrong shape crashed `infertop replay` with exit 70 (TypeError in from_doc)."""
    import subprocess
    import sys

    from infertop.state.recording.recorder import Recorder

    path = tmp_path / "bad.db"
    with Recorder(str(path), retention_s=None) as rec:
        rec.append(1_700_000_000.0, {"engines": 5, "refresh_s": "x"})  # a wall-clock time: from_doc fails
    p = subprocess.run([sys.executable, "-m", "infertop", "replay", str(path)], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and "damaged recording" in p.stderr


async def test_a_corrupt_later_block_stops_playback_in_place(tmp_path):
    """Item 4: a damaged block met during playback crashed the replay TUI (exit 70)."""
    import sqlite3

    from infertop.config import Config, GpuConfig
    from infertop.state.recording.recorder import Recorder
    from infertop.state.recording.replay import Player, Replay
    from infertop.ui.app import InfertopApp, Settings

    path = tmp_path / "r.db"
    from recorded_fleet import recorded_states  # real states, as the live console records them

    with Recorder(str(path), retention_s=None, block_s=2.0) as rec:  # 4 ticks: two blocks
        for st in recorded_states(4):
            rec.append(st.taken_at, st.to_doc())
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 2
        conn.execute("UPDATE blocks SET data = x'00ff' WHERE id = (SELECT max(id) FROM blocks)")
    now = {"t": 1000.0}
    player = Player(Replay(str(path)), clock=lambda: now["t"])
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], read_only=True,
                               mode="replay", replay=player, replay_path=str(path)), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(40):  # bounded: the corrupt block is due after 2 s of playback
            now["t"] += 0.5
            app.replay_ctl.tick()
            await pilot.pause()  # a step of this bounded loop: tick() itself sets the error it waits for
            if app.replay_ctl.error:
                break
        assert app.is_running
        assert "corrupt block" in app.replay_ctl.error
        assert any("replay stopped" in line for line in app.log_lines)


# -- item 1: the recorder counts and says only what is in the file ------------------------------------------
# A real write error without patching: RLIMIT_FSIZE in a child process (EFBIG on every write past the limit;
# Python ignores SIGXFSZ), lifted again to show the recorder recovers.

_FULL_DISK_LOG = r'''
import json, os, resource, sys
from infertop.state.recording.state_log import StateLog
from infertop.state.recording.replay import Replay
path = sys.argv[1]
log = StateLog(path, refresh_s=1.0, keep_s=0, retention_s=None)
log._recorder.flush_s, log._recorder.block_s = 1.0, 3.0  # small blocks: several in a short run
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
out = {}
def run(first, n):
    for i in range(first, first + n):
        log.add(1_700_000_000.0 + i, {"s": os.urandom(2000).hex(), "i": i})  # incompressible: pages per tick
        log.flush()
run(0, 5)
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path + "-wal") + 100, hard))  # the disk is full
run(5, 10)
out["failing"] = log.record_error
out["written_while_full"] = log.ticks_written
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
run(15, 10)
out["after"] = log.record_error
log.close()
out["news"] = list(log.record_news)
out["written"] = log.ticks_written
with Replay(path) as rp:
    out["in_file"] = rp.count()
print(json.dumps(out))
'''


def _child(tmp_path, script: str, *args: str, timeout_s: float = 120):
    import subprocess
    import sys

    (tmp_path / "child.py").write_text(script)
    return subprocess.run([sys.executable, str(tmp_path / "child.py"), *args], capture_output=True, text=True,
                          timeout=timeout_s)


def test_a_full_disk_is_said_retried_and_nothing_is_lost_once_it_has_space(tmp_path):
    """The old code lost every tick that arrived while the disk was full (16 of 25 in the file, no
    record_error) and kept saying '● rec'."""
    import json

    r = _child(tmp_path, _FULL_DISK_LOG, str(tmp_path / "r.infertop"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["failing"] and "cannot write the recording" in out["failing"]
    assert out["written_while_full"] < 15  # counted: only what was committed
    assert out["after"] is None
    assert any("rec failing: cannot write the recording" in n for n in out["news"])
    assert any("recording again" in n for n in out["news"])
    assert out["in_file"] == out["written"] == 25  # held while full, written once there was space


_FULL_DISK_RECORD = r'''
import os, resource, sys
path = sys.argv[1]
if sys.argv[2] == "seed":
    from infertop.state.recording.recorder import Recorder
    rec = Recorder(path, flush_s=0.5, block_s=1.0)
    for i in range(40):
        rec.append(1_700_000_000 + i, {"s": os.urandom(1500).hex(), "i": i})
    os._exit(0)  # killed: its -wal stays, so the next writer appends past the end of it
limit = os.path.getsize(path + "-wal") - 1  # no room for one more page: the disk is full
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
from infertop.cli import main
sys.exit(main(["record", path, "--duration", "1.5", "--config", sys.argv[3]]))
'''


def test_record_on_a_full_disk_exits_1_with_the_reason_not_ticks_appended(tmp_path):
    """The old code printed '8 ticks appended' and exited 0 having written nothing."""
    path = str(tmp_path / "r.infertop")
    config = tmp_path / "c.yaml"
    config.write_text("gpu:\n  nvml: false\nrefresh_s: 0.2\n")
    assert _child(tmp_path, _FULL_DISK_RECORD, path, "seed").returncode == 0
    r = _child(tmp_path, _FULL_DISK_RECORD, path, "run", str(config))
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"infertop record: 0 of ") and "ticks written to" in last
    assert "cannot write the recording" in last and "appended" not in r.stderr
    assert "Traceback" not in r.stderr


def test_replay_leaves_no_wal_or_shm_beside_the_file(tmp_path):
    """Item 3: the old code's mode=ro open made r.infertop-wal and r.infertop-shm next to a file handed over
    (and left them after close)."""
    from infertop.state.recording.recorder import record_all
    from infertop.state.recording.replay import Player, Replay

    path = tmp_path / "r.infertop"
    record_all(str(path), [(1_700_000_000.0 + i, {"i": i}) for i in range(5)])
    replay = Replay(str(path))
    span = replay.span()
    player = Player(replay, clock=lambda: 0.0)
    assert player.due() == [(span[0], {"i": 0})]
    assert player.step(3) == (span[0] + 3, {"i": 3})
    assert replay.count() == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # while open, too
    replay.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_name_with_hash_or_question_mark_replays(tmp_path):
    """The old URI f'file:{path}?mode=ro' cut the name at '?' or '#': 'unable to open database file'."""
    from infertop.state.recording.recorder import record_all
    from infertop.state.recording.replay import Replay

    path = str(tmp_path / "r #1?.infertop")
    record_all(path, [(1_700_000_000.0 + i, {"i": i}) for i in range(3)])
    with Replay(path) as rp:
        assert rp.count() == 3


# -- item 2: header bombs --------------------------------------------------------------------------------


def _recorded(path, n: int = 3, engines: int | None = None) -> None:
    from recorded_fleet import recorded_states  # real states, as the live console records them

    from infertop.state.recording.recorder import Recorder

    with Recorder(str(path), retention_s=None) as rec:
        for st in recorded_states(n):
            doc = st.to_doc()
            if engines is not None:
                doc["engines"] = [dict(doc["engines"][0], name=f"e{i}") for i in range(engines)]
            rec.append(st.taken_at, doc)


def test_a_recording_whose_times_are_not_wall_clock_times_is_refused(tmp_path):
    """t0=-1e308 in the block index: the old code opened it (span from -1e308) and the TUI took it."""
    import sqlite3
    import subprocess
    import sys

    import pytest

    from infertop.flight_cli import open_replay

    path = tmp_path / "r.db"
    _recorded(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE blocks SET t0 = -1e308")
    with pytest.raises(ValueError, match=r"damaged recording \(tick time -1e\+308 is not a wall-clock time"):
        open_replay(str(path))
    p = subprocess.run([sys.executable, "-m", "infertop", "replay", str(path)], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "wall-clock" in p.stderr, p.stderr


def test_a_block_whose_times_disagree_with_its_index_is_corrupt(tmp_path):
    import sqlite3

    import pytest

    from infertop.state.recording.recorder import RecordingError
    from infertop.state.recording.replay import Replay

    path = tmp_path / "r.db"
    _recorded(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE blocks SET n = 5000000")  # 5 M ticks claimed, 3 held
    with Replay(str(path)) as rp, pytest.raises(RecordingError, match="corrupt block: 3 ticks"):
        rp.at(rp.span()[1])


async def test_a_tick_with_more_than_4096_engines_shows_4096_and_says_how_many(tmp_path):
    """The old code built all of them (20000: 935 MB in the TUI, never painted)."""
    from infertop.config import Config, GpuConfig
    from infertop.state.fleet_types import FleetState
    from infertop.state.recording.replay import Player, Replay
    from infertop.ui.app import InfertopApp, Settings

    path = tmp_path / "r.db"
    _recorded(path, n=1, engines=5000)
    with Replay(str(path)) as rp:
        ts, doc = rp.at(rp.span()[1])
    assert len(doc["engines"]) == 4096 and doc["engines"][-1]["name"] == "e4095"
    assert doc["truncated"] == {"engines": 5000}
    assert len(FleetState.from_doc(doc).engines) == 4096
    player = Player(Replay(str(path)), clock=lambda: 1000.0)
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], read_only=True,
                               mode="replay", replay=player, replay_path=str(path)), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(20):  # bounded: the tick is due at once
            app.replay_ctl.tick()
            await pilot.pause()  # a step of this bounded loop: tick() itself shows the state it waits for
            if app.state is not None:
                break
        assert app.is_running and len(app.state.engines) == 4096
        assert any("a tick holds 5000 engines, the first 4096 are shown" in line for line in app.log_lines)


def test_a_block_header_past_24_mib_is_refused_before_it_is_parsed():
    """20000 engines made a 50 MB header, parsed whole (617 MB RSS); the old code parsed any header."""
    import lzma

    import pytest

    from infertop.state.recording.recorder import RecordingError, decode_block

    header = b'{"ts":[1700000000.0],"p":[],"c":[],"x":"' + b"a" * (25 * 2**20) + b'"}'
    data = lzma.compress(len(header).to_bytes(4, "big") + header)
    with pytest.raises(RecordingError, match=r"corrupt block: header of 25.0 MiB \(the limit is 24 MiB\)"):
        decode_block(data, "lzma")


async def test_the_header_says_rec_failing_while_writes_fail_and_the_log_says_recording_again(tmp_path):
    """The old header kept '● rec' while nothing was written. A real EFBIG: RLIMIT_FSIZE below the end of
    the recording's -wal for a few ticks (only this window; Python ignores SIGXFSZ)."""
    import os
    import resource

    from overview_view import text_of
    from recorded_fleet import recorded_states

    from infertop.config import Config, GpuConfig
    from infertop.ui.app import InfertopApp, Settings

    path = str(tmp_path / "r.infertop")
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], record_path=path,
                               state_dir=str(tmp_path / "state")), poll=False)
    states = iter(recorded_states(12))
    async with app.run_test(size=(160, 30)) as pilot:
        log = app.state_log
        log._recorder.flush_s = 0.5  # a block write every tick (the ticks are 1 s apart)
        for _ in range(2):
            app.show_state(next(states))
            log.flush()
        assert log.ticks_written == 2 and "● rec" in text_of(app, "#topbar")
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path + "-wal"), hard))  # the disk is full
        try:
            for _ in range(3):
                app.show_state(next(states))
                log.flush()
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        app.painter.render_top()
        await until(pilot, lambda: "rec failing: cannot write the recording" in text_of(app, "#topbar"),
                    "the failing recording on the top bar")
        top = text_of(app, "#topbar")
        assert "rec failing: cannot write the recording" in top and "● rec" not in top, top
        assert log.ticks_written == 2
        for _ in range(2):  # space again: the held ticks are written with the next block
            app.show_state(next(states))
            log.flush()
        app.show_state(next(states))
        await until(pilot, lambda: "● rec" in text_of(app, "#topbar") and log.ticks_written >= 7, '"● rec" in text_of(app, "#topbar") and log.ticks_written …')
        assert "● rec" in text_of(app, "#topbar") and log.ticks_written >= 7
        assert any("rec failing: cannot write the recording" in line for line in app.log_lines)
        assert any("recording again" in line for line in app.log_lines)
