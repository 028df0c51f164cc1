"""The console with local engines in tests: ``settings`` (a fake-engine profile, its own state dir)
and ``confirm_and_wait`` (the one confirmation screen: its check, ``y``, the end)."""

from __future__ import annotations

import sys

from engine_env import FAKE
from pilot_wait import until
from ports import free_port

from infertop.config import Config, ProfileConfig
from infertop.ui.app import Settings
from infertop.ui.screens.confirm import ConfirmScreen


def settings(tmp_path, read_only=False) -> Settings:
    cfg = Config()
    cfg.profiles["fake"] = ProfileConfig(model="fake-model", served_model_name="fake", port=free_port(),
                                         max_num_seqs=4, python=sys.executable, start_timeout_s=30.0,
                                         stop_grace_s=5.0)
    return Settings(config=cfg, endpoints=[], read_only=read_only, state_dir=str(tmp_path / "state"),
                    engine_module=FAKE)


async def confirm_and_wait(app, pilot) -> ConfirmScreen:
    """The one confirmation screen: wait for its check, confirm with y, wait for the end."""
    screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is not None
                         and app.screen, what="check")
    assert screen.dry_run_ok, screen.dry_run_text
    await pilot.press("y")
    await until(pilot, lambda: screen.state == "done", what=f"done: {screen.progress_text}")
    return screen
