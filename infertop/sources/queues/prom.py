"""The same queue series read through Prometheus instead of from the source itself.

One PromQL instant query per series name (``{__name__="…"}`` plus an optional
selector such as ``job="epp"``); the answers go through the same extraction
and window as a direct scrape (:mod:`.names`, :class:`.collector.QueueWindow`),
so a band's depth, wait quantiles and shares are computed alike. Labels
Prometheus adds (``job``, ``instance``) are summed over like fairness ids. A
series Prometheus has no fresh sample for is absent: "no data", never 0.
The queries are blocking (prometheus-api-client) and run in a thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ...domain.source import SourceHealth
from ..prometheus.connect import connect_prometheus
from ..prometheus.gpu import describe_prom_error
from .collector import QueueEndpoint, QueueWindow, build_view
from .names import EPP_NAMES, GATEWAY, GATEWAY_NAMES, QueueSample, extract
from ..sanitize import error_text, finite


class PromSeries:
    """Instant-query answers as ``series(name) -> [(labels, value)]``."""

    def __init__(self, by_name: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        self.by_name = by_name

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return self.by_name.get(name, [])


def series_query(name: str, selector: str = "") -> str:
    return f'{{__name__="{name}"{"," + selector if selector else ""}}}'


class PromQueueCollector:
    """A gateway's or endpoint picker's queues, from the series a Prometheus server scraped."""

    via = "prometheus"

    def __init__(self, endpoint: QueueEndpoint, prom_url: str, window_s: float, *, selector: str = "",
                 timeout_s: float = 5.0, token_file: str | None = None, prom: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.name, self.kind = endpoint.name, endpoint.kind
        self.prom_url = prom_url.rstrip("/")
        self.url = self.prom_url
        self.selector = selector
        self.timeout_s = timeout_s
        self.token_file = token_file
        self.clock = clock
        self.window = QueueWindow(window_s)
        self.health = SourceHealth(name=endpoint.name, kind=endpoint.kind, ok=False)
        self.view = None
        self.completed_polls = 0
        self._down_since: float | None = None
        self._prom = prom
        self.names = GATEWAY_NAMES if endpoint.kind == GATEWAY else EPP_NAMES

    def down_since_wall(self, now: float, mono: float) -> float | None:
        return None if self._down_since is None else now - max(0.0, mono - self._down_since)

    def _connect(self) -> Any:
        if self._prom is None:
            self._prom = connect_prometheus(self.prom_url, self.token_file, self.timeout_s)
        return self._prom

    def query(self) -> QueueSample:
        """Every series name, one query each (blocking); raises on any failure."""
        prom = self._connect()
        by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name in self.names:
            for item in prom.custom_query(series_query(name, self.selector), timeout=self.timeout_s):
                labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items() if k != "__name__"}
                value = item.get("value") or []
                v = finite(value[1]) if len(value) > 1 else None
                if v is not None:
                    by_name.setdefault(name, []).append((labels, v))
        return extract(PromSeries(by_name), self.kind)

    def next_delay_s(self, interval_s: float) -> float:
        return interval_s

    async def poll(self):
        started = self.clock()
        try:
            sample = await asyncio.to_thread(self.query)
            if sample.empty():
                raise LookupError(f"Prometheus has no {'infertop_gateway_*' if self.kind == GATEWAY else 'flow-control'}"
                                  " series — does it scrape this source?")
            now = self.clock()
            self.window.add(now, sample.counters)
            self.view = build_view(self.endpoint, sample, self.window, None, "none", None, url=self.url, via=self.via)
        except Exception as exc:  # noqa: BLE001 — shown, never raised
            self._failed(exc, started)
            return self.view
        self._down_since = None
        self.completed_polls += 1
        self.health = SourceHealth(name=self.name, kind=self.kind, ok=True, last_ok_at=now, latency_s=now - started)
        return self.view

    def _failed(self, exc: BaseException, started: float) -> None:
        now = self.clock()
        self.completed_polls += 1
        if self._down_since is None:
            self._down_since = now
        msg = str(exc) if isinstance(exc, LookupError) else describe_prom_error(exc, self.timeout_s)
        h = self.health
        self.health = SourceHealth(name=self.name, kind=self.kind, ok=False, last_ok_at=h.last_ok_at,
                                   last_error=error_text(msg), last_error_at=now, latency_s=now - started,
                                   consecutive_failures=h.consecutive_failures + 1)

    async def aclose(self) -> None:
        close = getattr(self._prom, "close", None)
        if close is not None:
            close()
        self._prom = None
