"""The command line: subcommands in --help, global flags on either side of a
subcommand, flags validated like the config (one line, exit 2), and crashes that
are logged, never printed as a traceback, and exit 70."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import stat
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

import infertop
from infertop import cli
from infertop.crash import EXIT_CRASH, report_crash, run_tui, write_crash_log

REPO = Path(infertop.__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse: --help, usage errors
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- help ---------------------------------------------------------------------------------------------

def test_help_lists_every_subcommand_with_one_line(capsys):
    rc, out, _ = run_main(["--help"], capsys)
    assert rc == 0
    listed = {line.split()[0]: line for line in out.split("commands (without one: the live TUI):\n")[1].splitlines()
              if line.startswith("  ")}
    assert {"snapshot", "engine", "sim"} <= set(listed) == set(cli.COMMANDS)
    for name, cmd in cli.COMMANDS.items():
        assert listed[name].split(None, 1)[1] == cmd.help
    assert "70 crash" in out


@pytest.mark.parametrize("name", ["snapshot", "engine", "sim"])
def test_help_after_a_subcommand_is_its_help(name, capsys):
    rc, out, _ = run_main([name, "--help"], capsys)
    assert rc == 0 and out.startswith(f"usage: infertop {name} ")


# --- flags: the config's bounds, one line, exit 2 ------------------------------------------------------

BAD_FLAGS = [
    (["--refresh", "nan"], "argument --refresh: must be a finite number, got nan"),
    (["--refresh", "inf"], "argument --refresh: must be a finite number"),
    (["--refresh", "-1"], "argument --refresh: must be >= 0.1 and <= 600, got -1"),
    (["--refresh", "0.00001"], "argument --refresh: must be >= 0.1"),
    (["--refresh", "soon"], "argument --refresh: expected a number, got 'soon'"),
    (["--window", "nan"], "argument --window: must be a finite number"),
    (["--window", "1"], "window_s (with --window): must be at least twice refresh_s"),
    (["--refresh", "100"], "window_s (with --refresh): must be at least twice refresh_s"),
    (["--demo-engines", "0"], "argument --demo-engines: must be >= 1 and <= 256, got 0"),
    (["--demo-engines", "-3"], "argument --demo-engines: must be >= 1"),
    (["--demo-engines", "100000"], "argument --demo-engines: must be >= 1 and <= 256, got 100000"),
    (["snapshot", "--refresh", "nan"], "infertop snapshot: argument --refresh: must be a finite number"),
    (["snapshot", "--window", "nan"], "infertop snapshot: argument --window: must be a finite number"),
    (["snapshot", "--window", "-1"], "infertop snapshot: argument --window: must be >= 0"),
    (["--demo-engines", "0", "snapshot"], "argument --demo-engines: must be >= 1"),
    (["snaphsot"], "argument COMMAND: invalid choice: 'snaphsot'"),
    (["--json"], "unrecognized arguments: --json"),
    (["--theme", "x", "snapshot"], "infertop snapshot: unrecognized arguments: --theme x"),
    (["--context", "lab", "engine", "status"], "--context does not apply to 'engine' (global flags it takes: --config)"),
    (["--demo", "sim"], "--demo does not apply to 'sim'"),
]


@pytest.mark.parametrize("argv, msg", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flags_give_one_line_and_exit_2(argv, msg, capsys):
    rc, out, err = run_main(argv, capsys)
    assert rc == 2 and out == ""
    assert msg in one_line(err)


def test_bad_flag_through_the_entry_point():
    r = subprocess.run([sys.executable, "-m", "infertop", "--refresh", "nan"], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 2
    assert one_line(r.stderr) == "infertop: argument --refresh: must be a finite number, got nan"


# --- global flags before or after the subcommand ---------------------------------------------------------

@pytest.fixture
def configs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("refresh_s: .nan\n")
    good = tmp_path / "good.yaml"
    good.write_text("profiles:\n  tiny: {model: /models/tiny}\n")
    return bad, good, tmp_path / "engine-state"


@pytest.mark.parametrize("shape", [
    ["--config", "{bad}", "snapshot"],
    ["snapshot", "--config", "{bad}"],
    ["--context", "fake", "--config", "{bad}", "snapshot", "--json"],
    ["--context", "fake", "snapshot", "--json", "--config", "{bad}"],
    ["--config", "{bad}", "engine", "start", "NAME"],
    ["engine", "--config", "{bad}", "status"],
    ["--config", "{bad}"],
])
def test_the_config_flag_reaches_every_subcommand(shape, configs, capsys):
    bad, _, _ = configs
    rc, _, err = run_main([a.format(bad=bad) for a in shape], capsys)
    assert rc == 2
    assert f"{bad}:1: refresh_s: must be a finite number" in one_line(err)


def test_engine_gets_the_config_given_before_it(configs, capsys):
    _, good, state = configs
    rc, _, err = run_main(["--config", str(good), "engine", "--state-dir", str(state), "start", "nope"], capsys)
    assert rc == 2 and f"no profile 'nope' in {good} (profiles: tiny)" in one_line(err)
    rc, out, _ = run_main(["--config", str(good), "engine", "--state-dir", str(state), "status"], capsys)
    assert rc == 0 and out.strip() == "no engines started by infertop"


def test_engine_flags_before_and_after_snapshot_add_up(scripted, capsys):
    from vllm_text import v1_doc

    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 2, "waiting": 0}}))
    rc, out, _ = run_main(["--engine", srv.url, "snapshot", "--json", "--window", "0",
                           "--engine", "http://127.0.0.1:9"], capsys)
    assert rc == 1  # one engine is down
    states = {e["name"]: e["state"] for e in json.loads(out)["engines"]}
    assert states == {srv.url.split("://")[1].replace("127.0.0.1", "local"): "up", "local:9": "down"}


# --- crashes: a log file, one line, exit 70; the terminal restored ---------------------------------------

CRASH_APP = textwrap.dedent('''
    import sys

    from textual.app import App
    from textual.widgets import Static

    from infertop.crash import run_tui


    class CrashApp(App):
        BINDINGS = [("x", "boom", "boom")]

        def compose(self):
            yield Static("ready-to-crash")

        def action_boom(self):
            token = "tok-4b1d-do-not-log"  # a local: Textual's own traceback would show it
            raise ValueError("boom in a key handler")


    if __name__ == "__main__":
        sys.exit(run_tui(CrashApp()))
''')


def _crash_app_class(tmp_path: Path):
    src = tmp_path / "crash_app.py"
    src.write_text(CRASH_APP)
    namespace: dict = {"__name__": "crash_app"}
    exec(compile(src.read_text(), str(src), "exec"), namespace)
    return namespace["CrashApp"]


def _assert_crash_log(path: Path) -> None:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "Traceback (most recent call last)" in text and "ValueError: boom in a key handler" in text
    assert "tok-4b1d-do-not-log" not in text  # local variables are not dumped


def test_exception_in_a_key_handler_is_logged_not_printed(tmp_path, capfd):
    app = _crash_app_class(tmp_path)()

    async def press_x(pilot):
        await pilot.press("x")

    err = io.StringIO()
    rc = run_tui(app, err=err, directory=tmp_path / "logs", headless=True, auto_pilot=press_x)
    assert rc == EXIT_CRASH
    line = one_line(err.getvalue())
    assert line.startswith("infertop: crashed: ValueError: boom in a key handler; traceback in ")
    log = Path(line.rsplit(" ", 1)[1])
    assert log.parent == tmp_path / "logs" and log.name.startswith("crash-") and log.suffix == ".log"
    _assert_crash_log(log)
    printed = capfd.readouterr()
    assert "Traceback" not in printed.out + printed.err and "boom" not in printed.out + printed.err


def test_crash_under_a_real_terminal_restores_it(tmp_path):
    """The real path: a pseudo-terminal, a key press, Textual's own exception handling."""
    src = tmp_path / "crash_app.py"
    src.write_text(CRASH_APP)
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               TERM="xterm-256color", XDG_STATE_HOME=str(tmp_path / "state"))
    proc = subprocess.Popen([sys.executable, str(src)], stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    screen, sent = b"", False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                screen += chunk
            if not sent and b"ready-to-crash" in screen:
                os.write(master, b"x")
                sent = True
            if proc.poll() is not None and not ready:
                break
        rc = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        after = termios.tcgetattr(slave)
        os.close(master)
        os.close(slave)
    assert sent and rc == EXIT_CRASH
    text = screen.decode("utf-8", "replace")
    assert "Traceback" not in text
    assert b"\x1b[?1049l" in screen  # left the alternate screen
    assert after[3] == before[3]  # local modes (echo, canonical input) as they were
    tail = text.rsplit("\x1b[?1049l", 1)[1]
    line = [ln for ln in tail.replace("\r", "").split("\n") if "infertop:" in ln]
    assert len(line) == 1 and "infertop: crashed: ValueError: boom in a key handler; traceback in " in line[0]
    logs = list((tmp_path / "state" / "infertop").glob("crash-*.log"))
    assert len(logs) == 1 and stat.S_IMODE(logs[0].parent.stat().st_mode) == 0o700
    _assert_crash_log(logs[0])


def test_an_intended_exit_message_still_reaches_the_user(tmp_path):
    from textual.app import App

    class Leaving(App):
        def on_mount(self) -> None:
            self.exit(return_code=4, message="leaving on purpose")

    err = io.StringIO()
    assert run_tui(Leaving(), err=err, directory=tmp_path, headless=True) == 4
    assert "leaving on purpose" in err.getvalue()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("wanted", ["", "asyncio"])
def test_the_console_runs_on_uvloops_event_loop_unless_asked_for_asyncios(tmp_path, monkeypatch, wanted):
    """uvloop (a dependency) runs the console's loop, timers and sockets in C: less CPU per poll and frame.
    INFERTOP_EVENT_LOOP=asyncio rules it out when chasing a problem."""
    import asyncio

    from textual.app import App

    monkeypatch.setenv("INFERTOP_EVENT_LOOP", wanted)
    seen = []

    class Probe(App):
        async def on_mount(self) -> None:
            seen.append(type(asyncio.get_running_loop()).__module__)
            await asyncio.to_thread(seen.append, "thread")  # the default executor works and is shut down
            self.exit(return_code=3)

    assert run_tui(Probe(), err=io.StringIO(), directory=tmp_path, headless=True) == 3
    assert seen == (["uvloop", "thread"] if wanted == "" else ["asyncio.unix_events", "thread"])


def test_crash_logs_never_overwrite_each_other(tmp_path):
    try:
        raise RuntimeError("first")
    except RuntimeError as e:
        a = write_crash_log(e, tmp_path, now=1_700_000_000)
        b = write_crash_log(e, tmp_path, now=1_700_000_000)
    assert a != b and a.exists() and b.exists()
    assert {stat.S_IMODE(p.stat().st_mode) for p in (a, b)} == {0o600}


def test_crash_without_a_writable_log_is_still_one_line(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    err = io.StringIO()
    assert report_crash(KeyError("x\ny"), err, blocker) == EXIT_CRASH
    assert one_line(err.getvalue()).startswith("infertop: crashed: KeyError: 'x\\ny' (no crash log: ")


def test_a_crashing_subcommand_is_logged(tmp_path, monkeypatch, capsys):
    def explode(argv):
        raise ZeroDivisionError("in a subcommand")

    monkeypatch.setitem(cli.COMMANDS, "sim", cli.Command("test", explode, frozenset()))
    rc, _, err = run_main(["sim"], capsys)
    assert rc == EXIT_CRASH
    line = one_line(err)
    assert line.startswith("infertop: crashed: ZeroDivisionError: in a subcommand; traceback in ")
    assert Path(line.rsplit(" ", 1)[1]).parent == tmp_path / "xdg-state" / "infertop"


def test_kubernetes_flags_before_snapshot_reach_it(kube_emulator, tmp_path, capsys):
    emu = kube_emulator("t0ken")
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig", context="lab")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("gpu:\n  nvml: false\n")
    rc, out, _ = run_main(["--kubeconfig", str(kubeconfig), "--context", "lab", "snapshot", "--json",
                           "--window", "0", "--config", str(cfg)], capsys)
    doc = json.loads(out)
    # exit 1 only because of the default engine (127.0.0.1:8000, nothing listens); the cluster is fresh
    assert rc == (0 if doc["engines"][0]["state"] == "up" else 1)
    assert doc["cluster"]["freshness"]["status"] == "fresh"
    cluster = doc["cluster"]
    assert cluster["context"] == "lab" and {"gpu-a", "gpu-b"} <= {n["name"] for n in cluster["nodes"]}


def test_the_console_starts_without_importing_the_kubernetes_client():
    """The kubernetes client is ~0.4 s of import — most of a console's start-up before its first
    frame — and a console without a cluster never needs it: it is imported when a session connects."""
    import subprocess

    code = ("import sys, infertop.cli, infertop.ui.app, infertop.sources.kube, infertop.control.kube\n"
            "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:400]
