"""The one fleet state: freshness, the joiner's memory, documents, and every
renderer (TUI panes, snapshot table, snapshot JSON) showing the same numbers."""

from __future__ import annotations

import asyncio
import io
import json
import re
from dataclasses import dataclass, field, replace

import pytest

from infertop.config import Config, GpuConfig, SloConfig
from infertop.domain.engine import DOWN, UNKNOWN, UP, EngineStats
from infertop.domain.source import SourceHealth
from infertop.format import count_human, pct_human, rate_human, seconds_human
from infertop.snapshot import collect_state, exit_code, print_table, write_json
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import FRESH, MISSING, STALE, FleetState
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.engines_table import EnginesTable
from infertop.ui.widgets.panels import Trend
from overview_view import alert_lines, hot_rows, tile
from pilot_wait import until
from vllm_text import v1_doc


# -- the joiner, with a fake collector and fake clocks (no I/O) ---------------------------------

@dataclass
class FakeCollector:  # the shape FleetJoiner reads from sources.vllm.EngineCollector
    endpoint: EngineEndpoint
    stats: list = field(default_factory=list)
    health: SourceHealth | None = None
    windows: dict = field(default_factory=dict)


@dataclass
class FakeFleet:
    collectors: list


class Clock:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_800_000_000.0

    def advance(self, s: float) -> None:
        self.mono += s
        self.wall += s


def _good(c: FakeCollector, clock: Clock, running: float) -> None:
    c.stats = [EngineStats(name=c.endpoint.name, url=c.endpoint.url, state=UP, running=running, waiting=1.0,
                           kv_cache_pct=40.0, requests_per_s=2.0, scraped_at=clock.wall, window_s=10.0)]
    c.health = SourceHealth(c.endpoint.name, "vllm", True, last_ok_at=clock.mono)


def _fail(c: FakeCollector, clock: Clock, error: str = "timeout after 2 s") -> None:
    s = c.stats[0]
    c.stats = [EngineStats(name=s.name, url=s.url, state=DOWN, error=error, scraped_at=s.scraped_at)]
    h = c.health
    c.health = replace(h, ok=False, last_error=error, last_error_at=clock.mono,
                       consecutive_failures=h.consecutive_failures + 1)


def _joiner(n: int = 2):
    clock = Clock()
    cols = [FakeCollector(EngineEndpoint(f"e{i}", f"http://127.0.0.1:{9000 + i}")) for i in range(n)]
    for c in cols:
        c.stats = [EngineStats(name=c.endpoint.name, url=c.endpoint.url)]
        c.health = SourceHealth(c.endpoint.name, "vllm", False)
    j = FleetJoiner(FakeFleet(cols), slo=Config().slo, refresh_s=1.0, window_s=60.0,
                    wall=lambda: clock.wall, mono=lambda: clock.mono)
    return j, cols, clock


def test_missing_before_the_first_poll_is_none_with_a_reason_never_zero():
    j, cols, clock = _joiner()
    st = j.build()
    assert [e.freshness.status for e in st.engines] == [MISSING, MISSING]
    assert st.fleet.engines_up == 0 and st.fleet.running is None and st.fleet.requests_per_s is None
    assert st.fleet.missing["running"] == "no engine is up"
    assert st.engines[0].missing["running"] == "not polled yet"
    doc = json.loads(json.dumps(st.to_doc(), allow_nan=False))
    assert doc["fleet"]["requests_per_s"] is None and doc["fleet"]["missing"]["requests_per_s"]


def test_down_engine_keeps_its_last_good_values_with_age_and_since():
    j, (a, b), clock = _joiner()
    _good(a, clock, 7)
    _good(b, clock, 5)
    st = j.build()
    assert [e.freshness.status for e in st.engines] == [FRESH, FRESH]
    assert st.fleet.running == 12 and st.all_fresh
    clock.advance(1)
    _fail(b, clock)
    down_at = clock.wall
    clock.advance(4)
    _good(a, clock, 8)
    st = j.build()
    eb = st.engine("e1")
    assert eb.freshness.status == STALE and eb.stats.state == DOWN
    assert eb.stats.running == 5  # the last good value, kept
    assert eb.freshness.age_s == pytest.approx(5.0) and eb.freshness.since == pytest.approx(down_at)
    assert eb.freshness.reason == "timeout after 2 s"
    assert st.fleet.running == 8  # totals only count what is fresh now
    assert not st.all_fresh
    assert [s.name for s in st.failing_sources()] == ["e1"]
    assert any(a.target == "e1" and a.text.startswith("down since ") for a in st.alerts)
    # the engine comes back: fresh again, down-since forgotten
    _good(b, clock, 6)
    st = j.build()
    assert st.engine("e1").freshness.status == FRESH and st.engine("e1").stats.running == 6


