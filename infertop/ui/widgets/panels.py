"""Small read-only panels that repaint only when their text changes."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import Widget
from textual.widgets import Static

from ...format import pct_human, rate_human, seconds_human
from ..fastpaint.direct_lines import DirectLines
from .tiles import text_strip


class QuietStatic(Static):
    """A Static whose ``show`` is a no-op when the content is unchanged —
    on a slow SSH link every repaint costs bytes."""

    _last: object = None
    _lines: int | None = None  # lines of the content shown (0: empty)

    def show(self, content: Text | str) -> None:
        # what a Text shows: its text, base style and spans (cheaper than writing its markup each tick)
        key = ((content.plain, content.style, tuple(content.spans), content.justify, content.overflow,
                content.no_wrap) if isinstance(content, Text) else content)
        if key == self._last:
            return
        self._last = key
        plain = content.plain if isinstance(content, Text) else content
        lines = plain.count("\n") + 1 if plain else 0
        layout = not self._fixed_size(lines)
        self._lines = lines
        self.update(content, layout=layout)

    def _fixed_size(self, lines: int) -> bool:
        """True when new content cannot change this widget's size: then it repaints
        without a layout pass of the whole screen (a tile value, an alert line)."""
        st = self.styles
        if st.width is not None and st.width.is_auto:
            return False
        if st.height is not None and not st.height.is_auto:
            return True
        # auto height: a line that never wraps keeps its height while its line count holds
        return st.text_wrap == "nowrap" and lines > 0 and lines == self._lines


def on_view(widget: Widget) -> bool:
    """True when neither ``widget`` nor any container of it is ``display: none`` (a pane not on view,
    the Overview's wide trends on a narrow terminal). Its size tells only after the next layout:
    until then it reads the size it had on screen."""
    node: object = widget
    while isinstance(node, Widget):
        if not node.display:
            return False
        node = node.parent
    return True


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


def _cells(strip: Strip) -> list[tuple[str, Style | None]]:
    """Each cell of a strip of narrow characters: (character, style)."""
    return [(ch, style) for text, style, _ in strip for ch in text]


def _changed_span(old: Sequence, new: Sequence) -> tuple[int, int]:
    """[first, last + 1) of the cells where two different rows differ (the longer row's tail counts)."""
    n = min(len(old), len(new))
    lo = 0
    while lo < n and old[lo] == new[lo]:
        lo += 1
    a, b = len(old), len(new)
    while a > lo and b > lo and old[a - 1] == new[b - 1]:
        a, b = a - 1, b - 1
    return lo, max(a, b)


def bucket_max(points: list[float | None], width: int, first: int) -> list[float | None]:
    """At most ``width`` buckets of ``k`` points each (their largest value, None when
    none is present), bounded at multiples of ``k`` of the points' absolute index
    (``first`` is the index of ``points[0]``): while a series scrolls, the older
    buckets keep their points and only the newest one changes until it is full.
    A partial oldest bucket (its older points already dropped) is left out."""
    k = -(-len(points) // width)
    out: list[float | None] = []
    start = 0
    head = first % k
    if head:  # the oldest bucket lost points: leave it out rather than show it shrinking
        start = k - head
    for i in range(start, len(points), k):
        out.append(max((v for v in points[i:i + k] if v is not None and v == v), default=None))  # v == v: not NaN
    return out[-width:]


def bars(data: Sequence[float | None], width: int, height: int, top: float, first: int = 0) -> list[str]:
    """Rows of block characters (top row first) for ``data`` on the scale 0..``top``.

    One bar per point, newest on the right; more points than ``width`` are
    bucketed (the bucket's largest value, see :func:`bucket_max`; ``first`` is
    the absolute index of ``data[0]``). A missing point (None, NaN) is a gap,
    never a zero; a zero is the lowest eighth, so it still shows.
    """
    if width <= 0 or height <= 0:
        return []
    points = list(data)
    if len(points) > width:
        points = bucket_max(points, width, first)
    cells = height * 8
    blank = _column(None, height)
    columns = [blank] * (width - len(points))
    for v in points:
        if v is None or v != v:  # a gap (None or NaN)
            columns.append(blank)
            continue
        ratio = min(1.0, max(0.0, v / top)) if top > 0 else 0.0
        columns.append(_column(max(1, math.ceil(ratio * cells)), height))
    return ["".join(row) for row in zip(*columns)]


@functools.lru_cache(maxsize=1024)
def _column(level: int | None, height: int) -> tuple[str, ...]:
    """One bar's cells, top row first, for a bar ``level`` eighths high (None: a gap)."""
    out = []
    for r in reversed(range(height)):
        if level is None or level <= r * 8:
            out.append(" ")
        elif level >= (r + 1) * 8:
            out.append("█")
        else:
            out.append(BLOCKS[level - r * 8 - 1])
    return tuple(out)


BLOCKS = "▁▂▃▄▅▆▇█"


class CachedLine(DirectLines):
    """Mixin for a one-line Static or Label whose text changes every tick (a clock, a trend's
    title and value): painted from a cached Strip — the cells a nowrap Static with an ellipsis
    paints — without a Static's update (markup, visual, layout) per change."""

    _line: Text = Text("")
    _strip: Strip | None = None

    def show(self, text: Text | str) -> None:
        text = Text(text) if isinstance(text, str) else text
        if (text.plain, text.style, text.spans) != (self._line.plain, self._line.style, self._line.spans):
            self._line, self._strip = text, None
            self.refresh()

    def render(self) -> Text:
        return self._line

    def render_line(self, y: int) -> Strip:
        width = self.content_width()
        if y:
            return Strip.blank(width, self.rich_style)
        if self._strip is None or self._strip.cell_length != width:
            self._strip = Strip(text_strip(self._line, width, self.visual_style, self.app.console),
                                     width)
        return self._strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strip = None  # a theme change: the colours in the strip are stale


class LineStatic(CachedLine, Static):
    """A one-line Static shown through :meth:`show` (the header's clock)."""


class Trend(DirectLines, Widget):
    """A titled sparkline with its latest value, on a stated scale: 0..100 for a
    percentage, 0..the largest value shown for counts, rates and latencies.

    One line-API widget: its first row is the title and latest value (muted, cut with
    "…" where it does not fit), the rows below it the bars, with the scale written on
    their left (Textual's Sparkline stretches min..max of the data: a constant series
    would draw as an empty line). Each row is a cached Strip, kept until its text, the
    size or the theme changes; a tick repaints only the cells that changed (the value's
    digits, the newest bar), and the trend is one widget to the compositor, not three."""

    COMPONENT_CLASSES = {"trend--title", "sparkline--bar", "sparkline--axis"}
    DEFAULT_CSS = """
    Trend { height: 3; width: 1fr; min-width: 20; padding: 0 1; }
    Trend > .trend--title { color: $text-muted; }
    Trend > .sparkline--bar { color: $primary; }
    Trend > .sparkline--axis { color: $text-muted; }
    """

    def __init__(self, title: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self._label_text = title  # the title and latest value
        self._label_shown = title  # the one on the title row (a hidden trend's is written when shown)
        self._fmt: Callable[[float], str] | None = None
        self._series: list[float | None] = []  # the last data, NaN as None
        self._first = 0  # absolute index of the series' first point (see bucket_max)
        self._plotted: tuple = ((), 1.0, "", 0)  # data, top, top_text, first: what the bars show
        self._rows: list[str] | None = None  # the bar rows last drawn, with their axis
        self._rows_size: Size | None = None  # the size they were drawn for
        self._unpainted = False  # data plotted while hidden: painted when shown (on_show)
        self._title_strip: Strip | None = None
        self._bar_strips: list[Strip] | None = None  # the bar rows as painted
        self._row_strips: dict[str, Strip] = {}  # by row text: a row the tick left as it was keeps its Strip
        self._blank_rows: tuple[Strip, Strip] | None = None
        self._styles: tuple[Style, Style] | None = None  # axis, bars: with the widget's base
        self._title_style: VisualStyle | None = None

    def show(self, data: list[float], value_text: str, *, fmt: Callable[[float], str] | None = None,
             percent: bool | None = None) -> None:
        """``data`` oldest first (None or NaN: no value); ``fmt`` writes the scale
        (default: in the unit of ``value_text``); ``percent``: 0..100 (default: when
        ``value_text`` ends in %)."""
        self._label_text = f"{self.title}  {value_text}"
        shown = on_view(self)
        size = self.size  # read once: it is looked up on the screen each time
        title = self._show_label(size) if shown else []  # a hidden trend's title is written when shown (on_show)
        series = self._follow(data)
        self._fmt = fmt or _unit_format(value_text) or self._fmt or rate_human
        if percent is None:
            percent = self._fmt is pct_human
        top = max((v for v in series if v is not None), default=None)
        if len(series) < 2 or top is None:
            self._repaint(title, self._plot((), 1.0, "", 0, size, shown))  # one point is not a trend
            return
        if percent:
            top = 100.0
        if top <= 0:
            top = 1.0  # all zero: the lowest bars, on a scale of 0..1
        self._repaint(title, self._plot(series, top, self._fmt(top), self._first, size, shown))

    def _repaint(self, *dirty: list[Region] | None) -> None:
        """One refresh for what changed (None: all of it): one message to the widget, one to the screen."""
        if any(regions is None for regions in dirty):
            self.refresh()
        elif any(dirty):
            self.refresh(*(region for regions in dirty if regions is not None for region in regions))

    # -- what it shows (for tests) ---------------------------------------------------------------
    def title_text(self) -> str:
        """The title and latest value written on the title row (uncut)."""
        return self._label_shown

    def bar_rows(self) -> list[str]:
        """The bar rows as painted, the axis first (none: no trend)."""
        return [strip.text for strip in self._bars(self.size)]

    # -- the title row -----------------------------------------------------------------------------
    def _show_label(self, size: Size) -> list[Region] | None:
        """Write the latest title on the title row; returns the cells to repaint (None: all)."""
        if self._label_text == self._label_shown:
            return []
        self._label_shown = self._label_text
        old, self._title_strip = self._title_strip, None
        width = size.width
        if old is None or not width or old.cell_length != width:
            return None
        new = self._title(width)
        if len(new.text) != width:  # a wide character: its characters and cells do not line up
            return [Region(0, 0, width, 1)]
        left, right = _changed_span(_cells(old), _cells(new))  # a cell whose style alone changed counts
        return [Region(left, 0, right - left, 1)] if right > left else []  # e.g. the value's last digits

    def _title(self, width: int) -> Strip:
        strip = self._title_strip
        if strip is None or strip.cell_length != width:
            if self._title_style is None:
                self._title_style = self.get_visual_style("trend--title")
            strip = self._title_strip = Strip(
                text_strip(Text(self._label_shown), width, self._title_style, self.app.console), width)
        return strip

    def on_show(self) -> None:
        title = self._show_label(self.size)
        if self._unpainted:  # what it shows was rendered before it was hidden
            self._unpainted = False
            self._bar_strips = None
            title = None
        self._repaint(title)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        # a theme change: the colours in the strips are stale
        self._styles, self._title_style, self._title_strip, self._bar_strips = None, None, None, None
        self._row_strips, self._blank_rows = {}, None

    # -- the bars ----------------------------------------------------------------------------------
    def _plot(self, data: Sequence[float | None], top: float, top_text: str, first: int, size: Size,
              shown: bool) -> list[Region] | None:
        """Show ``data`` on 0..``top``; returns the cells to repaint (None: all), only the columns
        whose bars changed."""
        plotted = (tuple(data), top, top_text, first)
        if plotted == self._plotted:
            return []
        self._plotted = plotted
        if not size.area or not shown:  # hidden: no repaint per tick, one when shown
            self._unpainted = True
            self._bar_strips, self._rows_size = None, None  # drawn afresh from the data when painted
            return []
        old, rows = self._rows, self._bar_lines(size)
        stale_size = self._rows_size != size
        self._rows, self._rows_size, self._bar_strips = rows, size, None
        if self._unpainted or stale_size:
            self._unpainted = False
            return None
        height = size.height - 1
        if old is None or rows is None or len(old) != len(rows):
            return [Region(0, 1, size.width, height)] if old != rows else []
        spans = [_changed_span(a, b) for a, b in zip(old, rows) if a != b]
        if not spans:
            return []
        left, right = min(lo for lo, _ in spans), max(hi for _, hi in spans)
        return [Region(left, 1, right - left, height)]  # e.g. the newest bar alone

    def _bar_lines(self, size: Size) -> list[str] | None:
        """Each bar row as drawn for ``size``: the axis (scale, ▕) then the bars; None: nothing to draw."""
        data, top, top_text, first = self._plotted
        width, height = size.width, size.height - 1
        axis = max(len(top_text), 1)
        if not data or width <= axis + 2 or height <= 0:
            return None
        rows = bars(data, width - axis - 1, height, top, first)
        return [f"{top_text if i == 0 else ('0' if i == height - 1 else ''):>{axis}}▕{row}"
                for i, row in enumerate(rows)]

    def _bars(self, size: Size) -> list[Strip]:
        strips = self._bar_strips
        if strips is None or self._rows_size != size:
            strips = self._bar_strips = self._render_bars(size)
        return strips

    def _render_bars(self, size: Size) -> list[Strip]:
        """The bar rows in the cells and styles Rich text and Textual's Content give them,
        without that conversion per repaint."""
        if self._rows_size != size:
            self._rows, self._rows_size = self._bar_lines(size), size
        rows = self._rows
        if rows is None:
            return []  # no trend yet: nothing, not a flat line that reads as zero
        if self._styles is None:
            base = self.visual_style
            probe = Text("a")
            probe.stylize(self.get_component_rich_style("sparkline--axis"))
            probe.append("b", style=self.get_component_rich_style("sparkline--bar"))
            by_text = {seg.text: seg.style for seg in Content.from_rich_text(probe, self.app.console)
                       .render_segments(base)}
            # without the probe's text offsets (meta for text selection: a sparkline is not text to copy)
            axis_of, bar_of = by_text["a"] or Style(), by_text["b"] or Style()
            self._styles = (axis_of.clear_meta_and_links(), bar_of.clear_meta_and_links())
        axis_style, bar_style = self._styles
        axis = max(len(self._plotted[2]), 1) + 1
        # a row the same as last frame keeps its Strip, so DirectLines reuses it as painted
        last, strips = self._row_strips, []
        made: dict[str, Strip] = {}
        for row in rows:
            strip = made.get(row) or last.get(row)
            if strip is None:
                strip = Strip([Segment(row[:axis], axis_style), Segment(row[axis:], bar_style)], size.width)
            made[row] = strip
            strips.append(strip)
        self._row_strips = made
        return strips

    def render_line(self, y: int) -> Strip:
        size = self.layout_content_size()
        if y == 0:
            return self._title(size.width)
        strips = self._bars(size)
        if y - 1 < len(strips):
            return strips[y - 1]
        return self._blank(size.width)[y > 1]

    def _blank(self, width: int) -> tuple[Strip, Strip]:
        """The rows of a trend without bars, as Textual paints an empty text: its one line (no
        cells, padded with the background), then blank lines below it."""
        blank = self._blank_rows
        if blank is None or blank[0].cell_length != width:
            style = self.rich_style
            pad = Segment(" " * width, Style(bgcolor=style.bgcolor))
            blank = self._blank_rows = (Strip([*Content("").render_segments(self.visual_style), pad], width),
                                        Strip.blank(width, style))
        return blank

    def _follow(self, data: Sequence[float | None]) -> list[float | None]:
        """Count the points that scrolled out, so that bucket boundaries stay with
        their points: the same series shifted by one moves ``_first`` by one; any
        other change (another engine selected, a gap) starts counting afresh.
        Returns the series with NaN as None."""
        series = [None if v is None or v != v else v for v in data]  # v != v: NaN
        prev = self._series
        if series == prev:
            return prev
        n = len(series)
        if n and n == len(prev) and series[:-1] == prev[1:]:
            self._first += 1
        elif not (n == len(prev) + 1 and series[:-1] == prev):
            self._first = 0
        self._series = series
        return series
