"""Flight recorder, replay, player and incident bundles, on real SQLite files."""

from __future__ import annotations

import lzma
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import zlib

import pytest

from infertop.state.recording.bundle import read_bundle_extras, redact_config, write_bundle
from infertop.state.recording.recorder import Recorder, RecordingError, decode_block, quantize
from infertop.state.recording.replay import MAX_SPEED, MIN_SPEED, Player, Replay

T0 = 1_764_489_600.0


def fleet_doc(i: int, rng: random.Random) -> dict:
    """A small fleet state whose shape changes over time (engines come and go, alerts grow and shrink)."""
    engines = {
        f"vllm-{e}": {
            "state": "up",
            "sampled_at": T0 + i - rng.uniform(0.01, 0.3),
            "stats": {"running": rng.randint(0, 100), "kv_cache_pct": rng.uniform(0, 100),
                      "ttft_p99_s": rng.choice([None, rng.uniform(0.1, 3)]), "requests_total": 10 * i + e},
            "gpus": [f"GPU-{e}"],
        }
        for e in range(3 if i % 50 < 40 else 2)
    }
    doc = {
        "ts": T0 + i,
        "engines": engines,
        "alerts": [{"engine": "vllm-0", "value": rng.uniform(2, 3), "since": T0}] * (i % 4),
        "flags": {"read_only": i % 2 == 0, "mode": 1 if i % 3 else 1.0, "empty_d": {}, "empty_l": []},
        "note": "naïve ☃" if i % 5 == 0 else None,
        "nested": [[1, 2], [], [{"a": [None]}]],
    }
    if i % 7 == 0:
        doc["sometimes"] = {"x": i}
    return doc


def record(path, n: int = 300, step: float = 1.0, **kw) -> list[tuple[float, dict]]:
    rng = random.Random(n)
    ticks = [(T0 + i * step, fleet_doc(i, rng)) for i in range(n)]
    with Recorder(str(path), **kw) as rec:
        for ts, doc in ticks:
            rec.append(ts, doc)
    return ticks


def types_of(node):
    """The structure with every leaf replaced by its type: 1, 1.0 and True must stay apart."""
    if isinstance(node, dict):
        return {k: types_of(v) for k, v in node.items()}
    if isinstance(node, list):
        return [types_of(v) for v in node]
    return type(node)


# --- round trip ----------------------------------------------------------------------


def test_lossless_round_trip_across_blocks(tmp_path):
    ticks = record(tmp_path / "r.rec", precision=None)
    with Replay(str(tmp_path / "r.rec")) as rp:
        out = list(rp.iter())
        assert rp.count() == len(ticks) == len(out)
        blocks = rp._conn.execute("SELECT count(*) FROM blocks").fetchone()[0]
    assert blocks == 5  # 300 ticks at 1 s in 60 s blocks
    assert [t for t, _ in out] == [t for t, _ in ticks]
    for (_, want), (_, got) in zip(ticks, out):
        assert got == want
        assert types_of(got) == types_of(want)


def test_default_precision_is_quantize(tmp_path):
    ticks = record(tmp_path / "r.rec")
    with Replay(str(tmp_path / "r.rec")) as rp:
        out = list(rp.iter())
    for (ts, want), (got_ts, got) in zip(ticks, out):
        assert got_ts == ts  # tick times are exact
        assert got == quantize(want)
        assert types_of(got) == types_of(want)
    # Six significant digits, and never coarser than a millisecond (timestamps).
    sample = ticks[123][1]["engines"]["vllm-1"]
    kv = sample["stats"]["kv_cache_pct"]
    assert abs(quantize(kv) - kv) <= 5e-6 * abs(kv)
    assert quantize(kv) != kv
    at = sample["sampled_at"]
    assert abs(quantize(at) - at) <= 0.0005 and quantize(at) != at


def test_recorded_docs_compress_far_below_json(tmp_path):
    path = tmp_path / "r.rec"
    ticks = record(path, n=600)
    import json

    raw = sum(len(json.dumps(d)) for _, d in ticks)
    with Replay(str(path)) as rp:
        stored = rp._conn.execute("SELECT sum(nbytes) FROM blocks").fetchone()[0]
    assert stored * 5 < raw


# --- seek semantics ---------------------------------------------------------------------


