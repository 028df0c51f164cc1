"""Local engine actions through the TUI (Pilot), against the fake engine process."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from engine_env import FAKE
from engine_ui import confirm_and_wait, settings

from infertop.ui.app import InfertopApp, Settings
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.engine_dialogs import ArgsDialog, ProfilePicker
from infertop.ui.screens.engine_detail import EngineDetailScreen
from infertop.ui.widgets.engines_table import EnginesTable
from pilot_wait import until


async def test_start_change_max_num_seqs_and_stop_from_the_keyboard(tmp_path):
    app = InfertopApp(settings(tmp_path), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()  # engine manager ready
        await pilot.press("2", "n")
        assert isinstance(app.screen, ProfilePicker)
        await pilot.press("enter")  # the only profile
        op = await confirm_and_wait(app, pilot)
        assert op.result == "ok", op.result_text
        await pilot.press("escape")
        await app.poll_now()
        await until(pilot, lambda: app.query_one("#engines-table", EnginesTable).selected_engine == "fake",
                    "the started engine selected in the Engines table")
        table = app.query_one("#engines-table", EnginesTable)
        assert table.selected_engine == "fake"
        row = [str(getattr(c, "plain", c)) for c in table.get_row("fake")]
        assert row[1] == "up" and row[4] == "0/4"

        await pilot.press("m")
        assert isinstance(app.screen, ArgsDialog)
        await pilot.press("end", "backspace", "8", "enter")
        op = await confirm_and_wait(app, pilot)
        assert op.change == "max_num_seqs 4 → 8"
        assert op.result == "ok" and "verified in the running process (max_num_seqs=8)" in op.result_text
        await pilot.press("escape")
        await app.poll_now()
        await until(pilot, lambda: cell(table, "fake", 4) == "0/8", "Run/Max 0/8 on the row")
        row = [str(getattr(c, "plain", c)) for c in table.get_row("fake")]
        assert row[4] == "0/8"

        await pilot.press("x")
        op = await confirm_and_wait(app, pilot)
        assert op.result == "ok", op.result_text
        await pilot.press("escape")
        await until(pilot, lambda: "fake" not in [c.endpoint.name for c in app.collector.collectors],
                    "the stopped engine no longer watched")
        assert "fake" not in [c.endpoint.name for c in app.collector.collectors]

    audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    audit = [e for e in audit if "result" in e]  # outcomes (each action also writes an intent first)
    actions = [(e["action"], e["result"]) for e in audit]
    assert actions == [("engine.start", "ok"), ("engine.set", "ok"), ("engine.stop", "ok")]
    change = audit[1]
    assert change["target"] == "fake" and change["old"] == {"max_num_seqs": 4} and change["new"] == {"max_num_seqs": 8}


@pytest.mark.parametrize("restart_unseen", [False, True], ids=["down-seen", "restart-between-polls"])
async def test_a_change_made_outside_this_console_shows_once_the_engine_is_back(tmp_path, restart_unseen):
    """``infertop engine set`` (or another console) restarts an engine this console watches with another
    max_num_seqs: once the engine is back, Run/Max shows the new limit, not the one read at adoption."""
    from infertop.control.audit import AuditLog
    from infertop.control.engines import EngineManager

    s = settings(tmp_path)
    cli = EngineManager(Path(s.state_dir), AuditLog(Path(s.state_dir) / "audit.jsonl"), profiles=s.config.profiles,
                        module=FAKE)
    cli.start("fake", s.config.profiles["fake"])
    try:
        await _watch_an_outside_change(s, cli, restart_unseen)
    finally:
        cli.stop("fake")


async def _watch_an_outside_change(s: Settings, cli, restart_unseen: bool) -> None:
    app = InfertopApp(s, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.managed("fake") is not None, what="adopted")
        await pilot.press("2")
        table = app.query_one("#engines-table", EnginesTable)

        async def shows(limit: str, ready=lambda: True) -> None:
            """Poll (and let the tick's workers finish) until the row's Run/Max is ``limit``."""
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                await app.poll_now()
                await app.workers.wait_for_complete()
                await pilot.pause()  # a step of this loop, which waits for the condition (it polls again each turn)
                if ready() and "fake" in table.rows and cell(table, "fake", 4) == limit:
                    return
                assert asyncio.get_running_loop().time() < deadline, (limit, list(app.log_lines)[-5:])

        await shows("0/4")
        done = threading.Event()
        worker = threading.Thread(target=lambda: (cli.set_args("fake", {"max_num_seqs": 8}), done.set()))
        worker.start()
        try:
            if restart_unseen:  # no poll while it restarts: the console never sees it down
                await asyncio.to_thread(done.wait, 120)
            await shows("0/8", done.is_set)
        finally:
            worker.join(120)
        # the console saw the restart: as a down and up between polls, or (faster than a poll) by its record
        lines = list(app.log_lines)
        if restart_unseen:
            assert any("fake: restarted (pid" in line and "max_num_seqs 4 → 8" in line for line in lines), lines
        else:
            assert any("fake up → down" in line or "fake: restarted (pid" in line for line in lines), lines


async def test_an_engine_started_elsewhere_after_this_console_is_watched(tmp_path):
    """``infertop engine start`` in another terminal once this console runs: within a few seconds its row is
    on the Engines pane (up, Run/Max of its profile; the Log names who started it when that is another
    process — here the other manager runs in this test's process)."""
    from infertop.control.audit import AuditLog
    from infertop.control.engines import EngineManager

    s = settings(tmp_path)
    app = InfertopApp(s, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.engine_manager is not None, what="engine control ready")
        await app.poll_now()
        await pilot.press("2")
        table = app.query_one("#engines-table", EnginesTable)
        assert "fake" not in table.rows
        cli = EngineManager(Path(s.state_dir), AuditLog(Path(s.state_dir) / "audit.jsonl"),
                            profiles=s.config.profiles, module=FAKE)
        await asyncio.to_thread(cli.start, "fake", s.config.profiles["fake"])
        try:
            async def shown() -> bool:
                await app.poll_now()
                await app.workers.wait_for_complete()
                return "fake" in table.rows and cell(table, "fake", 4) == "0/4"

            deadline = asyncio.get_running_loop().time() + 60
            while not await shown():
                assert asyncio.get_running_loop().time() < deadline, list(app.log_lines)[-5:]
                await pilot.pause(0.2)  # discovery lists the state files at most every 5 s
        finally:
            await asyncio.to_thread(cli.stop, "fake")


async def test_actions_greyed_for_unmanaged_and_hidden_read_only(tmp_path):
    app = InfertopApp(settings(tmp_path), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        assert app.check_action("engine_new", ()) is True
        assert app.check_action("engine_stop", ()) is False  # no local engine selected
    ro = InfertopApp(settings(tmp_path, read_only=True), poll=False)
    async with ro.run_test(size=(120, 40)) as pilot:
        await ro.workers.wait_for_complete()
        for action in ("engine_new", "engine_stop", "engine_restart", "engine_set_seqs"):
            assert ro.check_action(action, ()) is False  # not offered
        await pilot.press("n")
        await pilot.pause()  # nothing to wait for: no picker may open
        assert not isinstance(ro.screen, ProfilePicker)


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pytest.mark.parametrize("name", ["127.0.0.1:1", "local:28400", "my engine/a b"])
async def test_engines_named_like_urls_never_crash_and_keys_say_why(tmp_path, name):
    """`infertop --engine http://127.0.0.1:1`, press 2, Enter, x: a traceback once; now an explanation."""
    s = settings(tmp_path)
    s.config.profiles.clear()
    s.endpoints = [EngineEndpoint(name, "http://127.0.0.1:1")]
    app = InfertopApp(s, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.engine_manager is not None, what="engine manager")
        await app.poll_now()
        await pilot.press("2")
        await until(pilot, lambda: app.query_one("#engines-table", EnginesTable).selected_engine == name, 'app.query_one("#engines-table", EnginesTable).selected_en…')
        assert app.query_one("#engines-table", EnginesTable).selected_engine == name
        assert app.check_action("engine_stop", ()) is False
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, EngineDetailScreen))
        await pilot.press("x")
        why = f"{name} was not started by infertop: it can be watched, not stopped or changed"
        await until(pilot, lambda: notices(app), "the notice for x")
        assert isinstance(app.screen, EngineDetailScreen) and app.is_running
        assert notices(app) == [why]
        await pilot.press("escape", "r", "m", "n")
        await until(pilot, lambda: notices(app) == [why, why, why, "no launch profiles in the config: add a 'profiles:' section (see README)"], 'notices(app) == [why, why, why, "no launch profiles in th…')
        assert notices(app) == [why, why, why, "no launch profiles in the config: add a 'profiles:' section (see README)"]
        assert len(app.screen_stack) == 1 and app.is_running


async def test_enter_never_confirms_and_a_configured_engine_keeps_its_timeout_and_stays_watched(tmp_path):
    s = settings(tmp_path)
    port = s.config.profiles["fake"].port
    s.endpoints = [EngineEndpoint("fake", f"http://127.0.0.1:{port}", timeout_s=7.5)]  # listed in `engines:`
    app = InfertopApp(s, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.engine_manager is not None, what="engine manager")
        await pilot.press("2", "n", "enter")  # the only profile
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                             and app.screen, what="check")
        assert screen.title_text == "Start engine fake"
        await pilot.press("enter")
        await until(pilot, lambda: len(app.screen_stack) == 1, what="cancelled")
        assert app.engine_manager.status("fake") is None  # nothing started
        await pilot.press("n", "enter")
        op = await confirm_and_wait(app, pilot)
        assert op.result == "ok", op.result_text
        await pilot.press("escape")
        (ep,) = [c.endpoint for c in app.collector.collectors if c.endpoint.name == "fake"]
        assert ep.timeout_s == 7.5  # not a fixed 2 s
    # another infertop (same state directory) adopts it: the confirmation names who started it
    again = InfertopApp(settings_like(s), poll=False)
    async with again.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: again.managed("fake") is not None, what="adopted")
        await again.poll_now()
        await pilot.press("2", "x")
        op = await until(pilot, lambda: isinstance(again.screen, ConfirmScreen) and again.screen.dry_run_ok
                         and again.screen, what="check")
        assert op.title_text.startswith("Stop engine fake — started by ")
        await pilot.press("y")
        await until(pilot, lambda: op.state == "done", what=op.progress_text)
        assert op.result == "ok", op.result_text
        await pilot.press("escape")
        # listed in `engines:`: still watched after the stop (it shows down, not frozen)
        (ep,) = [c.endpoint for c in again.collector.collectors if c.endpoint.name == "fake"]
        assert ep.timeout_s == 7.5


