"""The fast paint's fence (infertop/ui/fastpaint/): each piece is on only when the internals it
builds on are as checked, INFERTOP_FAST_PAINT=0 turns every piece off, and with it off the TUI runs
on stock Textual (its compositor, its driver, DataTable's public methods)."""

from __future__ import annotations

import dataclasses
import logging

from rich.text import Text
from textual._compositor import Compositor
from textual.app import App, ComposeResult
from textual.drivers.linux_driver import LinuxDriver
from textual.widgets.data_table import ColumnKey

from infertop.config import Config
from infertop.sources.vllm import EngineEndpoint
from infertop.ui import fastpaint
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.controllers.navigation import PANES
from infertop.ui.fastpaint.compositor import ChangedOnlyCompositor
from infertop.ui.widgets.engines_table import EnginesTable
from infertop.ui.fastpaint.lean import LeanTable
from overview_view import tile
from pilot_wait import until
from vllm_text import v1_doc

OFF = {fastpaint.ENV: "0"}


class CompositorWithoutRenderChops:
    """Textual's Compositor as a release that renamed ``_render_chops`` would have it."""

    _get_renders = Compositor._get_renders
    render_partial_update = Compositor.render_partial_update
    visible_widgets = Compositor.visible_widgets
    cuts = Compositor.cuts


class TableWithOtherRenderCell:
    """A DataTable whose ``_render_cell`` takes other arguments."""

    def _render_cell(self, row_index, column_index, style, width):
        return []


def test_a_piece_whose_internal_is_missing_falls_back_and_the_others_stay_on():
    real = fastpaint.real_internals()
    assert fastpaint.check(real, {}).on == frozenset(fastpaint.PIECES)  # this Textual: every piece checked on

    got = fastpaint.check(dataclasses.replace(real, compositor=CompositorWithoutRenderChops), {})
    assert fastpaint.COMPOSITOR not in got
    assert "_render_chops missing" in got.off[fastpaint.COMPOSITOR]
    assert got.on == {fastpaint.DRIVER, fastpaint.DIRECT_LINES, fastpaint.LEAN_TABLE}

    got = fastpaint.check(dataclasses.replace(real, data_table=TableWithOtherRenderCell), {})
    assert got.on == {fastpaint.DRIVER, fastpaint.COMPOSITOR, fastpaint.DIRECT_LINES}
    assert "_render_cell" in got.off[fastpaint.LEAN_TABLE]

    got = fastpaint.check(dataclasses.replace(real, linux_driver=None, posix=False), {})
    assert fastpaint.DRIVER not in got and fastpaint.COMPOSITOR in got


def test_a_textual_or_rich_outside_the_tested_minor_keeps_only_the_driver():
    real = fastpaint.real_internals()
    for changed in ({"textual_version": "8.3.0"}, {"rich_version": "15.1.0"}, {"textual_version": None}):
        got = fastpaint.check(dataclasses.replace(real, **changed), {})
        assert got.on == {fastpaint.DRIVER}, changed
        assert "is not the tested" in got.off[fastpaint.LEAN_TABLE]


def test_install_sets_the_driver_only_for_the_pieces_that_pass_and_logs_them(caplog):
    real = fastpaint.real_internals()
    app = App()
    assert app.driver_class is LinuxDriver
    with caplog.at_level(logging.INFO, logger="infertop.ui.fastpaint"):
        pieces = fastpaint.install(app, dataclasses.replace(real, compositor=CompositorWithoutRenderChops), {})
    assert app.driver_class.__name__ == "CellDiffDriver" and issubclass(app.driver_class, LinuxDriver)
    assert not fastpaint.enabled(app, fastpaint.COMPOSITOR) and fastpaint.enabled(app, fastpaint.LEAN_TABLE)
    assert pieces is fastpaint.pieces_for(app)
    assert "fast paint on: driver, direct_lines, lean_table; off: compositor (" in caplog.text


def test_the_environment_variable_turns_every_piece_off():
    app = App()
    pieces = fastpaint.install(app, fastpaint.real_internals(), OFF)
    assert pieces.on == frozenset()
    assert app.driver_class is LinuxDriver  # Textual's own
    assert all(not fastpaint.enabled(app, piece) for piece in fastpaint.PIECES)
    assert "off: driver (INFERTOP_FAST_PAINT=0)" in pieces.summary()


