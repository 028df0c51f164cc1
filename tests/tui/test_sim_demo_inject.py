"""The demo injects an incident from the command palette (issue 24 item 7): "Inject incident: NAME"
switches the running demo simulator (its own process, commands on its stdin) to that scenario from
now, and the verdict it leads to appears in the Log."""

from __future__ import annotations

import pytest
from pilot_wait import until

from infertop.config import Config, GpuConfig
from infertop.demo import DemoError, running_demo, start_demo
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.commands import DemoIncidentCommands


@pytest.fixture
def demo():
    d = start_demo(n_engines=3, kube=False)
    try:
        yield d
    finally:
        d.stop()
    assert running_demo() is None


def test_inject_answers_with_the_timeline_and_refuses_an_unknown_scenario(demo):
    assert running_demo() is demo
    answer = demo.inject("gpu-throttled", engine=2)
    assert answer.startswith("scenario gpu-throttled engine=2 onset=")
    assert demo.inject(None) == "scenario none"
    with pytest.raises(DemoError, match="unknown scenario"):
        demo.inject("meteor-strike")


async def test_palette_injects_an_incident_and_the_log_shows_its_verdict(demo, tmp_path):
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=demo.endpoints, mode="demo",
                               dcgm_urls=[demo.dcgm_url], state_dir=str(tmp_path)))
    async with app.run_test(size=(120, 40)) as pilot:
        titles = [t for t, _, _ in DemoIncidentCommands(app.screen)._entries()]
        assert "Inject incident: engine-down" in titles and len(titles) == 9
        await until(pilot, lambda: any("vllm-1" in e.name and e.stats.state == "up" for e in app.state.engines),
                    "vllm-1 up")
        await pilot.press("ctrl+p")
        await until(pilot, lambda: app.screen.__class__.__name__ == "CommandPalette", "the palette open")
        await pilot.press(*"Inject incident: engine-down")
        await until(pilot, lambda: "engine-down" in str(app.screen.query_one("CommandList").get_option_at_index(0)
                                                        .prompt), "the entry listed")
        await pilot.press("enter")
        await until(pilot, lambda: any("incident injected: scenario engine-down engine=1" in line
                                       for line in app.log_lines), "the injection logged")
        await until(pilot, lambda: any("verdict engine-down vllm-1" in line for line in app.log_lines),
                    "the verdict in the Log")


async def test_no_incident_entries_outside_a_demo(demo, tmp_path):
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=demo.endpoints,
                               state_dir=str(tmp_path)), poll=False)
    async with app.run_test(size=(120, 40)):
        assert DemoIncidentCommands(app.screen)._entries() == []
