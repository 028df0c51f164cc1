"""Local engine actions through the TUI (Pilot), against the fake engine process."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from infertop.config import Config, ProfileConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.engine_dialogs import ArgsDialog, ConfirmDialog, OperationScreen, ProfilePicker
from infertop.ui.widgets.engines_table import EnginesTable

FAKE = str(Path(__file__).with_name("fake_engine.py").resolve())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settings(tmp_path, read_only=False) -> Settings:
    cfg = Config()
    cfg.profiles["fake"] = ProfileConfig(model="fake-model", served_model_name="fake", port=free_port(),
                                         max_num_seqs=4, python=sys.executable, start_timeout_s=30.0,
                                         stop_grace_s=5.0)
    return Settings(config=cfg, endpoints=[], read_only=read_only, state_dir=str(tmp_path / "state"),
                    engine_module=FAKE)


async def wait_op(app, pilot) -> OperationScreen:
    screen = app.screen
    assert isinstance(screen, OperationScreen)
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert screen.done
    return screen


async def test_start_change_max_num_seqs_and_stop_from_the_keyboard(tmp_path):
    app = InfertopApp(settings(tmp_path), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()  # engine manager ready
        await pilot.press("2", "n")
        assert isinstance(app.screen, ProfilePicker)
        await pilot.press("enter")  # the only profile
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        op = await wait_op(app, pilot)
        assert not isinstance(op.result, Exception), op.result
        await pilot.press("escape")
        await app.poll_now()
        await pilot.pause()
        table = app.query_one("#engines-table", EnginesTable)
        assert table.selected_engine == "fake"
        row = [str(getattr(c, "plain", c)) for c in table.get_row("fake")]
        assert row[1] == "up" and row[4] == "0/4"

        await pilot.press("m")
        assert isinstance(app.screen, ArgsDialog)
        await pilot.press("end", "backspace", "8", "enter")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        op = await wait_op(app, pilot)
        assert not isinstance(op.result, Exception), op.result
        assert op.result.new == {"max_num_seqs": 8} and op.result.verified["max_num_seqs"] == "8"
        await pilot.press("escape")
        await app.poll_now()
        await pilot.pause()
        row = [str(getattr(c, "plain", c)) for c in table.get_row("fake")]
        assert row[4] == "0/8"

        await pilot.press("x")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        op = await wait_op(app, pilot)
        assert not isinstance(op.result, Exception), op.result
        await pilot.press("escape")
        await pilot.pause()
        assert "fake" not in [c.endpoint.name for c in app.collector.collectors]

    audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    audit = [e for e in audit if "result" in e]  # outcomes (each action also writes an intent first)
    actions = [(e["action"], e["result"]) for e in audit]
    assert actions == [("engine.start", "ok"), ("engine.set", "ok"), ("engine.stop", "ok")]
    change = audit[1]
    assert change["target"] == "fake" and change["old"] == {"max_num_seqs": 4} and change["new"] == {"max_num_seqs": 8}


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
            assert ro.check_action(action, ()) is None
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(ro.screen, ProfilePicker)