def test_a_good_sample_between_two_ticks_is_not_lost():
    j, (a, b), clock = _joiner()
    _good(a, clock, 3)
    _good(b, clock, 4)
    j.observe()  # the poll callback: no tick yet
    _fail(b, clock)
    st = j.build()
    assert st.engine("e1").stats.running == 4 and st.engine("e1").freshness.status == STALE


def test_values_older_than_three_intervals_are_stale():
    j, (a, b), clock = _joiner()
    _good(a, clock, 3)
    _good(b, clock, 4)
    clock.advance(3.5)  # the poll of e1 hangs: health still ok, no new sample
    _good(a, clock, 3)
    st = j.build()
    assert st.engine("e0").freshness.status == FRESH
    e1 = st.engine("e1")
    assert e1.freshness.status == STALE and e1.freshness.reason == "no new sample for 4 s"
    assert [s.name for s in st.sources if s.stale] == ["e1"]


def test_document_round_trip_is_exact_and_valid_json():
    j, (a, b), clock = _joiner()
    _good(a, clock, 3)
    _good(b, clock, float("nan"))  # cleaned at the joiner: no NaN reaches a document
    st = j.build()
    assert st.engine("e1").stats.running is None
    doc = st.to_doc()
    text = json.dumps(doc, allow_nan=False)
    back = FleetState.from_doc(json.loads(text))
    assert back.to_doc() == doc
    assert back.engine("e0").stats == st.engine("e0").stats


# -- snapshot over real HTTP -----------------------------------------------------------------------

def _cfg() -> Config:
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.refresh_s = 0.5
    return cfg


def test_snapshot_keeps_last_good_values_when_the_final_poll_times_out(scripted):
    srv = scripted()
    calls = {"n": 0}
    good = v1_doc(engines={"0": {"running": 3, "waiting": 2}})

    def metrics() -> str:
        calls["n"] += 1
        if calls["n"] > 2:
            srv._release.wait()  # hang from the third poll on, until the server stops
        return good

    srv.routes["/metrics"] = (200, metrics)
    srv.routes["/health"] = (200, "")
    ep = EngineEndpoint("slow", srv.url, timeout_s=0.4)
    st = asyncio.run(collect_state([ep], _cfg(), 2.0))
    e = st.engine("slow")
    assert e.freshness.status == STALE and e.stats.state == DOWN
    assert e.stats.running == 3 and e.stats.waiting == 2  # not thrown away
    assert e.freshness.age_s is not None and e.freshness.age_s > 0
    assert exit_code(st) == 1
    doc = st.to_doc()
    assert doc["engines"][0]["running"] == 3 and doc["engines"][0]["freshness"]["status"] == "stale"


def test_snapshot_exit_code_zero_only_when_everything_is_fresh(scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 1}}))
    st = asyncio.run(collect_state([EngineEndpoint("ok", srv.url)], _cfg(), 0.0))
    assert st.all_fresh and exit_code(st) == 0
    st = asyncio.run(collect_state([EngineEndpoint("ok", srv.url), EngineEndpoint("gone", "http://127.0.0.1:9")],
                                   _cfg(), 0.0))
    assert exit_code(st) == 1 and st.engine("gone").freshness.status == MISSING


