"""Keys typed fast into a form field act in the order typed (issue 27 item 19).

Textual inserts a printable key in the Input's own handler but runs Backspace
through a binding once the key has bubbled up to the App: with "9 ⌫ 1 0" in one
terminal read the field read "91". Pilot delivers one key at a time and cannot
show it, so a real terminal (a pty) gets the four bytes in one write.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import time

import pytest

pty = pytest.importorskip("pty")

APP = textwrap.dedent("""
    import sys
    from textual.app import App
    from textual.widgets import Input
    from infertop.ui.screens.kube_dialogs import FormDialog, FormField

    OUT = sys.argv[1]

    def note(line):
        with open(OUT, "a") as f:
            f.write(line + "\\n")

    class Host(App):
        def on_mount(self):
            self.push_screen(FormDialog("Bounds", [FormField("max", "Max replicas", "10", "", "integer")]))
            self.set_timer(0.3, lambda: note("ready"))

        def on_input_changed(self, event: Input.Changed) -> None:
            note(f"value={event.value}")

    Host().run()
""")


def _drain(fd: int, seconds: float) -> None:
    """Read (and drop) the app's screen output for ``seconds``, so it never blocks writing."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                os.read(fd, 65536)
            except OSError:
                return


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_backspace_and_the_keys_after_it_in_one_read_act_in_order(tmp_path):
    script, out = tmp_path / "host.py", tmp_path / "events.txt"
    script.write_text(APP)
    out.write_text("")
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", LINES="24")
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stdin=slave, stdout=slave, stderr=slave,
                            close_fds=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        while "ready" not in _lines(out) and time.monotonic() < deadline and proc.poll() is None:
            _drain(master, 0.1)
        assert "ready" in _lines(out), "the form never came up"
        os.write(master, b"9\x7f10")  # 9, Backspace, 1, 0 — one read
        deadline = time.monotonic() + 20
        while len([x for x in _lines(out) if x.startswith("value=")]) < 4 and time.monotonic() < deadline:
            _drain(master, 0.1)
        _drain(master, 0.5)  # a late Backspace would land now
        values = [x.removeprefix("value=") for x in _lines(out) if x.startswith("value=")]
        assert values[-1] == "10", values  # before: "91" (the Backspace ran after "1" and "0")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        os.close(master)
