"""The demo's gateway: the load generator's mixed classes through it, and ``--demo`` starting it."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request

import pytest

from gateway_upstream import Upstream, start_gateway, wait_for
from infertop.gateway.loadgen import LoadGen, parse_clients


async def test_loadgen_classes_follow_the_weights_and_a_change_moves_them():
    up = await Upstream("a").start()
    up.delay_s = 0.005
    g = await start_gateway([up], caps={"a": 2})
    gen = LoadGen(g.url, {"batch": 8, "background": 8}, think_s=0, max_tokens=(2, 2))
    task = asyncio.create_task(gen.run())
    try:
        def counts() -> dict[str, int]:
            return {c: g.policy.classes[c].dispatches for c in ("batch", "background")}

        await wait_for(lambda: sum(counts().values()) >= 40, what="load")
        a = counts()
        await wait_for(lambda: sum(counts().values()) >= sum(a.values()) + 150, what="150 dispatches")
        b = counts()
        share_batch = (b["batch"] - a["batch"]) / (sum(b.values()) - sum(a.values()))
        g.policy.change_class("background", {"weight": 8.0})  # batch 2 : background 8
        await wait_for(lambda: sum(counts().values()) >= sum(b.values()) + 10, what="the change to apply")
        c = counts()
        await wait_for(lambda: sum(counts().values()) >= sum(c.values()) + 150, what="150 more dispatches")
        d = counts()
        share_after = (d["batch"] - c["batch"]) / (sum(d.values()) - sum(c.values()))
        print(f"batch share at 2:1 = {share_batch:.3f}, at 2:8 = {share_after:.3f}")
        assert abs(share_batch - 2 / 3) <= 0.1 and abs(share_after - 0.2) <= 0.1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await g.stop()
        await up.stop()
    assert gen.stats.failed == {}


def test_parse_clients():
    assert parse_clients("realtime=2,batch=10") == {"realtime": 2, "batch": 10}
    with pytest.raises(ValueError):
        parse_clients("realtime")


def test_demo_starts_the_gateway_with_mixed_load_and_stops_it():
    from infertop.demo import start_demo
    from infertop.gateway.demo import TOKEN_ENV

    demo = start_demo(1)
    try:
        gw = demo.gateway
        assert gw is not None and gw.url.startswith("http://127.0.0.1:")

        def dispatched() -> set[str]:
            text = urllib.request.urlopen(gw.url + "/metrics", timeout=5).read().decode()
            return {line.split('class="')[1].split('"')[0] for line in text.splitlines()
                    if line.startswith("infertop_gateway_dispatches_total{")}

        deadline = time.monotonic() + 30
        while dispatched() != {"realtime", "batch", "background"}:
            assert time.monotonic() < deadline, dispatched()
            time.sleep(0.2)
        req = urllib.request.Request(gw.admin_url + "/admin/state",
                                     headers={"Authorization": f"Bearer {os.environ[TOKEN_ENV]}"})
        state = json.load(urllib.request.urlopen(req, timeout=5))
        assert [e["url"] for e in state["engines"]] == [e.url for e in demo.endpoints][:6]
    finally:
        demo.stop()
    assert demo.gateway.proc.poll() is not None
