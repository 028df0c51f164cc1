"""Small read-only panels that repaint only when their text changes."""

from __future__ import annotations

import math

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Label, Sparkline, Static

from .lean import LeanLines


class QuietStatic(Static):
    """A Static whose ``show`` is a no-op when the content is unchanged —
    on a slow SSH link every repaint costs bytes."""

    _last: object = None

    def show(self, content: Text | str) -> None:
        key = content.markup if isinstance(content, Text) else content
        if key == self._last:
            return
        self._last = key
        self.update(content)


class LeanSparkline(LeanLines, Sparkline):
    """Sparkline whose bars of one colour go out as one run of text."""


class Trend(Vertical):
    """A titled sparkline with its latest value."""

    DEFAULT_CSS = """
    Trend { height: 3; width: 1fr; min-width: 20; padding: 0 1; }
    Trend > Label { width: 1fr; color: $text-muted; }
    Trend > LeanSparkline { height: 2; }
    Trend > LeanSparkline > .sparkline--max-color { color: $primary; }
    Trend > LeanSparkline > .sparkline--min-color { color: $primary; }
    """

    def __init__(self, title: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self._data: tuple = ()
        self._label_text = ""

    def compose(self):
        yield Label(self.title)
        yield LeanSparkline([])

    def show(self, data: list[float], value_text: str) -> None:
        label = f"{self.title}  {value_text}"
        if label != self._label_text:
            self._label_text = label
            self.query_one(Label).update(label)
        clean = tuple(0.0 if (v is None or math.isnan(v)) else v for v in data)
        if len(clean) < 2:
            clean = ()  # one point is not a trend
        if clean != self._data:
            self._data = clean
            self.query_one(LeanSparkline).data = list(clean)
