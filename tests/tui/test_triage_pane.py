"""The Triage pane (Pilot): verdicts from fleets driven into trouble over loopback HTTP, their evidence,
remedies one key away through the one action pipeline, text only when read-only or replaying, the
verdicts recorded and replayed as they were, and every pane and detail screen while engines crash."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from fake_pynvml import FakeNvml, h100, l4
from locations import FAKE_ENGINE
from infertop.analysis.triage import Evidence, Remedy, Verdict
from infertop.config import Config, GpuConfig, ProfileConfig
from infertop.domain.engine import DOWN, UP, EngineStats
from infertop.sources.gpu import GpuCollector
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_types import FRESH, STALE, EngineState, FleetState, Freshness
from infertop.state.recording.recorder import Recorder
from infertop.state.recording.replay import Player, Replay
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.engine_detail import EngineDetailScreen
from infertop.ui.screens.engine_dialogs import ArgsDialog
from infertop.ui.screens.gpu_detail import GpuDetailScreen
from infertop.ui.screens.help import HelpScreen
from infertop.ui.screens.verdict_detail import VerdictDetailScreen
from infertop.ui.widgets.engines_table import EnginesTable
from infertop.ui.widgets.gpus import GpusTable
from infertop.ui.widgets.triage import TriagePane
from pilot_wait import until
from ports import free_port
from vllm_text import v1_doc

T0 = 1_796_025_600.0  # a wall-clock time (replay refuses others)
FAKE = str(FAKE_ENGINE)


class Clock:
    """The ticks' wall clock: each test moves it on, so minimum durations pass without sleeping."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def queue_bound_doc() -> str:
    """Every slot of 8 busy, 5 waiting, KV cache 40 %: out of capacity."""
    return v1_doc(engines={"0": {"running": 8, "waiting": 5, "kv": 0.4}}, model="llama")


def kv_bound(metrics_calls: list[int]):
    """KV cache 97 % full and preempting (the counter grows with every scrape), tokens counted."""
    def doc() -> str:
        metrics_calls.append(1)
        n = len(metrics_calls)
        return v1_doc(engines={"0": {"running": 8, "waiting": 2, "kv": 0.97, "preempt": 3 * n, "gen": 40 * n}},
                      model="llama")
    return doc


def troubled_fleet(scripted) -> list[EngineEndpoint]:
    alpha = scripted().serve_engine(queue_bound_doc(), model="llama")
    beta = scripted().serve_engine(kv_bound([]), model="llama")
    return [EngineEndpoint("alpha", alpha.url, max_num_seqs=8, timeout_s=30),
            EngineEndpoint("beta", beta.url, max_num_seqs=16, timeout_s=30),
            EngineEndpoint("gone", f"http://127.0.0.1:{free_port()}"),  # nothing listens there: down
            EngineEndpoint("lost", f"http://127.0.0.1:{free_port()}")]


def app_for(endpoints, clock: Clock, **settings) -> InfertopApp:
    return InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=list(endpoints),
                                wall_clock=clock, **settings), poll=False)


async def ticks(app, clock: Clock, n: int) -> None:
    for _ in range(n):
        await app.poll_now()
        clock.t += 1.0


