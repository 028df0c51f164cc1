"""The Overview's fleet tiles as one line-API widget.

A tile is a muted label over a bold value (red when bad, a dim note after
it). All tiles are drawn by one widget, a Strip per screen row: a tick that
changes three values repaints the rows they are on, not one widget per value
(21 Statics cost ~3.6x the CPU of two line widgets in
benchmarks/bench_textual_floor.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from rich.cells import cached_cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import Widget

from .. import fastpaint
from ..fastpaint.direct_lines import DirectLines


def text_strip(text: Text, width: int, base: VisualStyle, console: Console, lead: int = 0) -> list[Segment]:
    """``text`` on one line of ``width`` cells after ``lead`` spaces, cut with "…" when it
    does not fit, padded: the segments a nowrap Static with ``text-overflow: ellipsis``
    paints (the same Content conversion, so colours and dim come out the same).

    Where the cells' styles and cut points cannot depend on the characters (each one cell
    wide, none stripped, nothing cut) they are cached per layout and only the characters are
    sliced in: a tile's digits change every tick, its lengths and styles rarely."""
    plain = text.plain
    room = width - lead
    # isprintable: no tab, newline or control code (Rich's Text drops those Textual strips,
    # but a layout must never be applied to text Content would change).
    if room <= 0 or len(plain) > room or console is None or not plain.isprintable() \
            or cached_cell_len(plain) != len(plain):
        return _text_strip_slow(text, width, base, console, lead)
    key = _layout_key(text, plain, width, base, console, lead)
    if key is None:
        return _text_strip_slow(text, width, base, console, lead)
    layout = _LAYOUTS.get(key)
    if layout is None:
        out = _text_strip_slow(text, width, base, console, lead)
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = _layout_of(out, plain, room, lead)
        return out
    if layout is _NOT_CACHED:
        return _text_strip_slow(text, width, base, console, lead)
    head, pieces, tail = cast(tuple, layout)
    return [*head, *[Segment(plain[start:end], style) for start, end, style in pieces], *tail]


_LAYOUTS: dict[tuple, tuple | object] = {}  # layout key → (lead segments, (start, end, style)s, padding)
_LAYOUTS_MAX = 2048
_NOT_CACHED = object()  # a layout the slow path's output did not confirm: always take the slow path


def _layout_key(text: Text, plain: str, width: int, base: VisualStyle, console: Console, lead: int) -> tuple | None:
    """Everything besides the characters that ``Content.from_rich_text`` and ``render_segments``
    read, as they read it; None where a style does not parse (left to the slow path)."""
    style: str | Style | VisualStyle = text.style
    if isinstance(style, str):
        if style:
            # A str style is parsed at render time with the app's CSS variables (a theme's
            # colours), so the key holds what it parses to, not the string.
            try:
                style = VisualStyle.parse(style)
            except Exception:
                return None
        ansi = fastpaint.active_ansi_theme() if text.spans else None
    else:
        ansi = fastpaint.active_ansi_theme()  # ANSI colours of Rich styles map through the app's terminal theme
    if ansi is fastpaint.UNKNOWN:  # the app's terminal theme cannot be told: no layout is safe to reuse
        return None
    return (len(plain), style, tuple(text.spans), width, lead, base, console, ansi)


def _layout_of(out: list[Segment], plain: str, room: int, lead: int) -> tuple | object:
    """The slow path's ``out`` as lead segments, pieces of ``plain`` and padding; _NOT_CACHED
    unless it is exactly lead spaces, ``plain`` and the padding to ``room``."""
    head = out[:1] if lead else []
    tail = out[-1:] if len(plain) < room else []
    body = out[len(head):len(out) - len(tail)]
    if [s.text for s in head] != [" " * lead] * len(head) or [s.text for s in tail] != [" " * (room - len(plain))] * len(tail):
        return _NOT_CACHED
    pieces = []
    start = 0
    for segment in body:
        end = start + len(segment.text)
        if segment.control or plain[start:end] != segment.text:
            return _NOT_CACHED
        pieces.append((start, end, segment.style))
        start = end
    if start != len(plain):
        return _NOT_CACHED
    return tuple(head), tuple(pieces), tuple(tail)


def _text_strip_slow(text: Text, width: int, base: VisualStyle, console: Console, lead: int = 0) -> list[Segment]:
    """``text_strip`` through Textual's Content, uncached (what the cache must equal)."""
    pad = Style(bgcolor=base.rich_style.bgcolor)  # blank cells as Textual pads them: background only
    room = width - lead
    if room <= 0:
        return [Segment(" " * width, pad)] if width > 0 else []
    content = Content.from_rich_text(text, console)
    if content.cell_length > room:
        content = content.truncate(room, ellipsis=True)
    out = [Segment(" " * lead, pad)] if lead else []
    out += content.render_segments(base)
    if content.cell_length < room:
        out.append(Segment(" " * (room - content.cell_length), pad))
    return out


