"""The Overview's line-API widgets: tiles and alert lines repaint only the rows that changed."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult

from infertop.ui.widgets.alert_lines import AlertLines
from infertop.ui.widgets.tiles import TileGrid, column_offsets
from pilot_wait import until

TILES = tuple((f"k{i}", f"Label {i}") for i in range(8))


class Painted:
    """Records the rows a widget paints anew: those whose ``render_line`` gives another strip than it
    gave last time (a row kept from the last frame is not painted again; the tests read what is
    painted through the widgets' own methods, which do not count)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.painted: list[int] = []
        self._given: dict[int, object] = {}

    def render_line(self, y: int):
        strip = super().render_line(y)
        if self._given.get(y) is not strip:
            self._given[y] = strip
            self.painted.append(y)
        return strip


class CountingGrid(Painted, TileGrid):
    pass


class CountingAlerts(Painted, AlertLines):
    pass


def settled(widget) -> bool:
    """Nothing of ``widget`` left to lay out or paint: the frame that painted it is over."""
    return not (widget._repaint_regions or widget._repaint_required or widget._layout_required
                or widget.screen._dirty_widgets or widget.screen._layout_required)


class Host(App):
    def __init__(self, cols: int = 3) -> None:
        super().__init__()
        self.grid = CountingGrid(TILES[:6], TILES[6:], id="tiles")
        self.grid.set_columns(cols)
        self.alerts = CountingAlerts(4, rows=3, id="alerts")

    def compose(self) -> ComposeResult:
        yield self.grid
        yield self.alerts


async def test_a_changed_value_repaints_its_row_only():
    app = Host()
    async with app.run_test(size=(60, 12)) as pilot:
        grid = app.grid
        for i in range(6):
            grid.set_value(f"k{i}", str(i))
        await until(pilot, lambda: 3 in grid.painted, "the values painted")
        await until(pilot, lambda: grid.region.height == 4 and settled(grid), "the first frames over")
        assert grid.region.height == 4  # 6 tiles in 3 columns: two rows of label and value
        grid.painted.clear()
        grid.set_value("k4", "44", bad=True)  # second tile row: screen row 3
        await until(pilot, lambda: grid.painted, "a repaint")
        await until(pilot, lambda: settled(grid), "the repaint over")
        assert set(grid.painted) == {3} and grid.value_text("k4") == "44"
        grid.painted.clear()
        grid.set_value("k4", "44", bad=True)  # the same: nothing to paint
        grid.set_value("k0", "0")
        await pilot.pause()  # nothing to wait for: nothing may be painted
        assert grid.painted == []


async def test_tiles_fit_their_columns_with_an_ellipsis_and_extra_tiles_append():
    app = Host(cols=3)
    async with app.run_test(size=(31, 12)) as pilot:
        grid = app.grid
        grid.set_value("k0", "123", note="≤2s")
        grid.set_value("k1", "a value far too long for a tile")
        await until(pilot, lambda: grid.value_text("k0") == "123 ≤2s", "k0's value with its note")
        assert column_offsets(31, 3) == [0, 10, 20, 31]
        assert grid.value_text("k0") == "123 ≤2s"
        assert grid.value_text("k1") == "a value …"  # 10 cells less the left padding
        assert grid.label_text("k2") == "Label 2"
        assert grid.tile_region("k2").x == 20 and grid.tile_width("k2") == 10
        grid.show_extra(True)
        grid.set_value("k6", "6")
        await until(pilot, lambda: grid.region.height == 6, "a third tile row for the extra tiles")
        assert grid.value_text("k6") == "6" and grid.tile_region("k6").y == grid.region.y + 4
        grid.set_columns(9)
        await until(pilot, lambda: grid.region.height == 2, "one row of nine")
        grid.show_extra(False)
        await until(pilot, lambda: grid.label_text("k5") == "L…", 'grid.label_text("k5") == "L…"')
        assert grid.label_text("k5") == "L…"  # 9 columns of 3 or 4 cells


async def test_alert_lines_repaint_only_the_changed_line():
    app = Host()
    async with app.run_test(size=(40, 12)) as pilot:
        alerts = app.alerts
        alerts.show_title(Text("Alerts (2)", style="bold"))
        alerts.show_line(0, Text("● a — down"))
        alerts.show_line(1, Text("● b — slow " + "x" * 40))
        await until(pilot, lambda: 2 in alerts.painted, "the lines painted")
        await until(pilot, lambda: settled(alerts), "the first frames over")
        assert alerts.title_text() == "Alerts (2)"
        assert alerts.line_texts() == ["● a — down", "● b — slow " + "x" * 26 + "…", ""]  # 38 cells: padding 0 1
        alerts.painted.clear()
        alerts.show_line(0, Text("● a — up"))
        await until(pilot, lambda: alerts.painted, "a repaint")
        await until(pilot, lambda: settled(alerts), "the repaint over")
        assert set(alerts.painted) == {1} and alerts.line_texts()[0] == "● a — up"
        alerts.set_rows(1)
        await until(pilot, lambda: alerts.region.height == 2, "one alert line under the title")
        assert alerts.line_texts() == ["● a — up"]
