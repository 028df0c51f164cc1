"""Paint a line-API widget's cached lines without Textual's per-line box styling.

This reaches into Textual's screen and widget internals (the screen's dirty widgets, its compositor,
a widget's caches): it does so only where :mod:`..fastpaint` turned ``direct_lines`` on for the app;
otherwise these widgets refresh and paint through Textual's own path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Self

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.geometry import Region, Size
from textual.strip import Strip

from .. import fastpaint  # the package this module is part of: its switches

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.widget import Widget as _WidgetBase
else:
    # Only for the type checker: at run time the mixin stays a plain class. Were it a Widget, Textual would
    # follow it, as a class's first DOM base, for the CSS type names and DEFAULT_CSS of the widgets using it
    # (LineStatic's chain would skip Static: no ``Static`` selector, nor Static's DEFAULT_CSS, would apply).
    _WidgetBase = object


@contextmanager
def one_frame(screen) -> Iterator[None]:
    """Paint what the block marks dirty on ``screen`` when it ends, in this call.

    Textual paints a repaint on its next idle: a prompt to the screen, whose idle handler resumes
    the screen's update timer, whose next fire renders the dirty widgets — two more wake-ups of
    the event loop after a tick, and the tick's code then runs again from cold caches. A tick
    paints its widgets inside this block, and the frame is rendered at its end, as the update
    timer's handler would render it. Anything but a plain repaint of the screen on view (a layout
    or a scroll pending, a dialog on top, a batch update) is left to Textual's path, as is every
    frame where the fast paint's ``direct_lines`` is off."""
    if not fastpaint.enabled(screen.app, fastpaint.DIRECT_LINES):
        yield
        return
    held = getattr(screen, "_frame_held", False)
    screen._frame_held = True
    try:
        yield
    finally:
        screen._frame_held = held
        if not held:
            paint_now(screen)


def paint_now(screen) -> None:
    """Render ``screen``'s dirty widgets now (``Screen._on_timer_update``), or prompt Textual to."""
    app = screen.app
    if (getattr(app, "_batch_count", 1) or app.screen is not screen or screen._layout_required or screen._scroll_required
            or screen._repaint_required or screen._recompose_required):
        if screen._dirty_widgets:
            screen.check_idle()
        return
    if screen._dirty_widgets:
        screen._compositor.update_widgets(screen._dirty_widgets)
        screen._compositor_refresh()


