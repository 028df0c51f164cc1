"""The Queue pane's tables share its height by their content: at 80x24 the demo's three classes and six
engines all fit, so no table draws a scrollbar. (A vertical scrollbar's thumb ends in a cell drawn with a
lower-block glyph, ▁..▇ in reverse video: on the Queue pane it read as a stray sparkline fragment.)"""

from __future__ import annotations

import pytest

from infertop.config import Config, QueueGatewayConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.panels import BLOCKS
from infertop.ui.widgets.queue import QueuePane
from pilot_wait import until
from queue_gateway_fake import TOKEN, FakeEngine, FakeGateway


@pytest.fixture
def gateway(monkeypatch):
    monkeypatch.setenv("GW_TOKEN", TOKEN)
    with FakeGateway() as gw:
        yield gw


def make_app(tmp_path, gateway: FakeGateway) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"))
    cfg.queues.gateways.append(QueueGatewayConfig(url=gateway.url, name="gw", admin_url=gateway.url,
                                                  token_env="GW_TOKEN"))
    return InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)


def screen_lines(app) -> list[str]:
    """The text of every row of the screen as the compositor paints it."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def add_engines(gateway: FakeGateway, n: int) -> list[str]:
    gateway.engines = {f"vllm-{i}": FakeEngine(f"vllm-{i}", f"http://127.0.0.1:9/{i}", in_flight=3, cap=3)
                       for i in range(n)}
    return list(gateway.engines)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_demos_classes_and_engines_fit_without_a_scrollbar(gateway, tmp_path, size):
    names = add_engines(gateway, 6)  # as the demo: six engines behind the gateway, three classes
    app = make_app(tmp_path, gateway)
    async with app.run_test(size=size) as pilot:
        await pilot.press("2")  # the Engines pane (its trends) first, then the Queue pane
        await pilot.press("6")
        await app.poll_now()
        pane = app.query_one(QueuePane)
        await until(pilot, lambda: pane.engines_table.row_count == 6 and pane.classes_table.row_count == 3,
                    "three classes and six engines in the Queue pane")
        await until(pilot, lambda: all(any(f" {n} " in line for line in screen_lines(app)) for n in names),
                    "every engine row on screen")
        assert not pane.engines_table.show_vertical_scrollbar
        assert not pane.classes_table.show_vertical_scrollbar
        top = pane.region.y
        body = screen_lines(app)[top:top + pane.region.height]
        assert not [line for line in body if set(line) & set(BLOCKS)], "\n".join(body)


async def test_many_engines_scroll_while_the_classes_keep_their_own_rows(gateway, tmp_path):
    add_engines(gateway, 30)
    app = make_app(tmp_path, gateway)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("6")
        await app.poll_now()
        pane = app.query_one(QueuePane)
        await until(pilot, lambda: pane.engines_table.row_count == 30, "thirty engines in the Queue pane")
        await until(pilot, lambda: pane.engines_table.show_vertical_scrollbar, "the engines table scrolls")
        # the classes table is as tall as its header and three rows (and, at 80 columns, the scrollbar that
        # says more columns exist): no blank rows above the engines
        classes = pane.classes_table
        assert classes.show_horizontal_scrollbar
        assert classes.region.height == 4 + 1
        assert not pane.classes_table.show_vertical_scrollbar
