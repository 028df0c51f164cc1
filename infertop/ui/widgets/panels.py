"""Small read-only panels that repaint only when their text changes."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from rich.text import Text
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Label, Static

from ...format import pct_human, rate_human, seconds_human
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


def _present(v: float | None) -> bool:
    return v is not None and not math.isnan(v)


def _unit_format(value_text: str) -> Callable[[float], str] | None:
    """How to write the scale in the unit of the value beside it (None: not known from this text)."""
    if value_text.endswith("%"):
        return pct_human
    if re.search(r"\d(µs|ms|s)$", value_text):
        return seconds_human
    if re.search(r"\dW$", value_text):
        return lambda v: f"{v:.0f}W"
    if value_text.endswith("°C"):
        return lambda v: f"{v:.0f}°C"
    if re.search(r"\d[kM]?$", value_text):
        return rate_human
    return None


def bars(data: Sequence[float | None], width: int, height: int, top: float) -> list[str]:
    """Rows of block characters (top row first) for ``data`` on the scale 0..``top``.

    One bar per point, newest on the right; more points than ``width`` are
    bucketed (the bucket's largest value). A missing point (None, NaN) is a
    gap, never a zero; a zero is the lowest eighth, so it still shows.
    """
    if width <= 0 or height <= 0:
        return []
    points = list(data)
    if len(points) > width:
        step = len(points) / width
        buckets = [points[int(i * step): int((i + 1) * step)] for i in range(width)]
        points = [max((v for v in b if _present(v)), default=None) for b in buckets]
    cells = height * 8
    levels: list[int | None] = [None] * (width - len(points))
    for v in points:
        if not _present(v):
            levels.append(None)
            continue
        ratio = min(1.0, max(0.0, v / top)) if top > 0 else 0.0
        levels.append(max(1, math.ceil(ratio * cells)))
    rows = []
    for r in reversed(range(height)):
        row = []
        for lv in levels:
            if lv is None or lv <= r * 8:
                row.append(" ")
            elif lv >= (r + 1) * 8:
                row.append("█")
            else:
                row.append(BLOCKS[lv - r * 8 - 1])
        rows.append("".join(row))
    return rows


BLOCKS = "▁▂▃▄▅▆▇█"


class ScaledSparkline(LeanLines, Widget):
    """A sparkline drawn on a stated scale, 0..``top``, with the scale written on its
    left (Textual's Sparkline stretches min..max of the data: a constant series
    would draw as an empty line)."""

    COMPONENT_CLASSES = {"sparkline--bar", "sparkline--axis"}
    DEFAULT_CSS = """
    ScaledSparkline { height: 2; }
    ScaledSparkline > .sparkline--bar { color: $primary; }
    ScaledSparkline > .sparkline--axis { color: $text-muted; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data: tuple[float | None, ...] = ()
        self.top = 1.0
        self.top_text = ""

    def plot(self, data: Sequence[float | None], top: float, top_text: str) -> None:
        if (tuple(data), top, top_text) == (self.data, self.top, self.top_text):
            return
        self.data, self.top, self.top_text = tuple(data), top, top_text
        self.refresh()

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        axis = max(len(self.top_text), 1)
        text = Text(no_wrap=True, overflow="crop")
        if not self.data or width <= axis + 2 or height <= 0:
            return text  # no trend yet: nothing, not a flat line that reads as zero
        bar_style = self.get_component_rich_style("sparkline--bar")
        axis_style = self.get_component_rich_style("sparkline--axis")
        rows = bars(self.data, width - axis - 1, height, self.top)
        for i, row in enumerate(rows):
            label = self.top_text if i == 0 else ("0" if i == height - 1 else "")
            text.append(f"{label:>{axis}}▕", style=axis_style)
            text.append(row, style=bar_style)
            if i < height - 1:
                text.append("\n")
        return text


class Trend(Vertical):
    """A titled sparkline with its latest value, on a stated scale: 0..100 for a
    percentage, 0..the largest value shown for counts, rates and latencies."""

    DEFAULT_CSS = """
    Trend { height: 3; width: 1fr; min-width: 20; padding: 0 1; }
    Trend > Label { width: 1fr; height: 1; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    Trend > ScaledSparkline { height: 1fr; }
    """

    def __init__(self, title: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self._label_text = ""
        self._fmt: Callable[[float], str] | None = None

    def compose(self):
        yield Label(self.title)
        yield ScaledSparkline()

    def show(self, data: list[float], value_text: str, *, fmt: Callable[[float], str] | None = None,
             percent: bool | None = None) -> None:
        """``data`` oldest first (None or NaN: no value); ``fmt`` writes the scale
        (default: in the unit of ``value_text``); ``percent``: 0..100 (default: when
        ``value_text`` ends in %)."""
        label = f"{self.title}  {value_text}"
        if label != self._label_text:
            self._label_text = label
            self.query_one(Label).update(Text(label))
        self._fmt = fmt or _unit_format(value_text) or self._fmt or rate_human
        if percent is None:
            percent = self._fmt is pct_human
        present = [v for v in data if _present(v)]
        if len(data) < 2 or not present:
            self.query_one(ScaledSparkline).plot((), 1.0, "")  # one point is not a trend
            return
        top = 100.0 if percent else max(present)
        if top <= 0:
            top = 1.0  # all zero: the lowest bars, on a scale of 0..1
        top_text = self._fmt(top)
        self.query_one(ScaledSparkline).plot(data, top, top_text)
