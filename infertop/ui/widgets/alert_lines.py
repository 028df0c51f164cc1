"""The Overview's alerts: a title line and one line per engine, as one line-API widget.

Only the lines whose text changed are repainted (see widgets/tiles.py for why
one widget and not a Static per line).
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from ..fastpaint.direct_lines import DirectLines
from .tiles import text_strip


class AlertLines(DirectLines, Widget):
    """Line 0 is the title; lines 1..``rows`` the alerts (``set_rows`` sets how many fit)."""

    DEFAULT_CSS = "AlertLines { height: auto; padding: 0 1; }"

    def __init__(self, capacity: int, rows: int = 2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.capacity = capacity
        self._rows = rows
        self._texts: list[Text] = [Text("") for _ in range(capacity + 1)]
        self._keys: list[object] = [None] * (capacity + 1)
        self._strips: dict[int, Strip] = {}

    @property
    def rows(self) -> int:
        return self._rows

    def set_rows(self, rows: int) -> None:
        """How many alert lines are shown under the title."""
        rows = max(0, min(self.capacity, rows))
        if rows != self._rows:
            self._rows = rows
            self._strips.clear()
            self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return 1 + self._rows

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def show_title(self, text: Text) -> None:
        self._show(0, text)

    def show_line(self, i: int, text: Text | str) -> None:
        """Alert line ``i`` (0-based, under the title)."""
        self._show(i + 1, text)

    def _show(self, y: int, text: Text | str) -> None:
        if isinstance(text, str):
            text = Text(text)
        key = (text.plain, text.style, tuple(text.spans))
        if key == self._keys[y]:
            return
        self._keys[y] = key
        self._texts[y] = text
        self._strips.pop(y, None)
        self.repaint(Region(0, y, self.content_width(), 1))

    # -- what is on screen (for tests) ---------------------------------------------------------
    def _painted(self, y: int) -> str:
        if not self.size.width:  # not laid out (its pane is hidden): the text it will paint, uncut
            return self._texts[y].plain
        return self._strip(y).text.rstrip()

    def title_text(self) -> str:
        return self._painted(0)

    def line_texts(self) -> list[str]:
        """The alert lines shown, as painted (blank ones included)."""
        return [self._painted(y) for y in range(1, 1 + self._rows)]

    # -- painting ------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        return self._strip(y)

    def _strip(self, y: int) -> Strip:
        width = self.content_width()
        strip = self._strips.get(y)
        if strip is None or strip.cell_length != width:
            text = self._texts[y] if y <= self._rows else Text("")
            strip = self._strips[y] = Strip(text_strip(text, width, self.visual_style, self.app.console), width)
        return strip
