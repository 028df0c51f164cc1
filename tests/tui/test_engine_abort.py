"""Aborting local engine actions (fake engine processes; manager and TUI).

Abort during the drain: infertop stops waiting, sends no SIGKILL, and says
the engine is still stopping. Abort while a restart waits for /health: the
new engine is left as it is (it comes up on its own). Both are audited as
``aborted``. In the TUI, ``a`` aborts a stop / restart / change like a
Kubernetes follow.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pilot_wait import until
from engine_env import Env, alive, wait_until
from engine_ui import confirm_and_wait, settings

from infertop.control.engines import EngineAborted
from infertop.ui.app import InfertopApp
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.engine_dialogs import ArgsDialog


@pytest.fixture
def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    e.cleanup()


def abort_on(phase: str, text: str = ""):
    """A progress callback that sets the abort event at the first event of ``phase`` (containing ``text``)."""
    abort = threading.Event()
    events = []

    def progress(ev) -> None:
        events.append(ev)
        if ev.phase == phase and text in ev.message:
            abort.set()

    return abort, events, progress


def outcomes(env: Env) -> list[tuple[str, str]]:
    return [(e["action"], e["result"]) for e in env.audit()]


def test_abort_during_the_drain_stops_waiting_and_sends_no_sigkill(env):
    mgr = env.manager()
    rec = mgr.start("slowdrain", env.profile(running=2, drain_s=30))
    abort, events, progress = abort_on("draining", "draining (")
    with pytest.raises(EngineAborted) as ei:
        mgr.stop("slowdrain", grace_s=60, progress=progress, abort=abort)
    msg = ei.value.reason
    assert "aborted during the drain" in msg and f"main process {rec.pid}" in msg, msg
    assert "still stopping" in msg and "no SIGKILL" in msg and "exits by itself" in msg, msg
    assert alive(rec.pid), "the engine is still draining, not killed"
    assert mgr.status("slowdrain").phase == "stopping"
    assert outcomes(env)[-1] == ("engine.stop", "aborted")
    assert any(e.countdown_s is not None for e in events if e.phase == "draining")  # counting down to the grace
    mgr.stop("slowdrain", grace_s=0.5)  # ends it
    assert wait_until(lambda: not alive(rec.pid))


def test_abort_while_a_restart_waits_for_health_leaves_the_new_engine(env):
    mgr = env.manager()
    mgr.start("slow", env.profile(name="slow", start_delay=2))
    abort, events, progress = abort_on("waiting")
    with pytest.raises(EngineAborted) as ei:
        mgr.set_args("slow", {"max_num_seqs": 8}, progress, abort=abort)
    msg = ei.value.reason
    assert "aborted while waiting for /health" in msg and "left as it is, still starting" in msg, msg
    assert "max_num_seqs=8" in msg
    assert not any(e.phase == "rollback" for e in events)  # an abort is no failure: nothing rolled back
    new = mgr.status("slow")
    assert new is not None and new.alive and new.max_num_seqs == 8
    assert wait_until(lambda: mgr.health("slow"), timeout=15), "the new engine comes up on its own"
    assert outcomes(env)[-1] == ("engine.set", "aborted")
    mgr.stop("slow")


def test_abort_before_anything_was_signalled_changes_nothing(env):
    mgr = env.manager()
    rec = mgr.start("e", env.profile())
    abort = threading.Event()
    abort.set()
    with pytest.raises(EngineAborted) as ei:
        mgr.restart("e", abort=abort)
    assert "aborted before anything was signalled" in ei.value.reason
    assert alive(rec.pid) and mgr.health("e")
    assert outcomes(env)[-1] == ("engine.restart", "aborted")
    mgr.stop("e")


async def test_tui_aborts_a_change_during_its_drain_and_says_what_state_the_engine_is_in(tmp_path):
    s = settings(tmp_path)
    s.config.profiles["fake"].env = {"FAKE_ENGINE_DRAIN_S": "30", "FAKE_ENGINE_RUNNING": "2"}
    s.config.profiles["fake"].stop_grace_s = 60.0
    app = InfertopApp(s, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.press("2", "n", "enter")
        assert (await confirm_and_wait(app, pilot)).result == "ok"
        await pilot.press("escape")
        await app.poll_now()
        await until(pilot, lambda: app.selected_engine_name() == "fake", what="engine fake selected on the Engines pane")
        pid = app.engine_manager.status("fake").pid
        await pilot.press("m")
        assert isinstance(app.screen, ArgsDialog)
        await pilot.press("end", "backspace", "8", "enter")
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                             and app.screen, what="check")
        notes = "\n".join(screen.notes)
        assert "no infertop gateway in front" in notes and "HTTP 500" in notes and "infertop gateway" in notes
        await pilot.press("y")
        await until(pilot, lambda: "draining (2 in flight)" in screen.progress_text, what=screen.progress_text)
        assert "left" in screen.progress_text  # the countdown to the grace
        await pilot.press("a")
        await until(pilot, lambda: screen.state == "done", what=screen.progress_text)
        assert screen.result == "aborted", screen.result_text
        assert "still stopping" in screen.result_text and "no SIGKILL" in screen.result_text
        assert alive(pid)
        assert app.actions_ctl.board.runs() == []
        app.engine_manager.stop("fake", grace_s=0.5)


async def test_keys_typed_ahead_in_the_running_actions_list_close_it_once(tmp_path):
    """Seen in a tmux walk on a busy host: Enter then `a` in the list of running actions popped two
    screens → crash ScreenStackError."""
    from infertop.ui.screens.actions_list import ActionsListScreen

    app = InfertopApp(settings(tmp_path), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        picked = []
        listing = ActionsListScreen([("engine:x", "Stop engine x", "draining")])
        app.push_screen(listing, picked.append)
        await until(pilot, lambda: app.screen is listing and listing.query_one("#actions-list").is_mounted, what="the list mounted")
        listing.query_one("#actions-list").action_select()  # Enter…
        listing.action_close()  # …and `a`, handled before the list is gone
        await until(pilot, lambda: app.is_running and len(app.screen_stack) == 1 and len(picked) == 1, 'app.is_running and len(app.screen_stack) == 1 and len(pic…')
        assert app.is_running and len(app.screen_stack) == 1 and len(picked) == 1  # one answer, one pop
