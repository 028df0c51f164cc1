"""A hidden trend (the Overview's wide trends below 160 columns, a trend in a pane not on view)
costs no repaint per tick, and shows the latest title and series as soon as it is shown —
whether or not it was shown before."""

from __future__ import annotations

import pytest
from textual.app import App
from textual.containers import Vertical

from infertop.ui.widgets.panels import Trend
from pilot_wait import until


class HiddenTrendApp(App):
    CSS = """
    Trend { display: none; }
    Screen.shown Trend { display: block; }
    """

    def compose(self):
        yield Trend("Requests/s", id="t")


async def test_a_hidden_trend_is_not_repainted_and_shows_its_latest_values_when_shown():
    app = HiddenTrendApp()
    async with app.run_test(size=(40, 6)) as pilot:
        trend = app.query_one(Trend)
        await until(pilot, lambda: not trend._repaint_required and not app.screen._dirty_widgets,
                    "the mount's refresh done")
        for top in (5.0, 7.0, 9.0):  # ticks while hidden
            trend.show([1.0, 2.0, top], f"{top:g}")
            assert not trend._repaint_required
        assert trend.title_text() == "Requests/s"  # nothing written yet
        app.screen.add_class("shown")
        await until(pilot, lambda: trend.title_text() == "Requests/s  9", 'trend.title_text() == "Requests/s  9"')
        assert trend.title_text() == "Requests/s  9"
        rows = trend.bar_rows()
        assert rows[0].startswith("9.0▕") and rows[-1].endswith("█")
        lines = screen_lines(app)
        assert lines[0].startswith(" Requests/s  9") and lines[1].startswith(" 9.0▕")


class ShownThenHiddenApp(App):
    CSS = """
    #box { height: 4; }
    Screen.trend-off Trend { display: none; }
    Screen.box-off #box { display: none; }
    """

    def compose(self):
        with Vertical(id="box"):
            yield Trend("Requests/s", id="t")


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


@pytest.mark.parametrize("hide", ["trend-off", "box-off"])  # the trend itself, or a container of it (a pane)
async def test_a_trend_shown_then_hidden_is_not_repainted_and_shows_its_latest_values_when_shown_again(hide):
    app = ShownThenHiddenApp()
    async with app.run_test(size=(40, 6)) as pilot:
        trend = app.query_one(Trend)
        await until(pilot, lambda: trend.size.area, "the trend laid out")
        trend.show([1.0, 2.0, 3.0], "3")
        await until(pilot, lambda: any(line.lstrip().startswith("3.0▕") for line in screen_lines(app)),
                    "the first values on screen")
        app.screen.add_class(hide)
        await until(pilot, lambda: not any("▕" in line for line in screen_lines(app)), "the trend hidden")
        await until(pilot, lambda: not trend._repaint_required, "painted")
        # (hidden, it has no region on screen: its size reads 0 once the layout has run)
        for top in (5.0, 7.0, 9.0):  # ticks while hidden
            trend.show([1.0, 2.0, 3.0, top], f"{top:g}")
            assert not trend._repaint_required
        app.screen.remove_class(hide)
        await until(pilot, lambda: any(line.lstrip().startswith("9.0▕") for line in screen_lines(app))
                    and any("Requests/s  9" in line for line in screen_lines(app)),
                    "the latest title and series on screen once shown")


class FramesApp(App):
    """Counts the frames Textual hands to the terminal (headless: handed, not written)."""

    def __init__(self) -> None:
        super().__init__()
        self.frames = 0

    def compose(self):
        yield Trend("Requests/s", id="t")

    def _display(self, screen, renderable) -> None:
        if renderable is not None:
            self.frames += 1
        super()._display(screen, renderable)


async def test_a_tick_inside_one_frame_is_painted_when_it_ends_not_on_a_later_wake_up():
    from infertop.ui.fastpaint.direct_lines import one_frame

    app = FramesApp()
    async with app.run_test(size=(40, 6)) as pilot:
        trend = app.query_one(Trend)
        await until(pilot, lambda: trend.size.area, "the trend laid out")
        await until(pilot, lambda: app.frames and not app.screen._dirty_widgets and not app.screen._layout_required
                    and not trend._repaint_required, "the first frame painted, nothing left to paint")
        before = app.frames
        with one_frame(app.screen):
            trend.show([1.0, 2.0, 3.0], "3")
            assert app.frames == before  # held while the tick paints its widgets
        assert app.frames == before + 1  # painted as the block ended, before any await
        assert not app.screen._dirty_widgets
        assert any(line.startswith(" Requests/s  3") for line in screen_lines(app))
        await pilot.pause()  # nothing to wait for: no frame may come
        await pilot.pause()
        assert app.frames == before + 1  # nothing left over for Textual's idle path to paint again


async def test_one_frame_leaves_a_screen_under_a_dialog_to_textual():
    from textual.screen import ModalScreen
    from textual.widgets import Static

    from infertop.ui.fastpaint.direct_lines import one_frame

    class Dialog(ModalScreen):
        def compose(self):
            yield Static("sure?")

    app = FramesApp()
    async with app.run_test(size=(40, 6)) as pilot:
        main = app.screen
        trend = app.query_one(Trend)
        await until(pilot, lambda: trend.size.area, "the trend laid out")
        dialog = Dialog()
        await app.push_screen(dialog)
        await until(pilot, lambda: app.screen is dialog and dialog.query_one(Static).size.area
                    and not dialog._dirty_widgets, "the dialog on top, painted")
        with one_frame(main):
            trend.show([1.0, 2.0, 3.0], "3")
        assert trend in main._dirty_widgets  # not painted by one_frame: the dialog is on top
        await until(pilot, lambda: not main._dirty_widgets, "Textual painted it behind the dialog")
        app.pop_screen()
        await until(pilot, lambda: any(line.startswith(" Requests/s  3") for line in screen_lines(app)),
                    "the new title on screen once the dialog is gone")
