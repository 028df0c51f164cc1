"""Operator navigation through Textual's Pilot: pane keys, the pinned Engine
column, the sort picker, the footer and help at 80x24, alerts that do not fit,
sparkline scales and the selected GPU row."""

from __future__ import annotations

import math

import pytest
from textual.app import App
from textual.widgets import Input, OptionList
from textual.widgets._footer import FooterKey

from fake_pynvml import FakeNvml, h100
from infertop.config import Config, GpuConfig
from infertop.sources.gpu import GpuCollector
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.actions import ACTIONS
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.controllers.navigation import PANES
from infertop.ui.screens.help import HelpScreen
from infertop.ui.screens.sort_picker import SortPicker
from infertop.ui.widgets.engines_table import EnginesTable
from infertop.ui.widgets.gpus import GpusTable
from infertop.ui.widgets.panels import Trend, bars
from infertop.ui.widgets.overview import TILES
from overview_view import alert_lines, alerts, tiles
from pilot_wait import until
from vllm_text import v1_doc

DEAD = "http://127.0.0.1:9"  # nothing listens: connection refused


def make_app(endpoints, **kw) -> InfertopApp:
    return InfertopApp(Settings(config=Config(), endpoints=endpoints, **kw), poll=False)


def line_text(widget, y: int) -> str:
    return "".join(seg.text for seg in widget.render_line(y))


def order(app) -> list[str]:
    t = app.query_one("#engines-table", EnginesTable)
    return [row.key.value for row in t.ordered_rows]


def footer(app) -> dict[str, FooterKey]:
    return {k.description: k for k in app.screen.query(FooterKey)}


@pytest.fixture
def engines(scripted):
    """alpha runs 7, beta 2 (its metrics can be changed), gone is down."""
    docs = {"beta": v1_doc(engines={"0": {"running": 2}}, model="qwen-7b")}
    a = scripted().serve_engine(v1_doc(engines={"0": {"running": 7, "waiting": 3, "kv": 0.5}}), model="llama-8b")
    b = scripted().serve_engine(lambda: docs["beta"], model="qwen-7b")
    # a generous poll timeout: a starved machine must not turn a slow answer into a down engine
    eps = [EngineEndpoint("alpha", a.url, max_num_seqs=8, timeout_s=30), EngineEndpoint("beta", b.url, timeout_s=30),
           EngineEndpoint("gone", DEAD)]
    return eps, docs


