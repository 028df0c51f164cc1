"""The gateway over real loopback HTTP: shares, waits, promotion, drain, failover, timeouts, streaming."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from gateway_upstream import Upstream, start_gateway, wait_for

TWO_CLASSES = [{"name": "gold", "priority": 100, "weight": 3, "max_wait_s": 60},
               {"name": "silver", "priority": 50, "weight": 1, "max_wait_s": 60}]


@pytest.fixture
async def upstreams():
    made: list[Upstream] = []

    async def make(*names: str) -> list[Upstream]:
        out = [await Upstream(n).start() for n in names]
        made.extend(out)
        return out

    yield make
    for u in made:
        await u.stop()


@pytest.fixture
async def client():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        yield s


async def post(client, url, body=None, *, cls=None, headers=None, raw=None) -> tuple[int, dict]:
    h = dict(headers or {})
    if cls:
        h["x-infertop-class"] = cls
    data = raw if raw is not None else json.dumps(body or {"prompt": "hi", "max_tokens": 2})
    async with client.post(url + "/v1/completions", data=data, headers=h) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, {"text": text}


def share(bodies, priority: int) -> float:
    return sum(1 for b in bodies if b.get("priority") == priority) / len(bodies)


async def test_weights_3_to_1_share_then_a_live_change_moves_it_without_dropping(upstreams, client):
    up, = await upstreams("a")
    up.delay_s = 0.002
    g = await start_gateway([up], caps={"a": 2}, classes=TWO_CLASSES, default_class="silver")
    try:
        tasks = []
        for _ in range(300):
            tasks.append(asyncio.create_task(post(client, g.url, cls="gold")))
            tasks.append(asyncio.create_task(post(client, g.url, cls="silver")))
        await wait_for(lambda: len(up.received) >= 220, what="220 dispatches")
        async with client.patch(g.admin_url + "/admin/classes/silver", json={"weight": 3},
                                headers={"Authorization": "Bearer tok"}) as r:
            assert r.status == 200 and (await r.json())["weight"] == 3
        changed_at = len(up.received)
        results = await asyncio.gather(*tasks)
        assert [s for s, _ in results] == [200] * 600  # nothing dropped across the change
        before = up.received[20:220]  # both classes backlogged from the first few requests on
        after = up.received[changed_at + 4:changed_at + 204]  # ≤ cap dispatched under the old weights
        s_before, s_after = share(before, -100), share(after, -100)
        print(f"gold share at 3:1 = {s_before:.3f}; after the change to 1:1 = {s_after:.3f}")
        assert abs(s_before - 0.75) <= 0.075, s_before
        assert abs(s_after - 0.5) <= 0.05, s_after
        text = await (await client.get(g.url + "/metrics")).text()
        assert 'infertop_gateway_requests_total{class="gold",code="200"} 300' in text
        assert 'infertop_gateway_class_weight{class="silver"} 3.0' in text
    finally:
        await g.stop()


async def test_top_class_wait_stays_bounded_while_batch_floods(upstreams, client):
    up, = await upstreams("a")
    up.delay_s = 0.004
    g = await start_gateway([up], caps={"a": 2})
    try:
        flood = [asyncio.create_task(post(client, g.url, cls="batch")) for _ in range(300)]
        await wait_for(lambda: g.policy.classes["batch"].queued >= 150, what="a batch backlog")
        passed_by = []
        for _ in range(5):
            n0 = len(up.received)
            status, _ = await post(client, g.url, cls="realtime")
            assert status == 200
            idx = max(i for i, b in enumerate(up.received) if b["priority"] == -100)
            passed_by.append(idx - n0)
        backlog = g.policy.classes["batch"].queued
        print(f"batch requests dispatched ahead of each realtime one: {passed_by}; batch still queued: {backlog}")
        assert max(passed_by) <= 4, passed_by  # the next free slot, not the end of the flood
        assert backlog >= 50
        assert all(s == 200 for s, _ in await asyncio.gather(*flood))
    finally:
        await g.stop()


async def test_background_request_is_promoted_after_its_max_wait(upstreams, client):
    up, = await upstreams("a")
    up.delay_s = 0.01
    classes = [{"name": "realtime", "priority": 100, "weight": 1000, "max_wait_s": 60},
               {"name": "background", "priority": 10, "weight": 0.001, "max_wait_s": 0.2}]
    g = await start_gateway([up], caps={"a": 1}, classes=classes, default_class="realtime", strict_top=True)
    try:
        flood = [asyncio.create_task(post(client, g.url, cls="realtime")) for _ in range(60)]
        await wait_for(lambda: g.policy.classes["realtime"].queued >= 20, what="a realtime backlog")
        bg = asyncio.create_task(post(client, g.url, {"prompt": "bg", "max_tokens": 2}, cls="background"))
        await wait_for(lambda: g.policy.classes["background"].promotions == 1, what="the promotion")
        assert g.policy.classes["realtime"].queued > 0  # promoted while realtime still floods
        status, _ = await bg
        assert status == 200
        sent = next(b for b in up.received if b["prompt"] == "bg")
        assert sent["priority"] == -100  # it left from the realtime queue, with realtime's vLLM priority
        text = await (await client.get(g.url + "/metrics")).text()
        assert 'infertop_gateway_promotions_total{class="background"} 1' in text
        assert 'infertop_gateway_dispatches_total{class="background"' not in text
        assert all(s == 200 for s, _ in await asyncio.gather(*flood))
    finally:
        await g.stop()


async def test_drain_completes_with_no_failed_request_while_traffic_continues(upstreams, client):
    a, b = await upstreams("a", "b")
    a.delay_s = b.delay_s = 0.01
    g = await start_gateway([a, b], caps={"a": 4, "b": 4})
    auth = {"Authorization": "Bearer tok"}
    try:
        tasks = [asyncio.create_task(post(client, g.url)) for _ in range(200)]
        await wait_for(lambda: len(a.received) + len(b.received) >= 40, what="traffic")
        sent_to_a = len(a.received)
        async with client.post(g.admin_url + "/admin/engines/a/drain", headers=auth) as r:
            doc = await r.json()
            assert r.status == 200 and doc["draining"] is True
        in_flight_at_drain = doc["in_flight"]

        async def a_in_flight() -> int:
            async with client.get(g.admin_url + "/admin/state", headers=auth) as r:
                return next(e for e in (await r.json())["engines"] if e["name"] == "a")["in_flight"]

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await a_in_flight():
            assert loop.time() < deadline, "drain did not complete"
        assert g.policy.queued > 0 or g.policy.engines["b"].in_flight > 0  # traffic still flowing
        results = await asyncio.gather(*tasks)
        assert [s for s, _ in results] == [200] * 200
        assert len(a.received) <= sent_to_a + in_flight_at_drain  # nothing new went to the drained engine
        async with client.post(g.admin_url + "/admin/engines/a/undrain", headers=auth) as r:
            assert (await r.json())["draining"] is False
        assert (await post(client, g.url))[0] == 200
    finally:
        await g.stop()


async def test_an_upstream_dying_mid_run_fails_over_requests_not_started(upstreams, client):
    a, b = await upstreams("a", "b")
    a.delay_s = b.delay_s = 0.02
    g = await start_gateway([a, b], caps={"a": 4, "b": 4})
    try:
        tasks = [asyncio.create_task(post(client, g.url)) for _ in range(100)]
        await wait_for(lambda: len(a.received) >= 10, what="traffic on a")
        await a.stop()
        results = await asyncio.gather(*tasks)
        assert [s for s, _ in results] == [200] * 100
        assert g.policy.engines["a"].up is False
        errors = g.state.metrics.upstream_errors
        assert errors.get(("a", "connect"), 0) + errors.get(("a", "reset"), 0) >= 1, errors
        assert sum(1 for _, d in results if d.get("upstream") == "a") < 20
    finally:
        await g.stop()


async def test_no_engine_left_answers_502(upstreams, client):
    a, = await upstreams("a")
    g = await start_gateway([a])
    try:
        await a.stop()
        await wait_for(lambda: not g.policy.engines["a"].up, what="engine down")
        status, doc = await post(client, g.url)
        assert status == 502 and doc["error"]["type"] == "upstream_error"
        assert (await client.get(g.url + "/health")).status == 503
    finally:
        await g.stop()


async def test_a_hung_upstream_times_out_without_blocking_the_others(upstreams, client):
    a, b = await upstreams("a", "b")
    a.mode = "hang"
    g = await start_gateway([a, b], caps={"a": 2, "b": 2}, timeouts={"a": 0.5})
    try:
        order: list[int] = []

        async def one():
            status, _ = await post(client, g.url)
            order.append(status)

        await asyncio.gather(*(one() for _ in range(8)))
        assert sorted(order) == [200] * 6 + [504] * 2
        assert order[:6] == [200] * 6  # b answered everything while a's two requests hung
        assert g.state.metrics.upstream_errors[("a", "timeout")] == 2
        assert g.policy.engines["a"].in_flight == 0
    finally:
        await g.stop()


async def test_streaming_is_passed_chunk_by_chunk_and_a_client_disconnect_cancels_upstream(upstreams, client):
    up, = await upstreams("a")
    up.chunk_gate = asyncio.Event()
    g = await start_gateway([up])
    try:
        body = {"prompt": "hi", "max_tokens": 3, "stream": True}
        async with client.post(g.url + "/v1/completions", json=body) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            first = await r.content.readuntil(b"\n\n")
            assert b" t0" in first  # arrived while the upstream still holds the rest
            up.chunk_gate.set()
            rest = await r.read()
        assert rest.count(b"data: ") == 3 and rest.endswith(b"data: [DONE]\n\n")
        up.chunk_gate = asyncio.Event()
        r = await client.post(g.url + "/v1/completions", json=body)
        await r.content.readuntil(b"\n\n")
        r.close()  # the client goes away mid-stream
        await wait_for(lambda: up.cancelled == 1, what="the upstream request to be cancelled")
        await wait_for(lambda: g.policy.engines["a"].in_flight == 0, what="the slot to be freed")
    finally:
        await g.stop()


async def test_a_client_leaving_while_queued_is_dropped_from_the_queue(upstreams, client):
    up, = await upstreams("a")
    up.hold = asyncio.Event()
    g = await start_gateway([up], caps={"a": 1})
    try:
        first = asyncio.create_task(post(client, g.url))
        await wait_for(lambda: len(up.received) == 1, what="the first request")
        queued = asyncio.create_task(post(client, g.url))
        await wait_for(lambda: g.policy.queued == 1, what="a queued request")
        queued.cancel()
        await wait_for(lambda: g.policy.queued == 0, what="the queue to empty")
        up.hold.set()
        assert (await first)[0] == 200
        assert len(up.received) == 1
    finally:
        await g.stop()


async def test_bad_input(upstreams, client):
    up, = await upstreams("a")
    g = await start_gateway([up], max_body_bytes=2048)
    try:
        status, doc = await post(client, g.url, raw="{not json")
        assert status == 400 and doc["error"]["type"] == "invalid_request_error"
        assert "Invalid JSON" in doc["error"]["message"] and doc["error"]["code"] == 400
        assert (await post(client, g.url, raw="[1, 2]"))[0] == 400
        status, doc = await post(client, g.url, {"prompt": "x" * 5000})
        assert status == 413 and "larger than 2048" in doc["error"]["message"]
        assert up.received == []
        assert (await post(client, g.url, cls="gold"))[0] == 200  # unknown class: the default (batch)
        assert (await post(client, g.url, headers={"x-gateway-inference-objective": "realtime"}))[0] == 200
        assert [b["priority"] for b in up.received] == [-50, -100]
    finally:
        await g.stop()


async def test_priority_is_dropped_for_an_engine_without_priority_scheduling(upstreams, client):
    up, = await upstreams("a")
    up.refuse_priority = True
    g = await start_gateway([up])
    try:
        assert (await post(client, g.url, cls="realtime"))[0] == 200
        assert (await post(client, g.url, cls="realtime"))[0] == 200
        assert g.policy.engines["a"].priority_scheduling is False
        assert ["priority" in b for b in up.received] == [False, False]
    finally:
        await g.stop()


async def test_api_key_decides_the_class(upstreams, client, tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_text("k-bg: background\nk-rt: realtime\n")
    up, = await upstreams("a")
    g = await start_gateway([up], api_keys_file=str(keys))
    try:
        for key in ("k-bg", "k-rt", "unknown"):
            assert (await post(client, g.url, headers={"Authorization": f"Bearer {key}"}))[0] == 200
        assert [b["priority"] for b in up.received] == [-10, -100, -50]
    finally:
        await g.stop()