def pane_lines(app) -> list[str]:
    """The Triage pane's list, one string per line of each option."""
    pane = app.query_one(TriagePane)
    return [line for i in range(pane.options.option_count)
            for line in str(getattr(pane.options.get_option_at_index(i).prompt, "plain", "")).splitlines()]


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def highlight(app, predicate) -> None:
    """Move the Triage list's highlight to the first option whose text satisfies ``predicate``."""
    ol = app.query_one(TriagePane).options
    ol.highlighted = next(i for i in range(ol.option_count)
                          if predicate(str(getattr(ol.get_option_at_index(i).prompt, "plain", ""))))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_triage_pane_lists_queue_bound_and_kv_bound_with_evidence_and_remedy_keys(scripted, size):
    clock = Clock()
    app = app_for(troubled_fleet(scripted), clock)
    async with app.run_test(size=size) as pilot:
        await ticks(app, clock, 8)
        assert [(v.kind, v.subject) for v in app.state.verdicts] == [
            ("engine-down", "gone"), ("engine-down", "lost"), ("queue-bound", "alpha"), ("kv-bound", "beta")]
        # the Overview's first line names the worst verdict
        first = screen_lines(app)[3]
        worst = app.state.verdicts[0]
        assert f"◆ critical engine-down gone · since {app.state.taken_at - worst.since:.0f} s · +3 more" in first, first
        await pilot.press("8")
        await until(pilot, lambda: app.current_pane == "triage" and pane_lines(app), what="the Triage pane")
        lines = pane_lines(app)
        text = "\n".join(lines)
        assert "WARNING queue-bound  alpha  · since 7 s" in text, text
        assert "alpha is out of capacity: all 8 slots run and 5 requests wait." in text
        assert "· running / max_num_seqs 8/8  against = max  (now)" in text
        assert "WARNING kv-bound  beta" in text and "· KV cache 97%  against ≥ 95 % (clears < 85 %)" in text
        remedies = [line.strip() for line in lines if line.startswith("    ")]
        assert "m  raise max_num_seqs 8 → 16 (KV cache 40%)" in remedies, remedies
        assert "m  lower max_num_seqs 16 → 12 (fewer sequences share the cache)" in remedies
        assert "S  add replicas (the same load on more KV cache)" in remedies
        # it fits the width (no horizontal scroll) and scrolls where it is taller than the pane
        ol = app.query_one(TriagePane).options
        assert ol.max_scroll_x == 0
        await pilot.press("end")
        await until(pilot, lambda: ol.highlighted == ol.option_count - 1
                    and any("S  add replicas" in line for line in screen_lines(app)), what="the last remedy highlighted, on screen")
        assert ol.highlighted == ol.option_count - 1
        if size == (80, 24):
            assert ol.max_scroll_y > 0 and ol.scroll_y > 0  # the last remedy scrolled into view
        assert any("S  add replicas" in line for line in screen_lines(app))
        # the affected engines are marked in the Engines pane
        await pilot.press("2")
        await until(pilot, lambda: app.current_pane == "engines"
                    and app.query_one("#engines-table", EnginesTable).row_count == 4, what="the Engines table on view")
        table = app.query_one("#engines-table", EnginesTable)
        names = {str(table.get_row(k)[0]).strip() for k in table.rows}
        assert names == {"◆ alpha", "◆ beta", "◆ gone", "◆ lost"}


async def test_no_verdict_says_the_fleet_looks_healthy_and_the_overview_has_no_verdict_line(scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 2, "waiting": 0, "kv": 0.2}}), model="llama")
    clock = Clock()
    app = app_for([EngineEndpoint("alpha", srv.url, max_num_seqs=8, timeout_s=30)], clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await ticks(app, clock, 3)
        assert "Engines up" in screen_lines(app)[3]  # the tiles come first: no verdict line
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        assert pane_lines(app) == ["no verdict — the fleet looks healthy"]
        await pilot.press("question_mark")  # the help says what the pane is and what ◆ means
        help_screen = await until(pilot, lambda: isinstance(app.screen, HelpScreen) and app.screen, what="help")
        table = help_screen.query_one("#help-keys")
        await until(pilot, lambda: table.row_count > 0, what="the keys")
        rows = {str(table.get_row(k)[0]): str(table.get_row(k)[1]) for k in table.rows}
        assert "Triage pane" in rows["8"] and "◆ marks the engines and GPUs a verdict is about" in rows["8"]


async def test_a_throttled_gpu_is_marked_in_the_gpus_pane_and_its_evidence_has_its_trends():
    clock = Clock()
    nv = FakeNvml([h100(0), l4(1)])  # the L4 runs at its thermal limit
    app = InfertopApp(Settings(config=Config(), endpoints=[], wall_clock=clock), poll=False,
                      gpu_collector=GpuCollector(GpuConfig(nvml=True), nvml_module=nv))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(12):
            await app.poll_gpus_now()
            clock.t += 1.0
        (v,) = app.state.verdicts
        assert v.kind == "gpu-throttled" and v.subject.endswith("gpu1")
        await pilot.press("4")
        await until(pilot, lambda: app.current_pane == "gpus" and app.query_one("#gpus-table", GpusTable).row_count == 2,
                    what="the GPUs table on view")
        t = app.query_one("#gpus-table", GpusTable)
        labels = [str(t.get_row(k)[0]).strip() for k in t.rows]
        assert labels == ["gpu0", "◆ gpu1"]
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        await pilot.press("enter")  # on the verdict: its evidence
        screen = await until(pilot, lambda: isinstance(app.screen, VerdictDetailScreen) and app.screen,
                             what="the verdict's evidence")
        await until(pilot, lambda: "Trends from" in str(screen.query_one("#verdict-trends-title").render()),
                    what="its trends")
        body = str(screen.query_one("#verdict-body").render())
        assert "is throttled (HW thermal" in body and "Evidence" in body
        util = screen.query_one("#vtrend-0")
        assert util.title == "Util" and len(util._series) >= 12  # every tick since the first
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, what="back on the Triage pane")
        assert app.current_pane == "triage"


