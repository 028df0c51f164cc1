"""The Overview's "Under most pressure" table (a line-API widget): its order, cells,
styles, what fits the width, what a tick repaints, and a click on a row."""

from __future__ import annotations

from dataclasses import replace

from rich.cells import cell_len
from textual.app import App, ComposeResult

from infertop.domain.engine import DOWN, UP, EngineStats
from infertop.state.fleet_types import FRESH, STALE, EngineState, FleetState, Freshness, Slo
from infertop.ui.widgets.hot_table import HotTable
from infertop.ui.widgets.overview import HOT_COLUMNS
from pilot_wait import until

SLO = Slo(2.0, 0.04, 20.0, 1.0, 95.0)


def stats(name: str, **kw) -> EngineStats:
    base = dict(name=name, url=f"http://127.0.0.1/{name}", state=UP, running=4.0, waiting=0.0, max_num_seqs=64,
                kv_cache_pct=10.0, ttft_p99_s=0.2, itl_p95_s=0.02, e2e_p99_s=3.0,
                generation_tokens_per_s=500.0, scraped_at=1000.0, window_s=60.0)
    base.update(kw)
    return EngineStats(**base)


def state(engines: list[EngineStats], tick: int = 1, stale: dict[str, float] | None = None) -> FleetState:
    now = 1000.0 + tick

    def fresh(name: str) -> Freshness:
        if stale and name in stale:
            return Freshness(STALE, "test", now - stale[name], stale[name], since=now - stale[name], reason="timeout")
        return Freshness(FRESH, "test", now, 0.5)

    return FleetState(tick=tick, taken_at=now, refresh_s=1.0, window_s=60.0, slo=SLO,
                      engines=tuple(EngineState(s, fresh(s.name)) for s in engines))


def painted(table: HotTable) -> bool:
    """The table laid out and painted: nothing of it left for the next frame."""
    return bool(table.size.area) and not (table._repaint_regions or table._repaint_required or table._layout_required
                                          or table.screen._layout_required)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class HotApp(App):
    def __init__(self, clock: Clock, limit: int = 5) -> None:
        super().__init__()
        self.clock, self.limit = clock, limit
        self.clicked: list[str] = []

    def compose(self) -> ComposeResult:
        yield HotTable(slo=SLO, columns=HOT_COLUMNS, limit=self.limit, resort_every_s=5.0, clock=self.clock, id="hot")

    def on_hot_table_engine_clicked(self, event: HotTable.EngineClicked) -> None:
        self.clicked.append(event.name)


def lines(table: HotTable) -> list[str]:
    return [table.render_line(y).text.rstrip() for y in range(1 + len(table.engine_names))]


def cell_style(table: HotTable, y: int, text: str):
    """The style of the segment on line ``y`` that holds ``text``."""
    for seg in table.render_line(y):
        if text in seg.text:
            return seg.style
    raise AssertionError(f"{text!r} not on line {y}: {table.render_line(y).text!r}")


async def test_rows_by_pressure_with_the_engine_tables_cells_and_styles():
    clock = Clock()
    app = HotApp(clock)
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("calm"), stats("queued", waiting=7.0), stats("slow", ttft_p99_s=0.5, itl_p95_s=0.063),
                                  stats("dead", state=DOWN)]))
        await until(pilot, lambda: painted(table) and table.size.height == 5, "the four rows painted under the header")
        # broken first, then over an SLO target (ITL 63 ms > 40 ms), then queued, then the rest
        assert table.engine_names == ["dead", "slow", "queued", "calm"]
        shown = lines(table)
        assert shown[0].split() == ["Engine", "State", "Run", "Wait", "Run/Max", "KV%", "TTFT99", "ITL95",
                                    "Gen", "t/s", "E2E99"]
        assert shown[2].split()[:8] == ["slow", "up", "4", "0", "4/64", "10%", "500ms", "63ms"]
        assert cell_style(table, 2, "63ms").bold and cell_style(table, 2, "63ms").color.name == "red"  # over 40 ms
        assert cell_style(table, 3, " 7 ").color.name == "yellow"  # a queue
        assert cell_style(table, 1, "down").color.name == "red"
        assert table.rows_text()["queued"]["wait"] == "7"


async def test_the_engine_furthest_over_its_slo_comes_before_a_short_queue():
    app = HotApp(Clock(), limit=2)
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("q1", waiting=1.0), stats("q2", waiting=1.0), stats("ok"),
                                  stats("ttft", ttft_p99_s=3.48), stats("itl", itl_p95_s=0.06)]))
        await until(pilot, lambda: table.engine_names == ["ttft", "itl"], 'table.engine_names == ["ttft", "itl"]')
        assert table.engine_names == ["ttft", "itl"]  # 1.74x and 1.5x over their targets; q1 and q2 below


async def test_stale_values_are_dimmed_and_say_their_age():
    app = HotApp(Clock())
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("a"), stats("b", running=9.0)], stale={"b": 12.0}))
        await until(pilot, lambda: painted(table) and table.size.height == 3, "the two rows painted under the header")
        row = table.rows_text()["b"]
        assert row["state"] == "up 12s" and row["run"] == "9"
        assert cell_style(table, table.engine_names.index("b") + 1, "9/64").dim