async def test_tab_and_shift_tab_switch_panes_from_a_focused_table_and_input(engines):
    app = make_app(engines[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_now()

        async def press(key: str, cond, what: str) -> None:  # one key, then the state it leads to
            await pilot.press(key)
            await until(pilot, cond, what)

        await press("2", lambda: isinstance(app.focused, EnginesTable), "the Engines table focused")
        await press("tab", lambda: app.current_pane == "log", "Tab: the Log pane")
        await press("tab", lambda: app.current_pane == "gpus" and isinstance(app.focused, GpusTable),
                    "Tab: the GPUs table focused")
        gpus = PANES.index("gpus")
        for k in range(len(PANES) - 3):
            want = PANES[(gpus + k + 1) % len(PANES)]
            await press("tab", lambda want=want: app.current_pane == want, f"Tab: {want}")
        assert app.current_pane == "overview"  # wraps around
        await press("shift+tab", lambda: app.current_pane == PANES[-1], "Shift+Tab: the last pane")
        for i in range(len(PANES) - 3):
            await press("shift+tab", lambda i=i: app.current_pane == PANES[-2 - i], "Shift+Tab back")
        assert app.current_pane == "log"
        await press("slash", lambda: isinstance(app.focused, Input), "the filter box focused")
        await press("tab", lambda: not isinstance(app.focused, Input), "Tab out of the filter box")
        assert app.current_pane == "log"
        # in a dialog Tab belongs to the dialog
        await press("2", lambda: app.current_pane == "engines", "the Engines pane")
        await press("s", lambda: isinstance(app.screen, SortPicker), "the sort picker")
        await pilot.press("tab")
        await pilot.pause()  # nothing to wait for: Tab must leave the dialog and the pane as they were
        assert isinstance(app.screen, SortPicker) and app.current_pane == "engines"


async def test_engine_column_stays_pinned_after_scrolling_right(engines):
    app = make_app(engines[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.press("2")
        await until(pilot, lambda: app.current_pane == "engines" and app.query_one("#engines-table", EnginesTable)
                    .show_horizontal_scrollbar, "the Engines table on view, wider than the terminal")
        table = app.query_one("#engines-table", EnginesTable)
        assert table.virtual_size.width > table.scrollable_content_region.width  # more columns than fit
        assert table.show_horizontal_scrollbar  # ... and the table says so
        assert "Model" not in line_text(table, 0)
        table.scroll_to(x=table.max_scroll_x, animate=False)
        await until(pilot, lambda: table.scroll_x > 0, 'table.scroll_x > 0')
        assert table.scroll_x > 0
        header, first = line_text(table, 0), line_text(table, 1)
        assert header.lstrip().startswith("Engine") and "Model" in header and "State" not in header
        assert first.lstrip().startswith("alpha")


async def choose_sort(app, pilot, column: str, header: str) -> None:
    """Pick ``column`` in the sort picker; wait until the picker is gone and the header shows ``header``."""
    await pilot.press("s")
    await until(pilot, lambda: isinstance(app.screen, SortPicker), "the sort picker open")
    options = app.screen.query_one(OptionList)
    options.highlighted = options.get_option_index(column)
    await pilot.press("enter")
    table = app.query_one("#engines-table", EnginesTable)
    await until(pilot, lambda: not isinstance(app.screen, SortPicker) and header in line_text(table, 0),
                f"the picker closed and {header!r} in the header")


async def test_sort_picker_sorts_reverses_and_the_selected_engine_stays_selected(engines):
    endpoints, docs = engines
    app = make_app(endpoints)
    async with app.run_test(size=(120, 40)) as pilot:
        now = [0.0]
        table = app.query_one("#engines-table", EnginesTable)
        table.clock = lambda: now[0]
        await app.poll_now()
        # one key at a time: Pilot sends the next key once the process looks idle, which a
        # starved process does before the first key's focus change has run
        await pilot.press("2")
        await until(pilot, lambda: app.focused is table, "the Engines table focused")
        await pilot.press("down")
        await until(pilot, lambda: table.selected_engine == "beta", "the cursor on beta")
        assert order(app) == ["alpha", "beta", "gone"]
        assert line_text(table, 0).lstrip().startswith("Engine ▲")

        await choose_sort(app, pilot, "run", "Run ▼")
        assert order(app) == ["alpha", "beta", "gone"]  # 7, 2, no value last
        assert "Engine ▲" not in line_text(table, 0)
        await choose_sort(app, pilot, "run", "Run ▲")  # the same column again: reversed
        assert order(app) == ["beta", "alpha", "gone"]
        assert table.selected_engine == "beta" and table.cursor_row == 0

        # beta now runs more than alpha: the rows hold still for a few seconds (the table's clock)...
        docs["beta"] = v1_doc(engines={"0": {"running": 9}}, model="qwen-7b")
        now[0] = 1.0
        await app.poll_now()
        await until(pilot, lambda: order(app) == ["beta", "alpha", "gone"], 'order(app) == ["beta", "alpha", "gone"]')
        assert order(app) == ["beta", "alpha", "gone"]
        assert str(table.get_cell("beta", "run")) == "9"  # values update in place
        # ... then re-sort, and the cursor follows beta to its new row
        now[0] = 6.0
        await app.poll_now()
        await until(pilot, lambda: order(app) == ["alpha", "beta", "gone"], 'order(app) == ["alpha", "beta", "gone"]')
        assert order(app) == ["alpha", "beta", "gone"]
        await until(pilot, lambda: table.cursor_row == 1, "the cursor following beta to row 1")
        assert table.selected_engine == "beta"
        # Esc closes the picker without changing anything
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SortPicker), "the sort picker open")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SortPicker), "the sort picker closed by Esc")
        assert "Run ▲" in line_text(table, 0) and order(app) == ["alpha", "beta", "gone"]