class DirectLines(_WidgetBase):
    """Mixin for a line-API widget whose box is plain: no border, outline, vertical padding, tint,
    hatch, opacity or text opacity (horizontal padding is allowed).

    Textual styles every repainted line of every widget through its styles cache, which
    reads some fifty style rules per line to draw borders, padding and effects this box
    does not have; for the dozen lines the Overview changes each tick that was a large
    part of a frame's CPU. Here a line is what the widget's ``render_line`` returns,
    padded to the content width and with the app's line filters applied — what the
    styles cache paints for such a box (tests/tui/test_direct_lines.py compares the two).
    A row whose ``render_line`` returns the same strip as last frame is reused as painted.
    Any other box is painted by Textual as usual.

    Mixed into Widgets only (before the Widget class among the bases): it is typed as one.
    """

    _direct_rows: dict[int, tuple[Strip, Strip]] | None = None  # y -> (render_line's strip, the strip painted)
    _direct_key: tuple | None = None
    _batched: list[Region] | None = None  # regions to repaint, inside repaint_batch()
    _direct_box: tuple | None = None  # (the styles' keys, what _box read from them)
    _gutter: tuple | None = None  # (the styles' key, their gutter)
    _direct_screen: Screen | None = None  # the screen it was mounted on (see refresh)
    _direct_on: bool | None = None  # whether the fast paint's direct_lines is on for its app (asked once)

    def _direct(self) -> bool:
        on = self._direct_on
        if on is None:
            try:
                app = self.app
            except Exception:  # noqa: BLE001 — no app yet: ask again later
                return False
            on = self._direct_on = fastpaint.enabled(app, fastpaint.DIRECT_LINES)
        return on

    @contextmanager
    def repaint_batch(self) -> Iterator[None]:
        """Repaint what :meth:`repaint` is given inside in one refresh: Textual's cost is per refresh
        (the widget looked up on its screen, a message to it and one to the screen), and a tick
        changes a dozen tiles or a few alert lines."""
        self._batched = []
        try:
            yield
        finally:
            regions, self._batched = self._batched, None
            if regions:
                self.refresh(*regions)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False) -> Self:
        """``Widget.refresh``; a repaint of a mounted widget goes straight to its screen's dirty widgets.

        Textual's repaint takes two message hops: a prompt to the widget, whose idle handler posts an
        Update to the screen, whose handler adds the widget to the screen's dirty widgets. Each hop
        wakes a message pump; a tick repaints a dozen of these widgets (measured: each changing widget
        cost ~1.3 % of the console's CPU at 6 engines). Here the widget is added at once, as the
        Update handler would add it, and the screen is prompted to paint."""
        if (layout or recompose or not repaint or not self._direct() or not self._is_mounted
                or self._closing or self._parent is None):
            return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        screen = self._direct_screen
        if screen is None:
            try:
                screen = self._direct_screen = self.screen  # a widget stays on its screen
            except Exception:  # noqa: BLE001 — NoScreen: not on one (yet)
                return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        self._layout_cache.clear()
        self._set_dirty(*regions)
        self.clear_cached_dimensions()
        self._rich_style_cache.clear()
        if self.display and screen in screen._compositor:  # as Screen._on_update
            screen._dirty_widgets.add(self)
            if not getattr(screen, "_frame_held", False):  # inside one_frame: painted at its end
                screen.check_idle()
        return self

    def repaint(self, region: Region) -> None:
        """Refresh ``region`` now, or with the others at the end of :meth:`repaint_batch`."""
        if self._batched is not None:
            self._batched.append(region)
        else:
            self.refresh(region)

    def layout_content_size(self) -> Size:
        """The content's size from the last layout (``Widget.size`` finds the widget on its screen
        each call: too dear for every line of every frame)."""
        styles = self.styles
        key = fastpaint.styles_key(styles)  # Textual bumps it on every style change
        got = self._gutter
        if key is None or got is None or got[0] != key:
            got = self._gutter = (key, styles.gutter)  # padding and border: summed on each read
        outer, gutter = self.outer_size, got[1]
        return Size(max(0, outer.width - gutter.width), max(0, outer.height - gutter.height))

    def content_width(self) -> int:
        """The content's width from the last layout (see :meth:`layout_content_size`)."""
        return self.layout_content_size().width

    def _box(self) -> tuple[bool, int, int, Color, Color, Style]:
        """(plain box?, left and right padding, base background, background, the padding's style),
        read from the styles of the widget and its ancestors once, then again only when one of those
        styles changes (a theme, a class): each read walks the ancestors, and a frame paints a dozen
        of these widgets."""
        nodes = self.ancestors_with_self
        keys = [fastpaint.styles_key(node.styles) for node in nodes]  # Textual bumps one on every style change
        key = None if None in keys else tuple(keys)  # a Textual without them: read every time
        box = self._direct_box
        if key is not None and box is not None and box[0] == key:
            return box[1]
        styles = self.styles
        pad_top, pad_right, pad_bottom, pad_left = styles.padding
        plain = not (pad_top or pad_bottom or styles.border.spacing != (0, 0, 0, 0)
                     or styles.outline.spacing != (0, 0, 0, 0) or styles.tint.a or styles.text_opacity != 1.0
                     or self.opacity != 1.0
                     or (styles.has_rule("hatch") and styles.hatch != "none"))
        base_background, background = self.background_colors
        inner = Style(bgcolor=(base_background + background).rich_color)  # padding: the background only
        got = (plain, pad_left, pad_right, base_background, background, inner)
        self._direct_box = (key, got) if key is not None else None
        return got

    def render_lines(self, crop: Region) -> list[Strip]:
        if not self._direct():
            return super().render_lines(crop)
        plain, pad_left, pad_right, base_background, background, inner = self._box()
        if not plain:
            self._direct_rows = None
            return super().render_lines(crop)
        width = self.outer_size.width
        filters = self.get_line_filters()
        key = (width, pad_left, pad_right, base_background, background, tuple(filters))
        painted = self._direct_rows
        if painted is None or key != self._direct_key:
            painted = self._direct_rows = {}
            self._direct_key = key
        content_width = width - pad_left - pad_right
        render_line = self.render_line
        strips = []
        for y in crop.line_range:
            line = render_line(y)
            got = painted.get(y)
            if got is not None and got[0] is line:
                strips.append(got[1])
                continue
            strip = line if line.cell_length == content_width else line.adjust_cell_length(content_width, inner)
            if pad_left or pad_right or filters:
                # padded and filtered as segment lists, then one strip (a line the filters leave as
                # it is, without padding, is painted as it is)
                segments = list(strip)
                if pad_left or pad_right:
                    left = [Segment(" " * pad_left, inner)] if pad_left else []
                    right = [Segment(" " * pad_right, inner)] if pad_right else []
                    segments = [*left, *segments, *right]
                out = segments
                for line_filter in filters:
                    out = line_filter.apply(out, background)
                if out is not segments or pad_left or pad_right:
                    strip = Strip(out, width)
            painted[y] = (line, strip)
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

