"""Kubernetes reads: a pod's load, vLLM's requests in flight from its /metrics.

Blocking (:func:`fetch_pod_load`, for one pod during a drain) and async
(:func:`fetch_pod_loads`, many pods at once). Errors become ``PodLoad.error``;
a body over ``POD_METRICS_MAX_BYTES`` is refused while it is read.
This module never imports textual or rich.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from .expfmt import ParseError, Parser

__all__ = [
    "POD_METRICS_MAX_BYTES",
    "PodLoad",
    "fetch_pod_load",
    "fetch_pod_loads",
    "pod_load_from_text",
]


POD_METRICS_MAX_BYTES = 8 * 1024 * 1024  # a vLLM /metrics document is ~50 KB


@dataclass(frozen=True)
class PodLoad:
    """vLLM's in-flight requests on one pod, read from its /metrics."""

    running: float | None = None
    waiting: float | None = None
    error: str | None = None

    @property
    def in_flight(self) -> float | None:
        if self.running is None and self.waiting is None:
            return None
        return (self.running or 0.0) + (self.waiting or 0.0)


def pod_load_from_text(text: str, parser: Parser | None = None) -> PodLoad:
    try:
        exp = (parser or Parser()).parse(text)
    except ParseError as e:
        return PodLoad(error=f"garbage /metrics ({e})")

    def total(name: str) -> float | None:
        series = exp.series(name)
        return sum(v for _, v in series) if series else None

    running, waiting = total("vllm:num_requests_running"), total("vllm:num_requests_waiting")
    if running is None and waiting is None:
        return PodLoad(error="no vllm:num_requests_* at /metrics")
    return PodLoad(running, waiting)


def fetch_pod_load(url: str, timeout_s: float = 2.0, client: httpx.Client | None = None) -> PodLoad:
    """GET ``url``/metrics (blocking) → running and waiting; errors become ``PodLoad.error``."""
    from .vllm import describe_error

    own = client is None
    c = client or httpx.Client(timeout=timeout_s, trust_env=False)
    try:
        with c.stream("GET", url.rstrip("/") + "/metrics", timeout=timeout_s) as resp:
            if resp.status_code != 200:
                return PodLoad(error=f"HTTP {resp.status_code}")
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > POD_METRICS_MAX_BYTES:
                    return PodLoad(error=f"response too large (> {POD_METRICS_MAX_BYTES >> 20} MB)")
        return pod_load_from_text(body.decode("utf-8", errors="replace"))
    except Exception as e:  # noqa: BLE001
        return PodLoad(error=describe_error(e, timeout_s))
    finally:
        if own:
            c.close()


async def fetch_pod_loads(urls: dict[str, str], timeout_s: float = 1.5) -> dict[str, PodLoad]:
    """Scrape many pods' /metrics concurrently (async); key → PodLoad."""
    import asyncio

    from .vllm import describe_error, fetch_text

    out: dict[str, PodLoad] = {}
    if not urls:
        return out
    parser = Parser()
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=min(1.0, timeout_s)),
                                 trust_env=False) as client:
        async def one(key: str, url: str) -> None:
            try:
                async with asyncio.timeout(timeout_s):
                    text = await fetch_text(client, url.rstrip("/") + "/metrics", POD_METRICS_MAX_BYTES)
                out[key] = pod_load_from_text(text, parser)
            except Exception as e:  # noqa: BLE001
                out[key] = PodLoad(error=describe_error(e, timeout_s))

        await asyncio.gather(*(one(k, u) for k, u in urls.items()))
    return out