async def test_enter_on_a_verdict_opens_its_signals_trends_around_the_onset_and_esc_goes_back(scripted):
    calls: list[int] = []
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 2, "waiting": 0, "kv": 0.3}}), model="llama")
    clock = Clock()
    app = app_for([EngineEndpoint("beta", srv.url, max_num_seqs=16, timeout_s=30)], clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await ticks(app, clock, 10)  # healthy first: the trends have a before
        srv.serve_engine(kv_bound(calls), model="llama")
        await ticks(app, clock, 8)
        (v,) = app.state.verdicts
        assert v.kind == "kv-bound"
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, VerdictDetailScreen) and app.screen,
                             what="the verdict's evidence")
        await until(pilot, lambda: "Trends from" in str(screen.query_one("#verdict-trends-title").render()),
                    what="its trends")
        title = str(screen.query_one("#verdict-trends-title").render())
        assert "from 10 s before the onset to now" in title, title
        body = str(screen.query_one("#verdict-body").render())
        assert "beta is KV-cache bound" in body and "KV cache  97%  against ≥ 95 %" in body
        kv = screen.query_one("#vtrend-0")
        assert kv.title == "KV cache %" and kv._series[:10] == [30.0] * 10 and kv._series[-1] == 97.0
        await ticks(app, clock, 1)  # it follows the ticks while open
        assert "(8 s)" in str(screen.query_one("#verdict-body").render())
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main and app.current_pane == "triage", what="back")


def notes(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def confirm_and_wait(app, pilot) -> ConfirmScreen:
    """The one confirmation screen of the pipeline: its check, y, the end."""
    screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is not None
                         and app.screen, what="the check")
    assert screen.dry_run_ok, screen.dry_run_text
    await pilot.press("y")
    await until(pilot, lambda: screen.state == "done", what=f"done: {screen.progress_text}")
    return screen


async def test_a_remedy_key_opens_its_action_prefilled_through_the_one_pipeline(tmp_path, monkeypatch):
    """A local engine out of capacity (4 of 4 running, 3 waiting, KV 40 %): on the Triage pane m opens the
    max_num_seqs dialog of that engine with the remedy's 8 filled in; Enter, y: drained, restarted,
    verified and audited as m on the Engines pane does."""
    from infertop.control.audit import AuditLog
    from infertop.control.engines import EngineManager

    for var, value in (("FAKE_ENGINE_RUNNING", "4"), ("FAKE_ENGINE_WAITING", "3"), ("FAKE_ENGINE_KV", "0.4")):
        monkeypatch.setenv(var, value)  # the engine process's load (it inherits the environment)
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.profiles["fake"] = ProfileConfig(model="fake-model", served_model_name="fake", port=free_port(),
                                         max_num_seqs=4, python=sys.executable, start_timeout_s=30.0,
                                         stop_grace_s=5.0)
    state_dir = tmp_path / "state"
    cli = EngineManager(state_dir, AuditLog(state_dir / "audit.jsonl"), profiles=cfg.profiles, module=FAKE)
    cli.start("fake", cfg.profiles["fake"])
    clock = Clock()
    app = InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(state_dir), engine_module=FAKE,
                               wall_clock=clock), poll=False)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            # watched, not only known to the manager: init's list can miss an engine still starting, and
            # then the periodic discovery adds it (seen in full runs: no engine in the state after 90 ticks)
            await until(pilot, lambda: app.managed("fake") is not None
                        and any(c.endpoint.name == "fake" for c in app.collector.collectors), what="adopted")
            for _ in range(90):  # ticks of the fake clock until the verdict holds (a loaded host: slow first polls)
                await ticks(app, clock, 1)
                if any(v.kind == "queue-bound" for v in app.state.verdicts):
                    break
            found = [v for v in app.state.verdicts if v.kind == "queue-bound"]
            assert len(found) == 1, ([(v.kind, v.subject) for v in app.state.verdicts],
                                     [(e.name, e.stats.state, e.stats.running, e.stats.waiting, e.fresh)
                                      for e in app.state.engines], list(app.log_lines)[-8:], [c.endpoint.name for c in app.collector.collectors])
            (v,) = found
            assert [str(r) for r in v.remedies if r.key == "m"] == ["m: raise max_num_seqs 4 → 8 (KV cache 40%)"]
            await pilot.press("8")
            await until(pilot, lambda: pane_lines(app), what="the Triage pane")
            await pilot.press("m")
            dialog = await until(pilot, lambda: isinstance(app.screen, ArgsDialog) and app.screen, what="the dialog")
            assert (dialog.engine, dialog.old) == ("fake", 4)
            assert dialog.query_one("#value").value == "8"  # the remedy's value, filled in
            await pilot.press("enter")
            op = await confirm_and_wait(app, pilot)
            assert op.change == "max_num_seqs 4 → 8"
            assert op.result == "ok" and "verified in the running process (max_num_seqs=8)" in op.result_text
            await pilot.press("escape")
    finally:
        cli.stop("fake")
    audit = [json.loads(line) for line in (state_dir / "audit.jsonl").read_text().splitlines()]
    sets = [e for e in audit if e.get("action") == "engine.set" and "result" in e]
    assert [(e["target"], e["old"], e["new"], e["result"]) for e in sets] == [
        ("fake", {"max_num_seqs": 4}, {"max_num_seqs": 8}, "ok")]


