"""A hidden trend (the Overview's wide trends below 160 columns) costs no repaint per tick,
and shows the latest title and series as soon as it is shown."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Label

from infertop.ui.widgets.panels import ScaledSparkline, Trend


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
        spark = app.query_one(ScaledSparkline)
        label = trend.query_one(Label)
        await pilot.pause()
        for top in (5.0, 7.0, 9.0):  # ticks while hidden
            trend.show([1.0, 2.0, top], f"{top:g}")
            assert not spark._repaint_required and not label._repaint_required
        assert label.render().plain == "Requests/s"  # nothing written yet
        app.screen.add_class("shown")
        await pilot.pause()
        await pilot.pause()
        assert label.render().plain == "Requests/s  9"
        rows = str(spark.render()).splitlines()
        assert rows[0].startswith("9.0▕") and rows[-1].endswith("█")
