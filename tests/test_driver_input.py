"""The driver's input thread (infertop/ui/driver_input.py) in a real pseudo-terminal: keys arrive,
a lone Escape still becomes a key once the parser's deadline passes, and quitting wakes the thread
at once (the child waits up to an hour between wake-ups, so a lost wake-up would hang it)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

KEYS_APP = """
import sys
from textual.app import App
from textual.widgets import Static
from infertop.ui import driver_input
from infertop.ui.driver import driver_class

driver_input.MAX_WAIT_S = 3600.0  # only input, the parser's deadline or a wake-up ends a wait
log = open(sys.argv[1], "a", buffering=1)

class Keys(App):
    def compose(self):
        yield Static("ready-for-keys")

    def on_key(self, event):
        log.write(event.key + "\\n")
        if event.key == "q":
            self.exit(0)

Keys(driver_class=driver_class()).run()
"""


@pytest.mark.parametrize("rows_cols", [(24, 80), (0, 0)], ids=["80x24", "no size"])
def test_keys_a_lone_escape_and_quitting_through_the_waiting_input_thread(tmp_path, rows_cols):
    # "no size": a terminal that reports 0x0 (a serial console, a pty nobody sized) is written to as is
    src, keys = tmp_path / "keys_app.py", tmp_path / "keys.log"
    src.write_text(KEYS_APP)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *rows_cols, 0, 0))
    before = termios.tcgetattr(slave)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               TERM="xterm-256color")
    proc = subprocess.Popen([sys.executable, str(src), str(keys)], stdin=slave, stdout=slave, stderr=slave,
                            env=env, start_new_session=True)
    screen = b""

    def pump(until, what: str) -> None:
        nonlocal screen
        deadline = time.monotonic() + 60
        while not until():
            assert time.monotonic() < deadline, f"waited a minute for {what}; keys: {logged()}"
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    screen += os.read(master, 65536)
                except OSError:
                    return

    def logged() -> list[str]:
        return keys.read_text().split() if keys.exists() else []

    try:
        pump(lambda: b"ready-for-keys" in screen, "the app")
        os.write(master, b"a")
        pump(lambda: logged() == ["a"], "a")
        os.write(master, b"\x1b")  # nothing follows: only the parser's deadline makes it a key
        pump(lambda: logged() == ["a", "escape"], "escape")
        os.write(master, b"\x1b[A")
        pump(lambda: logged() == ["a", "escape", "up"], "up")
        os.write(master, b"q")
        pump(lambda: proc.poll() is not None, "the app to quit")
        rc = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        after = termios.tcgetattr(slave)
        os.close(master)
        os.close(slave)
    assert rc == 0 and logged() == ["a", "escape", "up", "q"]
    assert b"Traceback" not in screen
    assert b"\x1b[?1049l" in screen and after[3] == before[3]  # the terminal is given back as it was
