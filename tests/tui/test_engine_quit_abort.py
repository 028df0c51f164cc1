"""An abort during an engine *start* is honoured (issue 27 item 6).

The UI used to raise from the progress callback to abort a start, but the
manager's progress emitter swallows callback exceptions: the start went on,
the engine came up and the action said "ok". The abort now goes to
``EngineManager.start(abort=...)``, which kills what it spawned.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from engine_env import Env, alive, wait_until

from infertop.control.engines import EngineAborted, EngineError
from infertop.control.engines.kind import EngineAction
from infertop.control.pipeline import execute_audited


@pytest.fixture
def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    e.cleanup()


def test_manager_start_stops_waiting_and_kills_the_spawn_when_aborted(env):
    mgr = env.manager()
    abort = threading.Event()
    pids: list[int] = []

    def progress(ev) -> None:
        if ev.phase == "spawned":
            pids.append(ev.pid)
            abort.set()

    with pytest.raises(EngineAborted) as ei:
        mgr.start("slow", env.profile(name="slow", start_delay=60), progress, abort=abort)
    assert "aborted while waiting for /health" in ei.value.reason
    assert pids and wait_until(lambda: not alive(pids[0]), timeout=15), "what was spawned is stopped"
    assert mgr.status("slow") is None
    assert [(e["action"], e["result"]) for e in env.audit()][-1] == ("engine.start", "aborted")


def test_ui_start_action_aborted_after_spawn_is_aborted_not_ok(env):
    """Old code: the abort raised in the callback was swallowed; the engine came up, outcome 'ok'."""
    mgr = env.manager()
    action = EngineAction(mgr, "start", "e", profile=env.profile(start_delay=3), profile_name="e")
    abort = threading.Event()
    pids: list[int] = []

    def progress(p) -> None:
        m = re.match(r"spawned pid (\d+)", p.text)
        if m:
            pids.append(int(m.group(1)))
            abort.set()

    outcome = action.execute(progress, abort)
    assert outcome.result == "aborted", outcome
    assert pids and wait_until(lambda: not alive(pids[0]), timeout=15)
    assert mgr.status("e") is None, "nothing is left running"


async def test_quit_mid_restart_aborts_it_and_undrains_at_the_gateway_before_exiting(env, tmp_path, monkeypatch):
    """r, y, q, y: the old code abandoned the restart and exited with the engine drained at the gateway."""
    from pilot_wait import until
    from engine_env import FAKE
    from gateway_child import TOKEN, Gateway, fake_profile

    from infertop.config import load_config
    from infertop.control.audit import AuditLog
    from infertop.ui.app import InfertopApp, Settings
    from infertop.ui.screens.actions_list import QuitScreen
    from infertop.ui.screens.confirm import ConfirmScreen

    monkeypatch.setenv("INFERTOP_GATEWAY_TOKEN", TOKEN)
    gw = Gateway(tmp_path, [{"name": "e", "url": "e", "cap": 16}], {"e": fake_profile(env, start_delay=0)})
    try:
        rec = env.manager().start("e", env.profiles["e"])
        cfg = load_config(gw.config)
        cfg.profiles["e"].env["FAKE_ENGINE_START_DELAY"] = "120"  # the restarted engine never gets healthy here
        app = InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(env.state_dir), engine_module=FAKE),
                          poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.engine_manager is not None and app.managed("e") is not None,
                        what="re-adopted")
            await app.workers.wait_for_complete()
            await pilot.press("2")
            await app.poll_now()
            await until(pilot, lambda: app.selected_engine_name() == "e", what="engine e selected on the Engines pane")
            await pilot.press("r")
            screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                                 and app.screen, what="check")
            await pilot.press("y")
            await until(pilot, lambda: "waiting for /health" in screen.progress_text, what=screen.progress_text)
            assert gw.engine("e")["draining"] is True
            await pilot.press("q")
            ask = await until(pilot, lambda: isinstance(app.screen, QuitScreen) and app.screen)
            assert ask.question.startswith("1 action in flight: "), ask.question
            assert f"quitting aborts it and undrains e at gateway 127.0.0.1:{gw.port}; quit? y/n" in ask.question
            await pilot.press("y")
            await until(pilot, lambda: not app.is_running, what="quit")
        assert gw.engine("e")["draining"] is False, "undrained before infertop exited"
        outcomes = [(e["action"], e["result"]) for e in AuditLog(env.audit_path).entries() if "result" in e]
        assert ("gateway.undrain", "ok") in outcomes and ("engine.restart", "aborted") in outcomes, outcomes
        assert app.managed("e") is None or app.managed("e").pid != rec.pid
    finally:
        gw.stop()
        with contextlib.suppress(EngineError):  # the restarted engine, still starting (Env.cleanup ends the rest)
            env.manager().stop("e", grace_s=1)


def test_an_audit_log_that_fails_mid_restart_still_undrains_at_the_gateway(env, tmp_path, monkeypatch):
    """The old code's undrain was refused (nothing sent) when the audit log failed after the drain."""
    from gateway_child import TOKEN, Gateway, fake_profile

    from infertop.config import load_config
    from infertop.control.gateway.drain import find_gateway

    monkeypatch.setenv("INFERTOP_GATEWAY_TOKEN", TOKEN)
    gw = Gateway(tmp_path, [{"name": "e", "url": "e", "cap": 16}], {"e": fake_profile(env)})
    try:
        mgr = env.manager()
        rec = mgr.start("e", env.profiles["e"])
        assert wait_until(lambda: gw.engine("e")["up"], timeout=60)
        drain, _ = find_gateway(load_config(gw.config), "e", rec.url)
        notes: list[str] = []

        def progress(ev) -> None:
            if ev.phase == "spawned" and env.audit_path.is_file():  # the audit log breaks: a directory there now
                env.audit_path.unlink()
                env.audit_path.mkdir()
            if ev.phase == "undrained":
                notes.append(ev.message)

        mgr.restart("e", progress=progress, gateway=drain)
        assert gw.engine("e")["draining"] is False
        assert notes and notes[-1].startswith("undrained at gateway") and "not audited" in notes[-1], notes
    finally:
        gw.stop()


def dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)


def test_drains_left_finds_a_step_drain_with_no_undrain_after_it(tmp_path):
    from infertop.control.audit import AuditLog
    from infertop.control.gateway.drain import STEP_DRAIN_WHY, drains_left

    log = AuditLog(tmp_path / "audit.jsonl")
    t1, t2, t3 = "engine a at gateway g", "engine b at gateway g", "engine c at gateway g"
    for target in (t1, t2):  # a and b: drained by an engine action's step
        op = log.intent("gateway.drain", target, engine=target[7], why=STEP_DRAIN_WHY)
        log.outcome(op, "gateway.drain", target, "ok")
    op = log.intent("gateway.undrain", t2, engine="b")  # b undrained again
    log.outcome(op, "gateway.undrain", t2, "ok")
    op = log.intent("gateway.drain", t3, engine="c", why="by hand")  # c: the operator's own drain
    log.outcome(op, "gateway.drain", t3, "ok")
    assert [e["target"] for e in drains_left(log.entries())] == [t1]


async def test_the_next_start_reports_an_engine_left_drained_once(tmp_path):
    """r, y, then infertop killed mid-restart: the old code's next start said only 'outcome unknown'."""
    from pilot_wait import until
    from engine_ui import settings

    from infertop.control.audit import AuditLog
    from infertop.control.gateway.drain import STEP_DRAIN_WHY, drains_left
    from infertop.ui.app import InfertopApp

    s = settings(tmp_path)
    target = "engine e at gateway 127.0.0.1:9"
    app = InfertopApp(s, poll=False)
    log = AuditLog(app.actions_ctl.audit_log().path)
    op = log.intent("gateway.drain", target, engine="e", why=STEP_DRAIN_WHY)
    log.outcome(op, "gateway.drain", target, "ok")
    lines = log.path.read_text().splitlines()
    log.path.write_text("".join(line.replace(f'"pid": {os.getpid()}', f'"pid": {dead_pid()}') + "\n"
                                for line in lines))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.engine_manager is not None, what="start done")
        await app.workers.wait_for_complete()
        await pilot.press("3")
        text = await until(pilot, lambda: "may still be drained" in (t := "\n".join(
            line.text for line in app.query_one("#log-view").lines)) and t, what="log")
        assert f"gateway: {target} may still be drained" in text and "POST /admin/engines/e/undrain" in text
    last = AuditLog(log.path).entries()[-1]
    assert (last["action"], last["result"], last["op"]) == ("gateway.undrain", "unknown", op)
    assert drains_left(AuditLog(log.path).entries()) == []  # reported once


def test_a_restart_that_cut_requests_says_how_many_in_its_result_and_audit(env):
    """vLLM finished 3 requests with reason abort during the drain: the old restart said only 'healthy'."""
    mgr = env.manager()
    mgr.start("e", env.profile(running=2, drain_s=1, aborted_on_term=3))
    action = EngineAction(mgr, "restart", "e")
    outcome = execute_audited(action, mgr.audit, lambda p: None, threading.Event())  # the pipeline audits it
    assert outcome.result == "ok" and "3 request(s) cut by the restart" in outcome.message, outcome
    last = env.audit()[-1]
    assert (last["action"], last["result"], last.get("requests_cut")) == ("engine.restart", "ok", 3), last
    mgr.stop("e")