async def test_an_engine_remedy_on_an_engine_infertop_did_not_start_says_so_and_opens_nothing(scripted):
    clock = Clock()
    app = app_for(troubled_fleet(scripted)[:1], clock)  # alpha: out of capacity, not started by infertop
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await ticks(app, clock, 7)
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        highlight(app, lambda text: "raise max_num_seqs" in text)
        await pilot.press("enter")
        await until(pilot, lambda: any("alpha was not started by infertop" in n for n in notes(app)), what="why")
        await pilot.press("m")
        await pilot.pause()  # nothing to wait for: nothing may open
        assert app.screen is app.main


@pytest.mark.parametrize("how", ["read-only", "replay"])
async def test_read_only_and_replay_show_remedies_as_text_and_no_key_opens_anything(scripted, tmp_path, how):
    clock = Clock()
    if how == "read-only":
        app = app_for(troubled_fleet(scripted), clock, read_only=True)
    else:
        path = tmp_path / "flight.infertop"
        live = app_for(troubled_fleet(scripted), clock, record_path=str(path), state_dir=str(tmp_path / "s"))
        async with live.run_test(size=(120, 40)):
            await ticks(live, clock, 8)
        app = replay_app(path)
    async with app.run_test(size=(120, 40)) as pilot:
        if how == "read-only":
            await ticks(app, clock, 8)
        else:
            app.player.pause()
            app.player.seek(clock.t - 1.0)
            app.replay_ctl.jump()
        await pilot.press("8")
        await until(pilot, lambda: any("raise max_num_seqs" in line for line in pane_lines(app)), what="remedies")
        lines = pane_lines(app)
        remedies = [line for line in lines if "max_num_seqs 8 → 16" in line or "add replicas" in line]
        assert remedies and all(line.startswith("        ·  ") for line in remedies), remedies  # no key
        title = str(app.query_one("#triage-title").render())
        assert f"remedies as text only ({how})" in title, title
        for key in ("m", "S", "r"):
            await pilot.press(key)
            await pilot.pause()  # nothing to wait for: nothing may open
            assert app.screen is app.main, key
        highlight(app, lambda text: "raise max_num_seqs" in text)
        await pilot.press("enter")
        await until(pilot, lambda: any(f"{how}: remedies are shown as text only" in n for n in notes(app)),
                    what="text only")
        assert app.screen is app.main
        highlight(app, lambda text: "queue-bound  alpha" in text)
        await pilot.press("enter")  # the evidence is a view: it opens
        await until(pilot, lambda: isinstance(app.screen, VerdictDetailScreen), what="the evidence")


def replay_app(path) -> InfertopApp:
    player = Player(Replay(str(path)), clock=Clock(1000.0))
    return InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], read_only=True,
                                mode="replay", replay=player, replay_path=str(path)), poll=False)


