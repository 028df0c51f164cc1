"""The gateway in front of a real vLLM engine on CPU (``--scheduling-policy priority``, max_num_seqs 2).

Batch requests flood the engine through the gateway (its cap is above the engine's
max_num_seqs, so they wait in vLLM's own queue), then realtime requests follow. The
gateway adds vLLM's ``priority`` (realtime −100, batch −50: lower is served first), so
vLLM schedules the realtime ones ahead of the waiting batch ones. Queue time is read
from vLLM's own histogram ``vllm:request_queue_time_seconds``, sampled continuously:
the increment between two readings belongs to the requests that finished in between
(stretches mixing both classes are left out).
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
    finished: list[str] = []  # classes in the order their answers arrived
    samples: dict[int, float] = {}  # histogram count -> sum, first seen
    codes: list[int] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            sum0, count0 = await _queue_hist(session, server.base_url)
            stop = asyncio.Event()

            async def sample() -> None:  # vLLM's histogram, read continuously
                while not stop.is_set():
                    total, count = await _queue_hist(session, server.base_url)
                    samples.setdefault(int(count - count0), total - sum0)
                    await asyncio.sleep(0.02)

            async def one(cls: str, i: int) -> None:
                body = {"model": server.served_name, "prompt": f"{cls} request {i} says", "max_tokens": 64,
                        "ignore_eos": True, "temperature": 0}
                async with session.post(runner.url + "/v1/completions", json=body,
                                        headers={"x-infertop-class": cls}) as r:
                    await r.read()
                    codes.append(r.status)
                finished.append(cls)

            sampler = asyncio.create_task(sample())
            batch = [asyncio.create_task(one("batch", i)) for i in range(8)]
            while runner.policy.engines["cpu"].in_flight < 8:  # the flood is at the engine
                await asyncio.sleep(0.01)
            realtime = [asyncio.create_task(one("realtime", i)) for i in range(6)]
            await asyncio.gather(*batch, *realtime)
            while max(samples, default=0) < len(finished):
                await asyncio.sleep(0.02)
            stop.set()
            await sampler
    finally:
        await runner.stop()
    assert codes == [200] * 14
    # Between two readings of the histogram (counts k1 < k2), the increment is the queue time of the
    # requests that finished k1+1..k2 (answers arrive in the order vLLM finishes them); a stretch of one
    # class only is that class's.
    per_class: dict[str, list[float]] = {"realtime": [], "batch": []}
    ks = sorted(k for k in samples if 0 <= k <= len(finished))
    for k1, k2 in zip(ks, ks[1:]):
        group = set(finished[k1:k2])
        if len(group) == 1:
            per_class[group.pop()].append((samples[k2] - samples[k1]) / (k2 - k1))
            print(f"[gateway-real] finished {finished[k1:k2]}: +{samples[k2] - samples[k1]:.3f} s queue time")
    rt, bt = per_class["realtime"], per_class["batch"]
    print(f"vLLM queue time, mean: realtime {sum(rt) / max(1, len(rt)):.3f} s over {len(rt)} stretches, "
          f"batch {sum(bt) / max(1, len(bt)):.3f} s over {len(bt)}; order finished: {finished}")
    assert rt and bt, (finished, samples)
    assert sum(rt) / len(rt) < sum(bt) / len(bt)
