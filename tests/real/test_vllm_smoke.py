"""A real vLLM engine on CPU: starts, serves, exports metrics, stops cleanly."""

from __future__ import annotations

import time

import httpx
import pytest

pytestmark = pytest.mark.real_vllm


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
    finally:
        info = server.stop(grace=30)

    assert info["left"] == [], f"processes left in the group: {info['left']}"
    assert server.proc is not None and server.proc.returncode is not None
    print(
        f"[real] healthy after {server.startup_s:.1f} s, completion of 16 tokens "
        f"in {completion_s:.2f} s ({text!r}), stopped in {info['seconds']:.1f} s "
        f"(exit {info['returncode']}, SIGKILL needed: {info['sigkill']}, "
        f"zombies: {info['zombies']}); test body {time.monotonic() - started:.1f} s"
    )