def test_the_environment_variable_turns_one_piece_off_or_keeps_only_those_named():
    real = fastpaint.real_internals()
    got = fastpaint.check(real, {"INFERTOP_FAST_PAINT": "-lean_table"})
    assert got.on == frozenset(fastpaint.PIECES) - {fastpaint.LEAN_TABLE}
    assert got.off == {fastpaint.LEAN_TABLE: "INFERTOP_FAST_PAINT=-lean_table"}
    got = fastpaint.check(real, {"INFERTOP_FAST_PAINT": "driver, compositor"})
    assert got.on == {fastpaint.DRIVER, fastpaint.COMPOSITOR}
    assert set(got.off) == {fastpaint.DIRECT_LINES, fastpaint.LEAN_TABLE}
    assert fastpaint.check(real, {"INFERTOP_FAST_PAINT": "1"}).on == frozenset(fastpaint.PIECES)
    assert fastpaint.check(real, {"INFERTOP_FAST_PAINT": "lean"}).on == frozenset(fastpaint.PIECES)  # no piece
    assert fastpaint.check(real, {"INFERTOP_FAST_PAINT": "off"}).on == frozenset()
    # a piece asked for but whose internals differ stays off, for that reason
    got = fastpaint.check(dataclasses.replace(real, compositor=CompositorWithoutRenderChops),
                          {"INFERTOP_FAST_PAINT": "compositor"})
    assert got.on == frozenset() and "INFERTOP_FAST_PAINT" not in got.off[fastpaint.COMPOSITOR]


class Table(App):
    def compose(self) -> ComposeResult:
        yield LeanTable(id="t")

    def on_mount(self) -> None:
        table = self.query_one(LeanTable)
        table.add_columns(*(("name", "name"), ("value", "value")))
        for name, value in (("a", "1"), ("b", "2"), ("c", "3")):
            table.add_row(Text(name), Text(value), key=name)


def rows(table: LeanTable) -> list[list[str]]:
    return [[str(getattr(c, "plain", c)) for c in table.get_row(row.key)] for row in table.ordered_rows]


async def test_a_lean_table_with_the_fast_paint_off_updates_renames_and_reorders_through_datatable(monkeypatch):
    monkeypatch.setenv(fastpaint.ENV, "0")
    app = Table()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(LeanTable)
        await until(pilot, lambda: len(table.rows) == 3, "the rows")
        assert not table._lean()
        table.set_cells("b", {"value": Text("a value wider than the column")})
        table.rename_row("a", "z")
        table.reorder_rows(["c", "z", "b"])
        assert [row.key.value for row in table.ordered_rows] == ["c", "z", "b"]
        assert rows(table) == [["c", "3"], ["a", "1"], ["b", "a value wider than the column"]]
        # DataTable measures the new widths when idle; a frame rendered before then keeps the old ones
        await until(pilot, lambda: table.columns[ColumnKey("value")].content_width == 29, "the column widened")
        await until(pilot, lambda: "a value wider than the column" in "".join(
            strip.text for strip in app.screen._compositor.render_strips()), "the wide value painted")


async def test_the_tui_with_the_fast_paint_off_starts_switches_panes_and_themes_and_quits(scripted, monkeypatch):
    monkeypatch.setenv(fastpaint.ENV, "0")
    engine = scripted().serve_engine(v1_doc(engines={"0": {"running": 7, "waiting": 3}}), model="llama-8b")
    app = InfertopApp(Settings(config=Config(), endpoints=[EngineEndpoint("alpha", engine.url, timeout_s=30.0)]),
                      poll=False)
    assert fastpaint.pieces_for(app).on == frozenset()
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_now()
        assert type(app.main._compositor) is Compositor  # Textual's, not ChangedOnlyCompositor
        assert not isinstance(app.main._compositor, ChangedOnlyCompositor)
        await until(pilot, lambda: tile(app, "running") == "7", "the running tile")
        for i, pane in enumerate(PANES, start=1):
            await pilot.press(str(i))
            await until(pilot, lambda pane=pane: app.query_one("#panes").active == pane, f"the {pane} pane")
        await pilot.press("2")
        table = app.query_one("#engines-table", EnginesTable)
        await until(pilot, lambda: table.row_count == 1 and "alpha" in table.get_row("alpha")[0].plain, "the engine row")
        assert not table._lean()
        theme = app.theme
        await pilot.press("t")
        await until(pilot, lambda: app.theme != theme, "the theme switched")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, "the app quit")
    assert app.return_code in (0, None)
