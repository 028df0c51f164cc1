"""GPU rows from Prometheus (dcgm-exporter series it scrapes), via prometheus-api-client.

One instant query selects every dcgm-exporter field infertop uses
(``{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|..."}``); the result is
grouped by (Hostname | hostname | instance, gpu, UUID) exactly like a direct
scrape (:func:`infertop.sources.dcgm.build_rows`). A series Prometheus has no
fresh sample for (a failed scrape makes it stale) is absent, so that field is
``None`` ("no data"), never 0.

Blocking: call :meth:`PromGpuSource.collect` from a thread.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from ..domain.gpu import GpuStats
from ..domain.source import SourceHealth
from .dcgm import METRICS, build_rows
from .prom_connect import connect_prometheus
from .sanitize import error_text

NO_SERIES = "Prometheus has no DCGM_FI_* series — is dcgm-exporter scraped by it?"
HOST_LABELS = ("Hostname", "hostname", "instance")


def gpu_query(metrics: tuple[str, ...] = METRICS, selector: str = "") -> str:
    """The PromQL instant query for all GPU fields (``selector``: extra matchers, e.g. ``job="dcgm"``)."""
    names = "|".join(re.escape(m) for m in metrics)
    extra = f",{selector}" if selector else ""
    return f'{{__name__=~"{names}"{extra}}}'


def describe_prom_error(exc: BaseException, timeout_s: float) -> str:
    """One line of plain text for the status bar from a requests / prometheus-api-client error."""
    return error_text(_describe(exc, timeout_s))


def _describe(exc: BaseException, timeout_s: float) -> str:
    import requests  # noqa: PLC0415 — a dependency of prometheus-api-client

    from .prom_connect import PromAnswerError  # noqa: PLC0415

    if isinstance(exc, PromAnswerError):
        return str(exc)
    if isinstance(exc, requests.exceptions.Timeout):
        return f"timeout after {timeout_s:g} s"
    if isinstance(exc, requests.exceptions.ConnectionError):
        text = str(exc).lower()
        if "refused" in text:
            return "connection refused"
        if "name or service" in text or "nodename" in text or "resolve" in text:
            return "unknown host"
        return "cannot connect"
    text = str(exc)
    m = re.search(r"HTTP Status Code (\d+)", text)
    if m:
        return f"HTTP {m.group(1)}"
    return f"{type(exc).__name__}: {text}"[:120]


class PromGpuSource:
    """GPU rows from a Prometheus server."""

    kind = "prometheus"

    def __init__(self, url: str, timeout_s: float = 5.0, token_file: str | None = None, *,
                 selector: str = "", prom: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.token_file = token_file
        self.selector = selector
        self.clock = clock
        self._prom = prom
        self.query = gpu_query(selector=selector)
        self.health = SourceHealth(name=self.url, kind="prometheus", ok=False)

    def _connect(self) -> Any:
        if self._prom is None:
            self._prom = connect_prometheus(self.url, self.token_file, self.timeout_s)
        return self._prom

    def query_rows(self) -> list[GpuStats]:
        """Run the query; raises on any failure."""
        result = self._connect().custom_query(self.query, timeout=self.timeout_s)
        triples = []
        for item in result:
            labels = dict(item.get("metric") or {})
            name = labels.pop("__name__", None)
            value = item.get("value")
            if name is None or not value:
                continue
            try:
                v = float(value[1])
            except (TypeError, ValueError, IndexError):
                continue
            triples.append((name, labels, v))
        return build_rows(triples, source="prometheus", source_url=self.url, host_labels=HOST_LABELS)

    def collect(self) -> list[GpuStats]:
        """Blocking; [] (with :attr:`health` saying why) on failure."""
        started = self.clock()
        try:
            rows = self.query_rows()
        except Exception as exc:  # noqa: BLE001 — shown, never raised
            self._failed(describe_prom_error(exc, self.timeout_s), started)
            return []
        now = self.clock()
        if not rows:
            self._failed(NO_SERIES, started)
            return []
        self.health = SourceHealth(name=self.url, kind="prometheus", ok=True, last_ok_at=now, latency_s=now - started)
        return rows

    def _failed(self, why: str, started: float) -> None:
        now = self.clock()
        h = self.health
        self.health = SourceHealth(name=self.url, kind="prometheus", ok=False, last_ok_at=h.last_ok_at,
                                   last_error=why, last_error_at=now, latency_s=now - started,
                                   consecutive_failures=h.consecutive_failures + 1)

    def close(self) -> None:
        close = getattr(self._prom, "close", None)
        if close is not None:
            close()
        self._prom = None
