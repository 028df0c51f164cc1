"""One Kubernetes object on a screen of its own: describe (d), YAML (y) or its events (e).

The text is read in a thread (``load``: a blocking function returning lines), shown
read-only and never as markup; ``/`` searches (a regex, else the literal text), ``n``
goes to the next match, ``r`` reads it again, Esc goes back. A failure is one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from ...sources.kube.session import KubeError
from ...sources.sanitize import error_text
from ...text import plain


def search_pattern(text: str) -> re.Pattern | None:
    """The search as a case-insensitive regex; text that is no valid regex is searched literally."""
    if not text:
        return None
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error:
        return re.compile(re.escape(text), re.IGNORECASE)


def styled(lines: list[str], pattern: re.Pattern | None = None, headings: bool = True) -> Text:
    """The lines as one Text: unindented lines bold (section titles), matches of ``pattern`` reversed."""
    out = Text()
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        start = len(out)
        out.append(plain(line, 4000), style="bold" if headings and line[:1] not in (" ", "") else "")
        if pattern is not None:
            for m in pattern.finditer(line):
                if m.end() > m.start():
                    out.stylize("reverse yellow", start + m.start(), start + m.end())
    return out


class KubeTextScreen(Screen[None]):
    """Read-only text about one object; ``load()`` runs in a thread and returns its lines."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match", "Next match"),
        Binding("r", "reload", "Reload"),
    ]
    DEFAULT_CSS = """
    KubeTextScreen #kobj-title { background: $panel; padding: 0 1; text-style: bold; height: 1; }
    KubeTextScreen #kobj-body { padding: 0 1; height: auto; }
    KubeTextScreen #kobj-scroll { height: 1fr; }
    KubeTextScreen #kobj-search { dock: bottom; display: none; }
    KubeTextScreen.-searching #kobj-search { display: block; }
    """

    def __init__(self, title: str, load: Callable[[], list[str]], *, headings: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.load = load
        self.headings = headings
        self.lines: list[str] = []
        self.error: str | None = None
        self.loaded = False
        self.pattern: re.Pattern | None = None
        self.match_rows: list[int] = []
        self._match_at = -1

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.title_text}   (Esc: back, /: search, r: reload)"), id="kobj-title")
        with VerticalScroll(id="kobj-scroll"):
            yield Static(Text("reading…", style="dim"), id="kobj-body")
        yield Input(placeholder="search (regex)", id="kobj-search")
        yield Footer()

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, group="kube-object")
    def _read(self) -> None:
        try:
            lines, error = self.load(), None
        except KubeError as e:
            lines, error = [], error_text(e)
        except Exception as e:  # noqa: BLE001 — never a traceback on screen
            lines, error = [], f"{type(e).__name__}: {e}"
        self.app.call_from_thread(self._loaded, lines, error)

    def _loaded(self, lines: list[str], error: str | None) -> None:
        self.lines, self.error, self.loaded = lines, error, True
        self._paint()

    @property
    def text(self) -> str:
        """What the body shows, as plain text (tests)."""
        return "\n".join(self.lines) if self.error is None else self.error

    def _paint(self) -> None:
        body = self.query_one("#kobj-body", Static)
        if self.error is not None:
            body.update(Text(self.error, style="bold red"))
            return
        self.match_rows = [i for i, line in enumerate(self.lines) if self.pattern and self.pattern.search(line)]
        body.update(styled(self.lines, self.pattern, self.headings))

    def action_search(self) -> None:
        self.add_class("-searching")
        self.query_one("#kobj-search", Input).focus()

    @on(Input.Changed, "#kobj-search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.pattern = search_pattern(event.value)
        self._match_at = -1
        self._paint()
        self.action_next_match()

    @on(Input.Submitted, "#kobj-search")
    def _search_done(self) -> None:
        self.query_one("#kobj-scroll").focus()

    def action_next_match(self) -> None:
        if not self.match_rows:
            return
        self._match_at = (self._match_at + 1) % len(self.match_rows)
        self.query_one("#kobj-scroll", VerticalScroll).scroll_to(y=self.match_rows[self._match_at], animate=False)

    def action_back(self) -> None:
        if self.has_class("-searching"):
            self.remove_class("-searching")
            self.query_one("#kobj-scroll").focus()
            return
        self.app.pop_screen()