def test_seek_next_previous_and_ranges(tmp_path):
    ticks = record(tmp_path / "r.rec", n=200, step=2.0)  # ticks every 2 s, blocks of 30 ticks
    times = [t for t, _ in ticks]
    with Replay(str(tmp_path / "r.rec")) as rp:
        assert rp.span() == (times[0], times[-1])
        assert rp.at(times[0] - 0.1) is None
        assert rp.at(times[0])[0] == times[0]
        for i in (1, 29, 30, 31, 59, 60, 150):  # block edges included
            assert rp.at(times[i])[0] == times[i]
            assert rp.at(times[i] + 1.5)[0] == times[i]
            assert rp.at(times[i] + 1.5)[1] == quantize(ticks[i][1])
            assert rp.after(times[i])[0] == times[i + 1]
            assert rp.after(times[i] - 0.5)[0] == times[i]
            assert rp.before(times[i])[0] == times[i - 1]
        assert rp.at(times[-1] + 1e6)[0] == times[-1]
        assert rp.after(times[-1]) is None
        assert rp.before(times[0]) is None
        assert [t for t, _ in rp.iter(times[55] + 0.5)] == times[56:]
        assert [t for t, _ in rp.iter(times[10], times[70])] == times[10:71]
        assert [t for t, _ in rp.between(times[29], times[31])] == times[30:32]


def test_empty_recording(tmp_path):
    Recorder(str(tmp_path / "e.rec")).close()
    with Replay(str(tmp_path / "e.rec")) as rp:
        assert rp.span() is None and rp.count() == 0 and rp.at(T0) is None and list(rp.iter()) == []
        assert Player(rp, clock=lambda: 0.0).due() == []


# --- retention ------------------------------------------------------------------------------


def test_retention_drops_old_blocks(tmp_path):
    path = tmp_path / "r.rec"
    ticks = record(path, n=900, retention_s=300)  # 15 minutes kept 5
    with Replay(str(path)) as rp:
        t0, t1 = rp.span()
        assert t1 == ticks[-1][0]
        assert t1 - 300 - 60 <= t0 and t0 > ticks[0][0]
        assert rp.count() < 900 - 500
        assert rp.at(t0)[1] == quantize(dict(ticks)[t0])


def test_max_bytes_keeps_newest(tmp_path):
    path = tmp_path / "r.rec"
    record(path, n=40, precision=None)
    with Replay(str(path)) as rp:
        one_block = rp._conn.execute("SELECT nbytes FROM blocks").fetchone()[0]
    path2 = tmp_path / "r2.rec"
    ticks = record(path2, n=900, block_s=10, max_bytes=3 * one_block)
    with Replay(str(path2)) as rp:
        total = rp._conn.execute("SELECT sum(nbytes) FROM blocks").fetchone()[0]
        assert total <= 3 * one_block + one_block  # plus the block being written
        assert rp.span()[1] == ticks[-1][0]
        assert rp.count() < 200


# --- crash safety and live files ---------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys
    from infertop.state.recording.recorder import Recorder
    rec = Recorder(sys.argv[1], block_s=60, flush_s=10)
    for i in range(26):
        rec.append(1000.0 + i, {"i": i, "payload": {"x": i * 0.5}})
    print("appended", flush=True)
    sys.stdin.read()  # wait to be killed: never closes
