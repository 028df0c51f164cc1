"""Issue 29, edges: credentials in URLs, invisible and unencodable characters."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import select
import struct
import subprocess
import sys
import termios
import time

import pytest
from pilot_wait import until

from infertop.config import parse_config
from infertop.sources.sanitize import io_url, plain_text, redact_url

pty = pytest.importorskip("pty")

SECRET = "S3cretPassw0rd"


def test_invisible_characters_and_lone_surrogates_are_made_visible():
    shown = plain_text("a\u200bb\ufeffc\u061cd\u00ade\ud800f\U000e0041g")
    assert shown == "a\\u200bb\\ufeffc\\u061cd\\xade\\ud800f\\U000e0041g"
    shown.encode("utf-8")  # strict: nothing left that a UTF-8 terminal cannot take
    assert plain_text("llama-3 8B é 日本") == "llama-3 8B é 日本"


def test_url_credentials_are_redacted_at_config_load_and_kept_for_io_only():
    cfg = parse_config(f"""
engines:
  - url: http://admin:{SECRET}@127.0.0.1:8000
gpu: {{dcgm: ['http://u:{SECRET}@gpu-node:9400/metrics']}}
prometheus: {{url: 'https://u:{SECRET}@prom:9090'}}
queues:
  gateways: [{{url: 'http://u:{SECRET}@gw:8080', admin_url: 'http://u:{SECRET}@gw:8081'}}]
  epp: [{{url: 'http://u:{SECRET}@epp:9090/metrics'}}]
""")
    e = cfg.engines[0]
    assert (e.name, e.url) == ("local:8000", "http://127.0.0.1:8000")
    assert cfg.gpu.dcgm == ["http://gpu-node:9400/metrics"]
    assert cfg.prometheus.url == "https://prom:9090"
    assert SECRET not in repr(cfg)
    assert io_url(cfg.prometheus.url) == f"https://u:{SECRET}@prom:9090"  # the connection keeps it
    assert redact_url("http://host:1/a@b") == "http://host:1/a@b"  # an @ in the path is no credential


def test_invisible_characters_in_configured_names_are_shown_escaped():
    cfg = parse_config("engines:\n  - {url: 'http://10.0.0.1:8000', name: \"a\\u200bb\"}\n"
                       "  - {url: \"http://10.0.0.2:8000/\\ufeff\"}\n"
                       "queues: {gateways: [{url: 'http://gw:1', name: \"g\\u00ad\"}]}\n")
    assert [e.name for e in cfg.engines] == ["a\\u200bb", "10.0.0.2:8000/\\ufeff"]
    assert cfg.queues.gateways[0].name == "g\\xad"


def _snapshot(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path),
           "PYTHONIOENCODING": "utf-8"}  # strict: a lone surrogate raised UnicodeEncodeError (exit 70)
    return subprocess.run([sys.executable, "-m", "infertop", "snapshot", "--window", "0", *args],
                          capture_output=True, timeout=180, env=env)


def test_snapshot_hides_the_password_and_survives_a_lone_surrogate(scripted, tmp_path):
    srv = scripted()
    srv.serve_engine("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n", model="m\\ud800x")
    url = srv.url.replace("http://", f"http://admin:{SECRET}@")
    for extra in ([], ["--json"]):
        p = _snapshot(["--engine", url, *extra], tmp_path)
        out = p.stdout.decode("utf-8", "backslashreplace") + p.stderr.decode("utf-8", "backslashreplace")
        assert p.returncode in (0, 1), out[-2000:]
        assert SECRET not in out and "Traceback" not in out
        assert "m\\ud800x" in out.replace("\\\\", "\\")  # shown escaped, in the table and the JSON
    doc = json.loads(p.stdout)
    assert [e["url"] for e in doc["engines"]] == [srv.url]


# -- SIGTERM / SIGHUP restore the terminal -------------------------------------------------

ALT_ON, ALT_OFF, CURSOR_ON, MOUSE_OFF = b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?25h", b"\x1b[?1000l"


def _read_until(fd: int, pid: int, done, deadline_s: float) -> tuple[bytes, int | None]:
    """Drain the pty until ``done(bytes so far)``, EOF or the child's exit; (bytes, exit code or None)."""
    out = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and not done(out):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk:
                break
            out += chunk
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            return out, os.waitstatus_to_exitcode(status)
    return out, None


