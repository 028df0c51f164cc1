"""Polling each engine's ``/metrics`` (~1 s): up/down, KV-cache % and vLLM's waiting queue,
with the project's exposition parser and vLLM name table (no parser of its own).

An engine is down when its port refuses connections, or when /metrics fails twice in a
row while no proxied request has had an answer from it for ``ANSWERING_S`` — an engine
too busy to serve /metrics in time but still answering requests is not taken out.
"""

from __future__ import annotations

import asyncio

import aiohttp

from ..sources.expfmt import ParseError, Parser
from ..sources.vllm_names import Extractor
from .policy import EngineState

MAX_METRICS_BYTES = 8 * 1024 * 1024
DOWN_AFTER_FAILURES = 2  # a slow scrape under load is not an outage; a refused connection is
ANSWERING_S = 5.0  # an engine that answered a proxied request this recently stays up whatever /metrics does


class EngineProbe:
    """One engine's metrics reader; ``poll`` updates the :class:`EngineState` in place."""

    def __init__(self, engine: EngineState) -> None:
        self.engine = engine
        self.parser = Parser()
        self.extractor = Extractor()
        self.failures = 0
        self.last_error: str | None = None

    async def poll(self, session: aiohttp.ClientSession, timeout_s: float) -> bool:
        """Read /metrics once; returns whether the engine's up state changed."""
        e = self.engine
        was_up = e.up
        try:
            async with session.get(e.url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                if r.status != 200:
                    raise ValueError(f"/metrics answered {r.status}")
                body = await r.content.read(MAX_METRICS_BYTES + 1)
                if len(body) > MAX_METRICS_BYTES:
                    raise ValueError("/metrics larger than 8 MiB")
            self._read(body.decode("utf-8", "replace"))
        except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
            self._failed(f"connect: {exc.__class__.__name__}", at_once=True)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, ParseError, OSError) as exc:
            self._failed(str(exc) or exc.__class__.__name__)
        else:
            self.failures = 0
            self.last_error = None
            e.up = True
        return e.up != was_up

    def _failed(self, why: str, *, at_once: bool = False) -> None:
        self.failures += 1
        self.last_error = why
        answering = asyncio.get_running_loop().time() - self.engine.answered_at < ANSWERING_S
        if at_once or (self.failures >= DOWN_AFTER_FAILURES and not answering):
            self.engine.up = False
            self.engine.kv_cache_pct = self.engine.vllm_waiting = None

    def _read(self, text: str) -> None:
        _, samples = self.extractor.extract(self.parser.parse(text))
        if not samples:  # answers, but not a vLLM document: the request path still works
            return
        kv = [s.gauges["kv_usage"] for s in samples if "kv_usage" in s.gauges]
        waiting = [s.gauges["waiting"] for s in samples if "waiting" in s.gauges]
        self.engine.kv_cache_pct = max(kv) * 100.0 if kv else None
        self.engine.vllm_waiting = sum(waiting) if waiting else None