def test_snapshot_table_carries_what_json_carries(scripted):
    a = scripted().serve_engine(v1_doc(engines={"0": {"running": 7, "waiting": 3, "kv": 0.95}}), model="llama")
    st = asyncio.run(collect_state([EngineEndpoint("alpha", a.url, max_num_seqs=8),
                                    EngineEndpoint("gone", "http://127.0.0.1:9")], _cfg(), 0.0))
    out = io.StringIO()
    print_table(st, out)
    table = out.getvalue()
    buf = io.StringIO()
    write_json(st, buf)
    doc = json.loads(buf.getvalue())
    assert f"engines up {doc['fleet']['engines_up']}/{doc['fleet']['engines']}" in table
    assert f"running {count_human(doc['fleet']['running'])}" in table
    for a in doc["alerts"]:
        assert f"{a['target']}: {a['text']}" in table
    for s in doc["sources"]:
        assert s["name"] in table
    row = next(line for line in table.splitlines() if line.startswith("alpha "))
    assert row.split()[:6] == ["alpha", "up", "now", "7", "3", "95%"]
    assert "KV cache 95% > 90%" in table
    assert "gpus:" in table


# -- the TUI: one metric, one value ---------------------------------------------------------------

def text_of(root, selector: str) -> str:
    r = root.query_one(selector).render()
    return str(getattr(r, "plain", r))


def cells(app, selector: str) -> dict[str, dict[str, str]]:
    t = app.query_one(selector, EnginesTable)
    keys = [c.key.value for c in t.columns.values()]
    return {rk.value: dict(zip(keys, (str(getattr(c, "plain", c)) for c in t.get_row(rk)))) for rk in t.rows}


def trend_value(app, selector: str) -> str:
    """The value a Trend's label states: "Running  73" → "73"."""
    label = app.query_one(selector, Trend).title_text()
    return label.split("  ", 1)[1].strip() if "  " in label else ""  # "" before it was drawn


@pytest.fixture
def sim_cluster():
    from infertop.sim import SimCluster

    with SimCluster(4, seed=3, realtime=False, load="bursty") as c:
        c.advance(120)
        yield c


async def test_wide_trends_are_drawn_when_the_terminal_widens_not_a_tick_later(sim_cluster):
    eps = [EngineEndpoint(f"vllm-{i}", e.url, max_num_seqs=e.max_num_seqs, timeout_s=30)
           for i, e in enumerate(sim_cluster.engines)]
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=eps), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        sim_cluster.advance(7)
        await app.poll_now()
        f = app.state.fleet
        await until(pilot, lambda: tile(app, "running") == count_human(f.running), "the Overview painted")
        assert trend_value(app, "#t-requests_per_s") == ""  # hidden below 160 columns: not drawn
        await pilot.resize_terminal(200, 60)
        await until(pilot, lambda: app.query_one("#overview-pane").has_class("wide"), "the wide layout")
        assert app.state.fleet is f  # no new tick
        assert trend_value(app, "#t-requests_per_s") == rate_human(f.requests_per_s)
        assert trend_value(app, "#t-e2e_p99_s") == tile(app, "e2e99").split(" ")[0]


