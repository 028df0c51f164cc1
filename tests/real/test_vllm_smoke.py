"""A real vLLM engine on CPU: starts, serves, exports metrics, stops cleanly."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from infertop.sources.expfmt import parse
from infertop.sources.vllm import FILTERED_METRICS, EngineCollector, EngineEndpoint
from infertop.sources.vllm_names import SCRAPE_NAMES

pytestmark = pytest.mark.real_vllm


def sample_names(text: str) -> set[str]:
    return set(parse(text).names)


def test_engine_serves_and_stops_cleanly(vllm_server_factory) -> None:
    started = time.monotonic()
    server = vllm_server_factory(max_num_seqs=4)
    try:
        with httpx.Client(base_url=server.base_url, timeout=60.0) as client:
            models = client.get("/v1/models")
            assert models.status_code == 200
            assert [m["id"] for m in models.json()["data"]] == [server.served_name]

            # /metrics can take seconds when the 2 cores are busy.
            metrics = client.get("/metrics")
            assert metrics.status_code == 200
            assert "vllm:num_requests_running" in metrics.text
            assert "vllm:num_requests_waiting" in metrics.text

            t0 = time.monotonic()
            resp = client.post(
                "/v1/completions",
                json={
                    "model": server.served_name,
                    "prompt": "The quick brown fox",
                    "max_tokens": 16,
                    "temperature": 0.0,
                    "ignore_eos": True,
                },
                timeout=120.0,
            )
            completion_s = time.monotonic() - t0
            assert resp.status_code == 200, resp.text
            body = resp.json()
            text = body["choices"][0]["text"]
            assert isinstance(text, str) and text
            assert body["usage"]["completion_tokens"] == 16

            # infertop asks /metrics for only the samples it reads: real vLLM must answer the name[]
            # query with exactly those (and nothing else), or the console would lose values.
            filtered = client.get(FILTERED_METRICS)
            assert filtered.status_code == 200
            full_names = sample_names(client.get("/metrics").text)
            assert sample_names(filtered.text) == full_names & set(SCRAPE_NAMES)
            assert "vllm:time_to_first_token_seconds_bucket" in sample_names(filtered.text)
            filtered_bytes = len(filtered.content)
            assert filtered_bytes < len(metrics.content) / 2

            async def poll_both() -> tuple[EngineCollector, EngineCollector]:
                narrow, whole = (EngineCollector(EngineEndpoint(name="e", url=server.base_url, timeout_s=30.0), 60.0)
                                 for _ in range(2))
                whole.filtered_scrape = False
                for c in (narrow, whole):
                    await c.poll()
                    await c.aclose()
                return narrow, whole

            narrow, whole = asyncio.run(poll_both())
            assert narrow.filtered_scrape, narrow.health.last_error
            a, b = narrow.stats[0], whole.stats[0]
            assert a.state == b.state == "up" and a.model == b.model == server.served_name
            assert (a.running, a.waiting, a.kv_cache_pct) == (b.running, b.waiting, b.kv_cache_pct)
            assert narrow._last_read[1][0].counters == whole._last_read[1][0].counters
    finally:
        info = server.stop(grace=30)

    assert info["left"] == [], f"processes left in the group: {info['left']}"
    assert server.proc is not None and server.proc.returncode is not None
    print(
        f"[real] healthy after {server.startup_s:.1f} s, completion of 16 tokens "
        f"in {completion_s:.2f} s ({text!r}), stopped in {info['seconds']:.1f} s "
        f"(exit {info['returncode']}, SIGKILL needed: {info['sigkill']}, "
        f"zombies: {info['zombies']}); /metrics {len(metrics.content)} B, for name[] {filtered_bytes} B; test body {time.monotonic() - started:.1f} s"
    )
