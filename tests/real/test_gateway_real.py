"""The gateway in front of a real vLLM engine on CPU (``--scheduling-policy priority``, max_num_seqs 2).

Batch requests flood the engine through the gateway (its cap is above the engine's
max_num_seqs, so they wait in vLLM's own queue), then realtime requests follow. The
gateway adds vLLM's ``priority`` (realtime −100, batch −50: lower is served first), so
vLLM schedules the realtime ones ahead of the waiting batch ones. Queue time is read
from vLLM's own histogram ``vllm:request_queue_time_seconds``, sampled continuously:
the increment between two readings belongs to the requests that finished in between
(stretches mixing both classes are left out). vLLM's API server can be starved on a busy
2-core host (the CPU engine's threads take every core) and answer /metrics only two or three
times in the run; then the histogram proves the requests queued in vLLM, and the order and
the client-side latency of the answers prove that realtime went first.
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
    latency_s: dict[str, list[float]] = {}  # per class, in the order answers arrived
    loop = asyncio.get_running_loop()
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
                t0 = loop.time()
                body = {"model": server.served_name, "prompt": f"{cls} request {i} says", "max_tokens": 64,
                        "ignore_eos": True, "temperature": 0}
                async with session.post(runner.url + "/v1/completions", json=body,
                                        headers={"x-infertop-class": cls}) as r:
                    await r.read()
                    codes.append(r.status)
                finished.append(cls)
                latency_s.setdefault(cls, []).append(loop.time() - t0)
                # A reading right after each answer too: on a loaded host the sampler alone can miss every
                # boundary between the classes (one run saw counts 0, 2, 14 and nothing between).
                total, count = await _queue_hist(session, server.base_url)
                samples.setdefault(int(count - count0), total - sum0)

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
    # Per class: the queue time of its single-class stretches over the requests in them (a mean per request,
    # so a stretch of one request that found a free slot does not weigh as much as a stretch of five that queued).
    time_s: dict[str, float] = {"realtime": 0.0, "batch": 0.0}
    requests: dict[str, int] = {"realtime": 0, "batch": 0}
    ks = sorted(k for k in samples if 0 <= k <= len(finished))
    for k1, k2 in zip(ks, ks[1:]):
        if k1 < 2:
            # the first two answers are the batch requests that took vLLM's two free slots: they never
            # queued, and counted as batch they made batch's queue time ~0 (one CI run: 6e-5 s over 2)
            continue
        group = set(finished[k1:k2])
        if len(group) == 1:
            cls = group.pop()
            time_s[cls] += samples[k2] - samples[k1]
            requests[cls] += k2 - k1
            print(f"[gateway-real] finished {finished[k1:k2]}: +{samples[k2] - samples[k1]:.3f} s queue time")
    print(f"vLLM queue time per request: realtime {time_s['realtime']:.3f} s / {requests['realtime']}, "
          f"batch {time_s['batch']:.3f} s / {requests['batch']}; order finished: {finished}; readings: {ks}")
    # The requests really queued in vLLM (not in the gateway): its own histogram grew.
    assert samples[max(samples)] > 0, samples
    # Every realtime request finished before the batch requests that had to wait (two batch requests took
    # vLLM's two slots before the realtime ones arrived), although those were sent first.
    assert finished[2:8].count("realtime") >= 5, finished
    waiting_batch = latency_s["batch"][2:]
    assert sum(latency_s["realtime"]) / 6 < sum(waiting_batch) / len(waiting_batch)
    # When vLLM's answers to /metrics come often enough to tell the classes apart (a starved API server on a
    # busy 2-core host may answer only a few times in the run), its histogram says the same per request.
    if requests["realtime"] >= 2 and requests["batch"] >= 2:
        assert time_s["realtime"] / requests["realtime"] < time_s["batch"] / requests["batch"]