def _tui_in_pty(config: str, state: str, *args: str) -> tuple[int, int]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: an 80x24 terminal, then the console
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            os.environ.update(XDG_CONFIG_HOME=state, XDG_STATE_HOME=state, TERM="xterm-256color")
            os.execv(sys.executable, [sys.executable, "-m", "infertop", "--config", config, *args])
        finally:
            os._exit(127)
    return pid, fd


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_restore_the_terminal(scripted, tmp_path, signum):
    srv = scripted()
    srv.serve_engine("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"engines: [{{url: '{srv.url}', name: e1}}]\ngpu: {{nvml: false}}\n")
    pid, fd = _tui_in_pty(str(cfg), str(tmp_path))
    try:
        # painted: the alternate screen is on and the engine's name is on it
        out, code = _read_until(fd, pid, lambda b: ALT_ON in b and b"e1" in b.split(ALT_ON, 1)[-1], 120)
        assert code is None, out[-2000:]
        os.kill(pid, signum)
        rest, code = _read_until(fd, pid, lambda b: False, 60)
        if code is None:
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(fd)
    assert code == 128 + signum, (out + rest)[-2000:]
    tail = (out + rest).rsplit(ALT_ON, 1)[-1]
    for seq in (ALT_OFF, CURSOR_ON, MOUSE_OFF):
        assert seq in tail, (seq, tail[-400:])
    assert b"Traceback" not in rest


# -- config and theme files ----------------------------------------------------------------

def test_a_theme_with_an_invalid_colour_is_one_line_and_exit_2(scripted, tmp_path):
    srv = scripted()
    srv.serve_engine("vllm:num_requests_running 1\n")
    (tmp_path / "infertop" / "themes").mkdir(parents=True)
    theme = tmp_path / "infertop" / "themes" / "broken.yaml"
    theme.write_text("primary: '#123456'\nsecondary: not-a-colour\ndark: true\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"engines: [{{url: '{srv.url}'}}]\ngpu: {{nvml: false}}\ntheme: broken\n")
    pid, fd = _tui_in_pty(str(cfg), str(tmp_path))
    try:
        out, code = _read_until(fd, pid, lambda b: False, 120)
        if code is None:
            os.kill(pid, signal.SIGKILL)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(fd)
    text = out.decode("utf-8", "replace").strip()
    assert code == 2, text[-2000:]  # the old code painted, then crashed (70) on the colour
    assert text.splitlines() == [f"infertop: theme {theme}: field 'secondary': not a colour: 'not-a-colour'"]


def test_a_fifo_as_config_is_not_a_regular_file_exit_2(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)  # no writer ever comes: the old code blocked in open() forever
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "infertop", "snapshot", "--config", str(fifo)],
                       capture_output=True, timeout=60, env=env)
    assert p.returncode == 2
    assert p.stderr.decode().splitlines() == [
        f"infertop: {fifo}: not a regular file (a FIFO, device or directory)"]


async def test_a_broken_theme_file_whose_problem_looks_like_markup_is_a_log_line(tmp_path, monkeypatch):
    from infertop.config import Config, GpuConfig
    from infertop.ui.app import InfertopApp, Settings

    themes = tmp_path / "cfg" / "infertop" / "themes"
    themes.mkdir(parents=True)
    (themes / "bad.yaml").write_text("name: other\nprimary: '[/red]'\n")  # its problem text quotes the value
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[],
                               state_dir=str(tmp_path / "state")), poll=False)
    async with app.run_test(size=(100, 30)) as pilot:  # MarkupError on mount before
        await until(pilot, lambda: any("bad.yaml" in line and "[/red]" in line for line in app.log_lines), 'any("bad.yaml" in line and "[/red]" in line for line in a…')
        assert any("bad.yaml" in line and "[/red]" in line for line in app.log_lines), list(app.log_lines)
