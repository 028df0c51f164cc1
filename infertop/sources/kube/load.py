"""Kubernetes reads: a pod's load, vLLM's requests in flight from its /metrics.

Blocking (:func:`fetch_pod_load`, for one pod during a drain) and async
(:class:`PodLoadScraper`, many pods at once, every refresh; :func:`fetch_pod_loads`
once). Errors become ``PodLoad.error``; a body over ``POD_METRICS_MAX_BYTES`` is
refused while it is read.
This module never imports textual or rich.
"""

from __future__ import annotations

from urllib.parse import urlencode

import httpx

from ...domain.kube import PodLoad, load_of
from ..expfmt import ParseError, Parser
from ..http_client import HttpError, LeanHttpClient, ResponseTooLarge, blocking_get

__all__ = [
    "POD_METRICS_MAX_BYTES",
    "PodLoad",
    "PodLoadScraper",
    "fetch_pod_load",
    "fetch_pod_loads",
    "load_of",
    "pod_load_from_text",
]


POD_METRICS_MAX_BYTES = 8 * 1024 * 1024  # a vLLM /metrics document is ~50 KB
LOAD_NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
LOAD_FILTER = "/metrics/?" + urlencode([("name[]", n) for n in LOAD_NAMES])


def pod_load_from_text(text: str, parser: Parser | None = None) -> PodLoad:
    try:
        exp = (parser or Parser()).parse(text)
    except ParseError as e:
        return PodLoad(error=f"garbage /metrics ({e})")

    def total(name: str) -> float | None:
        series = exp.series(name)
        return sum(v for _, v in series) if series else None

    return load_of(total("vllm:num_requests_running"), total("vllm:num_requests_waiting"))


def fetch_pod_load(url: str, timeout_s: float = 2.0, client: httpx.Client | None = None) -> PodLoad:
    """GET ``url``/metrics (blocking) → running and waiting; errors become ``PodLoad.error``."""
    from ..vllm import describe_error

    try:
        status, body = blocking_get(url.rstrip("/") + "/metrics", POD_METRICS_MAX_BYTES, timeout_s=timeout_s,
                                    client=client, error_body=False)
    except ResponseTooLarge:
        return PodLoad(error=f"response too large (> {POD_METRICS_MAX_BYTES >> 20} MB)")
    except Exception as e:  # noqa: BLE001
        return PodLoad(error=describe_error(e, timeout_s))
    if status != 200:
        return PodLoad(error=f"HTTP {status}")
    return pod_load_from_text(body.decode("utf-8", errors="replace"))


class PodLoadScraper:
    """Reads many pods' loads, tick after tick, cheaply: a keep-alive client and a parser (whose
    layout is reused) per pod, and where the server can filter (vLLM's ``/metrics/``, see
    :data:`.vllm.FILTERED_METRICS`) only the two samples read. A pod whose filtered answer has no
    load but whose whole document has gets whole documents from then on."""

    def __init__(self, timeout_s: float = 1.5) -> None:
        self.timeout_s = timeout_s
        self._pods: dict[str, _Pod] = {}  # base URL → its client, parser, whether it filters
        self._closed = False

    async def scrape(self, urls: dict[str, str]) -> dict[str, PodLoad]:
        """key → PodLoad for every ``urls`` entry, concurrently; pods no longer asked for are let go."""
        import asyncio

        from ..vllm import describe_error

        bases = {key: url.rstrip("/") for key, url in urls.items()}
        for base in set(self._pods) - set(bases.values()):
            self._pods.pop(base).client.close()
        out: dict[str, PodLoad] = {}

        async def one(key: str, base: str) -> None:
            pod = self._pods.get(base)
            if pod is None:
                pod = self._pods[base] = _Pod(LeanHttpClient(connect_timeout_s=min(1.0, self.timeout_s),
                                                             timeout_s=self.timeout_s))
            try:
                async with asyncio.timeout(self.timeout_s):
                    load = await pod.read(base + LOAD_FILTER) if pod.filtered else None
                    if load is None or load.error:
                        load = await pod.read(base + "/metrics")
                        pod.filtered = pod.filtered and load.error is not None
                out[key] = load
            except Exception as e:  # noqa: BLE001
                out[key] = PodLoad(error=describe_error(e, self.timeout_s))

        await asyncio.gather(*(one(k, b) for k, b in bases.items()))
        if self._closed:  # closed while this scrape ran: what it opened goes too
            self.close()
        return out

    def close(self) -> None:
        self._closed = True
        for pod in self._pods.values():
            pod.client.close()
        self._pods.clear()


class _Pod:
    __slots__ = ("client", "parser", "filtered")

    def __init__(self, client: LeanHttpClient) -> None:
        self.client, self.parser, self.filtered = client, Parser(), True

    async def read(self, url: str) -> PodLoad:
        """The load at ``url``; an HTTP status (the path may not exist here) is a PodLoad error."""
        try:
            _, body = await self.client.get(url, POD_METRICS_MAX_BYTES)
        except HttpError as e:
            if str(e).startswith("HTTP "):
                return PodLoad(error=str(e))
            raise
        return pod_load_from_text(body.decode("utf-8", errors="replace"), self.parser)


async def fetch_pod_loads(urls: dict[str, str], timeout_s: float = 1.5) -> dict[str, PodLoad]:
    """Scrape many pods' /metrics once, concurrently (async); key → PodLoad."""
    scraper = PodLoadScraper(timeout_s)
    try:
        return await scraper.scrape(urls)
    finally:
        scraper.close()