""")


def test_killed_writer_keeps_everything_up_to_the_last_flush(tmp_path):
    path = str(tmp_path / "r.rec")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "appended"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    with Replay(path) as rp:
        # flush_s=10: flushed at ticks 10 and 20; ticks 21..25 were only in memory.
        assert rp.span() == (1000.0, 1020.0)
        assert [d["i"] for _, d in rp.iter()] == list(range(21))
    # A new writer continues the same file after the crash.
    with Recorder(path) as rec:
        with pytest.raises(ValueError, match="not after"):
            rec.append(1020.0, {"i": -1})
        rec.append(1030.0, {"i": 30})
    with Replay(path) as rp:
        assert [d["i"] for _, d in rp.iter()] == list(range(21)) + [30]


def test_replay_follows_a_recording_in_progress(tmp_path):
    path = str(tmp_path / "r.rec")
    rec = Recorder(path, block_s=60, flush_s=5)
    try:
        for i in range(6):
            rec.append(T0 + i, {"i": i})
        rp = Replay(path)
        assert rp.span() == (T0, T0 + 5)
        assert rp.at(T0 + 100)[1] == {"i": 5}
        seen = list(rp.iter())
        for i in range(6, 68):  # the pending block is rewritten, then a second block starts
            rec.append(T0 + i, {"i": i})
        # Block 1 (0..59) was written when tick 60 came; block 2 flushed at 64; 65..67 still pending.
        assert rp.span() == (T0, T0 + 64)
        assert rp.at(T0 + 100)[1] == {"i": 64}
        assert [d["i"] for _, d in seen] == list(range(6))
        assert [d["i"] for _, d in rp.iter()] == list(range(65))
        with pytest.raises(sqlite3.OperationalError):
            rp._conn.execute("DELETE FROM blocks")  # read-only
        rp.close()
    finally:
        rec.close()
    with Replay(path) as rp:
        assert rp.count() == 68


# --- bad input -------------------------------------------------------------------------------------


def test_bad_input_is_refused_whole_and_loses_nothing(tmp_path):
    path = str(tmp_path / "r.rec")
    with Recorder(path) as rec:
        rec.append(T0, {"a": 1})
        with pytest.raises(TypeError, match="set at x/y"):
            rec.append(T0 + 1, {"x": {"y": {1, 2}}})
        with pytest.raises(TypeError, match="must be a dict"):
            rec.append(T0 + 1, [1])
        with pytest.raises(TypeError, match="keys must be strings"):
            rec.append(T0 + 1, {"x": {3: 1}})
        with pytest.raises(ValueError, match="not after"):
            rec.append(T0, {"a": 2})
        rec.append(T0 + 1, {"a": 3})
    with Replay(path) as rp:
        assert list(rp.iter()) == [(T0, {"a": 1}), (T0 + 1, {"a": 3})]
    junk = tmp_path / "junk.rec"
    junk.write_text("not a database at all " * 100)
    for opener in (Replay, Recorder):
        with pytest.raises(RecordingError, match="not an infertop recording"):
            opener(str(junk))
    assert junk.read_text() == "not a database at all " * 100
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    before = other.read_bytes()
    for opener in (Replay, Recorder):
        with pytest.raises(RecordingError, match="not an infertop recording"):
            opener(str(other))
    assert other.read_bytes() == before  # someone else's database is left as it was


# --- player -------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_player_plays_pauses_steps_seeks_and_changes_speed(tmp_path):
    path = str(tmp_path / "r.rec")
    with Recorder(path) as rec:
        for i in range(600):
            rec.append(T0 + i, {"i": i})
    clock = FakeClock()
    with Replay(path) as rp:
        p = Player(rp, clock=clock)
        ids = lambda ticks: [d["i"] for _, d in ticks]  # noqa: E731
        assert ids(p.due()) == [0]
        clock.now += 3
        assert ids(p.due()) == [1, 2, 3]
        assert ids(p.due()) == []
        p.set_speed(10)
        clock.now += 1
        assert ids(p.due()) == list(range(4, 14))
        p.pause()
        clock.now += 50
        assert p.due() == [] and p.current()[1] == {"i": 13}
        assert p.step()[1] == {"i": 14}
        assert ids(p.due()) == [14]
        assert p.step(3)[1] == {"i": 17}
        assert p.step(-5)[1] == {"i": 12}
        assert ids(p.due()) == [12]
        clock.now += 10
        assert p.due() == []
        p.resume()
        clock.now += 0.5
        assert ids(p.due()) == [13, 14, 15, 16, 17]
        p.seek(T0 + 300.7)
        assert ids(p.due()) == [300]
        p.set_speed(1)
        clock.now += 2
        assert ids(p.due()) == [301, 302]
        p.seek(T0 - 1000)
        assert ids(p.due()) == [0]
        p.seek(T0 + 10**6)
        assert ids(p.due()) == [599] and p.at_end
        clock.now += 100
        assert p.due() == []
        assert p.set_speed(1000) == MAX_SPEED and p.set_speed(0.01) == MIN_SPEED
        assert [p.faster() for _ in range(8)] == [1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 60.0, 60.0]
        assert p.slower() == 30.0
        assert p.toggle() is True and p.toggle() is False


def test_player_catches_up_with_a_growing_file(tmp_path):
    path = str(tmp_path / "r.rec")
    clock = FakeClock()
    rec = Recorder(path, flush_s=1)
    try:
        for i in range(5):
            rec.append(T0 + i, {"i": i})
        with Replay(path) as rp:
            p = Player(rp, clock=clock, speed=60)
            p.due()
            clock.now += 10  # far past the end: holds at the last tick
            assert [d["i"] for _, d in p.due()] == [1, 2, 3, 4]
            for i in range(5, 9):
                rec.append(T0 + i, {"i": i})
            clock.now += 1 / 60  # 60x: one second of recording per 1/60 s
            assert [d["i"] for _, d in p.due()] == [5]
            clock.now += 1
            assert [d["i"] for _, d in p.due()] == [6, 7, 8]
    finally:
        rec.close()


# --- incident bundle -----------------------------------------------------------------------------------

SECRETS = ["hunter2pw", "sk-live-123456", "gw-secret-token", "p@ss w0rd!", "hf_flowsecret", "vllm-flag-secret",
           "hf_blocksecret", "plainvalue9", "eqsecret99", "listsecret77", "Zm9vYmFyYmF6", "Tok-not-in-config-42"]

CONFIG = """\
# infertop config
engines:
  - name: a
    url: http://admin:hunter2pw@10.0.0.1:8000
    api_key: sk-live-123456
