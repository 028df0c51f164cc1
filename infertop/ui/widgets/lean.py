"""Fewer bytes per repaint: merge neighbouring segments that look the same.

Textual emits a full SGR escape for every segment. DataTable makes one
segment per cell (each with click metadata) and Sparkline one per bar, so a
120-column row costs ~3x its text in escape codes. Over a slow SSH link that
is most of the traffic; merged, only real style changes cost escapes.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.coordinate import Coordinate
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey


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


class LeanLines:
    """Mixin for widgets: every line written to a terminal goes through
    :func:`merge_segments`. Headless runs (tests, SVG screenshots) keep the
    original segments: SVG export positions each run of text as a whole, and
    some renderers drift inside long runs of spaces."""

    def render_line(self, y: int) -> Strip:  # type: ignore[override]
        strip = super().render_line(y)  # type: ignore[misc]
        if self.app.is_headless:  # type: ignore[attr-defined]
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
    """

    _forget_cells: set | None = None  # (row key, column key) whose cached renders are out of date

    def _forget(self) -> None:
        """Drop the cached renders of the cells set since the last paint: one pass per cache."""
        cells = self._forget_cells
        if not cells:
            return
        self._forget_cells = set()
        rows = {row for row, _ in cells}
        indices = {self._row_locations.get(row) for row in rows}
        for cache, stale in (
            (self._cell_render_cache, lambda k: (k[0], k[1]) in cells),
            (self._row_render_cache, lambda k: k[0] in rows),
            (self._row_renderable_cache, lambda k: k[1] in indices),
            (self._line_cache, self._line_of(rows)),
        ):
            for key in [k for k in cache.keys() if stale(k)]:
                cache.discard(key)

    def _line_of(self, rows: set):
        def stale(key) -> bool:
            try:
                return self._get_offsets(key[0])[0] in rows
            except LookupError:
                return True
        return stale

    def render_lines(self, crop):  # type: ignore[override]
        self._forget()
        return super().render_lines(crop)

    def render_line(self, y: int):  # type: ignore[override]
        self._forget()
        return super().render_line(y)

    def rename_row(self, old: str, new: str) -> None:
        """Give row ``old`` (its place and cells) the key ``new``: a row handed from an
        engine that left to one that arrived, without the relayout of a remove and an add."""
        old_key, new_key = RowKey(old), RowKey(new)
        self._data[new_key] = self._data.pop(old_key)
        row = self.rows.pop(old_key)
        row.key = new_key
        self.rows[new_key] = row
        locations = {key: self._row_locations.get(key) for key in self._row_locations}
        locations[new_key] = locations.pop(old_key)
        self._row_locations = type(self._row_locations)(locations)
        if old_key in self._new_rows:
            self._new_rows.discard(old_key)
            self._new_rows.add(new_key)
        self._updated_cells = {c for c in self._updated_cells if c.row_key != old_key}
        self._update_count += 1
        self.refresh()

    def set_cells(self, row: str, values: dict) -> None:
        """Update cells of one row; a value wider than its column relayouts."""
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
            cols.append(self._column_locations.get(col_key))
        if wider:
            for column, value in wider.items():
                self.update_cell(row, column, value, update_width=True)
            return  # update_cell repaints the whole table (the other cells were set above)
        if self._forget_cells is None:
            self._forget_cells = set()
        self._forget_cells.update((row_key, ColumnKey(c)) for c in values)
        y = self._row_locations.get(row_key)
        first = self._get_cell_region(Coordinate(y, min(cols)))
        last = self._get_cell_region(Coordinate(y, max(cols)))
        self._refresh_region(first.union(last))
