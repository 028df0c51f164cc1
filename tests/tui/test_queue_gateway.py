"""The Queue pane against the real ``infertop gateway`` (in this process, loopback ports):
the console reads its /metrics and admin state, and a weight edited with ``w``
changes how the gateway shares its dispatch slots."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gateway_upstream import Upstream, start_gateway
from infertop.config import Config, QueueGatewayConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.kube_dialogs import FormDialog
from infertop.ui.widgets.queue import QueuePane
from pilot_wait import until

TOKEN = "gateway-admin-token"
CLIENTS_PER_CLASS = 6


@pytest.fixture
async def gateway(monkeypatch):
    monkeypatch.setenv("GW_TOKEN", TOKEN)
    ups = [await Upstream(name).start() for name in ("a", "b")]
    for up in ups:
        up.delay_s = 0.004  # one slot each (cap 1) and a short request: both classes stay backlogged
    g = await start_gateway(ups, token=TOKEN, caps={"a": 1, "b": 1},
                            classes=[{"name": "realtime", "priority": 100, "weight": 8.0, "max_wait_s": 60.0},
                                     {"name": "batch", "priority": 50, "weight": 2.0, "max_wait_s": 60.0}])
    stop = asyncio.Event()
    statuses: dict[int, int] = {}

    async def client(session: aiohttp.ClientSession, cls: str) -> None:
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 1}
        while not stop.is_set():
            async with session.post(g.url + "/v1/completions", json=body, headers={"x-infertop-class": cls}) as r:
                await r.read()
                statuses[r.status] = statuses.get(r.status, 0) + 1

    session = aiohttp.ClientSession()
    load = [asyncio.create_task(client(session, cls)) for cls in ("realtime", "batch")
            for _ in range(CLIENTS_PER_CLASS)]
    g.statuses = statuses  # answers the load got (every one must be a 200)
    yield g
    stop.set()
    await asyncio.gather(*load, return_exceptions=True)
    await session.close()
    await g.stop()
    for up in ups:
        await up.stop()


def shares(pane: QueuePane) -> dict[str, float | None]:
    q = pane.sources[0]
    return {c.name: c.share_pct for c in q.classes}


async def test_a_weight_edited_in_the_pane_changes_the_gateways_shares(gateway, tmp_path):
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"), window_s=1.5)
    cfg.queues.gateways.append(QueueGatewayConfig(url=gateway.url, name="gw", admin_url=gateway.admin_url,
                                                  token_env="GW_TOKEN"))
    app = InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        pane = app.query_one(QueuePane)

        async def polled_shares():
            await app.poll_now()
            return shares(pane)

        # 8 : 2 while both classes are backlogged: realtime gets ~80 % of the dispatches
        before = None
        for _ in range(150):
            got = await polled_shares()
            if got.get("realtime") is not None and got["realtime"] > 0 and len(pane.sources[0].classes) == 2:
                before = got
                if 70 <= got["realtime"] <= 90:
                    break
            await pilot.pause(0.05)
        assert before is not None and 70 <= before["realtime"] <= 90, before
        q = pane.sources[0]
        assert q.admin == "ok" and q.klass("batch").depth and q.klass("realtime").depth  # both backlogged
        assert [(e.name, e.cap) for e in q.engines] == [("a", 1), ("b", 1)]
        # w on batch: weight 2 → 8
        pane.classes_table.move_cursor(row=1)
        await until(pilot, lambda: pane.selected_class == ("gw", "batch"), 'pane.selected_class == ("gw", "batch")')
        assert pane.selected_class == ("gw", "batch")
        await pilot.press("w")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        form.query_one("#field-weight").value = "8"
        form.submit()
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is not None
                             and app.screen, what="dry run")
        assert screen.dry_run_ok, screen.dry_run_text
        assert screen.change == "weight 2 → 8"
        assert gateway.policy.classes["batch"].weight == 2  # the dry run changed nothing
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done", what="weight change")
        assert screen.result == "ok", screen.result_text
        assert gateway.policy.classes["batch"].weight == 8
        await pilot.press("escape")
        # 8 : 8 — the shares move to about half each over the next window, no request dropped
        after = None
        for _ in range(150):
            after = await polled_shares()
            if after.get("batch") is not None and 40 <= after["batch"] <= 60:
                break
            await pilot.pause(0.05)
        assert after is not None and 40 <= after["batch"] <= 60, (before, after)
        await app.poll_now()
        assert pane.sources[0].klass("batch").weight == 8
        print(f"shares before {before}, after {after}; answers {gateway.statuses}")
        assert set(gateway.statuses) == {200} and sum(gateway.statuses.values()) > 100


async def test_admin_errors_of_the_real_gateway_are_one_line_refusals(gateway, monkeypatch):
    from infertop.control.gateway.actions import ClassEdit, EngineDrain, GatewayAdmin
    from infertop.control.pipeline import ActionRefused
    from infertop.sources.queues.collector import QueueEndpoint

    admin = GatewayAdmin(QueueEndpoint("gw", "gateway", gateway.url + "/metrics", admin_url=gateway.admin_url,
                                       token_env="GW_TOKEN"))
    with pytest.raises(ActionRefused, match="gateway gw has no class 'nope'") as e:
        await asyncio.to_thread(ClassEdit(admin, "nope", {"weight": 3}).plan)
    assert e.value.status == 404
    bad = ClassEdit(admin, "batch", {"reserved_slots": 1.5})
    await asyncio.to_thread(bad.plan)
    pre = await asyncio.to_thread(bad.preflight)
    assert not pre.ok and pre.status == 400 and pre.message.startswith("gateway gw: 400: ")
    assert gateway.policy.classes["batch"].reserved_slots == 0
    with pytest.raises(ActionRefused, match="is already serving"):
        await asyncio.to_thread(EngineDrain(admin, "a", False).plan)
    monkeypatch.setenv("GW_TOKEN", "wrong")
    with pytest.raises(ActionRefused, match=r"refused the admin token \(401\)") as e:
        await asyncio.to_thread(admin.state)
    assert e.value.status == 401 and "wrong" not in str(e.value)


async def test_drain_at_the_real_gateway_is_followed_to_zero_in_flight_under_load(gateway):
    """b keeps serving while a drains: no request fails."""
    import threading

    from infertop.control.gateway.actions import EngineDrain, GatewayAdmin
    from infertop.sources.queues.collector import QueueEndpoint

    admin = GatewayAdmin(QueueEndpoint("gw", "gateway", gateway.url + "/metrics", admin_url=gateway.admin_url,
                                       token_env="GW_TOKEN"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while gateway.policy.engines["a"].in_flight == 0:  # the load is flowing through the engine
        assert loop.time() < deadline, "no request reached the engine"
        await asyncio.sleep(0.01)
    drain = EngineDrain(admin, "a", True, follow_timeout_s=20, poll_s=0.01)
    review = await asyncio.to_thread(drain.plan)
    assert review.summary.startswith("drain a: in flight ")
    assert (await asyncio.to_thread(drain.preflight)).ok and not gateway.policy.engines["a"].draining
    seen = []
    outcome = await asyncio.to_thread(drain.execute, lambda p: seen.append(p.text), threading.Event())
    assert outcome.ok and outcome.message.startswith("a drained at gateway gw: 0 in flight after"), outcome
    assert gateway.policy.engines["a"].draining and gateway.policy.engines["a"].in_flight == 0
    undrain = EngineDrain(admin, "a", False)
    await asyncio.to_thread(undrain.plan)
    assert (await asyncio.to_thread(undrain.execute, lambda p: None, threading.Event())).ok
    before = sum(gateway.statuses.values())
    while sum(gateway.statuses.values()) < before + 20:  # the requests held while drained are served after
        assert loop.time() < deadline + 15, "the load did not resume"
        await asyncio.sleep(0.01)
    assert set(gateway.statuses) == {200}
