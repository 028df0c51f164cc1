"""The Triage pane (Pilot): verdicts from fleets driven into trouble over loopback HTTP, their evidence,
remedies one key away through the one action pipeline, text only when read-only or replaying, the
verdicts recorded and replayed as they were, and every pane and detail screen while engines crash."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fake_pynvml import FakeNvml, h100, l4
from infertop.analysis.triage import Evidence, Remedy, Verdict
from infertop.config import Config, GpuConfig, ProfileConfig
from infertop.domain.engine import DOWN, UP, EngineStats
from infertop.sources.gpu import GpuCollector
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet import FRESH, STALE, EngineState, FleetState, Freshness
from infertop.state.recorder import Recorder
from infertop.state.replay import Player, Replay
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.engine_detail import EngineDetailScreen
from infertop.ui.screens.engine_dialogs import ArgsDialog
from infertop.ui.screens.gpu_detail import GpuDetailScreen
from infertop.ui.screens.help import HelpScreen
from infertop.ui.screens.verdict_detail import VerdictDetailScreen
from infertop.ui.widgets.engines_table import EnginesTable
from infertop.ui.widgets.gpus import GpusTable
from infertop.ui.widgets.triage import TriagePane
from pilot_wait import until
from ports import free_port
from vllm_text import v1_doc

T0 = 1_796_025_600.0  # a wall-clock time (replay refuses others)
FAKE = str(Path(__file__).with_name("fake_engine.py").resolve())


class Clock:
    """The ticks' wall clock: each test moves it on, so minimum durations pass without sleeping."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def queue_bound_doc() -> str:
    """Every slot of 8 busy, 5 waiting, KV cache 40 %: out of capacity."""
    return v1_doc(engines={"0": {"running": 8, "waiting": 5, "kv": 0.4}}, model="llama")


def kv_bound(metrics_calls: list[int]):
    """KV cache 97 % full and preempting (the counter grows with every scrape), tokens counted."""
    def doc() -> str:
        metrics_calls.append(1)
        n = len(metrics_calls)
        return v1_doc(engines={"0": {"running": 8, "waiting": 2, "kv": 0.97, "preempt": 3 * n, "gen": 40 * n}},
                      model="llama")
    return doc


def troubled_fleet(scripted) -> list[EngineEndpoint]:
    alpha = scripted().serve_engine(queue_bound_doc(), model="llama")
    beta = scripted().serve_engine(kv_bound([]), model="llama")
    return [EngineEndpoint("alpha", alpha.url, max_num_seqs=8, timeout_s=30),
            EngineEndpoint("beta", beta.url, max_num_seqs=16, timeout_s=30),
            EngineEndpoint("gone", f"http://127.0.0.1:{free_port()}"),  # nothing listens there: down
            EngineEndpoint("lost", f"http://127.0.0.1:{free_port()}")]


def app_for(endpoints, clock: Clock, **settings) -> InfertopApp:
    return InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=list(endpoints),
                                wall_clock=clock, **settings), poll=False)


async def ticks(app, clock: Clock, n: int) -> None:
    for _ in range(n):
        await app.poll_now()
        clock.t += 1.0


def pane_lines(app) -> list[str]:
    """The Triage pane's list, one string per line of each option."""
    pane = app.query_one(TriagePane)
    return [line for i in range(pane.options.option_count)
            for line in str(getattr(pane.options.get_option_at_index(i).prompt, "plain", "")).splitlines()]


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def highlight(app, predicate) -> None:
    """Move the Triage list's highlight to the first option whose text satisfies ``predicate``."""
    ol = app.query_one(TriagePane).options
    ol.highlighted = next(i for i in range(ol.option_count)
                          if predicate(str(getattr(ol.get_option_at_index(i).prompt, "plain", ""))))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_triage_pane_lists_queue_bound_and_kv_bound_with_evidence_and_remedy_keys(scripted, size):
    clock = Clock()
    app = app_for(troubled_fleet(scripted), clock)
    async with app.run_test(size=size) as pilot:
        await ticks(app, clock, 8)
        assert [(v.kind, v.subject) for v in app.state.verdicts] == [
            ("engine-down", "gone"), ("engine-down", "lost"), ("queue-bound", "alpha"), ("kv-bound", "beta")]
        # the Overview's first line names the worst verdict
        first = screen_lines(app)[3]
        worst = app.state.verdicts[0]
        assert f"◆ critical engine-down gone · since {app.state.taken_at - worst.since:.0f} s · +3 more" in first, first
        await pilot.press("8")
        await until(pilot, lambda: app.current_pane == "triage" and pane_lines(app), what="the Triage pane")
        lines = pane_lines(app)
        text = "\n".join(lines)
        assert "WARNING queue-bound  alpha  · since 7 s" in text, text
        assert "alpha is out of capacity: all 8 slots run and 5 requests wait." in text
        assert "· running / max_num_seqs 8/8  against = max  (now)" in text
        assert "WARNING kv-bound  beta" in text and "· KV cache 97%  against ≥ 95 % (clears < 85 %)" in text
        remedies = [line.strip() for line in lines if line.startswith("    ")]
        assert "m  raise max_num_seqs 8 → 16 (KV cache 40%)" in remedies, remedies
        assert "m  lower max_num_seqs 16 → 12 (fewer sequences share the cache)" in remedies
        assert "S  add replicas (the same load on more KV cache)" in remedies
        # it fits the width (no horizontal scroll) and scrolls where it is taller than the pane
        ol = app.query_one(TriagePane).options
        assert ol.max_scroll_x == 0
        await pilot.press("end")
        await pilot.pause()
        assert ol.highlighted == ol.option_count - 1
        if size == (80, 24):
            assert ol.max_scroll_y > 0 and ol.scroll_y > 0  # the last remedy scrolled into view
        assert any("S  add replicas" in line for line in screen_lines(app))
        # the affected engines are marked in the Engines pane
        await pilot.press("2")
        await pilot.pause()
        table = app.query_one("#engines-table", EnginesTable)
        names = {str(table.get_row(k)[0]).strip() for k in table.rows}
        assert names == {"◆ alpha", "◆ beta", "◆ gone", "◆ lost"}


