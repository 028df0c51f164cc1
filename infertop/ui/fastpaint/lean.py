"""Fewer bytes per repaint: merge neighbouring segments that look the same.

Textual emits a full SGR escape for every segment. DataTable makes one
segment per cell (each with click metadata) and Sparkline one per bar, so a
120-column row costs ~3x its text in escape codes. Over a slow SSH link that
is most of the traffic; merged, only real style changes cost escapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.coordinate import Coordinate
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from .. import fastpaint  # the package this module is part of: its switches

if TYPE_CHECKING:
    from textual.cache import LRUCache
    from textual.geometry import Region
    from textual.widget import Widget as _WidgetBase
else:
    # Only for the type checker (as DirectLines): at run time the mixin stays a plain class, so Textual still
    # takes the widget's CSS type names and DEFAULT_CSS from the DataTable after it among the bases.
    _WidgetBase = object

_Key = TypeVar("_Key")
# a one-line cell's styles for one (base style, row, column, component, post): the blank's, the text's by its
# style, and how a text style is combined
_CellStyles = tuple[Style, dict[str | Style, Style], Callable[[Style | None], Style]]


def merge_segments(strip: Strip) -> Strip:
    """Join adjacent segments whose visible style is equal (metadata ignored;
    the first segment's metadata is kept, so a row keeps its click target)."""
    segments = list(strip)
    if len(segments) < 2:
        return strip
    out: list[Segment] = []
    prev_text, prev_style, prev_key = None, None, None
    visible: dict[Style | None, Style | None] = {}
    for text, style, control in segments:
        if control:
            if prev_text is not None:
                out.append(Segment(prev_text, prev_style))
                prev_text = None
            out.append(Segment(text, style, control))
            continue
        key = visible.get(style)
        if key is None and style is not None:
            key = visible[style] = style.clear_meta_and_links()
        if prev_text is not None and key == prev_key:
            prev_text += text
            continue
        if prev_text is not None:
            out.append(Segment(prev_text, prev_style))
        prev_text, prev_style, prev_key = text, style, key
    if prev_text is not None:
        out.append(Segment(prev_text, prev_style))
    return Strip(out, strip.cell_length)


class LeanLines(_WidgetBase):
    """Mixin for widgets (before the Widget class among the bases): every line written to a terminal
    goes through :func:`merge_segments`. Headless runs (tests, SVG screenshots) keep the
    original segments: SVG export positions each run of text as a whole, and
    some renderers drift inside long runs of spaces."""

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        if self.app.is_headless:
            return strip
        return merge_segments(strip)


class LeanTable(LeanLines, DataTable):
    """A DataTable that repaints only the changed span of a row, and re-renders
    only the changed cells.

    ``update_cell`` repaints the whole table, and Textual writes every dirty
    span from the line start, so one span per changed row is the cheapest
    update on a slow SSH link. DataTable keys all its render caches by one
    update counter: bumping it re-renders every cell on view. ``set_cells``
    instead drops the cached renders of the changed cells (and of their rows'
    lines) before the next paint, so a tick re-renders what changed.

    All of that patches DataTable's private caches and row maps: it is done only where
    :mod:`..fastpaint` turned ``lean_table`` on for the app. Otherwise the table is a DataTable
    updated through its public methods (``update_cell``; a rename or reorder rebuilds the rows).
    """

    _lean_on: bool | None = None  # whether the fast paint's lean_table is on for its app (asked once)
    _forget_cells: set | None = None  # (row key, column key) whose cached renders are out of date
    # (base style, row, column, component, post) → the styles of a one-line cell
    _cell_styles: dict[tuple, _CellStyles] | None = None

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> list[list[Segment]]:
        """A one-line cell of plain text goes the short way (:meth:`_one_line_cell`, the same
        segments as Rich's); every other cell the way DataTable renders it."""
        if row_index >= 0 and column_index >= 0 and self._lean():
            row_key = self._row_locations.get_key(row_index)
            column_key = self._column_locations.get_key(column_index)
            if row_key is not None and column_key is not None:  # (a cell of the table: always)
                key = (row_key, column_key, base_style, cursor, hover, self._show_hover_cursor, self._update_count,
                       self._pseudo_class_state)
                cache = self._cell_render_cache
                if key not in cache:
                    lines = self._one_line_cell(row_key, column_key, row_index, column_index, base_style, width,
                                                cursor, hover)
                    if lines is not None:
                        cache[key] = lines
                        return lines
        return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)

    def _one_line_cell(self, row_key: RowKey, column_key: ColumnKey, row_index: int, column_index: int,
                       base_style: Style, width: int, cursor: bool, hover: bool) -> list[list[Segment]] | None:
        """The segments DataTable would render (``Styled(Padding(cell))`` through Rich) for a cell whose
        text is one line that fits, with one style and default justify; None for any other cell.

        Rich builds them through wrap, join, pad and two style passes — most of a table's
        paint when a tick changes a hundred cells."""
        row = self.rows.get(row_key)
        if row is None or row.height != 1:
            return None
        cell = self._data.get(row_key, {}).get(column_key)
        cell_style: str | Style
        if type(cell) is str:
            if "[" in cell:  # markup
                return None
            text, cell_style = cell, ""
        elif type(cell) is Text:
            if cell._spans or cell.justify not in (None, "default") or cell.overflow not in (None, "fold"):
                return None
            text, cell_style = cell.plain, cell.style
        else:
            return None
        pad = self.cell_padding
        inner = width - 2 * pad
        length = cell_len(text)
        if not text or "\n" in text or "\t" in text or "\r" in text or length > inner or inner <= 0:
            return None
        console = self.app.console
        is_fixed = row_index < self.fixed_rows or column_index < self.fixed_columns
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, is_fixed, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
        # the combined styles of a cell (its meta: row and column) are the same every tick
        memo = self._cell_styles
        if memo is None or len(memo) > 4096:
            memo = self._cell_styles = {}
        skey = (base_style, row_index, column_index, component_style, post_style)
        styles: _CellStyles | None = memo.get(skey)
        if styles is None:
            pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
            post = console.get_style(post_style)

            def styled(style: Style | None) -> Style:  # Segment.apply_style(pre, post), as Styled does
                out = pre + style
                return out + post if post else out

            styles = memo[skey] = (styled(None), {}, styled)
        blank, by_style, style_text = styles
        if cell_style:
            text_style = by_style.get(cell_style)
            if text_style is None:
                text_style = by_style[cell_style] = style_text(console.get_style(cell_style))
        else:
            text_style = blank
        out = [Segment(" " * pad, blank)] if pad else []
        out.append(Segment(text, text_style))
        if length < inner:
            out.append(Segment(" " * (inner - length), blank))
        if pad:
            out.append(Segment(" " * pad, blank))
        return [out]

    def _lean(self) -> bool:
        on = self._lean_on
        if on is None:
            try:
                app = self.app
            except Exception:  # noqa: BLE001 — no app yet: the public path, ask again later
                return False
            on = self._lean_on = fastpaint.enabled(app, fastpaint.LEAN_TABLE)
        return on

    def _rebuild(self, order: list[str], renamed: dict[str, str]) -> None:
        """The rows again in ``order`` (keys after ``renamed``), through DataTable's public methods: the
        fallback of :meth:`rename_row` and :meth:`reorder_rows`."""
        rows = {}
        for row in self.ordered_rows:
            key = str(row.key.value)
            rows[renamed.get(key, key)] = (self.get_row(row.key), row.height, row.label)
        scroll = (self.scroll_x, self.scroll_y)
        self.clear()
        for key in order:
            cells, height, label = rows.pop(key)
            self.add_row(*cells, key=key, height=height, label=label)
        for key, (cells, height, label) in rows.items():  # rows ``order`` did not name keep their place after
            self.add_row(*cells, key=key, height=height, label=label)
        self.call_after_refresh(self.scroll_to, *scroll, animate=False)

    def _forget(self) -> None:
        """Drop the cached renders of the cells set since the last paint: one pass per cache."""
        cells = self._forget_cells
        if not cells:
            return
        self._forget_cells = set()
        rows = {row for row, _ in cells}
        indices = {self._row_locations.get(row) for row in rows}
        _discard(self._cell_render_cache, lambda k: (k[0], k[1]) in cells)
        _discard(self._row_render_cache, lambda k: k[0] in rows)
        _discard(self._row_renderable_cache, lambda k: k[1] in indices)
        _discard(self._line_cache, self._line_of(rows))

    def _line_of(self, rows: set) -> Callable[[tuple], bool]:
        def stale(key: tuple) -> bool:
            try:
                return self._get_offsets(key[0])[0] in rows
            except LookupError:
                return True
        return stale

    def render_lines(self, crop: Region) -> list[Strip]:
        self._forget()
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        self._forget()
        return super().render_line(y)

    def rename_row(self, old: str, new: str) -> None:
        """Give row ``old`` (its place and cells) the key ``new``: a row handed from an
        engine that left to one that arrived, without the relayout of a remove and an add."""
        if not self._lean():
            order = [str(row.key.value) for row in self.ordered_rows]
            self._rebuild([new if key == old else key for key in order], {old: new})
            return
        old_key, new_key = RowKey(old), RowKey(new)
        self._data[new_key] = self._data.pop(old_key)
        row = self.rows.pop(old_key)
        row.key = new_key
        self.rows[new_key] = row
        locations = {key: index for key in self._row_locations
                     if (index := self._row_locations.get(key)) is not None}  # (each key's: never None)
        locations[new_key] = locations.pop(old_key)
        self._row_locations = type(self._row_locations)(locations)
        if old_key in self._new_rows:
            self._new_rows.discard(old_key)
            self._new_rows.add(new_key)
        self._updated_cells = {c for c in self._updated_cells if c.row_key != old_key}
        self._update_count += 1
        self.refresh()

    def reorder_rows(self, order: list[str]) -> None:
        """Move the rows into ``order`` (their keys) in place: no rebuild, so the horizontal scroll stays."""
        if not self._lean():
            self._rebuild(order, {})
            return
        self._row_locations = type(self._row_locations)({RowKey(name): i for i, name in enumerate(order)})
        self._update_count += 1  # as DataTable.sort: invalidates the cached row order and renders
        self.refresh()

    def set_cells(self, row: str, values: dict) -> None:
        """Update cells of one row; a value wider than its column relayouts."""
        if not self._lean():
            for column, value in values.items():
                self.update_cell(row, column, value, update_width=True)
            return
        row_key = RowKey(row)
        data = self._data[row_key]
        cols = []
        wider = {}
        for column, value in values.items():
            col_key = ColumnKey(column)
            width = self.columns[col_key].content_width
            if len(str(getattr(value, "plain", value))) > width:
                wider[column] = value  # only a cell that widens its column needs measuring
                continue
            data[col_key] = value
            index = self._column_locations.get(col_key)
            assert index is not None  # a column of the table (self.columns has it)
            cols.append(index)
        if wider:
            for column, value in wider.items():
                self.update_cell(row, column, value, update_width=True)
            return  # update_cell repaints the whole table (the other cells were set above)
        if self._forget_cells is None:
            self._forget_cells = set()
        self._forget_cells.update((row_key, ColumnKey(c)) for c in values)
        y = self._row_locations.get(row_key)
        assert y is not None  # a row of the table (self._data has it)
        first = self._get_cell_region(Coordinate(y, min(cols)))
        last = self._get_cell_region(Coordinate(y, max(cols)))
        self._refresh_region(first.union(last))


def _discard(cache: LRUCache[_Key, Any], stale: Callable[[_Key], bool]) -> None:
    """Drop the entries of ``cache`` whose key is ``stale``."""
    for key in [k for k in cache.keys() if stale(k)]:
        cache.discard(key)
