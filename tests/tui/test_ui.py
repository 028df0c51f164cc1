"""The TUI through Textual's Pilot, against engines over loopback HTTP."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from infertop.config import Config
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.actions import ACTIONS
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.engine_detail import EngineDetailScreen
from infertop.ui.screens.help import HelpScreen
from infertop.ui.widgets.engines_table import EnginesTable
from overview_view import alert_lines, hot_rows, tile
from pilot_wait import until
from vllm_text import v1_doc


def text_of(app, selector: str) -> str:
    w = app.query_one(selector)
    r = w.render()
    return str(getattr(r, "plain", r))


def table_rows(app, selector: str = "#engines-table") -> dict[str, list[str]]:
    t = app.query_one(selector, EnginesTable)
    out = {}
    for row_key in t.rows:
        out[row_key.value] = [str(getattr(c, "plain", c)) for c in t.get_row(row_key)]
    return out


SLOW_S = 30.0  # an engine poll's timeout in these tests


def make_app(endpoints, **kw) -> InfertopApp:
    return InfertopApp(Settings(config=Config(), endpoints=endpoints, **kw), poll=False)


@pytest.fixture
def two_engines(scripted):
    a = scripted().serve_engine(v1_doc(engines={"0": {"running": 7, "waiting": 3, "kv": 0.5}}), model="llama-8b")
    b = scripted().serve_engine(v1_doc(engines={"0": {"running": 2}}, model="qwen-7b"), model="qwen-7b")
    # A starved machine may take seconds to answer on loopback: a poll that timed out would show the
    # engine down, not the values these tests look for.
    return [EngineEndpoint("alpha", a.url, max_num_seqs=8, timeout_s=SLOW_S),
            EngineEndpoint("beta", b.url, timeout_s=SLOW_S), EngineEndpoint("gone", "http://127.0.0.1:9")]


async def test_overview_and_engines_show_live_values(two_engines):
    app = make_app(two_engines)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_now()
        await until(pilot, lambda: tile(app, "engines") == "2/3", 'tile(app, "engines") == "2/3"')
        assert tile(app, "engines") == "2/3"
        assert tile(app, "running") == "9"
        assert tile(app, "waiting") == "3"
        # the engines under most pressure: the dead one first, then the queued one
        assert list(hot_rows(app)) == ["gone", "alpha", "beta"]
        assert alert_lines(app)[0].startswith("● gone — down since ")
        assert alert_lines(app)[0].endswith(": connection refused")
        assert "✗ gone down: connection refused, since " in text_of(app, "#statusbar")
        await pilot.press("2")
        await until(pilot, lambda: app.query_one("#panes").active == "engines", "the Engines pane")
        assert app.query_one("#panes").active == "engines"
        rows = table_rows(app)
        assert rows["alpha"][:6] == ["alpha", "up", "7", "3", "7/8", "50%"]
        assert rows["beta"][1:4] == ["up", "2", "0"]
        assert rows["gone"][1] == "down"


async def test_filter_detail_and_help(two_engines):
    app = make_app(two_engines)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_now()
        table = app.query_one("#engines-table", EnginesTable)
        await pilot.press("slash")
        # typed before the box has the focus, 'q' would quit
        await until(pilot, lambda: isinstance(app.focused, Input), "the filter box focused")
        await pilot.press(*"qwen")
        await until(pilot, lambda: list(table_rows(app)) == ["beta"], "the filter 'qwen' leaves only beta")
        await pilot.press("enter")  # leaves the filter box, focus on the table
        await until(pilot, lambda: app.focused is table, "the table focused after Enter in the filter")
        await pilot.press("enter")  # opens the selected engine
        await until(pilot, lambda: isinstance(app.screen, EngineDetailScreen)
                    and "Running / waiting" in text_of(app.screen, "#detail-body"), "the detail screen painted")
        body = text_of(app.screen, "#detail-body")
        assert "Engine beta" in text_of(app.screen, "#detail-title")
        assert "qwen-7b" in body and "Running / waiting" in body
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "back on the main screen")
        await pilot.press("escape")  # clears the filter
        await until(pilot, lambda: set(table_rows(app)) == {"alpha", "beta", "gone"}, "every engine back")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen)
                    and app.screen.query_one("#help-keys").row_count > 0, "the help screen")
        help_table = app.screen.query_one("#help-keys")
        titles = {str(help_table.get_row_at(i)[1]) for i in range(help_table.row_count)}
        hidden = {a.title for a in ACTIONS if a.group == "Kubernetes" and a.action not in ("kube_context",
                                                                                          "cluster_view")}
        assert len(hidden) == 10 and titles == {a.title for a in ACTIONS} - hidden  # no cluster: K and v only


async def test_usable_at_80x24(two_engines):
    app = make_app(two_engines)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.press("2")
        await until(pilot, lambda: app.query_one("#panes").active == "engines", "the Engines pane")
        await until(pilot, lambda: app.query_one("#engines-table", EnginesTable).size.height >= 4, "the Engines table laid out")
        table = app.query_one("#engines-table", EnginesTable)
        assert table.size.height >= 4  # rows visible between the tabs and the status bar
        assert table.region.right <= 80
        assert app.query_one("#statusbar").region.bottom <= 23


async def test_bad_data_keeps_app_running(scripted):
    garbage = scripted().serve_engine("\x00\xff not metrics {{{")
    good = scripted().serve_engine(v1_doc(engines={"0": {"running": 1}}))
    app = make_app([EngineEndpoint("bad", garbage.url), EngineEndpoint("good", good.url)])
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3):
            await app.poll_now()
        await until(pilot, lambda: "bad degraded" in text_of(app, "#statusbar"), "the status bar names the bad engine")
        # the status bar names the state the table shows: it answers, with garbage
        assert "bad degraded: garbage /metrics" in text_of(app, "#statusbar")
        await pilot.press("2")  # the Engines pane
        await until(pilot, lambda: app.query_one("#panes").active == "engines", "the Engines pane")
        await until(pilot, lambda: {"good", "bad"} <= set(table_rows(app)), "both engines in the table")
        assert table_rows(app)["good"][1] == "up"
        assert table_rows(app)["bad"][1] == "degraded"
        assert app.is_running


def test_snapshot_engines_pane(snap_compare):
    # The screen is painted from one fleet state built from fixed values and fixed clocks
    # (no HTTP, no timing): the picture cannot depend on how loaded the machine is.
    from infertop.domain.engine import EngineStats
    from infertop.domain.source import SourceHealth
    from infertop.state.fleet_join import FleetJoiner

    ep = EngineEndpoint("alpha", "http://127.0.0.1:8000", max_num_seqs=8)

    class One:
        endpoint = ep
        stats = [EngineStats(name="alpha", url=ep.url, state="up", running=4, waiting=1, kv_cache_pct=25.0,
                             max_num_seqs=8, scraped_at=1796025600.0)]
        health = SourceHealth("alpha", "vllm", True, last_ok_at=100.0)
        windows: dict = {}

    class Fleet:
        collectors = [One()]

    joiner = FleetJoiner(Fleet(), slo=Config().slo, refresh_s=1.0, window_s=60.0,
                         wall=lambda: 1796025600.0, mono=lambda: 100.5)
    app = make_app([ep])

    async def run_before(pilot):
        app.show_state(joiner.build())
        await pilot.press("2")
        await until(pilot, lambda: app.query_one("#panes").active == "engines", "the Engines pane")
        await pilot.pause()  # nothing to wait for: the snapshot compares the frame

    assert snap_compare(app, terminal_size=(100, 20), run_before=run_before)


async def test_palette_offers_only_runnable_actions(two_engines):
    from infertop.ui.commands import InfertopCommands

    app = make_app(two_engines, read_only=True)
    async with app.run_test(size=(120, 40)):
        provider = InfertopCommands(app.screen)
        titles = {a.title for a in provider._actions()}
        assert "Quit infertop" in titles and "Show the Engines pane" in titles
        assert not any(a.mutating and a.title in titles for a in ACTIONS)