async def test_no_verdict_says_the_fleet_looks_healthy_and_the_overview_has_no_verdict_line(scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 2, "waiting": 0, "kv": 0.2}}), model="llama")
    clock = Clock()
    app = app_for([EngineEndpoint("alpha", srv.url, max_num_seqs=8, timeout_s=30)], clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await ticks(app, clock, 3)
        assert "Engines up" in screen_lines(app)[3]  # the tiles come first: no verdict line
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        assert pane_lines(app) == ["no verdict — the fleet looks healthy"]


async def test_a_throttled_gpu_is_marked_in_the_gpus_pane_and_its_evidence_has_its_trends():
    clock = Clock()
    nv = FakeNvml([h100(0), l4(1)])  # the L4 runs at its thermal limit
    app = InfertopApp(Settings(config=Config(), endpoints=[], wall_clock=clock), poll=False,
                      gpu_collector=GpuCollector(GpuConfig(nvml=True), nvml_module=nv))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(12):
            await app.poll_gpus_now()
            clock.t += 1.0
        (v,) = app.state.verdicts
        assert v.kind == "gpu-throttled" and v.subject.endswith("gpu1")
        await pilot.press("4")
        await pilot.pause()
        t = app.query_one("#gpus-table", GpusTable)
        labels = [str(t.get_row(k)[0]).strip() for k in t.rows]
        assert labels == ["gpu0", "◆ gpu1"]
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        await pilot.press("enter")  # on the verdict: its evidence
        screen = await until(pilot, lambda: isinstance(app.screen, VerdictDetailScreen) and app.screen,
                             what="the verdict's evidence")
        await until(pilot, lambda: "Trends from" in str(screen.query_one("#verdict-trends-title").render()),
                    what="its trends")
        body = str(screen.query_one("#verdict-body").render())
        assert "is throttled (HW thermal" in body and "Evidence" in body
        util = screen.query_one("#vtrend-0")
        assert util.title == "Util" and len(util._series) >= 12  # every tick since the first
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, what="back on the Triage pane")
        assert app.current_pane == "triage"


async def test_enter_on_a_verdict_opens_its_signals_trends_around_the_onset_and_esc_goes_back(scripted):
    calls: list[int] = []
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 2, "waiting": 0, "kv": 0.3}}), model="llama")
    clock = Clock()
    app = app_for([EngineEndpoint("beta", srv.url, max_num_seqs=16, timeout_s=30)], clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await ticks(app, clock, 10)  # healthy first: the trends have a before
        srv.serve_engine(kv_bound(calls), model="llama")
        await ticks(app, clock, 8)
        (v,) = app.state.verdicts
        assert v.kind == "kv-bound"
        await pilot.press("8")
        await until(pilot, lambda: pane_lines(app), what="the Triage pane")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, VerdictDetailScreen) and app.screen,
                             what="the verdict's evidence")
        await until(pilot, lambda: "Trends from" in str(screen.query_one("#verdict-trends-title").render()),
                    what="its trends")
        title = str(screen.query_one("#verdict-trends-title").render())
        assert "from 10 s before the onset to now" in title, title
        body = str(screen.query_one("#verdict-body").render())
        assert "beta is KV-cache bound" in body and "KV cache  97%  against ≥ 95 %" in body
        kv = screen.query_one("#vtrend-0")
        assert kv.title == "KV cache %" and kv._series[:10] == [30.0] * 10 and kv._series[-1] == 97.0
        await ticks(app, clock, 1)  # it follows the ticks while open
        assert "(8 s)" in str(screen.query_one("#verdict-body").render())
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main and app.current_pane == "triage", what="back")
