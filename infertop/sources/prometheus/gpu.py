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
from dataclasses import replace
from collections.abc import Callable
from typing import Any

from ...domain.gpu import UNAVAILABLE, GpuStats
from ...domain.source import SourceHealth
from ..dcgm import _UUID_LABELS, METRICS, _identity, build_rows
from .connect import connect_prometheus
from ..sanitize import error_text

NO_SERIES = "Prometheus has no DCGM_FI_* series — is dcgm-exporter scraped by it?"
HOST_LABELS = ("Hostname", "hostname", "instance")
#: the label that tags the series of each GPU's newest sample time in the answer
AGE_LABEL = "infertop_sample_ts"
STALE_AFTER_S = 30.0  # as prometheus.stale_after_s: a GPU whose newest sample is older is stale


def gpu_query(metrics: tuple[str, ...] = METRICS, selector: str = "") -> str:
    """The PromQL instant query for all GPU fields (``selector``: extra matchers, e.g. ``job="dcgm"``),
    and, in the same answer, each GPU's newest sample time: an instant query's value timestamp is
    the evaluation time, not when the sample was taken (a series keeps its last sample for 5 min)."""
    names = "|".join(re.escape(m) for m in metrics)
    extra = f",{selector}" if selector else ""
    fields = f'{{__name__=~"{names}"{extra}}}'
    by = ", ".join(HOST_LABELS + ("gpu",) + _UUID_LABELS)
    # timestamp() of a plain selector is the sample's time; one per metric (it drops the name, so
    # one selector over all names would repeat label sets), ``or`` keeps one of each label set
    times = " or ".join(f"timestamp({m}{{{selector}}})" for m in metrics)
    return f'{fields} or label_replace(max by ({by}) ({times}), "{AGE_LABEL}", "1", "", "")'


def sample_times(result: list, host_labels: tuple[str, ...] = HOST_LABELS) -> dict[tuple, float]:
    """(host, gpu, UUID) → the newest sample's time (wall clock) of the age series in ``result``."""
    out: dict[tuple, float] = {}
    for item in result:
        labels = item.get("metric") or {}
        value = item.get("value")
        if AGE_LABEL not in labels or "__name__" in labels or not value:
            continue
        try:
            ts = float(value[1])
        except (TypeError, ValueError, IndexError):
            continue
        key, _ = _identity({k: v for k, v in labels.items() if k != AGE_LABEL}, host_labels, None)
        if ts == ts:
            out[key[:3]] = max(ts, out.get(key[:3], ts))
    return out


def describe_prom_error(exc: BaseException, timeout_s: float) -> str:
    """One line of plain text for the status bar from a requests / prometheus-api-client error."""
    return error_text(_describe(exc, timeout_s))


def _describe(exc: BaseException, timeout_s: float) -> str:
    import requests  # noqa: PLC0415 — a dependency of prometheus-api-client

    from .connect import PromAnswerError  # noqa: PLC0415

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
                 selector: str = "", prom: Any = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, stale_after_s: float = STALE_AFTER_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.token_file = token_file
        self.selector = selector
        self.clock, self.wall = clock, wall
        self.stale_after_s = stale_after_s
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
        rows = build_rows(triples, source="prometheus", source_url=self.url, host_labels=HOST_LABELS)
        return self._mark_stale(rows, sample_times(result))

    def _mark_stale(self, rows: list[GpuStats], times: dict[tuple, float]) -> list[GpuStats]:
        """Rows whose newest sample is older than ``stale_after_s``: their values kept, marked stale."""
        now = self.wall()
        out = []
        for g in rows:
            ts = times.get((g.host, g.index, g.uuid))
            age_s = None if ts is None else now - ts
            if age_s is not None and age_s > self.stale_after_s:
                g = replace(g, state=UNAVAILABLE, error=f"stale in Prometheus: newest sample {age_s:.0f} s old")
            out.append(g)
        return out

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
