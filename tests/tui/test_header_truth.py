"""The header's engine count comes from the fleet state: before the first tick there is no state,
so it reads "—", not the number of endpoints watched."""

from __future__ import annotations

from infertop.config import Config
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.panels import QuietStatic
from pilot_wait import until


async def test_the_header_counts_no_engines_before_the_first_tick(tmp_path):
    endpoints = [EngineEndpoint(f"e{i}", f"http://127.0.0.1:9/{i}", timeout_s=0.5) for i in range(3)]
    app = InfertopApp(Settings(config=Config(audit_log=str(tmp_path / "audit.jsonl")), endpoints=endpoints,
                               state_dir=str(tmp_path / "state")), poll=False)
    async with app.run_test(size=(100, 24)) as pilot:
        top = app.query_one("#topbar", QuietStatic)
        await until(pilot, lambda: "infertop" in top.render().plain, "the header")
        assert app.state is None
        header = top.render().plain
        assert " · — engines · " in header and "3 engine" not in header, header
        await app.poll_now()  # the first tick: the state holds the three engines (none answers)
        await until(pilot, lambda: " · 3 engines · " in top.render().plain, "the state's count in the header")
        assert len(app.state.engines) == 3
