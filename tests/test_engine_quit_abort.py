"""An abort during an engine *start* is honoured (issue 27 item 6).

The UI used to raise from the progress callback to abort a start, but the
manager's progress emitter swallows callback exceptions: the start went on,
the engine came up and the action said "ok". The abort now goes to
``EngineManager.start(abort=...)``, which kills what it spawned.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from test_engine_control import Env, alive, wait_until

from infertop.control.engines import EngineAborted
from infertop.ui.engine_actions import EngineAction


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
