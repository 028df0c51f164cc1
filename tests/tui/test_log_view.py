"""The Log pane keeps at most max_lines even when it is never opened (Textual's RichLog would keep every
line written before its first display), and shows them, in order, once opened."""

from __future__ import annotations

import asyncio

from rich.text import Text

from infertop.config import Config, GpuConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.log_view import LogView
from pilot_wait import until


def test_lines_logged_before_the_log_pane_is_opened_are_bounded_and_shown_in_order(tmp_path):
    async def go():
        app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], state_dir=str(tmp_path)),
                          poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            view = app.query_one("#log-view", LogView)
            before = len(view._unshown)
            for i in range(2500):
                app.log_event(Text(f"line {i}"))
            # never shown yet: nothing deferred inside RichLog, and our own queue holds max_lines
            assert not view.size.width and before < 2000
            assert len(view._unshown) == 2000 and not getattr(view, "_deferred_renders", ())
            await pilot.press("3")
            await until(pilot, lambda: len(view.lines) == 2000, "the Log pane shows its last 2000 lines")
            assert not view._unshown and not getattr(view, "_deferred_renders", ())
            assert view.lines[-1].text.endswith("line 2499") and view.lines[0].text.endswith("line 500")
            app.log_event(Text("after"))  # once shown, a line goes straight to the view
            await until(pilot, lambda: view.lines[-1].text.endswith("after"), "a new line at the end")
            assert len(view.lines) == 2000 and view.lines[0].text.endswith("line 501")

    asyncio.run(go())