async def test_rows_keep_their_places_between_resorts():
    clock = Clock()
    app = HotApp(clock)
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("a", waiting=5.0), stats("b", waiting=1.0)], tick=1))
        await until(pilot, lambda: table.engine_names == ["a", "b"], 'table.engine_names == ["a", "b"]')
        assert table.engine_names == ["a", "b"]
        clock.now = 4.0  # b is now the more queued, but the rows stay put under the operator's eye
        table.update_state(state([stats("a", waiting=0.0), stats("b", waiting=9.0)], tick=2))
        assert table.engine_names == ["a", "b"]
        assert table.rows_text()["b"]["wait"] == "9"
        clock.now = 5.5
        table.update_state(state([stats("a", waiting=0.0), stats("b", waiting=9.0)], tick=3))
        assert table.engine_names == ["b", "a"]
        await until(pilot, lambda: [ln.split()[0] for ln in lines(table)[1:]] == ["b", "a"], '[ln.split()[0] for ln in lines(table)[1:]] == ["b", "a"]')
        assert [ln.split()[0] for ln in lines(table)[1:]] == ["b", "a"]


async def test_at_80_columns_whole_columns_only_and_the_engine_first():
    app = HotApp(Clock())
    async with app.run_test(size=(80, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("vllm-llama-70b-0"), stats("vllm-llama-70b-1", waiting=3.0)]))
        await until(pilot, lambda: table.columns_shown()[0] == "name" and len(table.columns_shown()) < len(HOT_COLUMNS), 'table.columns_shown()[0] == "name" and len(table.columns_…')
        shown = table.columns_shown()
        assert shown[0] == "name" and len(shown) < len(HOT_COLUMNS)
        assert shown == list(HOT_COLUMNS[: len(shown)])
        last = {"run": "Run", "wait": "Wait", "runmax": "Run/Max", "kv": "KV%", "ttft99": "TTFT99",
                "itl95": "ITL95", "gen": "Gen t/s", "e2e99": "E2E99", "state": "State"}[shown[-1]]
        assert lines(table)[0].endswith(last)  # no column cut in the middle
        assert all(len(table.render_line(y).text) == 80 for y in range(3))


async def test_a_tick_repaints_only_the_changed_columns_of_changed_rows():
    app = HotApp(Clock())
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(HotTable)
        engines = [stats("a", waiting=2.0), stats("b", waiting=1.0), stats("c")]
        table.update_state(state(engines, tick=1))
        await until(pilot, lambda: painted(table) and table.size.height == 4, "the first tick painted")
        spans = []
        table.refresh = lambda *regions, **kw: spans.extend(regions) or None  # what the next tick asks Textual
        engines[1] = replace(engines[1], running=12.0)  # b: Run and Run/Max change
        table.update_state(state(engines, tick=2))
        assert len(spans) == 1
        (span,) = spans
        assert span.y == 2 and span.height == 1
        header = lines(table)[0]
        assert span.x == header.index("Run") - 1  # from the Run column (with its padding) …
        assert span.right == header.index("KV%") - 1  # … to the end of Run/Max, not the whole line


async def test_a_click_on_a_row_opens_that_engine():
    app = HotApp(Clock())
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("a", waiting=2.0), stats("b")]))
        await until(pilot, lambda: painted(table) and table.size.height == 3, "the two rows painted under the header")
        await pilot.click(HotTable, offset=(3, 2))  # line 2: the second engine
        await until(pilot, lambda: app.clicked == ["b"], "the click reported")
        await pilot.click(HotTable, offset=(3, 0))  # the header: nothing
        await pilot.click(HotTable, offset=(3, 1))
        await until(pilot, lambda: app.clicked == ["b", "a"], "the second click reported")


async def test_a_theme_change_repaints_the_colours():
    app = HotApp(Clock())
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("a")]))
        await until(pilot, lambda: painted(table) and table.size.height == 2, "the row painted under the header")
        before = cell_style(table, 0, "Engine").bgcolor
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await until(pilot, lambda: cell_style(table, 0, "Engine").bgcolor != before, "the header in the new theme")


async def test_wide_characters_and_markup_in_names_keep_the_columns_aligned():
    app = HotApp(Clock())
    async with app.run_test(size=(80, 12)) as pilot:
        table = app.query_one(HotTable)
        table.update_state(state([stats("モデル-7b", waiting=2.0), stats("[red]x[/red]", waiting=1.0), stats("a")]))
        await until(pilot, lambda: table.engine_names == ["モデル-7b", "[red]x[/red]", "a"], 'table.engine_names == ["モデル-7b", "[red]x[/red]", "a"]')
        assert table.engine_names == ["モデル-7b", "[red]x[/red]", "a"]
        header = lines(table)[0]
        for y in range(4):
            strip = table.render_line(y)
            assert strip.cell_length == 80
            assert "[red]x[/red]" in strip.text or y != 2  # shown as text, never read as markup
        # the State column starts in the same cell on every line (モ is two cells wide)
        state_at = header.index("State")
        for y in (1, 2, 3):
            text = table.render_line(y).text
            assert cell_len(text[: text.index(" up ") + 1]) == state_at, text
