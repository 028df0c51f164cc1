"""The gateway in front of a real vLLM engine on CPU (``--scheduling-policy priority``, max_num_seqs 2).

Batch requests flood the engine through the gateway (its cap is above the engine's
max_num_seqs, so they wait in vLLM's own queue), then realtime requests follow. The
gateway adds vLLM's ``priority`` (realtime −100, batch −50: lower is served first), so
vLLM schedules the realtime ones ahead of the waiting batch ones. Queue time is read
from vLLM's own histogram ``vllm:request_queue_time_seconds``: after each request
completes, /metrics is read; once the histogram's count equals the completions seen,
its increment since the last such point belongs to the requests completed in between
(increments mixing both classes are left out).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from infertop.gateway.config import GatewayConfig, GatewayEngine
from infertop.gateway.runner import GatewayRunner, resolve_engines
from infertop.sources.expfmt import parse

pytestmark = pytest.mark.real_vllm

QUEUE_SUM = "vllm:request_queue_time_seconds_sum"
QUEUE_COUNT = "vllm:request_queue_time_seconds_count"


async def _queue_hist(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    async with session.get(url + "/metrics") as r:
        exp = parse(await r.text())
    # one engine; vLLM may export the same histogram under more than one label set: take one
    total = max((v for _, v in exp.series(QUEUE_SUM)), default=0.0)
    count = max((v for _, v in exp.series(QUEUE_COUNT)), default=0.0)
    return total, count


async def test_realtime_waits_less_than_batch_in_vllms_own_queue(vllm_server_factory):
    server = vllm_server_factory(max_num_seqs=2, extra_args=["--scheduling-policy", "priority"])
    gw = GatewayConfig(listen="127.0.0.1:0", admin_listen="127.0.0.1:0", vllm_waiting_max=1000,
                       kv_cache_max_pct=100, metrics_poll_s=1.0)
    gw.engines = [GatewayEngine(url=server.base_url, name="cpu", cap=32, timeout_s=600)]
    runner = await GatewayRunner(gw, resolve_engines(gw), None).start()
    per_class: dict[str, list[float]] = {"realtime": [], "batch": []}
    codes: list[int] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            lock = asyncio.Lock()
            last = list(await _queue_hist(session, server.base_url))
            done_since: list[str] = []
            completed = [last[1]]  # requests finished (as the client saw them), counting earlier ones

            async def one(cls: str, i: int) -> None:
                body = {"model": server.served_name, "prompt": f"{cls} request {i} says", "max_tokens": 64,
                        "ignore_eos": True, "temperature": 0}
                async with session.post(runner.url + "/v1/completions", json=body,
                                        headers={"x-infertop-class": cls}) as r:
                    await r.read()
                    codes.append(r.status)
                async with lock:
                    done_since.append(cls)
                    completed[0] += 1
                    for _ in range(200):  # vLLM records a finished request's stats a moment later
                        total, count = await _queue_hist(session, server.base_url)
                        if count >= completed[0]:
                            break
                        await asyncio.sleep(0.05)
                    # requests running together finish together: wait until the histogram and the
                    # completions seen here agree, then give the increment to those completions
                    if count == completed[0]:
                        d_sum, d_count = total - last[0], count - last[1]
                        print(f"[gateway-real] completed {done_since}: histogram +{d_count:g}, +{d_sum:.3f} s")
                        if len(set(done_since)) == 1:
                            per_class[cls].extend([d_sum / d_count] * int(d_count))
                        last[:] = [total, count]
                        done_since.clear()

            batch = [asyncio.create_task(one("batch", i)) for i in range(8)]
            while runner.policy.engines["cpu"].in_flight < 8:  # the flood is at the engine
                await asyncio.sleep(0.01)
            realtime = [asyncio.create_task(one("realtime", i)) for i in range(6)]
            await asyncio.gather(*batch, *realtime)
    finally:
        await runner.stop()
    assert codes == [200] * 14
    rt, bt = per_class["realtime"], per_class["batch"]
    print(f"vLLM queue time, mean: realtime {sum(rt) / max(1, len(rt)):.3f} s over {len(rt)}, "
          f"batch {sum(bt) / max(1, len(bt)):.3f} s over {len(bt)}")
    assert len(rt) >= 2 and len(bt) >= 4, per_class
    assert sum(rt) / len(rt) < sum(bt) / len(bt)
