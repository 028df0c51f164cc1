"""Scrape vLLM engines concurrently (httpx, async) and derive their stats.

Every engine is polled by its own loop: the next poll starts when the
last one finished plus the interval, so polls of one engine never
overlap, and a hung or dead engine (own timeout, exponential backoff)
never delays the others.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import httpx

from ..analysis.engine_stats import derive
from ..domain.engine import DEGRADED, DOWN, UP, EngineStats, FleetSnapshot
from ..domain.source import SourceHealth
from ..state.history import HistoryStore
from ..state.window import CounterWindow
from .expfmt import ParseError, Parser
from .vllm_names import EngineSample, Extractor

MAX_BODY_BYTES = 16 * 1024 * 1024
HEALTH_EVERY = 5
HISTORY_FIELDS = (
    "running",
    "waiting",
    "kv_cache_pct",
    "generation_tokens_per_s",
    "prompt_tokens_per_s",
    "requests_per_s",
    "ttft_p99_s",
    "itl_p95_s",
    "e2e_p99_s",
)


@dataclass(frozen=True, slots=True)
class EngineEndpoint:
    """Where an engine is and what infertop knows about it from config."""

    name: str
    url: str
    max_num_seqs: int | None = None
    timeout_s: float = 2.0


async def _none() -> None:
    return None


class ScrapeError(Exception):
    """A scrape failed; the message is what the UI shows."""


def describe_error(exc: BaseException, timeout_s: float) -> str:
    """One short line for the status bar."""
    if isinstance(exc, ScrapeError):
        return str(exc)
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError, TimeoutError)):
        return f"timeout after {timeout_s:g} s"
    if isinstance(exc, httpx.ConnectError):
        cause: BaseException | None = exc
        while cause is not None:
            if isinstance(cause, ConnectionRefusedError):
                return "connection refused"
            cause = cause.__cause__ or cause.__context__
        text = str(exc).lower()
        if "refused" in text:
            return "connection refused"
        if "name or service" in text or "nodename" in text:
            return "unknown host"
        return "cannot connect"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "bad HTTP response"
    if isinstance(exc, httpx.HTTPError):
        return type(exc).__name__
    return f"{type(exc).__name__}: {exc}"[:120]


async def fetch_text(client: httpx.AsyncClient, url: str, limit: int = MAX_BODY_BYTES) -> str:
    """GET ``url`` and return its body, refusing bodies over ``limit`` bytes."""
    async with client.stream("GET", url) as resp:
        if resp.status_code != 200:
            raise ScrapeError(f"HTTP {resp.status_code}")
        declared = resp.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ScrapeError(f"response too large ({int(declared) // 1_000_000} MB)")
        chunks = []
        size = 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise ScrapeError(f"response too large (> {limit // 1_000_000} MB)")
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


class EngineCollector:
    """State of one endpoint across polls: parser, windows, health."""

    def __init__(self, endpoint: EngineEndpoint, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.window_s = window_s
        self.clock = clock
        self.parser = Parser()
        self.extractor = Extractor()
        self.windows: dict[tuple[str, str], CounterWindow] = {}
        self.stats: list[EngineStats] = [EngineStats(name=endpoint.name, url=endpoint.url)]
        self.health = SourceHealth(name=endpoint.name, kind="vllm", ok=False)
        self.models: list[dict] = []
        self.vllm_version: str | None = None
        self._polls = 0
        self._healthy: bool | None = None
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        """This engine's own HTTP client: a pool shared by many hosts costs
        O(connections) per request in httpcore, quadratic over a large fleet."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(5.0, connect=1.0),
                limits=httpx.Limits(max_connections=4, max_keepalive_connections=4),
                headers={"User-Agent": "infertop"},
                trust_env=False,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def next_delay_s(self, interval_s: float) -> float:
        """Interval when healthy; exponential backoff (max 30 s) when failing."""
        n = self.health.consecutive_failures
        if n == 0:
            return interval_s
        return min(30.0, interval_s * (2 ** min(n, 6)))

    async def poll(self, client: httpx.AsyncClient | None = None) -> list[EngineStats]:
        """One bounded poll of /metrics, /health (and /v1/models, /version now and then)."""
        client = client or self.client()
        ep = self.endpoint
        base = ep.url.rstrip("/")
        started = self.clock()
        self._polls += 1
        want_meta = not self.models or self._polls % 30 == 0
        # /health costs a request per engine per poll; while /metrics answers it
        # is checked every HEALTH_EVERY polls, and on every poll after a failure.
        want_health = self._healthy is not True or self._polls % HEALTH_EVERY == 0
        try:
            async with asyncio.timeout(ep.timeout_s):
                jobs = [fetch_text(client, base + "/metrics"), client.get(base + "/health") if want_health else _none()]
                if want_meta:
                    jobs.append(self._meta(client, base))
                text, health = (await asyncio.gather(*jobs, return_exceptions=True))[:2]
            if isinstance(text, BaseException):
                raise text
            try:
                exp = self.parser.parse(text)
            except ParseError as e:
                raise ScrapeError(f"garbage /metrics ({e})") from None
            version, samples = self.extractor.extract(exp)
            if not samples:
                raise ScrapeError("no vllm: metrics at /metrics")
        except Exception as exc:  # noqa: BLE001 — every failure is shown, none crashes
            return self._failed(exc, started)
        if want_health:
            self._healthy = not isinstance(health, BaseException) and health.status_code == 200
        healthy = bool(self._healthy)
        now = self.clock()
        self.health = SourceHealth(
            name=ep.name, kind="vllm", ok=True, last_ok_at=now, latency_s=now - started,
            last_error=None if healthy else "/health failing", last_error_at=None if healthy else now,
        )
        self.stats = [self._derive(s, version, now, healthy, len(samples) > 1) for s in samples]
        return self.stats

    async def _meta(self, client: httpx.AsyncClient, base: str) -> None:
        try:
            r = await client.get(base + "/v1/models")
            if r.status_code == 200:
                self.models = list(r.json().get("data", []))
            if self.vllm_version is None:
                r = await client.get(base + "/version")
                if r.status_code == 200:
                    self.vllm_version = str(r.json().get("version"))
        except (httpx.HTTPError, json.JSONDecodeError, AttributeError, TypeError):
            pass  # optional endpoints; /metrics decides health

    def _derive(self, s: EngineSample, version: str, now: float, healthy: bool, multi: bool) -> EngineStats:
        ep = self.endpoint
        window = self.windows.get(s.key)
        if window is None:
            window = self.windows[s.key] = CounterWindow(self.window_s)
        window.add(now, s.counters)
        model, engine_label = s.key
        if not model and self.models:
            model = str(self.models[0].get("id", ""))
        name = ep.name if not multi else f"{ep.name}/{model or '?'}#{engine_label or '0'}"
        base = EngineStats(
            name=name,
            url=ep.url,
            state=UP if healthy else DEGRADED,
            error=None if healthy else "/health failing",
            model=model or None,
            engine_label=engine_label or None,
            metrics_version=version,
            vllm_version=self.vllm_version,
            scraped_at=time.time(),
            max_num_seqs=ep.max_num_seqs,
            extra={k: v for k, v in s.cache_config.items() if k in ("num_gpu_blocks", "block_size", "enable_prefix_caching")},
        )
        return derive(base, window, s.gauges)

    def _failed(self, exc: BaseException, started: float) -> list[EngineStats]:
        self._healthy = None
        now = self.clock()
        msg = describe_error(exc, self.endpoint.timeout_s)
        h = self.health
        self.health = replace(
            h, ok=False, last_error=msg, last_error_at=now, latency_s=now - started,
            consecutive_failures=h.consecutive_failures + 1,
        )
        state = DEGRADED if isinstance(exc, ScrapeError) and msg.startswith(("garbage", "HTTP", "response", "no vllm")) else DOWN
        # Keep identity (model, version) but never show stale numbers as current.
        self.stats = [
            EngineStats(name=s.name, url=s.url, state=state, error=msg, model=s.model,
                        engine_label=s.engine_label, metrics_version=s.metrics_version,
                        vllm_version=s.vllm_version, scraped_at=s.scraped_at, max_num_seqs=s.max_num_seqs)
            for s in self.stats
        ]
        return self.stats


