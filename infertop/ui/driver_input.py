"""The terminal's input thread, waiting for input instead of waking ten times a second.

Textual's LinuxDriver reads the terminal in a thread that wakes every 0.1 s
(``select(0.1)``) to see whether the app is stopping and whether a lone Escape
has waited long enough to be a key. Measured side by side in ptys, those
wake-ups cost a ticking Textual app about 2 ms of CPU a second: half of what a
bare app updating one label a second costs, and an eighth of infertop's own.

Here the thread waits for input, a wake-up byte, or the parser's own deadline
(an escape sequence cut short), at most :data:`MAX_WAIT_S`: stopping sets the
driver's ``exit_event``, which writes the wake-up byte. The rest is Textual's
loop as it is (Textual is pinned to one major version in pyproject).
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._loop import loop_last
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser

MAX_WAIT_S = 2.0  # a lost wake-up delays stopping by at most this


class WakingEvent(threading.Event):
    """A ``threading.Event`` whose ``set()`` also writes a byte to wake a thread in ``select``."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        if self._wake_fd >= 0:
            try:
                os.write(self._wake_fd, b"\0")
            except OSError:  # full of wake-ups already: the thread is awake anyway
                pass

    def close(self) -> None:
        """Close the write end; later ``set()`` calls wake nobody (the number may be reused)."""
        fd, self._wake_fd = self._wake_fd, -1
        if fd >= 0:
            os.close(fd)


def wake_pipe() -> tuple[int, int]:
    """(read end, write end), both non-blocking: a wake-up never blocks whoever sends it."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def run_input_thread(driver: Any, wake_fd: int) -> None:
    """Textual's ``LinuxDriver.run_input_thread``, waiting on ``wake_fd`` too instead of polling."""
    selector = selectors.SelectSelector()
    selector.register(driver.fileno, selectors.EVENT_READ)
    selector.register(wake_fd, selectors.EVENT_READ)
    fileno = driver.fileno
    parser = XTermParser(driver._debug)
    feed, tick = parser.feed, parser.tick
    decode = getincrementaldecoder("utf-8")().decode
    read = os.read

    def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
        events = [e for e in events if e[0].fd != wake_fd or _drain(wake_fd)]
        for last, (_key, mask) in loop_last(events):
            if mask & selectors.EVENT_READ:
                data = decode(read(fileno, 1024 * 4), final=final and last)
                if not data:  # stdin is a pipe that closed
                    break
                for event in feed(data):
                    driver.process_message(event)
        for event in tick():
            driver.process_message(event)

    def timeout_s() -> float:
        deadline = parser._timeout_time  # an escape sequence waiting to be completed or timed out
        return MAX_WAIT_S if deadline is None else min(MAX_WAIT_S, max(0.0, deadline - get_time()))

    try:
        while not driver.exit_event.is_set():
            process(selector.select(timeout_s()))
        selector.unregister(fileno)
        process(selector.select(0.1), final=True)
    finally:
        selector.close()
        try:
            for _ in feed(""):
                pass
        except (EOFError, ParseError):  # as Textual: the end of input may cut a sequence short
            pass


def _drain(fd: int) -> bool:
    """Read the wake-up bytes; False (the event is not input)."""
    try:
        while os.read(fd, 512):
            pass
    except OSError:  # empty now (non-blocking)
        pass
    return False