async def test_replay_shows_the_verdicts_recorded_live_at_the_same_times(scripted, tmp_path):
    path = tmp_path / "flight.infertop"
    clock = Clock()
    app = app_for(troubled_fleet(scripted), clock, record_path=str(path), state_dir=str(tmp_path / "state"))
    live: dict[float, tuple] = {}
    async with app.run_test(size=(120, 40)):
        for _ in range(12):
            await ticks(app, clock, 1)
            live[app.state.taken_at] = app.state.verdicts
    assert {v.kind for v in live[max(live)]} == {"engine-down", "queue-bound", "kv-bound"}
    assert live[min(live)] == ()  # nothing held long enough at the first tick
    replay = replay_app(path)
    async with replay.run_test(size=(120, 40)) as pilot:
        replay.player.pause()
        for at, verdicts in live.items():
            replay.player.seek(at)
            replay.replay_ctl.jump()
            assert replay.state.taken_at == at and replay.state.verdicts == verdicts, at
        await pilot.press("8")
        await until(pilot, lambda: any("kv-bound  beta" in line for line in pane_lines(replay)), what="the pane")
        assert any("verdict kv-bound beta: beta is KV-cache bound" in line for line in replay.log_lines)


async def test_replay_shows_what_was_recorded_and_evaluates_nothing_again(tmp_path):
    """A recording of an engine down for 10 s with no verdict recorded shows no verdict (evaluated again, it
    would be engine-down); a verdict in the recording is shown although the state alone would not raise it."""
    recorded = Verdict("kv-bound", "alpha", "warning", T0 + 5, "alpha is KV-cache bound (as recorded).",
                       (Evidence("KV cache", "97%", "≥ 95 %"),), (Remedy("lower max_num_seqs 16 → 12", "m", "alpha", 12),),
                       changes=("max_num_seqs 8 → 16 on alpha, 40 s before",))
    path = tmp_path / "flight.infertop"
    with Recorder(str(path)) as rec:
        for i in range(10):
            down = EngineStats(name="beta", url="http://127.0.0.1:9", state=DOWN, error="connection refused")
            up = EngineStats(name="alpha", url="http://127.0.0.1:8", state=UP, running=2.0, waiting=0.0,
                             max_num_seqs=16, kv_cache_pct=20.0)
            st = FleetState(tick=i, taken_at=T0 + i, refresh_s=1.0, window_s=60.0, slo=Config().slo,
                            engines=(EngineState(up, Freshness(FRESH, up.url, T0 + i, 0.0)),
                                     EngineState(down, Freshness(STALE, down.url, T0, i, T0, "connection refused"))),
                            verdicts=(recorded,) if i >= 5 else ())
            rec.append(st.taken_at, st.to_doc())
    app = replay_app(path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.player.pause()
        app.player.seek(T0 + 4)
        app.replay_ctl.jump()
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app) == ["no verdict — the fleet looks healthy"], what="healthy")
        app.player.seek(T0 + 9)
        app.replay_ctl.jump()
        await until(pilot, lambda: any("alpha is KV-cache bound (as recorded)." in line for line in pane_lines(app)),
                    what="the recorded verdict")
        assert app.state.verdicts == (recorded,)
        assert "since 4 s" in pane_lines(app)[0]  # on the recording's clock, not today's
        assert "  changed before: max_num_seqs 8 → 16 on alpha, 40 s before" in pane_lines(app)


