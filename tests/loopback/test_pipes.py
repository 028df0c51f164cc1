"""A command whose reader has gone (``| head``, ``| true``) ends quietly: no crash, no "error:"."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from infertop.pipes import EXIT_PIPE


def run_into_closed_pipe(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte is written: every write is EPIPE
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    try:
        return subprocess.run([sys.executable, "-m", "infertop", *args], stdout=write_end, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, env=env, timeout=120, text=True)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [
    ["snapshot", "--engine", "http://127.0.0.1:9", "--window", "0"],
    ["snapshot", "--json", "--engine", "http://127.0.0.1:9", "--window", "0"],
    ["engine", "status"],
])
def test_a_closed_pipe_ends_quietly(args, tmp_path):
    done = run_into_closed_pipe(args, tmp_path)
    assert done.returncode == EXIT_PIPE, (done.returncode, done.stderr)
    assert "crashed" not in done.stderr and "error" not in done.stderr.lower(), done.stderr
    assert not list((tmp_path / "state").rglob("crash-*.log"))