async def test_every_visible_copy_of_a_metric_is_equal(sim_cluster):
    eps = [EngineEndpoint(f"vllm-{i}", e.url, max_num_seqs=e.max_num_seqs, timeout_s=30)
           for i, e in enumerate(sim_cluster.engines)]
    # targets the bursty simulation breaches (the defaults are met by a healthy fleet): alerts to compare
    slo = SloConfig(itl_p95_s=0.040, e2e_p99_s=5.0)
    wall = [1_800_000_000.0]  # the ticks' clock moves with the simulation: warnings are shown once held 5 s
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False), slo=slo), endpoints=eps,
                               wall_clock=lambda: wall[0]), poll=False)
    async with app.run_test(size=(160, 50)) as pilot:
        checked_alerts = 0
        for _ in range(4):
            sim_cluster.advance(7)
            wall[0] += 7
            await app.poll_now()
            f = app.state.fleet
            await until(pilot, lambda: tile(app, "running") == count_human(f.running),
                        "the Overview painted from this tick")
            # tiles, sparkline labels and the state agree
            assert tile(app, "running") == trend_value(app, "#t-running") == count_human(f.running)
            assert tile(app, "waiting") == trend_value(app, "#t-waiting") == count_human(f.waiting)
            assert tile(app, "gen") == trend_value(app, "#t-gen") == rate_human(f.generation_tokens_per_s)
            assert tile(app, "ttft99").split(" ")[0] == trend_value(app, "#t-ttft") \
                == seconds_human(f.ttft_p99_s)
            # at 160 columns the wide trends are shown too, from the same tick
            assert trend_value(app, "#t-requests_per_s") == rate_human(f.requests_per_s)
            assert trend_value(app, "#t-itl_p95_s") == tile(app, "itl95").split(" ")[0]
            # the sparkline's newest point is the number beside it
            assert app.history.series("__fleet__", "running")[-1] == pytest.approx(f.running)
            hot = hot_rows(app)
            alerts = alert_lines(app)
            # the Engines pane, shown as a user would, is painted from the same tick
            await pilot.press("2")
            await until(pilot, lambda: app.query_one("#panes").active == "engines", "the Engines pane on view")
            assert app.state.fleet is f
            main = cells(app, "#engines-table")
            await pilot.press("1")
            await until(pilot, lambda: app.query_one("#panes").active == "overview", "the Overview back on view")
            # the Engines table and the hot list show the same cells for the same engine
            for name, row in hot.items():
                for key, text in row.items():
                    assert main[name][key] == text, (name, key)
            # every alert's value is the one in the table beside it
            for text in alerts:
                m = re.match(r"● (\S+) — (.*)", text)
                if not m:
                    continue
                name = m.group(1)
                for part in m.group(2).split(" · "):
                    q = re.match(r"(TTFT p99|ITL p95|E2E p99) (\S+) > ", part)
                    if q:
                        col = {"TTFT p99": "ttft99", "ITL p95": "itl95", "E2E p99": "e2e99"}[q.group(1)]
                        assert main[name][col] == q.group(2), (name, part)
                        checked_alerts += 1
        assert checked_alerts, "the bursty simulation should breach at least one latency SLO"


async def test_no_data_is_a_dash_and_a_down_source_is_a_cross(scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 4, "waiting": 1}}))
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)),
                               endpoints=[EngineEndpoint("only", srv.url, timeout_s=0.5)]), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        # the first frame, before any poll: no data is not zero
        app.tick()
        await until(pilot, lambda: tile(app, "rps") == "—", "the first frame's rps tile")
        assert tile(app, "rps") == "—"
        assert tile(app, "running") == "—"
        await app.poll_now()
        await until(pilot, lambda: tile(app, "running") == "4", "the polled running count")
        assert tile(app, "running") == "4"
        assert "✓ 1/1 engines ok" in text_of(app, "#statusbar")
        srv.hang.add("/metrics")
        await app.poll_now()
        await until(pilot, lambda: tile(app, "running") == "—", "the running tile of a fleet that is down")
        assert tile(app, "running") == "—"  # nothing is up: not 0, not the old value
        assert tile(app, "engines") == "0/1"
        status = text_of(app, "#statusbar")
        assert status.startswith("✗ 1/1 engines down: timeout after 0.5 s, since ")
        await pilot.press("2")
        await until(pilot, lambda: app.query_one("#panes").active == "engines", "the engines pane")
        t = app.query_one("#engines-table", EnginesTable)
        row = t.get_row("only")
        assert str(row[1].plain).startswith("down ")  # state with the age of the values shown
        assert str(row[2].plain) == "4" and "dim" in str(row[2].style)  # the last good value, dimmed
        srv._release.set()


async def test_tui_and_snapshot_render_the_same_numbers_from_one_recorded_state(scripted):
    a = scripted().serve_engine(v1_doc(engines={"0": {"running": 7, "waiting": 3, "kv": 0.5}}), model="m1")
    b = scripted().serve_engine(v1_doc(engines={"0": {"running": 2, "kv": 0.1}}), model="m2")
    eps = [EngineEndpoint("alpha", a.url, max_num_seqs=8), EngineEndpoint("beta", b.url)]
    recorded = (await collect_state(eps, _cfg(), 0.0)).to_doc()
    state = FleetState.from_doc(json.loads(json.dumps(recorded)))
    out = io.StringIO()
    print_table(state, out)
    table = {line.split()[0]: line.split() for line in out.getvalue().splitlines()
             if line.split() and line.split()[0] in ("alpha", "beta")}
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[]), poll=False)
    async with app.run_test(size=(160, 40)) as pilot:
        app.show_state(state)
        await pilot.press("2")  # the Engines pane
        await until(pilot, lambda: app.query_one("#panes").active == "engines", "the engines pane")
        await until(pilot, lambda: {"alpha", "beta"} <= cells(app, "#engines-table").keys(), "both engines' rows")
        tui = cells(app, "#engines-table")
        for name in ("alpha", "beta"):
            t = table[name]
            assert [tui[name]["run"], tui[name]["wait"], tui[name]["kv"]] == [t[3], t[4], t[5]]
        await pilot.press("1")
        await until(pilot, lambda: app.query_one("#panes").active == "overview", "the overview pane")
        await until(pilot, lambda: tile(app, "running") == "9", "the overview's running tile")
        assert tile(app, "running") == count_human(state.fleet.running) == "9"
        assert tile(app, "kv") == f"{pct_human(30.0)}/{pct_human(50.0)}"