class FlappingEngine:
    """tests/support/fake_engine.py as a process on one loopback port: killed (down, connection refused) and started
    again (up) as a crashing engine is."""

    def __init__(self, name: str) -> None:
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def up(self) -> None:
        env = dict(os.environ, FAKE_ENGINE_RUNNING="2", FAKE_ENGINE_WAITING="1")
        self.proc = subprocess.Popen([sys.executable, FAKE, "--port", str(self.port), "--max-num-seqs", "4"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def down(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)  # a crash: no drain, the port refuses at once
            self.proc.wait()
            self.proc = None


async def test_every_pane_and_detail_screen_while_engines_crash_and_come_back():
    """Issue 24 saw NoMatches('#trend-running') on EngineDetailScreen end the console: a tick painted a detail
    screen in the turn it was pushed. Here ticks land right after every push and pop, while engines die and
    return, on every pane and every detail screen: the console keeps running and raises nothing."""
    engines = [FlappingEngine("e1"), FlappingEngine("e2")]
    for e in engines:
        e.up()
    clock = Clock()
    app = InfertopApp(Settings(config=Config(), endpoints=[EngineEndpoint(e.name, e.url, max_num_seqs=4, timeout_s=5)
                                                           for e in engines], wall_clock=clock), poll=False,
                      gpu_collector=GpuCollector(GpuConfig(nvml=True), nvml_module=FakeNvml([h100(0), l4(1)])))

    def up(name: str) -> bool:
        e = app.state.engine(name) if app.state is not None else None
        return e is not None and e.stats.state == UP

    async def tick() -> None:
        await app.poll_now()
        await app.poll_gpus_now()
        clock.t += 1.0

    async def until_state(pilot, name: str, want_up: bool) -> None:
        for _ in range(200):
            await tick()
            if up(name) == want_up:
                return
            await asyncio.sleep(0.05)  # a process starting: its port opens in its own time
        raise AssertionError(f"{name} never {'up' if want_up else 'down'}")

    try:
        async with app.run_test(size=(100, 30)) as pilot:
            for e in engines:
                await until_state(pilot, e.name, True)
            for round_ in range(3):
                victim = engines[round_ % 2]
                victim.down()
                for pane in "12345678":
                    await pilot.press(pane)
                    await tick()  # the pane painted while an engine is going down
                # every detail screen, each with ticks right after it is pushed and popped
                for pane, screen_type in (("2", EngineDetailScreen), ("4", GpuDetailScreen),
                                          ("8", VerdictDetailScreen)):
                    await pilot.press(pane)
                    await tick()
                    if pane == "8":
                        await until(pilot, lambda: app.state.verdicts, what="a verdict")  # engine-down after 3 s
                        await tick()
                    await pilot.press("enter")
                    await tick()
                    await until(pilot, lambda: isinstance(app.screen, screen_type), what=screen_type.__name__)
                    await tick()
                    await pilot.press("escape")
                    await tick()
                    assert app.screen is app.main
                await pilot.press("question_mark")
                await tick()
                assert isinstance(app.screen, HelpScreen)
                await pilot.press("escape")
                await until_state(pilot, victim.name, False)
                victim.up()
                await pilot.press("2", "enter")  # an engine's detail open while it comes back
                await until_state(pilot, victim.name, True)
                await pilot.press("escape")
                await tick()
                assert app.is_running
            assert app.is_running and app.screen is app.main
        assert app.return_code in (None, 0)
    finally:
        for e in engines:
            e.down()


def serving_doc(calls: list[int]) -> str:
    """Out of capacity with traffic: 8 of 8 running, 5 waiting, KV 40 %, 4 requests finishing per scrape in
    about 3 s each (vLLM's E2E histogram), so Little's law has an arrival rate and a residence time."""
    calls.append(1)
    n = len(calls)
    doc = v1_doc(engines={"0": {"running": 8, "waiting": 5, "kv": 0.4, "success": 4 * n, "gen": 50 * n}},
                 model="llama")
    lab = 'engine="0",model_name="llama"'
    rows = ["# HELP vllm:e2e_request_latency_seconds doc", "# TYPE vllm:e2e_request_latency_seconds histogram"]
    for le in ("1.0", "2.5", "5.0", "10.0", "+Inf"):
        rows.append(f'vllm:e2e_request_latency_seconds_bucket{{{lab},le="{le}"}} {0.0 if float(le) < 2.5 else 4.0 * n}')
    rows += [f"vllm:e2e_request_latency_seconds_count{{{lab}}} {4.0 * n}",
             f"vllm:e2e_request_latency_seconds_sum{{{lab}}} {12.0 * n}"]
    return doc + "\n".join(rows) + "\n"


async def test_s_opens_the_scale_dialog_of_the_workload_running_the_engine_with_littles_law_replicas(
        kube_emulator, scripted, tmp_path):
    from infertop.config import KubeConfig
    from infertop.ui.screens.kube_dialogs import FormDialog

    emu = kube_emulator("triage-token", reconcile_interval=0.2)
    emu.add_deployment("default", "vllm", replicas=1, args=["--max-num-seqs", "8"])
    emu.wait_until(lambda: len(emu.list("pods", "default", "app=vllm")) == 1)
    pod = emu.list("pods", "default", "app=vllm")[0]["metadata"]["name"]
    calls: list[int] = []
    srv = scripted().serve_engine(lambda: serving_doc(calls), model="llama")
    cfg = Config(gpu=GpuConfig(nvml=False), audit_log=str(tmp_path / "audit.jsonl"),
                 kube=KubeConfig(kubeconfig=str(emu.write_kubeconfig(tmp_path / "kc")), refresh_s=0.3))
    clock = Clock()
    endpoints = [EngineEndpoint(pod, srv.url, max_num_seqs=8, timeout_s=30),  # an engine named after its pod
                 EngineEndpoint("elsewhere", queue_bound_url(scripted), max_num_seqs=8, timeout_s=30)]
    app = InfertopApp(Settings(config=cfg, endpoints=endpoints, state_dir=str(tmp_path / "state"), wall_clock=clock),
                      poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.session is not None and app.kube_ctl.connection.snapshot is not None, what="connect")
        await ticks(app, clock, 12)
        by_subject = {v.subject: v for v in app.state.verdicts if v.kind == "queue-bound"}
        (scale,) = [r for r in by_subject[pod].remedies if r.key == "S"]
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        highlight(app, lambda text: f"queue-bound  {pod}" in text)
        await pilot.press("S")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen, what="the scale dialog")
        assert form.title_text == "Scale deployment default/vllm"
        assert form.query_one("#field-replicas").value == str(scale.value) and scale.value >= 2
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, what="cancelled")
        # an engine no pod serves: said, nothing opens
        highlight(app, lambda text: "queue-bound  elsewhere" in text)
        await pilot.press("S")
        await until(pilot, lambda: any("elsewhere maps to no workload" in n for n in notes(app)), what="why")
        assert app.screen is app.main
        # the remedy's line: Enter opens it too, and y scales through the pipeline
        pane = app.query_one(TriagePane)
        pane.options.highlighted = next(i for i, row in enumerate(pane._rows) if row is not None
                                        and row.key == ("queue-bound", pod) and row.remedy is not None
                                        and by_subject[pod].remedies[row.remedy].key == "S")
        assert pane.selected()[1] == scale
        await pilot.press("enter")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen, what="the dialog again")
        await pilot.press("enter")
        screen = await confirm_and_wait(app, pilot)
        assert screen.change == f"replicas 1 → {scale.value}" and screen.result == "ok", screen.result_text
    scaled = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [e["result"] for e in scaled if e.get("action") == "kube.scale" and "result" in e] == ["ok"]