def cell(table: EnginesTable, row: str, column: int) -> str:
    c = table.get_row(row)[column]
    return str(getattr(c, "plain", c))


def settings_like(s: Settings) -> Settings:
    return Settings(config=s.config, endpoints=list(s.endpoints), state_dir=s.state_dir, engine_module=s.engine_module)


async def test_a_slow_start_can_be_aborted_and_leaves_nothing_running(tmp_path):
    s = settings(tmp_path)
    profile = s.config.profiles["fake"]
    profile.env = {"FAKE_ENGINE_START_DELAY": "120"}  # /health never answers in this test
    app = InfertopApp(s, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.engine_manager is not None, what="engine manager")
        await pilot.press("2", "n", "enter")
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                             and app.screen, what="check")
        await pilot.press("y")
        await until(pilot, lambda: "waiting for /health" in screen.progress_text, what=screen.progress_text)
        assert "left" in screen.progress_text  # counting down to start_timeout_s
        pid = app.engine_manager.status("fake").pid
        await pilot.press("a")
        await until(pilot, lambda: screen.state == "done", what=screen.progress_text)
        assert screen.result == "aborted" and "nothing is left running" in screen.result_text
        assert app.engine_manager.status("fake") is None or not app.engine_manager.status("fake").alive
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    # an abort, not a failure: the abort goes to the manager's start (not raised from its progress callback)
    assert [(e["action"], e["result"]) for e in audit if "result" in e] == [("engine.start", "aborted")]


