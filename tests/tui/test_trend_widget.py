"""A trend is one widget painting its title row and its bar rows: what it paints, cut where
it does not fit, and repainted in a new theme's colours."""

from __future__ import annotations

from textual.app import App

from infertop.ui.widgets.panels import Trend
from pilot_wait import until


class TrendApp(App):
    CSS = "Trend { width: 24; }"

    def compose(self):
        yield Trend("Generation tokens per second", id="t")


def screen_rows(app) -> list[list[tuple[str, object]]]:
    """Each screen row as (character, style) cells."""
    return [[(ch, seg.style) for seg in strip for ch in seg.text]
            for strip in app.screen._compositor.render_strips()]


def text(row) -> str:
    return "".join(ch for ch, _ in row)


async def test_a_trend_paints_its_title_cut_with_an_ellipsis_and_its_bars_below_it():
    app = TrendApp()
    async with app.run_test(size=(40, 6)) as pilot:
        trend = app.query_one(Trend)
        assert not trend.children  # one widget: the title row and the bars are its own lines
        trend.show([1.0, 2.0, 4.0], "4")
        await until(pilot, lambda: "▕" in text(screen_rows(app)[1]), "the bars on screen")
        rows = [text(row) for row in screen_rows(app)]
        # padding 0 1: a blank cell either side; the title in 22 cells, cut with "…"
        assert rows[0][:24] == " Generation tokens per… "
        assert rows[1][:24].rstrip() == " 4.0▕" + " " * 15 + "  █"
        assert rows[2][:24].rstrip() == "   0▕" + " " * 15 + "▄██"
        assert trend.title_text() == "Generation tokens per second  4"  # as written, before the cut
        assert trend.bar_rows() == [row[1:23] for row in rows[1:3]]


async def test_a_theme_change_repaints_the_title_and_bars_in_the_new_colours():
    app = TrendApp()
    async with app.run_test(size=(40, 6)) as pilot:
        trend = app.query_one(Trend)
        trend.show([1.0, 2.0, 4.0], "4")
        await until(pilot, lambda: "▕" in text(screen_rows(app)[1]), "the bars on screen")

        def colours() -> tuple:
            rows = screen_rows(app)
            return rows[0][1][1].color, rows[2][22][1].color  # the title's "G", the newest bar

        title_before, bar_before = colours()
        assert title_before != bar_before  # the title muted, the bars in the primary colour
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await until(pilot, lambda: colours()[0] != title_before and colours()[1] != bar_before,
                    "the title and the bars in the new theme's colours")
