"""The Engines pane with 500 engines: it scrolls, filters, groups (by deployment,
model and node, with group totals) and sorts, and a new tick writes only the
cells of the engines that changed."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import Input, OptionList

from infertop.config import Config
from infertop.domain.engine import UP, EngineStats
from infertop.domain.gpu import GpuStats
from infertop.domain.kube import ClusterSnapshot, PodView
from infertop.state.engine_groups import NO_DEPLOYMENT, engine_groups
from infertop.state.fleet_types import FRESH, ClusterState, EngineState, FleetState, Freshness, Slo
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.sort_picker import SortPicker
from infertop.ui.widgets.engines_table import GROUP_PREFIX, EnginesTable
from pilot_wait import until

N = 500
MODELS = 5  # engine i serves model m{i % 5}
DEPLOYMENTS = 19  # engine i < 475 is a pod of Deployment dep-{i // 25}; the last 25 are not in Kubernetes
NODES = 63  # engine i's GPU is on node-{i % 63}


def ip(i: int) -> str:
    return f"10.0.{i // 250}.{i % 250 + 1}"


def engine(i: int, running: int | None = None) -> EngineStats:
    return EngineStats(name=f"e{i:03d}", url=f"http://{ip(i)}:8000", state=UP, model=f"m{i % MODELS}",
                       running=float(i % 37 if running is None else running), waiting=float(i % 3),
                       kv_cache_pct=float(i % 100), generation_tokens_per_s=float(10 * i), max_num_seqs=64,
                       ttft_p99_s=0.01 * (i % 50), scraped_at=1000.0, window_s=60.0)


def fleet_state(stats: list[EngineStats], tick: int = 1) -> FleetState:
    now = 1_000.0 + tick
    fresh = Freshness(FRESH, "test", now, 0.5)
    pods = tuple(PodView(namespace="llm", name=f"dep-{i // 25}-5d8f7c-{i:05d}", ip=ip(i), port=8000,
                         node=f"node-{i % NODES}", owner_kind="ReplicaSet", owner_name=f"dep-{i // 25}-5d8f7c",
                         phase="Running", status="Running", ready=True)
                 for i in range(N - 25))
    gpus = tuple(GpuStats(source="dcgm", host=f"node-{i % NODES}", index=0, uuid=f"GPU-{i}", engine=f"e{i:03d}",
                          util_pct=50.0) for i in range(N))
    cluster = ClusterState(ClusterSnapshot(context="test", namespaces=("llm",), taken_at=now, pods=pods), fresh)
    return FleetState(tick=tick, taken_at=now, refresh_s=1.0, window_s=60.0, slo=Slo(2.0, 0.1, 20.0, 1.0, 95.0),
                      engines=tuple(EngineState(s, fresh) for s in stats), gpus=gpus, gpus_configured=True,
                      cluster=cluster)


def rows(table: EnginesTable) -> list[str]:
    return [row.key.value for row in table.ordered_rows]


def cell(table: EnginesTable, row: str, col: str) -> str:
    return str(table.get_cell(row, col))


def test_groups_come_from_the_state_pods_gpus_and_models():
    groups = engine_groups(fleet_state([engine(i) for i in range(N)]))
    assert groups["e030"] == {"deployment": "dep-1", "model": "m0", "node": "node-30"}
    assert groups["e499"]["deployment"] == NO_DEPLOYMENT  # no pod at its address: said, not guessed
    assert len({g["deployment"] for g in groups.values()}) == DEPLOYMENTS + 1


async def test_500_engines_scroll_filter_group_and_sort():
    stats = [engine(i) for i in range(N)]
    app = InfertopApp(Settings(config=Config(), endpoints=[]), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_state(fleet_state(stats))
        await pilot.press("2")
        table = app.query_one("#engines-table", EnginesTable)
        # one key at a time where the next depends on it: Pilot sends the next key once the process
        # looks idle, which a starved process does before the first key's focus change has run
        await until(pilot, lambda: table.row_count == N and app.focused is table, "500 rows, the table focused")
        assert rows(table)[:3] == ["e000", "e001", "e002"]

        # scroll: the cursor goes to the last engine and the table scrolls with it
        await pilot.press("ctrl+end")
        await until(pilot, lambda: table.scroll_y > 0, "a scroll")
        assert table.selected_engine == "e499" and table.cursor_row == N - 1
        await pilot.press("ctrl+home")
        await until(pilot, lambda: table.cursor_row == 0, "the cursor on the first row")
        await pilot.press("pagedown")
        await until(pilot, lambda: 0 < table.cursor_row < N - 1, "a page down")

        # sort by Run (largest first; ties in name order); the cursor stays on its engine
        selected = table.selected_engine
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SortPicker), "the sort picker")
        options = app.screen.query_one(OptionList)
        options.highlighted = options.get_option_index("run")
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, SortPicker) and table.sort_key == "run", "sorted by Run")
        order = rows(table)
        assert [stats[int(k[1:])].running for k in order] == sorted((s.running for s in stats), reverse=True)
        assert order[0] == "e036" and table.selected_engine == selected

        # a new tick: one engine's value changes; only that row's cells are written
        before = {k: list(table.get_row(k)) for k in order}
        changed = replace(stats[7], running=36.0, waiting=5.0)
        app.show_state(fleet_state(stats[:7] + [changed] + stats[8:], tick=2))
        await until(pilot, lambda: cell(table, "e007", "run") == "36" and cell(table, "e007", "wait") == "5",
                    "the tick's new values in e007's row")
        after = {k: list(table.get_row(k)) for k in rows(table)}
        moved = [k for k in after if any(a is not b for a, b in zip(after[k], before[k]))]
        assert moved == ["e007"] and cell(table, "e007", "run") == "36" and cell(table, "e007", "wait") == "5"

        # filter by model: 100 engines
        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.focused, Input), "the filter box focused")
        await pilot.press(*"m3")
        await until(pilot, lambda: table.row_count == N // MODELS, "the filter")
        assert all(int(k[1:]) % MODELS == 3 for k in rows(table))
        app.action_clear_filter()
        await until(pilot, lambda: table.row_count == N, "all rows again")
        assert app.query_one("#filter", Input).value == ""

        # group by deployment: one row per deployment with its totals, its engines under it
        await pilot.press("G")
        await until(pilot, lambda: table.row_count == N + DEPLOYMENTS + 1, "deployment groups")
        order = rows(table)
        g = order.index(GROUP_PREFIX + "dep-3")
        members = order[g + 1:g + 26]
        assert sorted(members) == [f"e{i:03d}" for i in range(75, 100)]
        want_run = sum(stats[int(k[1:])].running for k in members)
        assert cell(table, GROUP_PREFIX + "dep-3", "run") == f"{want_run:.0f}"
        assert cell(table, GROUP_PREFIX + "dep-3", "name") == "▾ dep-3 (25)"
        assert cell(table, GROUP_PREFIX + "dep-3", "state") == "25/25 up"
        worst = max(members, key=lambda k: stats[int(k[1:])].ttft_p99_s)  # latencies: the group's worst
        assert cell(table, GROUP_PREFIX + "dep-3", "ttft99") == "↑" + cell(table, worst, "ttft99")  # marked: not the group's own
        # sorted by Run: groups by their total, largest first
        totals = [float(cell(table, k, "run")) for k in order if k.startswith(GROUP_PREFIX)]
        assert totals == sorted(totals, reverse=True)
        # the cursor on a group row selects no engine (engine keys never act on a group)
        table.move_cursor(row=g)
        await until(pilot, lambda: table.cursor_row == g and table.selected_engine is None, "the cursor on the group row")
        assert table.selected_engine is None

        # then by model, then by node, then no groups
        await pilot.press("G")
        await until(pilot, lambda: table.row_count == N + MODELS, "model groups")
        assert cell(table, GROUP_PREFIX + "m2", "name") == "▾ m2 (100)"
        assert cell(table, GROUP_PREFIX + "m2", "model") == "m2"
        await pilot.press("G")
        await until(pilot, lambda: table.row_count == N + NODES, "node groups")
        assert cell(table, GROUP_PREFIX + "node-5", "name") == "▾ node-5 (8)"
        # a filter while grouped keeps the groups of what matches (a node name matches too)
        table.filter_text = "node-62"
        app.render_snapshot()
        await until(pilot, lambda: rows(table)[:1] == [GROUP_PREFIX + "node-62"], "node-62's group on top, filtered")
        order = rows(table)
        assert order[0] == GROUP_PREFIX + "node-62" and sorted(order[1:]) == [f"e{i:03d}" for i in range(62, N, NODES)]
        table.filter_text = ""
        await pilot.press("G")
        await until(pilot, lambda: table.row_count == N, "no groups")
        assert not any(k.startswith(GROUP_PREFIX) for k in rows(table))


async def test_the_group_key_is_in_help_and_the_palette():
    app = InfertopApp(Settings(config=Config(), endpoints=[]), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: app.screen.query_one("#help-keys").row_count > 0, "the help screen", 60.0)
        help_table = app.screen.query_one("#help-keys")
        help_rows = [[str(getattr(c, "plain", c)) for c in help_table.get_row_at(i)] for i in range(help_table.row_count)]
        assert [r for r in help_rows if r[0] == "G"] == [["G", next(r[1] for r in help_rows if r[0] == "G"), "View"]]
        assert any(r[0] == "G" and r[1].startswith("Group engines by deployment, model or node") for r in help_rows)
        await pilot.press("escape")
        from infertop.ui.commands import InfertopCommands

        provider = InfertopCommands(app.screen)
        hits = [hit async for hit in provider.search("group engines")]
        assert any("Group engines by deployment" in str(h.match_display) and h.help == "key: G" for h in hits)
