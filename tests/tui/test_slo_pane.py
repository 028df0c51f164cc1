"""The SLO pane (key 9, Pilot): a real engine endpoint over loopback HTTP whose TTFT histogram grows between
polls, 10 % of its requests over the class's 1 s target — the class text, the fast-burn verdict, and four
plots with their target lines at 80x24, 120x40 and 200x60."""

from __future__ import annotations

import pytest

from infertop.config import Config, GpuConfig, SloClassConfig, SloClassesConfig
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.slo import SloPane, SloPlot
from pilot_wait import until

from slo_engine import growing_engine

T0 = 1_796_025_600.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def _cfg() -> Config:
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.slo_classes = SloClassesConfig(classes={"chat": SloClassConfig(
        queue_p99_s=1.0, ttft_p99_s=1.0, tpot_p95_s=0.04, e2e_p99_s=5.0, objective_stage="ttft", match=["*"])},
        min_burn_history_s=0.0)  # the plots' mechanics in seconds, not the 5 minutes a verdict needs by default
    return cfg


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)])
async def test_the_slo_pane_plots_against_their_targets(scripted, size):
    srv = growing_engine(scripted, slow_share=0.1)
    clock = Clock()
    app = InfertopApp(Settings(config=_cfg(), endpoints=[EngineEndpoint("chat-0", srv.url, max_num_seqs=8)],
                               wall_clock=clock), poll=False)
    async with app.run_test(size=size) as pilot:
        for _ in range(12):
            await app.poll_now()
            clock.t += 1.0
        await pilot.press("9")
        await until(pilot, lambda: app.query_one("#panes").active == "slo", "the SLO pane")
        await until(pilot, lambda: any(v.kind == "slo-fast-burn" and v.subject == "slo:chat" for v in app.state.verdicts), 'any(v.kind == "slo-fast-burn" and v.subject == "slo:chat"…')
        assert any(v.kind == "slo-fast-burn" and v.subject == "slo:chat" for v in app.state.verdicts)
        text = str(app.query_one("#slo-text").render())
        assert "chat: 99.9 % of requests within TTFT 1 s over 30 days" in text and "FIRING" in text
        plots = {p.id: p for p in app.query(SloPlot)}
        assert set(plots) == {"slo-plot-ttft", "slo-plot-queue", "slo-plot-kv", "slo-plot-burn"}
        assert plots["slo-plot-ttft"].target == 1.0 and plots["slo-plot-kv"].target == 90.0
        assert plots["slo-plot-burn"].target == 14.4 and max(v for v in plots["slo-plot-burn"].series if v == v) > 14.4
        w, h = size
        for p in plots.values():
            r = p.region
            assert r.width >= 20 and r.height >= 3 and r.right <= w and r.bottom <= h, (p.id, r)
            assert p.target_label  # the target line is labelled
        burn = plots["slo-plot-burn"]
        drawn = "\n".join(line.text for line in burn.render_lines(burn.region.reset_offset))
        assert "page at 14.4×" in drawn  # the label at the target line
        assert "now" in drawn and "-11s" in drawn  # the time axis
        # a range fitted to the data and the target: TTFT p99 ~3 s against 1 s does not start at 0
        ttft = plots["slo-plot-ttft"]
        assert 0 < ttft.ylim[0] < 1.0 < max(v for v in ttft.series if v == v) < ttft.ylim[1]
        assert "Traceback" not in screen_text(app)