def test_a_trend_painted_before_it_is_composed_does_not_crash():
    """The tick may paint an engine's detail screen while its Trend widgets are still being composed
    (seen in a tmux walk: Enter on an engine → crash NoMatches 'Label' on Trend); the next tick paints."""
    from infertop.ui.widgets.panels import Trend

    Trend("Running").show([1.0, 2.0], "2")  # not composed: nothing to paint into yet, no exception


async def test_an_engine_detail_painted_in_the_turn_it_is_pushed_does_not_crash(tmp_path):
    """Seen in a tmux walk: Enter on an engine, and the tick painted the detail screen before it was
    composed → crash NoMatches '#detail-body'."""
    app = InfertopApp(settings(tmp_path), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        screen = EngineDetailScreen("fake", app.history)
        app.push_screen(screen)
        app.painter.show_detail(screen)  # the same turn: not composed yet
        await until(pilot, lambda: app.screen is screen and screen.query_one("#detail-body"), "the detail screen composed")
        app.painter.show_detail(screen)
        assert app.screen is screen and "no longer configured" in str(screen.query_one("#detail-body").render())


async def test_an_orphaned_engine_says_orphaned_and_x_cleans_it_up(tmp_path):
    """The engine's main process dies, its worker lives on holding the GPU: the row says "orphaned"
    (not only "down"), the alert and the Log say what is left, and x stops it."""
    import os
    import signal

    from infertop.control.audit import AuditLog
    from infertop.control.engines import EngineManager

    s = settings(tmp_path)
    s.config.profiles["fake"].env = {"FAKE_ENGINE_CHILD": "2"}  # a worker that outlives the server
    cli = EngineManager(Path(s.state_dir), AuditLog(Path(s.state_dir) / "audit.jsonl"), profiles=s.config.profiles,
                        module=FAKE)
    rec = cli.start("fake", s.config.profiles["fake"])
    try:
        app = InfertopApp(s, poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.managed("fake") is not None, what="adopted")
            await pilot.press("2")
            table = app.query_one("#engines-table", EnginesTable)

            async def polled_until(cond, what):
                deadline = asyncio.get_running_loop().time() + 60
                while not cond():
                    await app.poll_now()
                    await app.workers.wait_for_complete()
                    await pilot.pause()  # a step of this loop, which waits for cond (it polls again each turn)
                    assert asyncio.get_running_loop().time() < deadline, (what, list(app.log_lines)[-5:])

            await polled_until(lambda: "fake" in table.rows and cell(table, "fake", 1) == "up", "up")
            os.kill(rec.pid, signal.SIGKILL)  # the server dies; its "EngineCore" lives on
            await polled_until(lambda: cell(table, "fake", 1).startswith("orphaned"), "orphaned")
            assert any("fake: orphaned — main process exited; 1 worker still alive" in line and "x stops" in line
                       for line in app.log_lines)
            e = app.state.engine("fake")
            assert e.freshness.reason.startswith("orphaned: main process exited")
            assert any(a.target == "fake" and "orphaned" in a.text for a in app.state.alerts)
            await pilot.press("x")
            op = await confirm_and_wait(app, pilot)
            assert op.result == "ok", op.result_text
            await pilot.press("escape")
            assert cli.status("fake") is None or not cli.status("fake").alive
    finally:
        if (r := cli.status("fake")) is not None and r.alive:
            cli.stop("fake")


def test_the_review_says_when_requests_outlast_the_drain(tmp_path):
    """Requests here take 35 s (E2E p99) and vLLM drains for 1 s: the stop/restart review says
    they will be cut and what to set — and says nothing when they fit."""
    from infertop.control.audit import AuditLog
    from infertop.control.engines import EngineManager
    from infertop.domain.engine import EngineStats
    from infertop.control.engines.kind import EngineAction

    s = settings(tmp_path)
    mgr = EngineManager(Path(s.state_dir), AuditLog(Path(s.state_dir) / "audit.jsonl"), profiles=s.config.profiles,
                        module=FAKE)
    mgr.start("fake", s.config.profiles["fake"])
    try:
        def review(e2e_s: float):
            stats = EngineStats(name="fake", url="http://127.0.0.1:1", state="up", e2e_p99_s=e2e_s)
            act = EngineAction(mgr, "restart", "fake", profile=s.config.profiles["fake"], stats=lambda r: stats)
            return [n for n in act.plan().notes if "E2E p99" in n]

        [note] = review(35.0)
        drain = mgr.status("fake").args["shutdown_timeout"]
        assert note.startswith(f"! requests here take up to 35.0s (E2E p99) and vLLM drains for {drain:g} s")
        assert "shutdown_timeout ≥ 36 s and stop_grace_s ≥ 46 s" in note
        assert review(0.5) == []
    finally:
        mgr.stop("fake")
