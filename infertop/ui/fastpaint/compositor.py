"""Textual's compositor, rendering a partial update from the widgets that changed only.

Textual renders a partial update from every widget inside the box around all
changed regions. infertop changes a few cells a tick from the header's clock
(row 0) to the alert lines at the bottom, so that box is nearly the screen:
about 40 widgets (the tab bar, the footer, containers, unchanged trends) were
rendered each second to paint a dozen changed ones. Each cell sent lies in a
changed region and is taken from the front-most widget covering it, and every
widget paints each cell of its visible region; so :class:`ChangedOnlyCompositor`
renders, front to back, only the widgets that overlap a changed region no widget
in front of them contains — the changed widgets, not their containers. A full
update (resize, another screen) renders everything, as Textual does.

Textual also writes each changed span from the left edge of the widget line it
lies in (a cut it marks "TODO: crop to x extents"): a tile's value changing at
column 100 of a one-widget row of tiles rewrote columns 0-100, for the
terminal driver to parse and diff again. :class:`SpanUpdate` writes the span's
own cells, except on a line with a wide character, which it writes as Textual
does (a cut through one would split it).

A line that lies in one chop is used as it is rather than through ``Strip.divide``, which caches such a
line as a list holding the line itself: a reference cycle, so each line painted (~30 a second at 6
engines, each with seven caches) stayed for the cyclic collector instead of being freed when replaced.

Textual's Compositor is private (``textual._compositor``): :func:`.fastpaint.fit_screen` gives a screen
this one only when :mod:`.fastpaint` has checked the methods it overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast

from rich.color import ColorSystem
from rich.console import COLOR_SYSTEMS, Console
from rich.style import Style
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from .driver import cell_model, one_cell_each


class SpanUpdate(ChopsUpdate):
    """Textual's partial update, writing only the cells of each changed span.

    Under the cell-diffing driver (:mod:`.driver`) the spans' cells go straight into its model of the
    terminal, which sends those that changed: rendering them to escape sequences for the driver to
    parse back into cells cost more than anything else in a frame."""

    def render_segments(self, console: Console) -> str:
        model = cell_model(console)
        pieces = self._pieces() if model is not None else None
        if pieces is None or model is None:  # no such driver, or a link or control code to write: as text
            return self._render_text(console)
        if model.shadow is not None:
            model.shadow.append(self._render_text(console))
        color_system = _color_system(console)
        last_y = self.spans[-1][0]
        for y, x, segments in pieces:
            model.write_segments(y, x, segments, color_system)
        for span_y, _, _ in self.spans:  # the newline after each span line but the last, as written
            if span_y != last_y:
                model.line_feed()
        return ""

    def _pieces(self) -> list[tuple[int, int, Iterable]] | None:
        """(row, column, segments) of what :meth:`_render_text` writes, in its order; None where a
        segment has a link or a control code (those are written as text)."""
        pieces: list[tuple[int, int, Iterable]] = []
        chops, chop_ends = self.chops, self.chop_ends
        for y, x1, x2 in self.spans:
            for end, (x, strip) in zip(chop_ends[y], chops[y].items()):
                if strip is None or x > x2 or end <= x1:
                    continue
                if x2 > x >= x1 and end <= x2:
                    pieces.append((y, x, strip))  # a Strip iterates its segments
                    continue
                right = min(end, x2)
                narrow = _narrow(strip)
                left = x1 if x < x1 and narrow else x
                if narrow:
                    pieces.append((y, left, _cells_of(strip, left - x, right - x)))
                else:
                    pieces.append((y, left, strip.crop(left - x, right - x)))
        for _, _, segments in pieces:
            for _, style, control in segments:
                if control or (style is not None and style.link):
                    return None
        return pieces

    def _render_text(self, console: Console) -> str:
        sequences: list[str] = []
        append = sequences.append
        chops, chop_ends = self.chops, self.chop_ends
        last_y = self.spans[-1][0]
        color_system = _color_system(console)
        for y, x1, x2 in self.spans:
            for end, (x, strip) in zip(chop_ends[y], chops[y].items()):
                if strip is None or x > x2 or end <= x1:
                    continue
                if x2 > x >= x1 and end <= x2:  # the whole chop lies in the span
                    append(f"\x1b[{y + 1};{x + 1}H")  # Control.move_to's text, without a Control per chop
                    append(strip.render(console))
                    continue
                right = min(end, x2)
                narrow = _narrow(strip)
                left = x1 if x < x1 and narrow else x  # a cut through a wide character would split it
                append(f"\x1b[{y + 1};{left + 1}H")
                if narrow:  # cells are characters: the span's text sliced from the segments, no cropped Strip
                    append(_render_cells(strip, left - x, right - x, color_system))
                else:
                    append(strip.crop(left - x, right - x).render(console))
            if y != last_y:
                append("\n")
        return "".join(sequences)


def _color_system(console: Console) -> ColorSystem:
    """The console's colour system as Strip.render reads it (truecolor where it has none)."""
    return COLOR_SYSTEMS.get(console.color_system or "truecolor", ColorSystem.TRUECOLOR)