class FleetCollector:
    """All engines: concurrent independent poll loops, latest snapshot, history."""

    def __init__(
        self,
        endpoints: list[EngineEndpoint],
        interval_s: float = 1.0,
        window_s: float = 60.0,
        history_capacity: int = 3600,
        on_update: Callable[[FleetSnapshot], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.collectors = [EngineCollector(ep, window_s, clock) for ep in endpoints]
        self.history = HistoryStore(history_capacity)
        self.on_update = on_update
        self._tasks: dict[str, asyncio.Task] | None = None
        self._stopped: asyncio.Event | None = None

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.collectors))

    def snapshot(self) -> FleetSnapshot:
        return FleetSnapshot(taken_at=time.time(), engines=tuple(s for c in self.collectors for s in c.stats))

    def health(self) -> list[SourceHealth]:
        return [c.health for c in self.collectors]

    def _record(self, stats: list[EngineStats]) -> None:
        for s in stats:
            for f in HISTORY_FIELDS:
                self.history.record(s.name, f, getattr(s, f))

    async def poll_collector(self, c: EngineCollector) -> None:
        stats = await c.poll()
        self._record(stats)
        if self.on_update is not None:
            self.on_update(self.snapshot())

    async def poll_once(self) -> FleetSnapshot:
        """Poll every engine once, concurrently; returns the new snapshot."""
        await asyncio.gather(*(self.poll_collector(c) for c in self.collectors))
        return self.snapshot()

    async def run(self) -> None:
        """Poll forever, one independent loop per engine (engines may be added later)."""
        self._tasks = {c.endpoint.name: asyncio.create_task(self._loop(c)) for c in self.collectors}
        self._stopped = asyncio.Event()
        try:
            await self._stopped.wait()
        finally:
            for t in self._tasks.values():
                t.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            self._tasks = {}
            await self.aclose()

    def add_endpoint(self, ep: EngineEndpoint) -> EngineCollector:
        """Watch one more engine (e.g. one infertop just started); replaces one of the same name."""
        self.remove_endpoint(ep.name)
        c = EngineCollector(ep, self.collectors[0].window_s if self.collectors else 60.0,
                            self.collectors[0].clock if self.collectors else time.monotonic)
        self.collectors.append(c)
        if self._tasks is not None and self._stopped is not None:
            self._tasks[ep.name] = asyncio.get_running_loop().create_task(self._loop(c))
        return c

    def remove_endpoint(self, name: str) -> None:
        for c in [c for c in self.collectors if c.endpoint.name == name]:
            self.collectors.remove(c)
            task = (self._tasks or {}).pop(name, None)
            if task is not None:
                task.cancel()
            self.history.forget(name)

    async def _loop(self, c: EngineCollector) -> None:
        while True:
            started = c.clock()
            await self.poll_collector(c)
            elapsed = c.clock() - started
            await asyncio.sleep(max(0.05, c.next_delay_s(self.interval_s) - elapsed))
