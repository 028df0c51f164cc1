"""A pod's container log through the API: the current container followed, or the previous one.

Lines arrive on a thread (``KubeSession.follow_pod_log``) into a bounded queue, and the
screen takes them in at most ten times a second; both hold at most ``max_lines`` lines,
so a container writing faster than the terminal can paint costs memory for ``max_lines``
and drops the oldest (the status line counts what was read and what is kept). Lines are
read with timestamps; ``t`` shows or hides them, ``w`` wraps, ``f`` stops or resumes the
follow, ``/`` keeps the lines matching a regex (``!`` first: those not matching). Text
from the container is never markup.
"""

from __future__ import annotations

import re
import threading
from collections import deque

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, RichLog, Static

from ...sources.kube.session import KubeError, KubeSession, LogFollow
from ...sources.sanitize import error_text
from ...text import plain
from .kube_object import search_pattern

MAX_LOG_LINES = 5000
DRAIN_S = 0.1


def split_stamp(line: str) -> tuple[str, str]:
    """("2025-06-01T10:00:00.123456789Z", "the line") of a line read with timestamps=true."""
    head, sep, rest = line.partition(" ")
    if sep and head.endswith("Z") and "T" in head and head[:4].isdigit():
        return head, rest
    return "", line


class KubeLogScreen(Screen[None]):
    """Esc goes back (or closes the search first)."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("w", "toggle_wrap", "Wrap"),
        Binding("t", "toggle_stamps", "Timestamps"),
        Binding("slash", "search", "Search"),
    ]
    DEFAULT_CSS = """
    KubeLogScreen #klog-title { background: $panel; padding: 0 1; text-style: bold; height: 1; }
    KubeLogScreen #klog-status { padding: 0 1; height: 1; color: $text-muted; }
    KubeLogScreen RichLog { height: 1fr; }
    KubeLogScreen #klog-search { dock: bottom; display: none; }
    KubeLogScreen.-searching #klog-search { display: block; }
    """

    def __init__(self, session: KubeSession, namespace: str, pod: str, container: str | None = None, *,
                 previous: bool = False, max_lines: int = MAX_LOG_LINES) -> None:
        super().__init__()
        self.session, self.namespace, self.pod, self.container = session, namespace, pod, container
        self.previous = previous
        self.max_lines = max_lines
        self.lines: deque[str] = deque(maxlen=max_lines)  # as read: with their timestamps
        self._pending: deque[str] = deque(maxlen=max_lines)  # the reader's, until the next drain
        self.received = 0  # lines read since the screen opened
        self.following = False
        self.wrap = False
        self.stamps = False
        self.pattern: re.Pattern | None = None
        self.invert = False
        self.error: str | None = None
        self.ended: str | None = None  # why the follow stopped
        self.loaded = False
        self._follow: LogFollow | None = None
        self._reader: threading.Thread | None = None
        self._count_lock = threading.Lock()

    # ----- layout
    def compose(self) -> ComposeResult:
        which = "previous container" if self.previous else "container"
        name = f" {self.container}" if self.container else ""
        yield Static(Text(f"Logs · {self.namespace}/{self.pod} · {which}{name}   (Esc: back, f: follow, w: wrap, "
                          "t: timestamps, /: filter)"), id="klog-title")
        yield Static("", id="klog-status")
        yield RichLog(max_lines=self.max_lines, wrap=False, markup=False, highlight=False, auto_scroll=True,
                      id="klog-log")
        yield Input(placeholder="filter (regex; ! first: lines not matching)", id="klog-search")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(DRAIN_S, self._drain)
        if self.previous:
            self._read_once()
        else:
            self._start_follow()

    def on_unmount(self) -> None:
        self._stop_follow()

    # ----- reading (threads)
    def _read_once(self) -> None:
        def work() -> None:
            try:
                text = self.session.pod_log(self.namespace, self.pod, container=self.container,
                                            previous=self.previous, tail_lines=self.max_lines, timestamps=True)
            except KubeError as e:
                self.app.call_from_thread(self._failed, error_text(e))
                return
            for line in text.splitlines():
                self._take(line)
            self.app.call_from_thread(self._drain)
            self.app.call_from_thread(setattr, self, "loaded", True)
        threading.Thread(target=work, name="kube-log-read", daemon=True).start()

    def _start_follow(self) -> None:
        self._stop_follow()
        self.following, self.ended = True, None
        # the lines since the last one kept (all of them on the first follow)
        tail = self.max_lines if not self.lines else 0

        def work() -> None:
            try:
                follow = self.session.follow_pod_log(self.namespace, self.pod, container=self.container,
                                                     tail_lines=tail, timestamps=True)
            except KubeError as e:
                self.app.call_from_thread(self._failed, error_text(e))
                return
            self._follow = follow
            if not self.following:  # closed (f, Esc) while it connected
                follow.close()
                return
            self.app.call_from_thread(setattr, self, "loaded", True)
            why = "the stream ended: the container restarted or the pod is gone (f: follow again)"
            try:
                for line in follow:
                    if not self.following:
                        break
                    self._take(line)
            except KubeError as e:
                why = f"the stream failed: {error_text(e)}"
            if self.following:
                self.app.call_from_thread(self._follow_ended, why)
        self._reader = threading.Thread(target=work, name="kube-log-follow", daemon=True)
        self._reader.start()

    def _take(self, line: str) -> None:
        self._pending.append(line)  # bounded: the oldest go first under a writer faster than the drain
        with self._count_lock:
            self.received += 1

    def _stop_follow(self) -> None:
        self.following = False
        follow, self._follow = self._follow, None
        if follow is not None:
            follow.close()

    def _failed(self, message: str) -> None:
        self.error, self.loaded, self.following = message, True, False
        self._status()

    def _follow_ended(self, why: str) -> None:
        self.following, self.ended = False, why
        self._drain()

    # ----- painting
    def _shown(self, line: str) -> Text | None:
        stamp, body = split_stamp(line)
        if self.pattern is not None and bool(self.pattern.search(body)) == self.invert:
            return None
        text = Text()
        if self.stamps and stamp:
            text.append(stamp + " ", style="dim")
        start = len(text)
        text.append(plain(body, 8000))
        if self.pattern is not None and not self.invert:
            for m in self.pattern.finditer(body):
                if m.end() > m.start():
                    text.stylize("reverse yellow", start + m.start(), start + m.end())
        return text

    def _drain(self) -> None:
        new = []
        while self._pending:
            new.append(self._pending.popleft())
        if new:
            self.lines.extend(new)
            log = self.query_one(RichLog)
            for line in new[-self.max_lines:]:
                shown = self._shown(line)
                if shown is not None:
                    log.write(shown)
        self._status()

    def _repaint(self) -> None:
        log = self.query_one(RichLog)
        log.clear()
        log.wrap = self.wrap
        for line in self.lines:
            shown = self._shown(line)
            if shown is not None:
                log.write(shown)
        self._status()

    def _status(self) -> None:
        if self.error is not None:
            self.query_one("#klog-status", Static).update(Text(self.error, style="bold red"))
            return
        parts = ["following" if self.following else ("previous container" if self.previous else "not following"),
                 f"{self.received} lines read, {len(self.lines)} kept (at most {self.max_lines})"]
        if self.pattern is not None:
            parts.append(f"filter {'!' if self.invert else ''}{self.pattern.pattern}")
        parts.append(f"wrap {'on' if self.wrap else 'off'}, timestamps {'on' if self.stamps else 'off'}")
        status = Text(" · ".join(parts))
        if self.ended:
            status.append(f" · {self.ended}", style="yellow")
        self.query_one("#klog-status", Static).update(status)

    @property
    def status_text(self) -> str:
        r = self.query_one("#klog-status", Static).render()
        return str(getattr(r, "plain", r))

    # ----- keys
    def action_toggle_follow(self) -> None:
        if self.previous:
            self.notify("the previous container has ended: nothing more to follow", timeout=3)
            return
        if self.following:
            self._stop_follow()
            self._status()
        else:
            self._start_follow()

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self._repaint()

    def action_toggle_stamps(self) -> None:
        self.stamps = not self.stamps
        self._repaint()

    def action_search(self) -> None:
        self.add_class("-searching")
        self.query_one("#klog-search", Input).focus()

    @on(Input.Changed, "#klog-search")
    def _search_changed(self, event: Input.Changed) -> None:
        value = event.value
        self.invert = value.startswith("!")
        self.pattern = search_pattern(value[1:] if self.invert else value)
        if self.pattern is None:
            self.invert = False
        self._repaint()

    @on(Input.Submitted, "#klog-search")
    def _search_done(self) -> None:
        self.query_one(RichLog).focus()

    def action_back(self) -> None:
        if self.has_class("-searching"):
            self.remove_class("-searching")
            self.query_one(RichLog).focus()
            return
        self.app.pop_screen()