def test_state_log_packs_older_ticks_and_gives_them_back_unchanged():
    """The console keeps 15 minutes of states for an incident bundle: packed in the background (a few KiB a
    tick instead of ~2 KiB per engine as objects), and a bundle gets exactly the documents of the states."""
    from infertop.state.recording.state_log import Packed, StateLog, documents

    j, cols, clock = _joiner(8)
    log = StateLog(None, refresh_s=1.0, keep_s=60)
    states = []
    for i in range(12):
        for k, c in enumerate(cols):
            _good(c, clock, running=i + k)
        st = j.build()
        states.append(st)
        log.add(st.taken_at, st)
        clock.advance(1.0)
    log.flush()  # the background thread has handled every queued tick
    kept = log.window(60)
    log.close()  # what window() gave stays usable: the packed ticks were read back from the spill file
    assert [ts for ts, _ in kept] == [s.taken_at for s in states]
    assert all(isinstance(item, Packed) for _, item in kept)
    blocks = {id(item.block): item.block for _, item in kept}.values()  # ticks are packed in blocks
    assert sum(len(b.data) for b in blocks) < sum(len(json.dumps(s.to_doc())) for s in states) / 4
    assert [doc for _, doc in documents(kept)] == [s.to_doc() for s in states]
    assert log.error is None


def test_headless_recorder_log_does_not_pack():
    from infertop.state.recording.state_log import Packed, StateLog

    j, cols, clock = _joiner(1)
    log = StateLog(None, refresh_s=1.0, keep_s=0)
    st = j.build()
    log.add(st.taken_at, st)
    log.close()
    assert not isinstance(log.window(60)[0][1], Packed)


def test_an_engine_that_has_not_answered_yet_is_connecting_not_down_until_the_grace_ends():
    """Start-up on a loaded host: the first polls time out. Until the first answer — for
    CONNECTING_FOR_S — the engine is "connecting": no alert, not down, the status line says so.
    Refused (nothing listens) is down at once; past the grace a silent engine is down too."""
    from infertop.state.fleet_join import CONNECTING_FOR_S
    from infertop.ui.status import status_line

    j, (a, b), clock = _joiner()
    j.connecting_for_s = CONNECTING_FOR_S  # as the console sets it (a one-shot snapshot does not)
    for c, error in ((a, "timeout after 5 s"), (b, "connection refused")):
        c.health = replace(c.health, last_error=error, last_error_at=clock.mono, consecutive_failures=1)
        c.stats = [EngineStats(name=c.endpoint.name, url=c.endpoint.url, state=DOWN, error=error)]
    st = j.build()
    ea, eb = st.engine("e0"), st.engine("e1")
    assert ea.stats.state == UNKNOWN and ea.freshness.reason == "connecting: no answer yet (timeout after 5 s)"
    assert eb.stats.state == DOWN and eb.freshness.reason == "connection refused"  # refused: down at once
    assert [al.target for al in st.alerts if al.severity == "critical"] == ["e1"]
    assert [s.connecting for s in st.sources if s.kind == "vllm"] == [True, False]
    line = status_line(st).plain
    assert "… 1/2 engines connecting" in line and "e1 down: connection refused" in line and "e0" not in line

    clock.advance(CONNECTING_FOR_S)
    st = j.build()
    assert st.engine("e0").stats.state == DOWN and st.engine("e0").freshness.reason == "timeout after 5 s"
    assert {al.target for al in st.alerts if al.severity == "critical"} == {"e0", "e1"}
    assert "connecting" not in status_line(st).plain