def column_offsets(width: int, columns: int) -> list[int]:
    """Where each of ``columns`` equal columns starts, and the end: as Textual's grid
    splits ``1fr`` columns (offsets are the floors of the running sums)."""
    return [width * i // columns for i in range(columns + 1)]


class TileGrid(DirectLines, Widget):
    """Label/value tiles in ``columns`` columns, two screen rows per tile row.

    ``tiles`` are always shown; ``extra`` tiles (the gateway queue) only after
    ``show_extra(True)``. Only the row of a value whose text changed is repainted.
    """

    DEFAULT_CSS = """
    TileGrid { height: auto; }
    TileGrid > .tiles--label { color: $text-muted; }
    """
    COMPONENT_CLASSES = {"tiles--label"}

    def __init__(self, tiles: Sequence[tuple[str, str]], extra: Sequence[tuple[str, str]] = (), **kwargs) -> None:
        super().__init__(**kwargs)
        self._labels = dict((*tiles, *extra))
        self._base = [key for key, _ in tiles]
        self._extra = [key for key, _ in extra]
        self._shown = list(self._base)
        self._index = {key: i for i, key in enumerate(self._shown)}
        self._columns = 6
        self._values: dict[str, Text] = {}
        self._keys: dict[str, tuple] = {}
        self._strips: dict[int, Strip] = {}  # by screen row, for the width they were made for
        self._tile_segments: dict[tuple[str, int], tuple[int, list[Segment]]] = {}  # (key, line) → (width, cells)

    # -- layout --------------------------------------------------------------------------------
    @property
    def columns(self) -> int:
        return self._columns

    def set_columns(self, columns: int) -> None:
        if columns != self._columns:
            self._columns = columns
            self._relayout()

    def show_extra(self, shown: bool) -> None:
        """Show or hide the extra tiles (appended after the others)."""
        keys = self._base + (self._extra if shown else [])
        if keys != self._shown:
            self._shown = keys
            self._index = {key: i for i, key in enumerate(keys)}
            self._relayout()

    def _relayout(self) -> None:
        self._strips.clear()
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return 2 * -(-len(self._shown) // self._columns)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()  # a theme change: the colours baked into the strips are stale
        self._tile_segments.clear()

    # -- values --------------------------------------------------------------------------------
    def set_value(self, key: str, value: str, bad: bool = False, note: str = "") -> None:
        """Show ``value`` on tile ``key`` (its row repaints only when the text changes)."""
        state = (value, bad, note)
        if self._keys.get(key) == state:
            return
        self._keys[key] = state
        text = Text(value, style="bold red" if bad else "bold")
        if note:
            text.append(f" {note}", style="dim")
        self._values[key] = text
        self._tile_segments.pop((key, 1), None)
        i = self._index.get(key)
        if i is not None:
            y = 2 * (i // self._columns) + 1
            self._strips.pop(y, None)
            offsets = column_offsets(self.content_width(), self._columns)
            col = i % self._columns
            self.repaint(Region(offsets[col], y, offsets[col + 1] - offsets[col], 1))  # that tile's cells

    # -- what is on screen (for tests and the app) ----------------------------------------------
    def _cell(self, key: str, line: int) -> str:
        if not self.size.width:  # not laid out (its pane is hidden): the text it will paint, uncut
            return self._labels[key] if line == 0 else (self._values[key].plain if key in self._values else "")
        i = self._index[key]
        strip = self._strip(2 * (i // self._columns) + line)
        offsets = column_offsets(self.size.width, self._columns)
        col = i % self._columns
        return strip.crop(offsets[col], offsets[col + 1]).text.strip()

    def value_text(self, key: str) -> str:
        """The value line of tile ``key`` as painted (with its note; "…" where cut)."""
        return self._cell(key, 1)

    def label_text(self, key: str) -> str:
        return self._cell(key, 0)

    def tile_region(self, key: str) -> Region:
        """Where tile ``key`` is on the screen."""
        i = self._index[key]
        offsets = column_offsets(self.size.width, self._columns)
        col = i % self._columns
        x, y = self.content_region.offset
        return Region(x + offsets[col], y + 2 * (i // self._columns), offsets[col + 1] - offsets[col], 2)

    def tile_width(self, key: str) -> int:
        """Cells a tile's label or value can use (its column less the left padding)."""
        return self.tile_region(key).width - 1

    # -- painting ------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        return self._strip(y)

    def _strip(self, y: int) -> Strip:
        width = self.content_width()
        strip = self._strips.get(y)
        if strip is None or strip.cell_length != width:
            strip = self._strips[y] = self._render_row(y, width)
        return strip

    def _render_row(self, y: int, width: int) -> Strip:
        base = self.visual_style
        label_style = self.get_visual_style("tiles--label")
        console = self.app.console
        cols = self._columns
        keys = self._shown[(y // 2) * cols:(y // 2 + 1) * cols]
        offsets = column_offsets(width, cols)
        segments: list[Segment] = []
        cache = self._tile_segments
        for col, key in enumerate(keys):
            cell = offsets[col + 1] - offsets[col]
            got = cache.get((key, y % 2))
            if got is None or got[0] != cell:  # only the tiles whose value changed are made again
                if y % 2:
                    text = self._values.get(key) or Text("")
                    got = (cell, text_strip(text, cell, base, console, lead=1))
                else:
                    got = (cell, text_strip(Text(self._labels[key]), cell, label_style, console, lead=1))
                cache[(key, y % 2)] = got
            segments += got[1]
        if offsets[len(keys)] < width:
            segments.append(Segment(" " * (width - offsets[len(keys)]), Style(bgcolor=base.rich_style.bgcolor)))
        return Strip(segments, width)
