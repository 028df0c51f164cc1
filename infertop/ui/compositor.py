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
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip


class SpanUpdate(ChopsUpdate):
    """Textual's partial update, writing only the cells of each changed span."""

    def render_segments(self, console: Console) -> str:
        sequences: list[str] = []
        append = sequences.append
        chops, chop_ends = self.chops, self.chop_ends
        last_y = self.spans[-1][0]
        for y, x1, x2 in self.spans:
            for end, (x, strip) in zip(chop_ends[y], chops[y].items()):
                if strip is None or x > x2 or end <= x1:
                    continue
                if not (x2 > x >= x1 and end <= x2):  # the chop reaches past the span
                    left = x1 if x < x1 and len(strip.text) == strip.cell_length else x  # narrow cells only
                    strip = strip.crop(left - x, min(end, x2) - x)
                    x = left
                append(f"\x1b[{y + 1};{x + 1}H")  # Control.move_to's text, without a Control per chop
                append(strip.render(console))
            if y != last_y:
                append("\n")
        return "".join(sequences)


class ChangedOnlyCompositor(Compositor):
    """A :class:`textual._compositor.Compositor` whose partial updates render only the widgets
    that overlap a changed region no widget in front of them contains."""

    _changed: list[Region] | None = None  # the changed regions of the partial update being rendered

    def render_partial_update(self) -> ChopsUpdate | None:
        self._changed = list(self._dirty_regions)
        try:
            update = super().render_partial_update()
        finally:
            self._changed = None
        return None if update is None else SpanUpdate(update.chops, update.spans, update.chop_ends)

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        changed = self._changed
        if not changed or crop is None:
            yield from super()._get_renders(crop)
            return
        open_regions = list(changed)  # changed regions no widget in front has covered yet
        for widget, (region, clip) in self.visible_widgets.items():  # front to back
            shown = region.intersection(clip)
            x, y, width, height = shown
            if not (width and height and any(map(shown.overlaps, open_regions))):
                continue
            yield region, clip, widget.render_lines(Region(x - region.x, y - region.y, width, height))
            # a widget paints every cell of its visible region: what it contains, no widget behind it shows
            open_regions = [r for r in open_regions if not shown.contains_region(r)]
            if not open_regions:
                return