def queue_bound_url(scripted) -> str:
    return scripted().serve_engine(queue_bound_doc(), model="other").url


def test_a_recorded_verdict_of_the_wrong_shape_is_a_damaged_recording_not_a_crash(tmp_path):
    """A recording is a file someone may hand over: a verdict whose since is text would end the pane that ages
    it. It is a damaged tick (one line, as any tick of the wrong shape), and at most 1000 verdicts are built."""
    from infertop.flight_cli import open_replay

    good = FleetState(tick=0, taken_at=T0, refresh_s=1.0, window_s=60.0, slo=Config().slo,
                      verdicts=(Verdict("kv-bound", "alpha", "warning", T0, "full"),) * 1500).to_doc()
    assert len(FleetState.from_doc(json.loads(json.dumps(good))).verdicts) == 1000
    bad = json.loads(json.dumps(good))
    bad["verdicts"] = [dict(bad["verdicts"][0], since="yesterday")]
    path = tmp_path / "bad.infertop"
    with Recorder(str(path)) as rec:
        rec.append(T0, bad)
    with pytest.raises(ValueError, match="damaged recording"):
        open_replay(str(path))


async def test_a_replayed_tick_with_a_thousand_verdicts_logs_twenty_lines_and_a_count(tmp_path):
    many = tuple(Verdict("engine-down", f"e{i}", "critical", T0, f"e{i} does not answer.") for i in range(1000))
    path = tmp_path / "many.infertop"
    with Recorder(str(path)) as rec:
        rec.append(T0, FleetState(tick=0, taken_at=T0, refresh_s=1.0, window_s=60.0, slo=Config().slo,
                                  verdicts=many).to_doc())
    app = replay_app(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state is not None and len(app.state.verdicts) == 1000, what="the tick")
        told = [line for line in app.log_lines if " verdict engine-down " in line]
        assert len(told) == 20 and any("… and 980 more verdicts raised or cleared at this tick" in line
                                       for line in app.log_lines)
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app)[-1] == "… 900 more verdicts", what="the pane's 100 and a count")
