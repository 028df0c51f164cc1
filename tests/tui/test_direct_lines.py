"""The line-API widgets paint through ``DirectLines`` exactly the cells and styles Textual's own
per-line styling paints for them (both themes, any crop), reuse a row that did not change, and
leave a box they cannot paint (a border, vertical padding) to Textual. The compositor that
renders only the widgets a frame changed sends the same update as Textual's."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.control import Control
from rich.text import Text
from textual._compositor import Compositor
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer, Label

from infertop.config import Config
from infertop.sim import SimCluster
from infertop.sources.vllm import EngineEndpoint
from infertop.ui import fastpaint
from infertop.ui.app import InfertopApp, PaneScreen, Settings
from infertop.ui.fastpaint.compositor import ChangedOnlyCompositor
from infertop.ui.fastpaint.driver import CellDiff
from infertop.ui.themes import load_themes
from infertop.ui.widgets.alert_lines import AlertLines
from infertop.ui.fastpaint.direct_lines import DirectLines
from infertop.ui.widgets.panels import LineStatic
from infertop.ui.widgets.tiles import TileGrid
from pilot_wait import until

TILES = tuple((f"k{i}", f"Label {i}") for i in range(6))


class Boxed(LineStatic):
    DEFAULT_CSS = "Boxed { border: round $primary; padding: 1 2; height: 5; }"


class Counting:
    """Counts the frames that render it."""

    renders = 0

    def render_lines(self, crop):
        self.renders += 1
        return super().render_lines(crop)


class CountingLabel(Counting, Label):
    pass


class CountingBox(Counting, Vertical):
    DEFAULT_CSS = "CountingBox { height: auto; }"


class Host(Screen):
    CSS = "#clock { padding: 0 1; text-style: bold; height: 1; }"

    def __init__(self) -> None:
        super().__init__()
        self._compositor = ChangedOnlyCompositor()
        self.grid = TileGrid(TILES, id="tiles")
        self.grid.set_columns(3)
        self.alerts = AlertLines(4, rows=3, id="alerts")
        self.clock = LineStatic(id="clock")
        self.boxed = Boxed(id="boxed")

    def compose(self) -> ComposeResult:
        yield self.clock
        yield CountingLabel("a label between them", id="between")
        yield self.grid
        with CountingBox(id="box"):
            yield self.alerts
        yield self.boxed
        yield Footer()


class HostApp(App):
    def on_mount(self) -> None:
        for theme in load_themes()[0]:
            self.register_theme(theme)
        self.theme = "infertop-dark"
        self.push_screen(Host())


def settled(screen: Screen) -> bool:
    """The frame is over: no restyle (a theme's refresh_css) pending, nothing left to lay out or paint,
    no Update on its way."""
    app = screen.app
    return (not app._next_callbacks and not app._batch_count
            and not (screen._dirty_widgets or screen._layout_required or screen._repaint_required
                     or screen._scroll_required or screen._recompose_required)
            and screen._message_queue.empty()
            and not any(w._repaint_required or w._layout_required or not w._message_queue.empty()
                        for w in screen.walk_children(Widget)))


def fill(screen: Host, n: int) -> None:
    for i, _ in TILES:
        screen.grid.set_value(i, f"{n * 7 + len(i)}ms", bad=i == "k4" and n % 2 == 0, note="▲" if n % 3 else "")
    screen.alerts.show_title(Text(f"Alerts ({n})", style="bold"))
    screen.alerts.show_line(0, Text(f"● vllm-{n} — ITL p95 {n * 3}ms > 40ms", style="red"))
    screen.alerts.show_line(1, "● " + "long line " * 12)
    screen.clock.show(Text(f"12:00:{n:02d}"))
    screen.boxed.show(f"boxed {n}")


def crops(widget: Widget) -> list[Region]:
    w, h = widget.outer_size
    return [Region(0, 0, w, h), Region(1, 0, max(1, w - 3), h), Region(0, h - 1, w, 1), Region(2, min(1, h - 1), 4, h - min(1, h - 1))]


def compare_with_textual(screen: Host) -> int:
    compared = 0
    for widget in screen.walk_children(Widget):
        if not isinstance(widget, DirectLines) or not widget.outer_size.area:
            continue
        for crop in crops(widget):
            direct = widget.render_lines(crop)
            widget._styles_cache.clear()
            textual = Widget.render_lines(widget, crop)
            assert [list(s) for s in direct] == [list(s) for s in textual], (widget.id, crop)
            compared += 1
    return compared


async def test_direct_lines_paint_what_textual_paints_in_both_themes():
    app = HostApp()
    async with app.run_test(size=(60, 20)) as pilot:
        screen = app.screen
        assert isinstance(screen, Host)
        for n, theme in ((1, "infertop-dark"), (2, "infertop-light"), (3, "infertop-dark")):
            app.theme = theme
            fill(screen, n)
            await until(pilot, lambda: screen.clock._line.plain.endswith(f"{n:02d}"), "the tick shown")
            await until(pilot, lambda: settled(screen), "the frame over")
            assert compare_with_textual(screen) == 4 * 4  # clock, tiles, alerts, the bordered one


async def test_an_unchanged_row_is_reused_and_a_changed_one_painted_again():
    app = HostApp()
    async with app.run_test(size=(60, 20)) as pilot:
        screen = app.screen
        fill(screen, 1)
        await until(pilot, lambda: settled(screen), "the frame over")
        grid = screen.grid
        full = Region(0, 0, *grid.outer_size)
        before = grid.render_lines(full)
        assert grid.render_lines(full) == before and all(a is b for a, b in zip(grid.render_lines(full), before))
        grid.set_value("k4", "999ms")  # second row of tiles: value line 3
        after = grid.render_lines(full)
        assert [a is b for a, b in zip(after, before)] == [True, True, True, False]
        assert "999ms" in after[3].text and "999ms" not in before[3].text


async def test_a_bordered_or_vertically_padded_box_is_painted_by_textual():
    app = HostApp()
    async with app.run_test(size=(60, 20)) as pilot:
        screen = app.screen
        fill(screen, 4)
        await until(pilot, lambda: settled(screen), "the frame over")
        boxed = screen.boxed
        lines = [strip.text for strip in boxed.render_lines(Region(0, 0, *boxed.outer_size))]
        assert lines[0].startswith("╭") and lines[2].strip("│ ").startswith("boxed 4")
        assert boxed._direct_rows is None  # Textual's own path


async def test_a_direct_lines_widget_recomposes_and_batches_its_repaints():
    """Textual's ``Widget.recompose`` enters ``async with self.batch()``: a DirectLines widget must not
    shadow it (its own batching of repaints is ``repaint_batch``, a plain context manager)."""
    app = HostApp()
    async with app.run_test(size=(60, 20)) as pilot:
        screen = app.screen
        assert isinstance(screen, Host)
        fill(screen, 5)
        await until(pilot, lambda: settled(screen), "the frame over")
        for widget in (screen.grid, screen.alerts, screen.clock):
            await widget.recompose()  # raised TypeError (no __aenter__) while DirectLines defined batch()
        with screen.grid.repaint_batch():
            screen.grid.set_value("k1", "123ms")
            screen.grid.set_value("k2", "456ms")
        await until(pilot, lambda: "123ms" in "".join(s.text for s in screen.grid.render_lines(
            Region(0, 0, *screen.grid.outer_size))), "the batched values painted")
        assert compare_with_textual(screen) == 4 * 4


def update_text(compositor: Compositor, console: Console) -> str:
    update = compositor.render_partial_update()
    return "" if update is None else update.render_segments(console)


async def test_the_changed_only_compositor_shows_what_textual_shows_in_fewer_cells():
    app = HostApp()
    async with app.run_test(size=(60, 20)) as pilot:
        screen = app.screen
        fill(screen, 1)
        await until(pilot, lambda: settled(screen), "the frame over")
        textual = Compositor()
        textual.reflow(screen, screen.outer_size)
        ours = screen._compositor
        assert isinstance(ours, ChangedOnlyCompositor)
        # what a tick changes: the clock, one tile, one alert line — from the top row to near the bottom
        changed = [screen.clock.region, screen.grid.tile_region("k4"), screen.alerts.region.crop_size((60, 2))]
        for comp in (textual, ours):
            comp._dirty_regions.clear()
            comp._dirty_regions.update(changed)
        between = screen.query_one("#between", CountingLabel)
        box = screen.query_one("#box", CountingBox)
        between.renders = box.renders = 0
        want = update_text(textual, app.console)
        # Textual renders both: the label lies in the box around the changes, the container under a change
        assert (between.renders, box.renders) == (1, 1)
        got = update_text(ours, app.console)
        assert (between.renders, box.renders) == (1, 1)  # not again: no change shows through either
        # the same screen in a terminal (characters and styles), from the changed spans' cells alone
        full = textual.render_update(full=True).render_segments(app.console)
        screens = []
        for update in (want, got):
            terminal = CellDiff(60, 20)
            terminal.frame(full)
            terminal.frame(update)
            screens.append(terminal.want)
        assert screens[0] == screens[1] and "12:00:01" in got
        assert len(got) < len(want)  # Textual rewrote each changed line from its widget's left edge


class ModelCompositor(ChangedOnlyCompositor):
    """Feeds every update it renders to a terminal model (the cell-diffing driver's), as the
    terminal would receive it."""

    def __init__(self) -> None:
        super().__init__()
        self.terminal: CellDiff | None = None
        self.console: Console | None = None

    def render_update(self, *args, **kwargs):
        update = super().render_update(*args, **kwargs)
        if update is not None and self.terminal is not None:
            self.terminal.frame(update.render_segments(self.console))
        return update


class ModelScreen(PaneScreen):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._compositor = ModelCompositor()


class ModelApp(InfertopApp):
    def get_default_screen(self):
        return ModelScreen(id="_default")


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_the_terminal_shows_the_screen_after_ticks_of_partial_updates(tmp_path, size):
    """Tick after tick of the demo fleet (six engines, one dcgm exporter), the screen a terminal builds
    from the partial updates alone is the screen as a full render draws it."""
    cols, rows = size
    sim = SimCluster(6, seed=7, load="bursty", realtime=False, warmup_s=30.0).start()
    try:
        endpoints = [EngineEndpoint(f"vllm-{i}", url, max_num_seqs=64) for i, url in enumerate(sim.urls)]
        app = ModelApp(Settings(config=Config(audit_log=str(tmp_path / "audit.jsonl")), endpoints=endpoints,
                                dcgm_urls=[sim.dcgm_url], state_dir=str(tmp_path / "state")), poll=False)
        async with app.run_test(size=size) as pilot:
            compositor = app.screen._compositor
            assert isinstance(compositor, ModelCompositor)
            compositor.console = app.console
            compositor.terminal = CellDiff(cols, rows)
            app.screen.refresh()  # a full frame first: the model starts from the whole screen
            await until(pilot, lambda: settled(app.screen), "the full frame out")
            for step in range(8):
                sim.advance(1.0)
                await app.collection.poll_gpus()
                await app.poll_now()
                if step == 5:
                    await pilot.press("2")  # another pane and back: full frames between partial ones
                if step == 6:
                    await pilot.press("1")
                await until(pilot, lambda: settled(app.screen), f"tick {step}'s frame out")
                strips = compositor.render_strips()
                full = [strip.text for strip in strips]
                shown = ["".join(cell[0] if cell else " " for cell in row) for row in compositor.terminal.want]
                assert shown == full, f"tick {step}"
                # and the styles: the full render through a fresh terminal model, cell by cell
                fresh = CellDiff(cols, rows)
                fresh.frame("".join(Control.move_to(0, y).segment.text + strip.render(app.console)
                                    for y, strip in enumerate(strips)))
                diffs = [(y, x, a, b) for y, (ra, rb) in enumerate(zip(compositor.terminal.want, fresh.want))
                         for x, (a, b) in enumerate(zip(ra, rb)) if a != b]
                assert not diffs, f"tick {step}: {diffs[:6]}"
            assert any("vllm-" in line for line in full)
    finally:
        sim.stop()


def test_a_span_of_a_narrow_strip_renders_as_its_crop_renders():
    """SpanUpdate writes part of a chop by slicing its segments; every cut of strips of one-cell
    characters (styled, unstyled, empty segments, any color system) renders as Textual's crop does,
    less the style codes Textual writes around an empty segment (nothing between them: no cell)."""
    import random
    import re

    from rich.color import ColorSystem
    from rich.segment import Segment
    from rich.style import Style

    from infertop.ui.fastpaint.compositor import _narrow, _render_cells

    rng = random.Random(8)
    styles = [None, Style(color="red"), Style(bold=True, bgcolor="#202020"), Style(color="#aabbcc", dim=True)]
    console = Console(color_system="truecolor")
    for _ in range(300):
        segments = [Segment("".join(rng.choice("ab ▇█—≤9") for _ in range(rng.randrange(0, 7))), rng.choice(styles))
                    for _ in range(rng.randrange(1, 6))]
        strip = Strip(segments)
        assert _narrow(strip)
        n = strip.cell_length
        a = rng.randrange(0, n + 1)
        b = rng.randrange(a, n + 2)
        for system in (ColorSystem.TRUECOLOR, ColorSystem.EIGHT_BIT):
            console._color_system = system
            textual = re.sub(r"\x1b\[[0-9;]*m\x1b\[0m", "", strip.crop(a, b).render(console))
            assert _render_cells(strip, a, b, system) == textual, (segments, a, b)
    assert not _narrow(Strip([Segment("日本")]))
    # a wide character and a combining mark: as many characters as cells, yet not one cell each
    assert not _narrow(Strip([Segment("ab日e\u0301")])) and not _narrow(Strip([Segment("a\tb")]))



@pytest.mark.skipif(fastpaint.DIRECT_LINES not in fastpaint.pieces_for(None),
                    reason="measures the fast paint's own path, turned off by INFERTOP_FAST_PAINT")
async def test_frames_of_ticks_leave_no_reference_cycles(tmp_path):
    """A line that lies in one chop is used as it is, not through ``Strip.divide``, which caches it in a
    list holding the line itself: each painted line (with its seven caches) became garbage for the cyclic
    collector, a full young-generation pass every ~15 s at 6 engines. Ticks now free what they replace."""
    import gc

    sim = SimCluster(6, seed=7, load="bursty", realtime=False, warmup_s=30.0).start()
    try:
        endpoints = [EngineEndpoint(f"vllm-{i}", url, max_num_seqs=64) for i, url in enumerate(sim.urls)]
        app = InfertopApp(Settings(config=Config(audit_log=str(tmp_path / "audit.jsonl")), endpoints=endpoints,
                                   dcgm_urls=[sim.dcgm_url], state_dir=str(tmp_path / "state")), poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(3):  # caches and windows filled
                sim.advance(1.0)
                await app.collection.poll_gpus()
                await app.poll_now()
                await until(pilot, lambda: settled(app.screen), "the tick's frame out")
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to be named
            try:
                for _ in range(5):
                    sim.advance(1.0)
                    await app.collection.poll_gpus()
                    await app.poll_now()
                    await until(pilot, lambda: settled(app.screen), "the tick's frame out")
                gc.collect()
                cyclic = [type(o).__qualname__ for o in gc.garbage]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
            assert "Strip" not in cyclic and "FIFOCache" not in cyclic, sorted(set(cyclic))
    finally:
        sim.stop()
