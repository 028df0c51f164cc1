"""The Overview's "Under most pressure" table as one line-API widget.

The same cells as the Engines table (:func:`engine_cell`), the same order
(:func:`kept_or_sorted`), but painted as one Strip per row, rebuilt only
when that row's text or styles change. A DataTable re-renders each row
whose cells changed through its per-row machinery (cache keys, component
styles, cursor and hover checks per cell, joins and crops): in a 6-engine
fleet, where every row changes each second, that was the largest single
cost of a tick. This table has no cursor and no scrolling: a click on a row
opens that engine's detail; columns that do not fit whole are left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from ...domain.engine import EngineStats
from ...state.fleet_types import FleetState, Freshness
from ..fastpaint.direct_lines import DirectLines
from .engines_table import COLUMNS, HEADERS, PRESSURE, Cells, engine_cell, kept_or_sorted

PAD = 1  # cells either side of a column's text, as DataTable's cell padding


class HotTable(DirectLines, Widget):
    """The ``limit`` engines under most pressure, one row each under a header row."""

    DEFAULT_CSS = """
    HotTable { height: auto; background: $surface; color: $foreground; }
    HotTable > .hot--header { text-style: bold; background: $panel; color: $foreground; }
    HotTable > .hot--name { background: $secondary-muted; color: $foreground; }
    """
    COMPONENT_CLASSES = {"hot--header", "hot--name"}

    class EngineClicked(Message):
        """A row was clicked: open this engine's detail."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, slo=None, columns: tuple[str, ...] | None = None, limit: int = 5,
                 sort_key: str = PRESSURE, resort_every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        super().__init__(**kwargs)
        self.slo = slo
        self.cols = [c for c in COLUMNS if columns is None or c[0] in columns]
        self.limit = limit
        self.sort_key = sort_key
        self.resort_every_s = resort_every_s
        self.clock = clock
        self._sorted_at = -1e9
        self._order: list[str] = []  # engine names, top row first
        self._cells: list[Cells] = []  # what each row shows
        self._sources: list[tuple] = []  # (stats object, freshness) each row was drawn from
        self._widths = {key: len(HEADERS[key]) for key, _, _, _ in self.cols}  # only ever grow, as DataTable's
        self._strips: dict[int, Strip] = {}  # by line (0 = header), for the width they were made for
        self._styles: dict[tuple, Style] = {}

    # -- rows --------------------------------------------------------------------------------
    def set_limit(self, limit: int) -> None:
        """Show at most ``limit`` rows; the next update re-sorts when it changed."""
        if limit != self.limit:
            self.limit = limit
            self._sorted_at = -1e9

    def update_state(self, state: FleetState) -> None:
        """The rows of this tick: only the lines whose text changed are repainted."""
        fresh = {e.name: e.freshness for e in state.engines}
        now = self.clock()
        rows, resorted = kept_or_sorted(list(state.engine_stats), self._order, now - self._sorted_at,
                                        self.resort_every_s, self.sort_key, True, self.limit, self.slo)
        if resorted:
            self._sorted_at = now
        self._show(rows, fresh)

    def _show(self, rows: list[EngineStats], fresh: dict[str, Freshness]) -> None:
        resized = len(rows) != len(self._order)
        order = [s.name for s in rows]
        cells, sources, changed = [], [], []
        for y, s in enumerate(rows):
            src = (s, fresh.get(s.name))
            old = y < len(self._order) and self._order[y] == s.name and self._sources[y]
            if old and old[0] is s and old[1] == src[1]:
                cells.append(self._cells[y])  # the very same values as drawn: nothing to compare
            else:
                cells.append({key: engine_cell(key, fmt, s, src[1], self.slo) for key, _, fmt, _ in self.cols})
            sources.append(src)
            if y >= len(self._cells) or cells[y] != self._cells[y]:
                changed.append(y)
        widened = False
        for row in (cells[y] for y in changed):
            for key, (text, _) in row.items():
                if cell_len(text) > self._widths[key]:
                    self._widths[key] = cell_len(text)
                    widened = True
        old_rows = list(zip(self._order, self._cells))
        self._order, self._cells, self._sources = order, cells, sources
        if resized:
            self._strips.clear()
            self.refresh(layout=True)
        elif widened:
            self._strips.clear()
            self.refresh()
        else:
            layout = self._layout(self.content_width())
            spans = []
            for y in changed:
                self._strips.pop(y + 1, None)
                span = self._changed_span(y, layout, old_rows)
                if span is not None:
                    spans.append(span)
            if spans:
                self.refresh(*spans)  # one refresh: Textual's cost is per call

    def _changed_span(self, y: int, layout: list[tuple[str, int]],
                      old_rows: list[tuple[str, Cells]]) -> Region | None:
        """Line ``y + 1`` from its first changed column to its last: Textual writes each dirty span
        from its start, so a row whose Run and Wait changed costs those columns, not the line."""
        if y >= len(old_rows) or old_rows[y][0] != self._order[y]:
            return Region(0, y + 1, self.content_width(), 1)  # another engine on this line
        old, new = old_rows[y][1], self._cells[y]
        x, first, last = 0, None, None
        for key, w in layout:
            if old.get(key) != new[key]:
                first = x if first is None else first
                last = x + w
            x += w
        if first is None or last is None:
            return None  # only columns cut at this width changed
        return Region(first, y + 1, last - first, 1)

    def get_content_height(self, container, viewport, width: int) -> int:
        return 1 + len(self._order)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()  # a theme change: the colours baked into the strips are stale
        self._styles.clear()

    # -- what is on screen (for tests and the app) ----------------------------------------------
    @property
    def engine_names(self) -> list[str]:
        """The engines shown, top row first."""
        return list(self._order)

    def rows_text(self) -> dict[str, dict[str, str]]:
        """engine → column → the text shown (every column, also those cut at this width)."""
        return {name: {key: cell[0] for key, cell in row.items()} for name, row in zip(self._order, self._cells)}

    def columns_shown(self) -> list[str]:
        """The columns that fit the width, left to right."""
        return [key for key, _ in self._layout(self.size.width)]

    # -- painting ------------------------------------------------------------------------------
    def _layout(self, width: int) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        used = 0
        for key, _, _, _ in self.cols:
            w = self._widths[key] + 2 * PAD
            if used + w > width and out:
                break
            out.append((key, w))
            used += w
        return out

    def render_line(self, y: int) -> Strip:
        width = self.content_width()
        strip = self._strips.get(y)
        if strip is None or strip.cell_length != width:
            strip = self._strips[y] = self._render_row(y, width)
        return strip

    def _style(self, part: str, cell_style: str) -> Style:
        key = (part, cell_style)
        style = self._styles.get(key)
        if style is None:
            base = self.rich_style if part == "" else self.get_component_rich_style(part)
            style = self._styles[key] = base + self.app.console.get_style(cell_style) if cell_style else base
        return style

    def _render_row(self, y: int, width: int) -> Strip:
        if y > len(self._cells):
            return Strip.blank(width, self.rich_style)
        segments: list[Segment] = []
        prev_style, prev_text = None, ""
        merge = not self.app.is_headless  # SVG export drifts inside long runs of text (see lean.py)
        used = 0
        for i, (key, w) in enumerate(self._layout(width)):
            if y == 0:
                text, part, cell_style = HEADERS[key], "hot--header", ""
            else:
                text, cell_style = self._cells[y - 1][key]
                part = "hot--name" if i == 0 else ""
            cell = " " * PAD + set_cell_size(text, w - 2 * PAD) + " " * PAD
            style = self._style(part, cell_style)
            if style == prev_style and merge:  # one segment per run of one style: fewer escape codes
                prev_text += cell
            else:
                if prev_style is not None:
                    segments.append(Segment(prev_text, prev_style))
                prev_style, prev_text = style, cell
            used += w
        if prev_style is not None:
            segments.append(Segment(prev_text, prev_style))
        if used < width:
            segments.append(Segment(" " * (width - used), self._style("hot--header" if y == 0 else "", "")))
        return Strip(segments, used + max(0, width - used)).crop(0, width)

    # -- input ---------------------------------------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        y = event.y - 1  # the header is line 0
        if 0 <= y < len(self._order):
            event.stop()
            self.post_message(self.EngineClicked(self._order[y]))