async def test_footer_at_80x24_shows_the_panes_keys_and_quit(engines):
    app = make_app(engines[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        for pane in ("1", "2", "3", "4", "5"):
            await pilot.press(pane)
            await until(pilot, lambda: "Quit" in footer(app) and footer(app)["Quit"].region.right <= 80 and footer(app)["Quit"].region.width > 0, '"Quit" in footer(app) and footer(app)["Quit"].region.righ…')
            keys = footer(app)
            assert "Quit" in keys and keys["Quit"].region.right <= 80 and keys["Quit"].region.width > 0, pane
            assert not any("palette" in d for d in keys), pane
            assert ("Sort" in keys) == (pane == "2") and ("Filter" in keys) == (pane == "2"), pane
            assert ("View" in keys) == (pane == "5"), pane
        await pilot.press("2")
        await until(pilot, lambda: footer(app)["Detail"].key_display == "Enter", 'footer(app)["Detail"].key_display == "Enter"')
        assert footer(app)["Detail"].key_display == "Enter"


async def test_slo_targets_on_the_tiles_are_not_clipped_at_80x24(engines):
    app = make_app(engines[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await until(pilot, lambda: all("≤" in tiles(app).value_text(k) and tiles(app).tile_region(k).height
                                       for k in ("ttft99", "itl95", "e2e99")), "the latency tiles with their SLO targets")
        grid = tiles(app)
        for key in ("ttft99", "itl95", "e2e99"):
            text = grid.value_text(key)
            assert "≤" in text and "…" not in text, (key, text)
            assert len(text) <= grid.tile_width(key), (key, text)
            assert grid.tile_region(key).bottom <= 24
        for key, label in TILES:
            assert grid.label_text(key) == label  # not cut


async def test_alerts_that_do_not_fit_say_how_many_more_at_80x24(scripted):
    up = scripted().serve_engine(v1_doc(engines={"0": {"running": 1}}))
    endpoints = [EngineEndpoint("ok", up.url)] + [EngineEndpoint(f"dead-{i}", DEAD) for i in range(5)]
    app = make_app(endpoints)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await until(pilot, lambda: len(alert_lines(app)) >= 2, 'len(alert_lines(app)) >= 2')
        texts = alert_lines(app)
        assert len(texts) >= 2
        shown = sum(t.startswith("● dead-") for t in texts)
        assert texts[-1] == f"… {5 - shown} more engines with {5 - shown} alerts"
        status_top = app.query_one("#statusbar").region.y
        assert alerts(app).region.bottom <= status_top  # on screen, above the status bar


async def test_help_uses_the_width_cuts_nothing_and_lists_q(engines):
    app = make_app(engines[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen) and app.screen.query_one("#help-keys").row_count,
                    "the help screen with its keys")
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one("#help-keys")
        rows = [[str(getattr(c, "plain", c)) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert ["q", "Quit infertop", "General"] in rows
        offered = {a.title for a in ACTIONS if app.check_action(a.action.split("(")[0], ()) is not None}
        assert {r[1] for r in rows} == offered and len(offered) >= len(ACTIONS) - 10  # only what may run
        assert not any("ctrl" in r[0].lower() for r in rows) and ["^R", "Poll every source now", "View"] in rows
        assert table.region.width >= 74  # the terminal's width, less the frame
        assert table.virtual_size.width <= table.scrollable_content_region.width  # no text cut on the right
        longest = max(range(len(rows)), key=lambda i: len(rows[i][1]))
        action_w = table.ordered_columns[1].width
        assert len(rows[longest][1]) > action_w  # it wraps ...
        assert table.ordered_rows[longest].height >= 2  # ... onto a second line
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


def test_bars_scale_and_gaps():
    # a constant 91 % on a 0..100 scale: full bottom row, 7/8 of the top row
    assert bars([91.0] * 10, 10, 2, 100.0) == ["▇" * 10, "█" * 10]
    # missing values are gaps, not zeros; a zero is the lowest eighth
    assert bars([4.0, math.nan, None, 0.0], 4, 1, 4.0) == ["█  ▁"]
    # fewer points than columns: newest on the right; more: bucketed by their largest value
    assert bars([1.0, 1.0], 4, 1, 1.0) == ["  ██"]
    assert bars([0.0, 8.0, 0.0, 0.0], 2, 1, 8.0) == ["█▁"]


class TrendApp(App):
    def compose(self):
        yield Trend("GPU util", id="pct")
        yield Trend("Running", id="count")


async def test_a_constant_series_draws_a_full_sparkline_with_its_scale():
    app = TrendApp()
    async with app.run_test(size=(40, 8)) as pilot:
        app.query_one("#pct", Trend).show([91.0] * 30, "91%")
        app.query_one("#count", Trend).show([73.0] * 30, "73")
        await until(pilot, lambda: not any(t._repaint_regions for t in app.query(Trend)), "both trends painted")
        pct = app.query_one("#pct", Trend).bar_rows()
        assert pct[0].startswith("100%▕") and pct[0].endswith("▇" * 30)
        assert pct[1].endswith("█" * 30) and pct[1].strip().startswith("0▕")
        count = app.query_one("#count", Trend).bar_rows()
        assert count[0].startswith("73▕") and count[0].endswith("█" * 30)


async def test_nan_points_are_gaps_and_do_not_set_the_scale():
    app = TrendApp()
    async with app.run_test(size=(40, 8)) as pilot:
        app.query_one("#count", Trend).show([math.nan, 2.0, math.nan, 4.0, None], "4")
        app.query_one("#pct", Trend).show([math.nan, None, math.nan], "—")
        await until(pilot, lambda: not any(t._repaint_regions for t in app.query(Trend)), "both trends painted")
        count = app.query_one("#count", Trend).bar_rows()
        # the scale from 2 and 4 alone; the NaN and None points are blank columns in every row
        assert count[0].startswith("4.0▕") and count[0].endswith("   █ ")
        assert count[-1].strip().startswith("0▕") and count[-1].endswith(" █ █ ")
        assert app.query_one("#pct", Trend).bar_rows() == []  # no value: no trend


async def test_constant_fleet_values_draw_on_the_overview(scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 5}}))
    app = make_app([EngineEndpoint("steady", srv.url)])
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3):
            await app.poll_now()
        await until(pilot, lambda: app.query_one("#t-running", Trend).title_text() == "Running  5"
                    and app.query_one("#t-running", Trend).bar_rows(), "the Running trend drawn")
        lines = app.query_one("#t-running", Trend).bar_rows()
        assert lines[0].startswith("5▕") and lines[0].endswith("██")
        assert app.query_one("#t-running", Trend).title_text() == "Running  5"


async def test_the_selected_gpu_row_keeps_its_utilisation_bar():
    nv = FakeNvml([h100(0), h100(1)])
    app = InfertopApp(Settings(config=Config()), poll=False,
                      gpu_collector=GpuCollector(GpuConfig(nvml=True), nvml_module=nv))
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_gpus_now()
        await pilot.press("4")
        await until(pilot, lambda: app.current_pane == "gpus" and app.query_one("#gpus-table", GpusTable).has_focus,
                    "the GPUs table on view and focused")
        table = app.query_one("#gpus-table", GpusTable)
        assert table.has_focus and table.cursor_row == 0

        def bar_colours(y: int) -> set[str]:
            return {seg.style.color.name for seg in table.render_line(y)
                    if seg.style is not None and seg.style.color is not None and seg.text.strip("▏▎▍▌▋▊▉█ ") == ""
                    and seg.text.strip()}

        assert bar_colours(1) == bar_colours(2) == {"green"}  # the selected row (1) and another one (2)
