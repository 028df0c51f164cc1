"""Local engine lifecycle (infertop.control.engines) against the fake engine.

Every engine here is ``tests/support/fake_engine.py`` run by this interpreter; it
speaks the api_server command line and serves /health and /metrics.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from ports import free_port
from locations import REPO
from engine_env import FAKE, Env, alive, wait_until

from infertop.config import ProfileConfig
from infertop.control import engines, logtail
from infertop.control.engines import cli as engine_cli
from infertop.control.audit import AuditLog
from infertop.control.engines.command import flag_count
from infertop.control.engines import (
    EngineBusyError,
    EngineManager,
    EngineNotFound,
    EngineStartError,
    InvalidArgsError,
    NotOurProcessError,
    PortInUseError,
    SetArgsError,
    VerifyError,
    build_command,
    cmdline_value,
    effective_args,
    group_members,
    normalize_overrides,
    parse_assignments,
    read_cmdline,
    read_stat,
    tail_file,
)


@pytest.fixture
def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    e.cleanup()


def spawn_foreign(argv: list[str], **kw) -> subprocess.Popen:
    """Start another program and wait until the kernel shows its command line.

    ``Popen`` returns once the exec has begun (the error pipe closes and a vfork
    parent resumes when the new memory is installed), but ``/proc/<pid>/cmdline``
    stays empty until the kernel has laid out the new argv: a starved child can
    sit in between, and infertop would then rightly name it by its ``comm`` alone.
    """
    proc = subprocess.Popen(argv, **kw)
    assert wait_until(lambda: read_cmdline(proc.pid) == argv), (argv, read_cmdline(proc.pid))
    return proc


# ----------------------------------------------------------------- pure parts


def test_build_command_profile_flags_extras_and_overrides():
    p = ProfileConfig(model="/m", served_model_name="tiny", port=8001, max_num_seqs=4, max_model_len=512,
                      dtype="float32", enforce_eager=True, enable_prefix_caching=False, shutdown_timeout=5.0,
                      extra_args=["--max-num-seqs", "2", "--seed", "1"], python="/venv/bin/python")
    cmd = build_command(p)
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    # extra_args win over the profile's fields: the profile's --max-num-seqs 4 is left out.
    assert cmd[3:] == [
        "--model", "/m", "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "8001",
        "--max-model-len", "512", "--no-enable-prefix-caching",
        "--shutdown-timeout", "5", "--dtype", "float32", "--enforce-eager",
        "--max-num-seqs", "2", "--seed", "1",
    ]
    assert cmdline_value(cmd, "max_num_seqs") == "2" and flag_count(cmd, "max_num_seqs") == 1
    assert effective_args(p)["max_num_seqs"] == 2  # what the engine really runs with
    # …and overrides come last and replace every other occurrence.
    cmd = build_command(p, {"max_num_seqs": 8, "max_num_batched_tokens": 1024, "enforce_eager": False},
                        module="fake_engine")
    assert cmd[1:3] == ["-m", "fake_engine"]
    assert cmd[-5:] == ["--max-num-seqs", "8", "--max-num-batched-tokens", "1024", "--no-enforce-eager"]
    assert flag_count(cmd, "max_num_seqs") == 1 and flag_count(cmd, "enforce_eager") == 1
    assert "--seed" in cmd and cmd[cmd.index("--seed") + 1] == "1"
    assert cmdline_value(cmd, "max_num_seqs") == "8"
    assert cmdline_value(cmd, "enforce_eager") == "false"
    assert cmdline_value(cmd, "scheduling_policy") is None
    assert build_command(p, module="/x/fake_engine.py")[1] == "/x/fake_engine.py"


@pytest.mark.parametrize("spelling", [
    ["--max-num-seqs", "64"], ["--max-num-seqs=64"], ["--max_num_seqs", "64"], ["--max_num_seqs=64"],
])
def test_args_patching_recognises_every_spelling_and_leaves_one(spelling):
    p = ProfileConfig(model="m", python="py", extra_args=["--seed", "1", *spelling, "--max-num-seqs=32",
                                                          *spelling, "--trust-remote-code"])
    base = build_command(p)
    assert cmdline_value(base, "max_num_seqs") == "64"  # the last occurrence, as argparse reads it
    assert flag_count(base, "max_num_seqs") == 1
    assert effective_args(p)["max_num_seqs"] == 64
    cmd = build_command(p, {"max_num_seqs": 8})
    assert flag_count(cmd, "max_num_seqs") == 1 and cmdline_value(cmd, "max_num_seqs") == "8"
    assert not any("64" in tok or "32" in tok for tok in cmd)
    assert cmd[cmd.index("--seed") + 1] == "1" and "--trust-remote-code" in cmd
    assert parse_assignments(["--max_num_seqs=8"]) == parse_assignments(["max-num-seqs=8"]) == {"max_num_seqs": 8}


def test_overrides_are_checked_and_coerced():
    p = ProfileConfig(model="m")
    assert normalize_overrides(p, {"max-num-seqs": "8", "enforce_eager": "yes"}) == {
        "max_num_seqs": 8, "enforce_eager": True}
    assert normalize_overrides(p, {"gpu_memory_utilization": 1}) == {"gpu_memory_utilization": 1.0}
    for bad in ({"max_num_seqs": 0}, {"max_num_seqs": "many"}, {"python": "/bin/sh"},
                {"scheduling_policy": "lifo"}, {"Bad Key": 1}, {"port": None}):
        with pytest.raises(InvalidArgsError):
            normalize_overrides(p, bad)
    assert parse_assignments(["max_num_seqs=8", "dtype=float32", "enable_prefix_caching=true",
                              "gpu_memory_utilization=0.85"]) == {
        "max_num_seqs": 8, "dtype": "float32", "enable_prefix_caching": True, "gpu_memory_utilization": 0.85}
    with pytest.raises(InvalidArgsError):
        parse_assignments(["max_num_seqs"])


def test_tail_file_reads_only_the_end(tmp_path, monkeypatch):
    path = tmp_path / "big.log"
    with open(path, "w") as f:
        for i in range(300_000):
            f.write(f"line {i} " + "x" * 40 + "\n")
        f.write("progress 10%\rprogress 50%\rprogress 100%\n")
    size = path.stat().st_size
    read_bytes = []
    real_open = open

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def read(self, n=-1):
            data = self.f.read(n)
            read_bytes.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(logtail, "open", lambda *a, **k: Spy(real_open(*a, **k)), raising=False)
    lines = tail_file(path, 3)
    assert lines == [f"line 299998 {'x' * 40}", f"line 299999 {'x' * 40}", "progress 100%"]
    assert read_bytes and sum(read_bytes) < 64 * 1024 < size
    assert tail_file(tmp_path / "missing.log", 5) == []


@pytest.mark.timeout(20)
def test_tail_file_of_a_fifo_or_a_device_reads_nothing_at_once(tmp_path):
    # A FIFO put where an engine's log was: opening it for reading waited for a writer (the engine
    # detail, painted each tick, would have hung the console); a device has no end to read back from.
    fifo = tmp_path / "engine.log"
    os.mkfifo(fifo)
    assert tail_file(fifo, 10) == []
    assert tail_file("/dev/zero", 10) == []


# ----------------------------------------------------------------- lifecycle


def test_start_status_logs_stop(env):
    mgr = env.manager()
    events = []

    def progress(ev):
        events.append(ev)
        raise RuntimeError("a broken callback must not break the action")

    prof = env.profile(start_delay=0.5, child=1)
    rec = mgr.start("e1", prof, progress)
    assert rec.phase == "running" and rec.port == prof.port and rec.max_num_seqs == 4
    assert rec.startup_s is not None and rec.startup_s > 0
    phases = [e.phase for e in events]
    assert phases[0] == "spawned" and phases[-1] == "healthy" and "waiting" in phases
    assert any(e.log_line and "Loading model weights" in e.log_line for e in events)

    state = json.loads((env.state_dir / "engines" / "e1.json").read_text())
    st = read_stat(rec.pid)
    assert state["pid"] == rec.pid == state["pgid"] == st.pgrp
    assert state["starttime"] == st.starttime
    assert state["cmdline"] == read_cmdline(rec.pid) == list(rec.cmdline)
    assert state["profile_name"] == "e1" and state["port"] == prof.port
    assert state["args"]["max_num_seqs"] == 4

    s = mgr.status("e1")
    assert s.phase == "running" and s.pid == rec.pid and s.uptime_s >= 0
    assert [r.name for r in mgr.list()] == ["e1"]
    assert mgr.health("e1")
    assert any("Application startup complete" in line for line in mgr.tail_log("e1", 20))
    with pytest.raises(engines.EngineError, match="already running"):
        mgr.start("e1", prof)
    members = [m.pid for m in group_members(rec.pgid)]
    assert len(members) == 2  # the server and its EngineCore stand-in

    res = mgr.stop("e1")
    assert not res.sigkill and not res.already_exited and res.exit_code == 0
    assert group_members(rec.pgid) == [] and not any(alive(p) for p in members)
    assert not (env.state_dir / "engines" / "e1.json").exists()
    assert mgr.status("e1") is None
    with pytest.raises(EngineNotFound):
        mgr.stop("e1")

    audit = [(a["action"], a["target"], a["result"]) for a in env.audit()]
    assert audit == [("engine.start", "e1", "ok"), ("engine.start", "e1", "failed"),
                     ("engine.stop", "e1", "ok"), ("engine.stop", "e1", "failed")]
    hist = [(h["action"], h["result"]) for h in mgr.history("e1")]
    assert hist[0] == ("start", "ok") and ("stop", "ok") in hist


def test_port_in_use_is_refused_before_spawning(env):
    mgr = env.manager()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PortInUseError) as ei:
            mgr.start("busy", env.profile(port=port))
    assert f"port {port} in use by pid {os.getpid()}" in str(ei.value)
    assert not (env.state_dir / "engines" / "busy.json").exists()
    assert not (env.state_dir / "engines" / "busy.log").exists()  # nothing was spawned
    [entry] = env.audit()
    assert entry["action"] == "engine.start" and entry["result"] == "failed"
    assert f"port {port} in use" in entry["reason"]


def test_port_of_another_running_engine(env):
    mgr = env.manager()
    prof = env.profile()
    a = mgr.start("a", prof)
    try:
        with pytest.raises(PortInUseError, match=f"port {prof.port} in use by engine 'a' \\(pid {a.pid}\\)"):
            mgr.start("b", prof)
    finally:
        mgr.stop("a")


def test_crash_on_start_reports_reason_and_log_tail(env):
    mgr = env.manager()
    with pytest.raises(EngineStartError) as ei:
        mgr.start("oom", env.profile(crash=1))
    e = ei.value
    assert "exited with status 1" in e.reason and "out of memory" in e.reason
    assert "CUDA out of memory" in e.reason
    assert any("torch.OutOfMemoryError: CUDA out of memory" in line for line in e.log_tail)
    assert any("Traceback" in line for line in e.log_tail)
    assert not alive(e.pid) and group_members(e.pid) == []
    assert not (env.state_dir / "engines" / "oom.json").exists()
    [entry] = env.audit()
    assert entry["result"] == "failed" and "out of memory" in entry["reason"]
    # the log keeps it for later
    assert any("CUDA out of memory" in line for line in mgr.tail_log("oom", 10))


def test_profile_python_without_vllm_or_missing(env):
    mgr = EngineManager(env.state_dir, AuditLog(env.audit_path), poll_interval_s=0.1)  # the real module
    with pytest.raises(EngineStartError) as ei:
        mgr.start("novllm", env.profile())  # this interpreter has no vLLM
    assert "No module named 'vllm'" in ei.value.reason and "vllm_env" in ei.value.reason
    prof = env.profile()
    prof.python = str(env.tmp / "no-such-python")
    with pytest.raises(EngineStartError, match="cannot run .*no-such-python"):
        mgr.start("nopython", prof)
    assert mgr.list() == []


def test_slow_start_times_out_and_leaves_nothing(env):
    mgr = env.manager()
    with pytest.raises(EngineStartError) as ei:
        mgr.start("slow", env.profile(start_delay=60, child=1), timeout_s=1.5)
    e = ei.value
    assert "not healthy after 1.5 s" in e.reason and "connection refused" in e.reason
    assert any("Loading model weights" in line for line in e.log_tail)
    assert group_members(e.pid) == []
    assert mgr.list() == []


def test_sigterm_ignored_gets_sigkill_after_grace(env):
    mgr = env.manager()
    rec = mgr.start("stubborn", env.profile(ignore_term=1, child=1))
    members = [m.pid for m in group_members(rec.pgid)]
    assert len(members) == 2
    events = []
    res = mgr.stop("stubborn", grace_s=1.0, progress=events.append)
    assert res.sigkill and res.reason.startswith("SIGKILL after 1 s grace")
    assert res.exit_code == -signal.SIGKILL
    assert [e.phase for e in events].count("killing") == 1
    assert group_members(rec.pgid) == [] and not any(alive(p) for p in members)
    assert any("SIGTERM received: ignoring it" in line for line in mgr.tail_log("stubborn"))
    stop = [a for a in env.audit() if a["action"] == "engine.stop"][0]
    assert stop["result"] == "ok" and stop["sigkill"] is True


def test_http_server_waiting_for_clients_after_drain_is_killed(env):
    mgr = env.manager(http_close_s=0.5)
    rec = mgr.start("hang", env.profile(hang_after_stop=1))
    events = []
    res = mgr.stop("hang", grace_s=60, progress=events.append)
    assert res.sigkill and "engine drained and stopped" in res.reason and "after 0.5 s" in res.reason
    assert any("waiting for the HTTP server" in e.message for e in events)
    assert group_members(rec.pgid) == []


def test_drain_reports_in_flight_from_metrics(env):
    mgr = env.manager()
    mgr.start("busy", env.profile(running=3, waiting=2, drain_s=2))
    events = []
    res = mgr.stop("busy", grace_s=20, progress=events.append)
    assert not res.sigkill and res.max_in_flight == 5
    draining = [e for e in events if e.phase == "draining" and e.in_flight is not None]
    assert draining and draining[0].in_flight == 5
    assert "(5 in flight)" in draining[0].message and "main process" in draining[0].message
    assert "drained up to 5 in flight" in res.reason
    assert res.in_flight_before == 5 and res.in_flight_after is not None and res.in_flight_after < 5
    assert res.signalled == f"main process {res.pid}"


def test_default_grace_covers_shutdown_timeout(env):
    mgr = env.manager()
    prof = env.profile()
    prof.shutdown_timeout = 30
    rec = mgr.start("drainer", prof)
    assert "--shutdown-timeout" in rec.cmdline
    assert mgr._default_grace(json.loads((env.state_dir / "engines" / "drainer.json").read_text())) == 40
    mgr.stop("drainer")


# ----------------------------------------------------------------- safety


def _tamper(env: Env, name: str, **changes) -> dict:
    path = env.state_dir / "engines" / f"{name}.json"
    orig = json.loads(path.read_text())
    path.write_text(json.dumps({**orig, **changes}))
    return orig


def test_pid_reuse_is_refused_and_nothing_is_signalled(env):
    mgr = env.manager()
    rec = mgr.start("e", env.profile())
    orig = _tamper(env, "e", starttime=read_stat(rec.pid).starttime - 1)
    refusal = f"recorded PID {rec.pid} now runs '.*fake_eng.*' — refusing to signal"
    with pytest.raises(NotOurProcessError, match=refusal) as ei:
        mgr.stop("e", grace_s=0.5)
    assert "kept aside as" in ei.value.reason
    # Kept aside for a human, not deleted; the next actions are refused the same way.
    [aside] = (env.state_dir / "engines").glob("e.stale-*.json")
    assert json.loads(aside.read_text())["pid"] == rec.pid
    assert not (env.state_dir / "engines" / "e.json").exists()
    with pytest.raises(NotOurProcessError, match=refusal):
        mgr.restart("e")
    with pytest.raises(NotOurProcessError, match=refusal):
        mgr.set_args("e", {"max_num_seqs": 8})
    assert alive(rec.pid) and httpx.get(rec.url + "/health", timeout=30).status_code == 200
    assert mgr.status("e").phase == "stale" and not mgr.health("e") and mgr.managed("e") is None
    refused = [a for a in env.audit() if a["result"] == "refused"]
    assert [a["action"] for a in refused] == ["engine.stop", "engine.restart", "engine.set"]
    assert all("refusing to signal" in a["reason"] for a in refused)
    assert env.intents() == [e for e in env.intents() if e["action"] == "engine.start"]  # nothing intended
    assert alive(rec.pid)  # nothing was signalled

    # The state file back as written: the same engine stops normally.
    (env.state_dir / "engines" / "e.json").write_text(json.dumps(orig))
    assert not mgr.stop("e").sigkill


def test_cli_pid_mismatch_exits_3_keeps_the_state_aside_and_leaves_no_lock(env, capsys):
    cfg = _config(env, e=(free_port(), {"running": 0}))
    base = ["--config", str(cfg), "--state-dir", str(env.state_dir), "--module", FAKE]
    assert engine_cli.main(["start", *base, "e"]) == 0, capsys.readouterr().err
    rec = env.manager().status("e")
    engine_cli.main(["stop", *base, "e"])
    capsys.readouterr()
    # Another program now runs under the PID the state file names.
    other = spawn_foreign(["sleep", "1000"], start_new_session=True)
    try:
        st = read_stat(other.pid)
        (env.state_dir / "engines" / "e.json").write_text(json.dumps({
            "name": "e", "pid": other.pid, "pgid": other.pid, "sid": other.pid,
            "starttime": st.starttime - 1, "cmdline": list(rec.cmdline), "port": rec.port,
            "url": rec.url, "args": rec.args, "profile": {"model": "m"}}))
        rc = engine_cli.main(["stop", *base, "e"])
        err = capsys.readouterr().err
        assert rc == 3, err
        assert f"recorded PID {other.pid} now runs 'sleep 1000' — refusing to signal" in err
        assert len(err.strip().splitlines()) == 1
        assert other.poll() is None
        assert list((env.state_dir / "engines").glob("e.stale-*.json"))  # kept aside
        rc = engine_cli.main(["stop", *base, "e"])
        err = capsys.readouterr().err
        assert rc == 1 and "stale state was kept aside" in err
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
    rc = engine_cli.main(["stop", *base, "nosuch"])
    assert rc == 1 and "no engine named 'nosuch'" in capsys.readouterr().err
    assert list((env.state_dir / "engines").glob("*.lock")) == []


def test_foreign_process_with_recorded_pid_is_never_signalled(env):
    mgr = env.manager()
    rec = mgr.start("e", env.profile())
    mgr.stop("e")
    # Another program now runs under a PID the state file names (its real start
    # time, but another command line): infertop must refuse to touch it.
    # it must outlive the test however starved the machine (it used to sleep only 60 s); the finally kills it
    other = spawn_foreign([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
    state = {"name": "e", "pid": other.pid, "pgid": other.pid, "sid": other.pid,
             "starttime": read_stat(other.pid).starttime, "cmdline": list(rec.cmdline), "port": rec.port,
             "url": rec.url, "args": rec.args, "profile": {"model": "m"},
             "procs": [{"pid": other.pid, "starttime": read_stat(other.pid).starttime}]}
    try:
        (env.state_dir / "engines" / "e.json").write_text(json.dumps(state))
        with pytest.raises(NotOurProcessError, match=f"recorded PID {other.pid} now runs .*time.sleep"):
            mgr.stop("e", grace_s=0.5)
        assert other.poll() is None
        assert mgr.status("e").phase == "stale"
        assert mgr.forget("e") and mgr.status("e") is None  # drops the record, signals nothing
        assert other.poll() is None
        (env.state_dir / "engines" / "e.json").write_text(json.dumps(state))
        # A new infertop keeps that state file aside rather than adopting or deleting it.
        mgr2 = env.manager()
        assert mgr2.status("e").phase == "stale"
        assert not (env.state_dir / "engines" / "e.json").exists()
        assert len(list((env.state_dir / "engines").glob("e.stale-*.json"))) == 2
        assert mgr2.history("e")[-1]["action"] == "kept-aside"
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_readoption_after_infertop_restarts(env):
    mgr1 = env.manager()
    rec = mgr1.start("keep", env.profile(running=2, drain_s=1))
    # A state file of an engine that died while infertop was away.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (env.state_dir / "engines" / "ghost.json").write_text(json.dumps({
        "name": "ghost", "pid": dead.pid, "pgid": dead.pid, "sid": dead.pid, "starttime": 1,
        "cmdline": ["x"], "port": 1, "url": "http://127.0.0.1:1"}))

    mgr2 = env.manager()  # "infertop restarted"
    got = mgr2.status("keep")
    assert got is not None and got.adopted and got.phase == "running"
    assert got.pid == rec.pid and got.cmdline == rec.cmdline
    assert not (env.state_dir / "engines" / "ghost.json").exists()
    assert [r.name for r in mgr2.list()] == ["keep"]
    res = mgr2.stop("keep")
    assert not res.sigkill and res.max_in_flight == 2
    assert res.exit_code is None  # not mgr2's child; its parent reaps it
    assert group_members(rec.pgid) == []


def test_orphans_of_a_dead_engine_are_found_and_cleaned_up(env):
    mgr = env.manager()
    rec = mgr.start("e", env.profile(child=2))
    [child] = [m.pid for m in group_members(rec.pgid) if m.pid != rec.pid]
    recorded = json.loads((env.state_dir / "engines" / "e.json").read_text())["procs"]
    assert {p["pid"] for p in recorded} == {rec.pid, child}  # tracked with their start times
    os.kill(rec.pid, signal.SIGKILL)  # the server dies; its "EngineCore" lives on
    assert wait_until(lambda: not alive(rec.pid))
    got = mgr.status("e")
    assert got.phase == "orphaned" and got.alive and got.pids == (child,)
    assert got.detail.startswith(f"main process exited; 1 worker still alive: pids {child}")
    other = EngineManager(env.state_dir, AuditLog(env.audit_path), module=FAKE)
    assert other.status("e").phase == "orphaned"  # adopted by a new infertop, too
    res = mgr.stop("e", grace_s=30)
    assert not res.already_exited and not alive(child) and group_members(rec.pgid) == []
    assert res.seconds < 30  # the orphan got SIGTERM without waiting for the grace
    assert mgr.status("e") is None


def test_process_outside_the_engine_is_never_signalled(env):
    """Same session, but neither recorded nor descended from the engine: left alone."""
    mgr = env.manager()
    rec = mgr.start("e", env.profile(child=2))
    os.kill(rec.pid, signal.SIGKILL)
    assert wait_until(lambda: not alive(rec.pid))
    st = json.loads((env.state_dir / "engines" / "e.json").read_text())
    [child] = [p["pid"] for p in st["procs"] if p["pid"] != rec.pid]
    # The record says another start time for the survivor (as if its PID were reused).
    for p in st["procs"]:
        p["starttime"] -= 1
    st["engine_id"] = "not-its-token"
    (env.state_dir / "engines" / "e.json").write_text(json.dumps(st))
    res = mgr.stop("e", grace_s=2)
    assert res.already_exited and alive(child)
    os.kill(child, signal.SIGKILL)


def test_engine_that_dies_shows_as_exited(env):
    mgr = env.manager()
    rec = mgr.start("fragile", env.profile())
    os.kill(rec.pid, signal.SIGKILL)
    assert wait_until(lambda: mgr.status("fragile").phase == "exited")
    got = mgr.status("fragile")
    assert got.exit_code == -signal.SIGKILL and "SIGKILL" in got.detail
    assert mgr.history("fragile")[-1]["action"] == "exited"
    assert [r.phase for r in mgr.list()] == ["exited"]
    # starting it again is allowed
    mgr.start("fragile", env.profile())
    mgr.stop("fragile")


def test_status_during_stop_does_not_report_a_crash(env):
    import threading

    mgr = env.manager()
    rec = mgr.start("e", env.profile(running=1, drain_s=1, child=1))
    done = []
    t = threading.Thread(target=lambda: done.append(mgr.stop("e")))
    t.start()
    phases = set()
    while t.is_alive():
        r = mgr.status("e")
        phases.add(r.phase if r else None)
        time.sleep(0.01)
    t.join()
    assert done and not done[0].sigkill
    assert "exited" not in phases and "stopping" in phases
    assert mgr.status("e") is None and group_members(rec.pgid) == []
    assert [h["action"] for h in mgr.history("e")] == ["start", "stop"]


def test_one_action_at_a_time(env):
    mgr = env.manager()
    mgr.start("e", env.profile())
    other = env.manager()
    with mgr._operation("e"), pytest.raises(EngineBusyError):
        other.stop("e")
    mgr.stop("e")


# ----------------------------------------------------------------- set_args


def test_set_args_restarts_with_new_value_and_verifies(env):
    mgr = env.manager()
    rec = mgr.start("e", env.profile(running=3))
    seen = []
    events = []

    def check(new):
        seen.append(new.pid)
        return None

    res = mgr.set_args("e", {"max_num_seqs": 8}, events.append, check=check)
    assert res.changed and res.old == {"max_num_seqs": 4} and res.new == {"max_num_seqs": 8}
    assert res.verified == {"max_num_seqs": "8"}
    new = res.record
    assert new.pid != rec.pid and not alive(rec.pid) and seen == [new.pid]
    assert cmdline_value(read_cmdline(new.pid), "max_num_seqs") == "8"
    assert new.max_num_seqs == 8 and new.restarts == 1 and new.overrides == {"max_num_seqs": 8}
    assert res.before.running == 3 and res.after.running == 3
    assert res.stop is not None and not res.stop.sigkill
    phases = [e.phase for e in events]
    assert phases.index("draining") < phases.index("spawned") < phases.index("healthy") < phases.index("verifying")

    entry = [a for a in env.audit() if a["action"] == "engine.set"][-1]
    assert entry["result"] == "ok" and entry["old"] == {"max_num_seqs": 4} and entry["new"] == {"max_num_seqs": 8}
    assert mgr.history("e")[-1]["action"] == "set"

    # the same value again: nothing restarts
    again = mgr.set_args("e", {"max_num_seqs": 8})
    assert not again.changed and again.record.pid == new.pid
    # restart keeps the override
    assert mgr.restart("e").max_num_seqs == 8
    mgr.stop("e")


def test_set_args_rolls_back_when_new_args_fail(env):
    mgr = env.manager()
    mgr.start("e", env.profile(oom_above=8))
    with pytest.raises(SetArgsError) as ei:
        mgr.set_args("e", {"max_num_seqs": 16})
    e = ei.value
    assert e.rolled_back and "out of memory" in e.reason and "rolled back to max_num_seqs=4" in e.reason
    assert any("CUDA out of memory" in line for line in e.log_tail)
    now = mgr.status("e")
    assert now.phase == "running" and cmdline_value(read_cmdline(now.pid), "max_num_seqs") == "4"
    entry = [a for a in env.audit() if a["action"] == "engine.set"][-1]
    assert entry["result"] == "failed" and entry["new"] == {"max_num_seqs": 16}
    mgr.stop("e")


def test_set_args_behaviour_check_failure(env):
    mgr = env.manager()
    mgr.start("e", env.profile())
    with pytest.raises(VerifyError, match="behaviour check failed: running stayed at 0"):
        mgr.set_args("e", {"max_num_seqs": 6}, check=lambda rec: "running stayed at 0")
    assert mgr.status("e").max_num_seqs == 6  # it runs with the new value; the check says it misbehaves
    assert [a for a in env.audit() if a["action"] == "engine.set"][-1]["result"] == "failed"
    mgr.stop("e")


# ----------------------------------------------------------------- headless CLI


def _config(env: Env, **profiles) -> Path:
    lines = [f"audit_log: {env.audit_path}", "profiles:"]
    for name, (port, fake) in profiles.items():
        lines += [f"  {name}:", "    model: fake-model", f"    port: {port}", "    max_num_seqs: 4",
                  f"    python: {sys.executable}", "    start_timeout_s: 60", "    stop_grace_s: 5", "    env:"]
        lines += [f"      FAKE_ENGINE_{k.upper()}: '{v}'" for k, v in fake.items()]
    path = env.tmp / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_lifecycle_and_exit_codes(env, capsys):
    cfg = _config(env, web=(free_port(), {"running": 1}), bad=(free_port(), {"crash": 1}))
    base = ["--config", str(cfg), "--state-dir", str(env.state_dir), "--module", FAKE]

    def run(*argv):
        rc = engine_cli.main([*argv[:1], *base, *argv[1:]])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, err = run("start", "web")
    assert rc == 0, err
    assert "web: running, pid" in out and "spawned pid" in out and "healthy after" in out
    rc, out, _ = run("status")
    assert rc == 0 and out.splitlines()[0].split()[:3] == ["NAME", "PHASE", "PID"]
    assert out.splitlines()[1].split()[:2] == ["web", "running"]
    rc, out, _ = run("status", "web", "--json")
    assert rc == 0 and json.loads(out)[0]["args"]["max_num_seqs"] == 4
    rc, out, err = run("set", "web", "max_num_seqs=8")
    assert rc == 0, err
    assert "max_num_seqs: 4 → 8" in out and "verified" in out
    rc, out, _ = run("logs", "web", "-n", "5")
    assert rc == 0 and len(out.splitlines()) == 5
    rc, out, err = run("restart", "web")
    assert rc == 0, err
    assert "restarted" in out
    rc, out, _ = run("status", "web", "--json")
    assert json.loads(out)[0]["args"]["max_num_seqs"] == 8
    rc, out, err = run("set", "web", "max_num_seqs=0")
    assert rc == 2 and "max_num_seqs: must be >= 1" in err and len(err.strip().splitlines()) == 1
    rc, out, err = run("stop", "web")
    assert rc == 0 and "web: stopped" in out
    rc, out, err = run("stop", "web")
    assert rc == 1 and "no engine named 'web'" in err

    rc, out, err = run("start", "bad")
    assert rc == 1 and "out of memory" in err and "last log lines" in err and "CUDA out of memory" in err

    rc, out, err = run("start", "nosuch")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "no profile 'nosuch'" in err
    rc, out, err = run("set", "web", "max_num_seqs")
    assert rc == 2 and "expected KEY=VALUE" in err
    rc, out, err = run("set", "web", "max_num_seqs=8")
    assert rc == 1 and "no engine named 'web'" in err

    actions = [(a["action"], a["result"]) for a in env.audit()]
    assert actions[:6] == [("engine.start", "ok"), ("engine.set", "ok"), ("engine.restart", "ok"),
                           ("engine.set", "failed"), ("engine.stop", "ok"), ("engine.stop", "failed")]


def test_cli_config_errors_and_read_only(env, capsys):
    broken = env.tmp / "broken.yaml"
    broken.write_text("profiles:\n  web:\n    model: m\n    port: [1\n")
    rc = engine_cli.main(["start", "web", "--config", str(broken), "--state-dir", str(env.state_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "broken.yaml" in err

    wrong = env.tmp / "wrong.yaml"
    wrong.write_text("profiles:\n  web:\n    model: m\n    max_num_seq: 4\n")
    rc = engine_cli.main(["--config", str(wrong), "status"])
    err = capsys.readouterr().err
    assert rc == 2 and "did you mean 'max_num_seqs'" in err and len(err.strip().splitlines()) == 1

    ro = env.tmp / "ro.yaml"
    ro.write_text("read_only: true\nprofiles:\n  web:\n    model: m\n")
    rc = engine_cli.main(["--config", str(ro), "--state-dir", str(env.state_dir), "start", "web"])
    assert rc == 3 and "read-only" in capsys.readouterr().err
    rc = engine_cli.main(["--config", str(ro), "--state-dir", str(env.state_dir), "status"])
    assert rc == 0 and "no engines" in capsys.readouterr().out

    rc = engine_cli.main(["frobnicate"])
    assert rc == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


# ----------------------------------------------------------------- audit before execution


def test_audit_intent_is_written_before_the_signal_and_the_spawn(env):
    mgr = env.manager()
    seen = env.tmp / "seen-by-engine.txt"
    rec = mgr.start("e", env.profile(snapshot=f"{env.audit_path}>{seen}", running=2, drain_s=0.5))
    res = mgr.set_args("e", {"max_num_seqs": 8})
    mgr.stop("e")
    # What the engine found in the audit log when it started and when SIGTERM arrived.
    blocks = [b for b in seen.read_text().split("== ") if b]
    events = [(b.split("\n", 1)[0], [json.loads(x) for x in b.split("\n", 1)[1].splitlines()]) for b in blocks]
    assert [e for e, _ in events] == ["start", "SIGTERM", "start", "SIGTERM"]
    for event, lines in events:
        last = lines[-1]
        assert last["phase"] == "intent", (event, last)  # intent written, outcome not yet
    start_i, set_i, spawn_i, stop_i = (lines[-1] for _, lines in events)
    assert start_i["action"] == "engine.start" and start_i["new"]["max_num_seqs"] == 4
    assert start_i["cmdline"][0] == sys.executable and start_i["user"]
    assert set_i["action"] == "engine.set" and set_i["old"] == {"max_num_seqs": 4}
    assert set_i["new"] == {"max_num_seqs": 8} and set_i["diff"] == "max_num_seqs=4 → max_num_seqs=8"
    assert set_i["check"]["in_flight"] == 2 and rec.pid in set_i["check"]["pids"]
    assert spawn_i["op"] == set_i["op"]  # the restart belongs to the same action
    assert stop_i["action"] == "engine.stop"
    outcomes = {e["op"]: e for e in AuditLog(env.audit_path).entries() if e.get("phase") == "outcome"}
    assert outcomes[set_i["op"]]["result"] == "ok" and outcomes[set_i["op"]]["in_flight_before"] == 2
    assert res.stop.in_flight_before == 2
    assert AuditLog(env.audit_path).unfinished() == []


def test_unwritable_audit_log_refuses_unless_unaudited(env, capsys):
    blocker = env.tmp / "not-a-dir"
    blocker.write_text("")
    audit = AuditLog(blocker / "audit.jsonl")  # its parent is a file: never writable
    mgr = EngineManager(env.state_dir, audit, module=FAKE, poll_interval_s=0.1, profiles=env.profiles)
    prof = env.profile()
    with pytest.raises(engines.AuditRefusedError, match="audit log .* cannot be written.*--unaudited"):
        mgr.start("e", prof)
    assert mgr.list() == [] and not (env.state_dir / "engines" / "e.log").exists()  # nothing spawned
    rec = mgr.start("e", prof, unaudited=True)
    with pytest.raises(engines.AuditRefusedError):
        mgr.stop("e")
    assert alive(rec.pid) and mgr.status("e").phase == "running"  # nothing signalled
    mgr.stop("e", unaudited=True)
    assert not alive(rec.pid)

    cfg = _config(env, web=(free_port(), {"running": 0}))
    cfg.write_text(cfg.read_text().replace(f"audit_log: {env.audit_path}", f"audit_log: {blocker}/audit.jsonl"))
    base = ["--config", str(cfg), "--state-dir", str(env.state_dir), "--module", FAKE]
    rc = engine_cli.main(["start", *base, "web"])
    err = capsys.readouterr().err
    assert rc == 3 and "cannot be written" in err and len(err.strip().splitlines()) == 1
    assert engine_cli.main(["start", *base, "web", "--unaudited"]) == 0
    assert engine_cli.main(["stop", *base, "web", "--unaudited"]) == 0


def test_an_action_cut_short_leaves_an_unknown_outcome(env):
    """infertop killed while it drains an engine: the next start sees the intent as `unknown`."""
    cfg = _config(env, e=(free_port(), {"running": 1, "drain_s": 30}))
    base = ["--config", str(cfg), "--state-dir", str(env.state_dir), "--module", FAKE]
    cli = [sys.executable, "-m", "infertop", "engine"]
    pyenv = {**os.environ, "PYTHONPATH": str(REPO)}
    assert subprocess.run([*cli, "start", *base, "e"], env=pyenv, capture_output=True).returncode == 0
    stopper = subprocess.Popen([*cli, "stop", *base, "e"], env=pyenv, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    for line in stopper.stdout:  # wait for the drain to begin
        if "SIGTERM sent" in line:
            break
    stopper.kill()
    stopper.wait()
    [unknown] = AuditLog(env.audit_path).unfinished()
    assert unknown["action"] == "engine.stop" and unknown["target"] == "e" and unknown["result"] == "unknown"
    env.manager().stop("e", grace_s=0.5)


# ----------------------------------------------------------------- names, isolation, owner


@pytest.mark.parametrize("name", ["local:28400", "my engine", "a/b", "../up", "x" * 300, "ünï"])
def test_any_engine_name_works_and_is_encoded_only_for_files(env, name):
    mgr = env.manager()
    assert mgr.status(name) is None and mgr.managed(name) is None  # never raises
    rec = mgr.start(name, env.profile())
    assert rec.name == name and mgr.managed(name).pid == rec.pid
    files = [p.name for p in (env.state_dir / "engines").iterdir()]
    assert all("/" not in f and f not in (".", "..") for f in files)
    assert all(p.parent == env.state_dir / "engines" for p in (env.state_dir / "engines").iterdir())
    assert [r.name for r in env.manager().list()] == [name]  # a new infertop reads the name back
    assert mgr.stop(name).pid == rec.pid
    assert mgr.status(name) is None and list((env.state_dir / "engines").glob("*.lock")) == []


def test_engines_record_their_owner(env):
    mgr = env.manager()
    rec = mgr.start("e", env.profile())
    assert rec.owner["pid"] == os.getpid() and rec.owner["user"] and not rec.foreign
    assert rec.owner_text.startswith("started by ") and f"infertop pid {os.getpid()}" in rec.owner_text
    other = subprocess.Popen(["sleep", "3600"])  # killed below; outlives any starved run
    try:
        path = env.state_dir / "engines" / "e.json"
        st = json.loads(path.read_text())
        st["owner"] = {"pid": other.pid, "user": "alice", "tty": "pts/7", "starttime": read_stat(other.pid).starttime}
        path.write_text(json.dumps(st))
        got = mgr.status("e")
        assert got.foreign and got.owner_text == f"started by alice on pts/7 (infertop pid {other.pid})"
    finally:
        other.kill()
        other.wait()
    assert not mgr.status("e").foreign  # its owner is gone: adopted, not foreign
    mgr.stop("e")


def test_demo_has_its_own_state_directory(tmp_path, monkeypatch):
    from infertop.private_fs import default_state_dir
    from infertop.demo import demo_state_dir

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert demo_state_dir() == tmp_path / "infertop" / "demo" != default_state_dir()


# ----------------------------------------------------------------- hygiene


def test_state_is_private_and_holds_no_secret(env):
    secret = "hf_" + "s3cr3t" * 6
    mgr = env.manager()
    prof = env.profile()
    prof.env["HF_TOKEN"] = secret
    (env.state_dir / "engines").mkdir(parents=True)
    os.chmod(env.state_dir / "engines", 0o755)  # an older infertop made it world-readable
    rec = mgr.start("e", prof)
    engines_dir = env.state_dir / "engines"
    assert engines_dir.stat().st_mode & 0o777 == 0o700
    for p in engines_dir.iterdir():
        assert p.stat().st_mode & 0o077 == 0, p
    assert (engines_dir / "e.json").stat().st_mode & 0o777 == 0o600
    state = json.loads((engines_dir / "e.json").read_text())
    assert state["env_names"] == sorted(prof.env) and state["profile"]["env"] == {}
    assert f"HF_TOKEN={secret}".encode() in Path(f"/proc/{rec.pid}/environ").read_bytes()
    new = mgr.set_args("e", {"max_num_seqs": 6}).record  # env values come from the config again
    assert f"HF_TOKEN={secret}".encode() in Path(f"/proc/{new.pid}/environ").read_bytes()
    mgr.stop("e")
    for p in [*env.state_dir.rglob("*"), env.audit_path]:
        if p.is_file():
            assert secret not in p.read_text(errors="replace"), p
    # Without the profile in the config, a restart says why instead of starting without the token.
    env.profiles.clear()
    mgr.start("e", prof)
    with pytest.raises(engines.EngineError, match="HF_TOKEN is not in the config"):
        mgr.restart("e")
    assert mgr.status("e").phase == "running"
    mgr.stop("e")


def test_filesystem_errors_are_one_line(env, capsys):
    blocker = env.tmp / "file"
    blocker.write_text("")
    cfg = _config(env, web=(free_port(), {"running": 0}))
    rc = engine_cli.main(["start", "--config", str(cfg), "--state-dir", str(blocker / "state"), "--module", FAKE,
                          "web"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "Not a directory" in err


def test_spawn_whose_state_cannot_be_written_is_stopped_again(env):
    import threading

    mgr = env.manager()
    engines_dir = env.state_dir / "engines"
    engines_dir.mkdir(parents=True)
    # The state file's temporary name is taken by a directory: the write fails after the spawn.
    (engines_dir / f".e.json.{os.getpid()}.{threading.get_ident()}.tmp").mkdir()
    with pytest.raises(EngineStartError, match="state cannot be written.*stopped again") as ei:
        mgr.start("e", env.profile(child=1))
    assert wait_until(lambda: group_members(ei.value.pid) == [])
    assert mgr.list() == []


def test_shebang_interpreter_is_recognised_as_the_engine(env):
    wrapper = env.tmp / "python-wrapper"  # exec: the interpreter replaces the shell
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    shell = env.tmp / "python-shell"  # no exec: the shell, run as `/bin/sh python-shell …`, stays the parent
    shell.write_text(f'#!/bin/sh\n{sys.executable} "$@"\n')
    for python in (wrapper, shell):
        python.chmod(0o755)
        prof = env.profile()
        prof.python = str(python)
        rec = env.manager().start("e", prof)
        if python == shell:
            assert read_cmdline(rec.pid)[:2] == ["/bin/sh", str(shell)]
        again = env.manager()  # a new infertop: the state must not be dropped as stale
        got = again.status("e")
        assert got is not None and got.phase == "running" and got.pid == rec.pid, (python, got)
        res = again.stop("e")
        assert group_members(rec.pgid) == []
        assert python == shell or not res.sigkill


def test_requests_still_in_flight_when_the_drain_runs_out_are_reported_cut(env):
    """vLLM drains for its shutdown_timeout, then aborts what still runs and exits — before its abort
    counter can be read again. A stop that ran out with 4 requests in flight says "4 request(s) cut",
    in the result and the audit, not "0 aborted"."""
    mgr = env.manager()
    prof = env.profile(running=4, drain_s=2, stuck=1)
    prof.shutdown_timeout = 2
    mgr.start("e", prof)
    res = mgr.stop("e", grace_s=30)
    assert not res.sigkill and res.in_flight_after == 4
    assert res.failed == 4 and "4 request(s) cut: still in flight when the drain ran out (shutdown_timeout 2 s)" \
        in res.reason, res.reason
    outcome = [json.loads(line) for line in env.audit_path.read_text().splitlines()][-1]
    assert outcome["action"] == "engine.stop" and outcome["failed"] == 4


def test_a_drain_that_empties_in_time_cuts_nothing(env):
    mgr = env.manager()
    prof = env.profile(running=4, drain_s=2)  # the requests finish during the drain
    prof.shutdown_timeout = 5
    mgr.start("e", prof)
    res = mgr.stop("e", grace_s=30)
    assert not res.failed and "cut" not in res.reason, res.reason


def test_a_restart_whose_outcome_cannot_be_audited_exits_1_and_says_so(env):
    """The disk fills up mid-restart (the audit log now answers ENOSPC): the engine is restarted — that
    is not undone — but the command no longer prints success and exits 0: it says the log lacks it."""
    cfg = _config(env, e=(free_port(), {"running": 1, "drain_s": 1}))
    base = ["--config", str(cfg), "--state-dir", str(env.state_dir), "--module", FAKE]
    cli = [sys.executable, "-m", "infertop", "engine"]
    pyenv = {**os.environ, "PYTHONPATH": str(REPO)}
    assert subprocess.run([*cli, "start", *base, "e"], env=pyenv, capture_output=True).returncode == 0
    try:
        restart = subprocess.Popen([*cli, "restart", *base, "e"], env=pyenv, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        for line in restart.stdout:  # the intent is written before the signal
            if "SIGTERM sent" in line:
                break
        env.audit_path.unlink()
        env.audit_path.symlink_to("/dev/full")  # every write now fails with ENOSPC
        out, err = restart.communicate(timeout=120)
        assert restart.returncode == 1, (out, err)
        assert err.startswith("error: outcome engine.restart e ok not recorded: audit log ") and \
            "No space left on device — what was done is above, but the audit log does not have its outcome" in err
        assert len(err.strip().splitlines()) == 1 and "e: restarted, pid" in out
        assert EngineManager(env.state_dir, AuditLog(env.tmp / "other.jsonl"), module=FAKE).status("e").alive
    finally:
        env.audit_path.unlink(missing_ok=True)
        subprocess.run([*cli, "stop", *base, "e", "--unaudited"], env=pyenv, capture_output=True)