def _narrow(strip: Strip) -> bool:
    """Whether each character of ``strip`` is one cell (no wide, zero-width or control ones: a wide
    one and a combining mark would also make its lengths agree)."""
    return all(one_cell_each(text) for text, _, _ in strip)


def _cells_of(strip: Strip, start: int, end: int) -> list[tuple[str, Style | None, None]]:
    """The segments of ``strip.crop(start, end)`` for a strip of one-cell characters, sliced from its own."""
    out: list[tuple[str, Style | None, None]] = []
    pos = 0
    for text, style, _ in strip:
        stop = pos + len(text)
        if stop > start:
            piece = text[max(0, start - pos):end - pos]
            if piece:
                out.append((piece, style, None))
            if stop >= end:
                break
        pos = stop
    return out


def _render_cells(strip: Strip, start: int, end: int, color_system: ColorSystem) -> str:
    """``strip.crop(start, end).render()`` for a strip of one-cell characters: each segment's part in
    [start, end), rendered as Strip.render renders a segment."""
    render = Strip.render_style
    return "".join(piece if style is None else render(style, piece, color_system)
                   for piece, style, _ in _cells_of(strip, start, end))


class ChangedOnlyCompositor(Compositor):
    """A :class:`textual._compositor.Compositor` whose partial updates render only the widgets
    that overlap a changed region no widget in front of them contains."""

    _changed: list[Region] | None = None  # the changed regions of the partial update being rendered
    _shown: tuple[dict, list] | None = None  # (Textual's visible_widgets map, what _shown_widgets made of it)

    def render_partial_update(self) -> ChopsUpdate | None:
        self._changed = list(self._dirty_regions)
        try:
            update = super().render_partial_update()
        finally:
            self._changed = None
        return None if update is None else SpanUpdate(update.chops, update.spans, update.chop_ends)

    def _shown_widgets(self) -> list[tuple[Widget, Region, Region, Region]]:
        """(widget, region, clip, the part of it shown) of each visible widget with a part shown, front to
        back: worked out once per layout (Textual makes a new ``visible_widgets`` map for each)."""
        visible = self.visible_widgets
        got = self._shown
        if got is None or got[0] is not visible:
            shown = [(widget, region, clip, region.intersection(clip)) for widget, (region, clip) in visible.items()]
            got = self._shown = (visible, [entry for entry in shown if entry[3].area])
        return got[1]

    def _render_chops(self, crop: Region, is_rendered_line: Callable[[int], bool]) -> Sequence[Mapping[int, Strip]]:
        """Textual's ``Compositor._render_chops`` (8.2), except that a line within one chop is not divided."""
        cuts = self.cuts
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        intersection = Region.intersection
        for region, clip, strips in self._get_renders(crop):
            render_region = intersection(region, clip)
            render_x = render_region.x
            first_cut, last_cut = render_region.column_span
            for y, strip in zip(render_region.line_range, strips):
                if not is_rendered_line(y):
                    continue
                chops_line = chops[y]
                final_cuts = [cut for cut in cuts[y] if (last_cut >= cut >= first_cut)]
                ends = [cut - render_x for cut in final_cuts[1:]]
                if len(ends) == 1 and ends[0] == strip.cell_length:
                    cut_strips: Sequence[Strip] = (strip,)  # what divide returns here, without its cycle
                else:
                    cut_strips = strip.divide(ends)
                # front to back: the first strip for a cut wins
                get_chops_line = chops_line.get
                for cut, piece in zip(final_cuts, cut_strips):
                    if get_chops_line(cut) is None:
                        chops_line[cut] = piece
        return cast("Sequence[Mapping[int, Strip]]", chops)  # as Textual's own: a cut nothing painted holds None

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        changed = self._changed
        if not changed or crop is None:
            yield from super()._get_renders(crop)
            return
        open_regions = list(changed)  # changed regions no widget in front has covered yet
        for widget, region, clip, shown in self._shown_widgets():  # front to back
            if not any(map(shown.overlaps, open_regions)):
                continue
            x, y, width, height = shown
            yield region, clip, widget.render_lines(Region(x - region.x, y - region.y, width, height))
            # a widget paints every cell of its visible region: what it contains, no widget behind it shows
            open_regions = [r for r in open_regions if not shown.contains_region(r)]
            if not open_regions:
                return