gateway:
  token: "gw-secret-token"
kube:
  context: prod-cluster
auth:
  username: bob
  password: 'p@ss w0rd!'
headers: {Authorization: "Bearer Zm9vYmFyYmF6"}
profiles:
  tiny:
    model: /models/tiny
    env: {VLLM_CPU_KVCACHE_SPACE: "1", HF_TOKEN: hf_flowsecret}
    extra_args: ["--api-key", "vllm-flag-secret", "--port=1"]
  big:
    model: /models/big
    env:
      HF_TOKEN: hf_blocksecret   # from the vault
      OTHER: plainvalue9
    extra_args:
    - --api-key=eqsecret99
  k8s:
    env:
    - name: SOME
      value: listsecret77
    max_num_seqs: 8
"""


def test_redact_config_keeps_the_rest():
    out = redact_config(CONFIG)
    for secret in SECRETS:
        assert secret not in out
    for kept in ("# infertop config", "context: prod-cluster", "model: /models/tiny", "max_num_seqs: 8",
                 "http://admin:<redacted>@10.0.0.1:8000", "# from the vault", '"--port=1"'):
        assert kept in out
    assert out.count("\n") == CONFIG.count("\n")


def test_bundle_is_replayable_and_holds_no_secret(tmp_path):
    states = [(T0 + i, {"i": i, "engines": {"a": {"url": "http://admin:hunter2pw@10.0.0.1:8000", "x": i * 0.25}}})
              for i in range(150)]
    logs = ["12:00:01 engine a up", "12:00:02 polling http://admin:hunter2pw@10.0.0.1:8000/metrics",
            "12:00:03 gateway said 401 to Bearer gw-secret-token"]
    audit = [{"action": "engine.start", "target": "big", "env": {"HF_TOKEN": "hf_blocksecret"}, "result": "ok"},
             {"action": "gateway.set", "target": "gw", "api_token": "Tok-not-in-config-42"}]
    path = tmp_path / "incident.rec"
    assert write_bundle(str(path), states, logs, audit, CONFIG) == 150
    assert sorted(os.listdir(tmp_path)) == ["incident.rec"]  # one file, nothing beside it

    blob = path.read_bytes()
    conn = sqlite3.connect(path)
    for codec, data in conn.execute("SELECT codec, data FROM blocks"):
        blob += lzma.decompress(data) if codec == "lzma" else zlib.decompress(data)
    conn.close()
    for secret in SECRETS:
        assert secret.encode() not in blob, secret
    assert b"/models/tiny" in blob and b"engine a up" in blob  # the rest is there, readable

    with Replay(str(path)) as rp:
        assert rp.count() == 150
        ts, doc = rp.at(T0 + 99.5)
        assert ts == T0 + 99 and doc["i"] == 99 and doc["engines"]["a"]["url"] == "http://admin:<redacted>@10.0.0.1:8000"
    extras = read_bundle_extras(str(path))
    assert extras.log_lines[0] == "12:00:01 engine a up" and len(extras.log_lines) == 3
    assert "<redacted>" in extras.log_lines[1] and "<redacted>" in extras.log_lines[2]
    assert extras.audit_entries == [
        {"action": "engine.start", "target": "big", "env": {"HF_TOKEN": "<redacted>"}, "result": "ok"},
        {"action": "gateway.set", "target": "gw", "api_token": "<redacted>"}]
    assert extras.config_text == redact_config(CONFIG)


def test_bundle_errors_are_one_line(tmp_path):
    plain = tmp_path / "plain.rec"
    record(plain, n=5)
    with pytest.raises(RecordingError, match="not an incident bundle"):
        read_bundle_extras(str(plain))
    with pytest.raises(RecordingError, match="cannot write incident bundle"):
        write_bundle(str(tmp_path / "missing-dir" / "b.rec"), [], [], [], "")


def test_decode_rejects_corrupt_blocks():
    with pytest.raises(RecordingError, match="corrupt block"):
        decode_block(b"garbage", "zlib")
