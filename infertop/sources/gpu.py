"""All configured GPU sources behind one call.

Sources, in order of preference when they report the same GPU (same UUID):
NVML on this host (richest: processes), dcgm-exporter endpoints, Prometheus.
A row from a preferred source is completed with fields only a later one has
(pod/namespace from dcgm on a node where NVML also runs, for instance).

``await collector.poll()`` runs NVML and Prometheus in threads and the dcgm
scrapes concurrently on the event loop; ``collector.collect()`` does the same
from synchronous code (not from inside a running event loop).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import fields, replace
from typing import Any

from ..config import GpuConfig, PrometheusConfig
from ..domain.gpu import GpuStats
from ..domain.source import SourceHealth
from .dcgm import DcgmSource, lean_client, normalize_url
from .http_client import LeanHttpClient
from .nvml import EngineRef, NvmlSource, map_processes
from .prometheus.gpu import PromGpuSource
from .sanitize import clean_gpu, error_text

NO_SOURCE = ("no GPU source configured — enable gpu.nvml on a GPU host, list dcgm-exporter URLs "
             "in gpu.dcgm (or --dcgm URL), or set prometheus.url")

_FIELD_NAMES = tuple(f.name for f in fields(GpuStats))


def merge_rows(primary: GpuStats, other: GpuStats) -> GpuStats:
    """``primary`` with its ``None`` fields (and empty process / MIG lists) filled from ``other``."""
    if primary.state != "ok":
        return primary
    changes: dict[str, Any] = {}
    for name in _FIELD_NAMES:
        mine = getattr(primary, name)
        if name in ("processes", "mig_devices"):
            if not mine and getattr(other, name):
                changes[name] = getattr(other, name)
        elif mine is None:
            theirs = getattr(other, name)
            if theirs is not None:
                changes[name] = theirs
    return replace(primary, **changes) if changes else primary


def merge_sources(*row_lists: Iterable[GpuStats]) -> list[GpuStats]:
    """One row per GPU across sources (earlier lists win), sorted by host and index."""
    by_key: dict[tuple, GpuStats] = {}
    for rows in row_lists:
        for g in rows:
            k = g.key
            prev = by_key.get(k)
            by_key[k] = g if prev is None else merge_rows(prev, g)
    return sorted(by_key.values(), key=lambda g: (g.host or "", g.index if g.index is not None else 1 << 30,
                                                   g.uuid or ""))


class GpuCollector:
    """NVML (optional) + dcgm-exporter URLs + Prometheus, combined."""

    def __init__(self, gpu: GpuConfig | None = None, prometheus: PrometheusConfig | None = None, *,
                 dcgm_urls: Iterable[str] = (), nvml_module: Any = None, dcgm_timeout_s: float = 2.0,
                 engines: Iterable[EngineRef | tuple] = (), prometheus_gpus: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        gpu = gpu or GpuConfig()
        self.clock = clock
        self.nvml: NvmlSource | None = NvmlSource(nvml_module, clock=clock) if gpu.nvml else None
        urls: list[str] = []
        for u in [*gpu.dcgm, *dcgm_urls]:
            n = normalize_url(u)
            if n not in urls:
                urls.append(n)
        self.dcgm: DcgmSource | None = DcgmSource(urls, dcgm_timeout_s, clock) if urls else None
        # Prometheus is asked for GPUs when configured, unless dcgm endpoints are
        # given explicitly (they return the same rows, fresher and cheaper).
        use_prom = prometheus is not None and bool(prometheus.url)
        if prometheus_gpus is not None:
            use_prom = use_prom and prometheus_gpus
        elif urls:
            use_prom = False
        self.prom: PromGpuSource | None = (
            PromGpuSource(prometheus.url, prometheus.timeout_s, prometheus.token_file, clock=clock,
                          stale_after_s=prometheus.stale_after_s)
            if use_prom and prometheus is not None and prometheus.url else None  # (use_prom says both: narrows)
        )
        self.engines: list[EngineRef] = [e if isinstance(e, EngineRef) else EngineRef(*e) for e in engines]
        self._client: LeanHttpClient | None = None
        self._nvml_lock = threading.Lock()
        self.rows: list[GpuStats] = []
        self.internal_errors: dict[str, str] = {}  # source kind → why its last poll raised

    # -- configuration at run time -------------------------------------------
    def set_engines(self, engines: Iterable[EngineRef | tuple]) -> None:
        """Engines to map GPU processes to: ``(name, root_pid | None, port | None)``."""
        self.engines = [e if isinstance(e, EngineRef) else EngineRef(*e) for e in engines]

    @property
    def configured(self) -> bool:
        return bool(self.nvml or self.dcgm or self.prom)

    def health(self) -> list[SourceHealth]:
        """Every source's state; an unavailable one says why in ``last_error``."""
        out: list[SourceHealth] = []
        if self.nvml is not None:
            out.append(self.nvml.health)
        if self.dcgm is not None:
            out.extend(self.dcgm.health)
        if self.prom is not None:
            out.append(self.prom.health)
        for kind, why in self.internal_errors.items():
            out = [replace(h, ok=False, last_error=why, last_error_at=self.clock()) if h.kind == kind else h
                   for h in out]
        if not out:
            out.append(SourceHealth(name="gpu", kind="gpu", ok=False, last_error=NO_SOURCE))
        return out

    # -- collection --------------------------------------------------------------
    def _http(self) -> LeanHttpClient:
        # the lean client, as for the engines: httpx's per-request machinery cost several
        # times the socket work of a scrape every 2 s (benchmarks/bench_http.py)
        if self._client is None:
            self._client = lean_client()
        return self._client

    def _collect_nvml(self) -> list[GpuStats]:
        assert self.nvml is not None
        with self._nvml_lock:
            rows = self.nvml.collect()
        if rows and self.engines:
            rows = map_processes(rows, self.engines)
        return rows

    async def poll(self) -> tuple[list[GpuStats], list[SourceHealth]]:
        """Read every source once, concurrently; (rows, health of each source)."""
        jobs: list[Any] = []
        kinds: list[str] = []
        if self.nvml is not None and not self.nvml.gone:  # gone: its health says why; no thread for it
            jobs.append(asyncio.to_thread(self._collect_nvml))
            kinds.append("nvml")
        if self.dcgm is not None:
            jobs.append(self._dcgm_rows(self._http()))
            kinds.append("dcgm")
        if self.prom is not None:
            jobs.append(asyncio.to_thread(self.prom.collect))
            kinds.append("prometheus")
        if len(jobs) == 1:  # the usual case: one source, awaited without a task
            try:
                results: list[Any] = [await jobs[0]]
            except Exception as e:  # noqa: BLE001 — as gather's return_exceptions
                results = [e]
        else:
            results = await asyncio.gather(*jobs, return_exceptions=True)
        # A source that raised (a bug, or input nobody foresaw) shows as that source's
        # error; the other sources' rows are still shown.
        self.internal_errors = {k: error_text(f"internal error: {type(r).__name__}: {r}")
                                for k, r in zip(kinds, results) if isinstance(r, BaseException)}
        rows = merge_sources(*(r for r in results if not isinstance(r, BaseException)))
        # dcgm and Prometheus rows leave build_rows clean, and a merge of clean rows is clean:
        # only NVML's (uncleaned where read, in a thread) need the pass
        self.rows = [clean_gpu(g) for g in rows] if self.nvml is not None else rows
        return self.rows, self.health()

    async def _dcgm_rows(self, client: LeanHttpClient) -> list[GpuStats]:
        assert self.dcgm is not None
        rows, _ = await self.dcgm.poll(client)
        return rows

    def collect(self) -> tuple[list[GpuStats], list[SourceHealth]]:
        """Blocking variant of :meth:`poll` for synchronous callers (scripts, CLI)."""

        async def once() -> tuple[list[GpuStats], list[SourceHealth]]:
            try:
                return await self.poll()
            finally:
                if self._client is not None:
                    await self._client.aclose()
                    self._client = None

        return asyncio.run(once())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await asyncio.to_thread(self.close_blocking)

    def close_blocking(self) -> None:
        """Shut NVML down and drop the Prometheus session."""
        if self.nvml is not None:
            with self._nvml_lock:
                self.nvml.close()
        if self.prom is not None:
            self.prom.close()

    def close(self) -> None:
        """Synchronous close (after :meth:`collect`)."""
        self.close_blocking()


def assign_pod_engines(rows: list, pod_engines: dict[str, str], engine_names: AbstractSet[str] = frozenset()) -> list:
    """GPU → pod → engine: rows whose ``pod`` label (dcgm-exporter ``-k``) is a known
    engine's pod, or is itself an engine's name, get that engine. Rows already
    mapped (NVML process ownership) keep theirs; MIG children are mapped too."""
    from dataclasses import replace as _replace

    def one(r):
        kids = tuple(one(m) for m in (r.mig_devices or ()))
        engine = r.engine
        if engine is None and r.pod:
            engine = pod_engines.get(r.pod) or (r.pod if r.pod in engine_names else None)
        if engine is r.engine and kids == tuple(r.mig_devices or ()):
            return r
        return _replace(r, engine=engine, mig_devices=kids) if r.mig_devices else _replace(r, engine=engine)

    return [one(r) for r in rows]
