"""The engine detail screen: painting it while it is still being built, and text from outside."""

from __future__ import annotations

import time

from textual.app import App
from textual.containers import Horizontal

from infertop.control.engines.state import EngineRecord
from infertop.domain.engine import EngineStats
from infertop.state.history import HistoryStore
from infertop.ui.screens.engine_detail import EngineDetailScreen
from infertop.ui.widgets.panels import QuietStatic
from pilot_wait import until

ESC = "\x1b]0;pwned\x07"


def record(**kw) -> EngineRecord:
    base = dict(name="tiny", profile_name="web[/b]", phase="running", pid=4242, pgid=4242, host="127.0.0.1",
                port=8000, url="http://127.0.0.1:8000", cmdline=("vllm", "serve", "foo[/x] 1"),
                args={"model": "foo[/x] 1", "served_model_name": f"m{ESC}"}, overrides={}, started_at=time.time(),
                healthy_at=None, startup_s=3.0, restarts=0, log_path="/tmp/[red]log")
    base.update(kw)
    return EngineRecord(**base)


async def test_a_paint_before_the_trends_are_mounted_is_skipped_not_a_crash():
    app = App()
    async with app.run_test(size=(100, 40)) as pilot:
        screen = EngineDetailScreen("tiny", HistoryStore())
        await app.push_screen(screen)
        await until(pilot, lambda: app.screen is screen and screen._composed(), "the detail screen composed, trends and all")
        await screen.query(Horizontal).remove()  # the text boxes are there, the trends not (yet / any more)
        screen.show(EngineStats(name="tiny", url="http://127.0.0.1:8000", state="up", running=3.0))  # NoMatches before


async def test_outside_text_in_the_local_engine_box_is_shown_as_text():
    app = App()
    async with app.run_test(size=(160, 40)) as pilot:
        screen = EngineDetailScreen("tiny", HistoryStore())
        await app.push_screen(screen)
        await until(pilot, lambda: app.screen is screen and screen._composed(), "the detail screen composed")
        history = [{"time": "12:00", "event": "restart", "detail": "exit [/i] 1"}]
        screen.show_local(record(), history, [f"INFO {ESC} ready [bold]"], ["gpu0"])  # MarkupError before
        await until(pilot, lambda: screen.query_one("#detail-local", QuietStatic).size.height >= 3,
                    "the local engine box laid out with its lines")
        shown = str(screen.query_one("#detail-local", QuietStatic).render())
        assert "foo[/x] 1" in shown and "web[/b]" in shown and "exit [/i] 1" in shown and "[bold]" in shown
        assert "\x1b" not in shown and "\\x1b]0;pwned" in shown
