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
from locations import REPO

pty = pytest.importorskip("pty")

APP = textwrap.dedent("""
    import sys
    from textual.app import App
    from textual.widgets import Input
    from infertop.ui.screens.kube_dialogs import FormDialog, FormField, OrderedInput

    OUT = sys.argv[1]

    def note(line):
        with open(OUT, "a") as f:
            f.write(line + "\\n")

    class Host(App):
        def compose(self):
            if sys.argv[2] == "input":  # the field alone on the default screen (Textual's Input reorders there)
                yield OrderedInput(value="10", id="field-max", type="integer")

        def on_mount(self):
            if sys.argv[2] == "input":
                self.query_one(OrderedInput).focus()
                self.set_timer(0.3, lambda: note("ready"))
                return
            fields = [FormField("min", "Min replicas", "1", "", "integer"),
                      FormField("max", "Max replicas", "10", "", "integer")]
            self.push_screen(FormDialog("Bounds", fields[-int(sys.argv[2]):]))
            self.set_timer(0.3, lambda: note("ready"))

        def on_input_changed(self, event: Input.Changed) -> None:
            note(f"value={event.input.id.removeprefix('field-')}={event.value}")

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


@pytest.mark.parametrize("fields, typed, field, before, after", [
    ("input", b"9\x7f10", "max", "91", "10"),  # Backspace ran after "1" and "0"
    (1, b"9\x7f10", "max", None, "10"),
    (2, b"2\r9", "max", None, "9"),  # Enter moved the focus after "9" was typed: min read "29", max untouched
])
def test_keys_in_one_read_act_in_order(tmp_path, fields: int | str, typed, field, before, after):
    """``before``: what the field read with Textual's Input (and Enter moving on in the dialog's handler)."""
    values = _type_in_one_read(tmp_path, fields, typed)
    assert values.get(field, [None])[-1] == after, values


def _type_in_one_read(tmp_path, fields: int | str, typed: bytes) -> dict[str, list[str]]:
    """Start the form in a pty, write ``typed`` in one write; each field's values, in order."""
    script, out = tmp_path / "host.py", tmp_path / "events.txt"
    script.write_text(APP)
    out.write_text("")
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", LINES="24")
    proc = subprocess.Popen([sys.executable, str(script), str(out), str(fields)], stdin=slave, stdout=slave, stderr=slave,
                            close_fds=True, env=env, cwd=REPO)
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        while "ready" not in _lines(out) and time.monotonic() < deadline and proc.poll() is None:
            _drain(master, 0.1)
        assert "ready" in _lines(out), "the form never came up"
        seen = len(_lines(out))
        os.write(master, typed)  # one read
        deadline = time.monotonic() + 20
        while len(_lines(out)) == seen and time.monotonic() < deadline:
            _drain(master, 0.1)
        _drain(master, 1.0)  # a late key would land now
        values: dict[str, list[str]] = {}
        for line in _lines(out)[seen:]:
            if line.startswith("value="):
                name, _, value = line.removeprefix("value=").partition("=")
                values.setdefault(name, []).append(value)
        return values
    finally:
        proc.kill()
        proc.wait(timeout=10)
        os.close(master)
