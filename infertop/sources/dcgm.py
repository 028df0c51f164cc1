"""GPU rows from NVIDIA dcgm-exporter endpoints (async, the lean keep-alive client + the project parser).

dcgm-exporter facts this relies on (see design/vllm-metrics.md §7):

* labels ``gpu``, ``UUID`` (``uuid`` with ``-o``), ``pci_bus_id``, ``device``,
  ``modelName``, ``Hostname`` (lower-case ``hostname`` on main since May 2026;
  absent with ``-n``), ``DCGM_FI_DRIVER_VERSION``; ``pod``/``namespace``/
  ``container`` with ``-k`` (``pod_name``/``pod_namespace``/``container_name``
  with ``-o``); ``GPU_I_PROFILE``/``GPU_I_ID`` on MIG devices;
* framebuffer in MiB; ``DCGM_FI_DEV_XID_ERRORS`` is the *last* XID, not a count;
  ``DCGM_FI_PROF_*`` are ratios 0..1; PCIe bytes/s in ``DCGM_FI_PROF_PCIE_*``.

:func:`build_rows` turns ``(metric, labels, value)`` triples into
:class:`GpuStats` and is shared with the Prometheus source.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..domain.gpu import GpuStats, decode_throttle
from ..domain.source import SourceHealth
from .expfmt import Exposition, Layout, ParseError, Parser
from .http_client import LeanHttpClient
from .sanitize import clean_gpu
from .vllm import MAX_BODY_BYTES, ScrapeError, describe_error, get_text

MiB = 1024 * 1024
MAX_GPU_ROWS = 256  # GPUs per exporter; more is a broken or hostile exporter

# metric → (GpuStats field, scale). Several metrics may feed one field; the
# first one present (in this order) wins.
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MiB),
    "DCGM_FI_DEV_FB_FREE": ("_fb_free", MiB),
    "DCGM_FI_DEV_FB_RESERVED": ("_fb_reserved", MiB),
    "DCGM_FI_DEV_FB_TOTAL": ("_fb_total", MiB),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temp_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("mem_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("_reasons", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("_reasons", 1.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_corrected", 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_uncorrected", 1.0),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("_ecc_sbe_agg", 1.0),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("_ecc_dbe_agg", 1.0),
    "DCGM_FI_DEV_RETIRED_SBE": ("_retired_sbe", 1.0),
    "DCGM_FI_DEV_RETIRED_DBE": ("_retired_dbe", 1.0),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("_remap_c", 1.0),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("_remap_u", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": ("last_xid", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_per_s", 1.0),
    "DCGM_FI_DEV_FAN_SPEED": ("fan_pct", 1.0),
    "DCGM_FI_DEV_PSTATE": ("pstate", 1.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active_pct", 100.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_pct", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_pct", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_pct", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_pct", 100.0),
    # dcgm-exporter 1.x names (--use-old-namespace with the 1.x CSV)
    "dcgm_gpu_utilization": ("util_pct", 1.0),
    "dcgm_mem_copy_utilization": ("mem_util_pct", 1.0),
    "dcgm_fb_used": ("mem_used_bytes", MiB),
    "dcgm_fb_free": ("_fb_free", MiB),
    "dcgm_gpu_temp": ("temp_c", 1.0),
    "dcgm_power_usage": ("power_w", 1.0),
    "dcgm_sm_clock": ("sm_clock_mhz", 1.0),
    "dcgm_memory_clock": ("mem_clock_mhz", 1.0),
    "dcgm_xid_errors": ("last_xid", 1.0),
}
METRICS: tuple[str, ...] = tuple(FIELDS)
_INT_FIELDS = frozenset({"mem_used_bytes", "ecc_corrected", "ecc_uncorrected", "last_xid", "pstate"})
_HOST_LABELS = ("Hostname", "hostname")
_UUID_LABELS = ("UUID", "uuid")
_POD_LABELS = (("pod", "pod_name"), ("namespace", "pod_namespace"), ("container", "container_name"))


@dataclass(slots=True)
class _Acc:
    """Accumulates one GPU's values while reading a scrape."""

    host: str | None
    index: int | None
    uuid: str | None
    gi: int | None
    labels: dict[str, str]
    values: dict[str, float]
    pods: AbstractSet[tuple[tuple[str, str], ...]]  # distinct pod label sets seen (frozen in a layout plan)


def _is_blank(v: float) -> bool:
    """DCGM_INT32_BLANK.. (0x7ffffff0+), DCGM_INT64_BLANK.. and DCGM_FP64_BLANK (1.4e14+)."""
    return v >= 2147483632.0 and (v <= 2147483647.0 or v >= 1.4e14)


def _first(labels: dict[str, str], names: Iterable[str]) -> str | None:
    for n in names:
        v = labels.get(n)
        if v:
            return v
    return None


def _int(v: str | None) -> int | None:
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        return None


class LabelCache:
    """Identity of a labels dict, remembered across scrapes.

    The project parser hands out the *same* labels dicts while an endpoint's
    layout does not change, so the GPU key and pod labels are worked out once
    per series instead of once per sample. Entries keep their dict alive, so
    an ``id`` is never reused while cached.
    """

    __slots__ = ("entries", "max_entries", "plan")

    def __init__(self, max_entries: int = 50_000) -> None:
        self.entries: dict[int, tuple] = {}
        self.max_entries = max_entries
        self.plan: _LayoutPlan | None = None  # the last document layout's plan (see parse_dcgm)


def _identity(labels: dict[str, str], host_labels: tuple[str, ...], default_host: str | None) -> tuple:
    host = _first(labels, host_labels) or default_host
    key = (host, _int(labels.get("gpu")), _first(labels, _UUID_LABELS), _int(labels.get("GPU_I_ID")))
    pods = []
    for field_name, alias in _POD_LABELS:
        v = labels.get(field_name) or labels.get(alias)
        if v:
            pods.append((field_name, v))
    return key, tuple(pods)


def build_rows(triples: Iterable[tuple[str, dict[str, str], float]], *, source: str,
               source_url: str | None = None, default_host: str | None = None,
               host_labels: tuple[str, ...] = _HOST_LABELS, cache: LabelCache | None = None) -> list[GpuStats]:
    """Group ``(metric, labels, value)`` by (host, gpu, UUID[, GPU instance]) into rows.

    MIG devices (``GPU_I_ID`` present) become ``mig_devices`` of their parent;
    a parent with no series of its own is made from their labels.
    """
    accs: dict[tuple, _Acc] = {}
    pod_sets: dict[tuple, set[tuple[tuple[str, str], ...]]] = {}  # each acc's pods, as a set to add to
    entries = cache.entries if cache is not None else None
    if cache is not None and len(cache.entries) > cache.max_entries:
        cache.entries.clear()
    fields_get = FIELDS.get
    for metric, labels, value in triples:
        spec = fields_get(metric)
        if spec is None:
            continue
        if entries is not None:
            hit = entries.get(id(labels))
            if hit is None or hit[0] is not labels:
                key, pods = _identity(labels, host_labels, default_host)
                entries[id(labels)] = (labels, key, pods)
            else:
                _, key, pods = hit
        else:
            key, pods = _identity(labels, host_labels, default_host)
        acc = accs.get(key)
        if acc is None:
            acc = accs[key] = _Acc(key[0], key[1], key[2], key[3], labels, {}, pod_sets.setdefault(key, set()))
        fname, scale = spec
        # first metric for a field wins; NaN, ±Inf and DCGM's "blank" sentinels = no data
        if fname not in acc.values and value == value and not _is_blank(value):
            scaled = value * scale
            if math.isfinite(scaled):
                acc.values[fname] = scaled
        if pods:
            pod_sets[key].add(pods)
    return _rows(accs, source, source_url)


def _rows(accs: dict[tuple, _Acc], source: str, source_url: str | None) -> list[GpuStats]:
    """The GPU rows of the accumulated GPUs, MIG devices under their parent, sorted; clean
    (:func:`~.sanitize.clean_gpu`), so that a poll of dcgm alone needs no second pass."""
    parents: dict[tuple, GpuStats] = {}
    migs: dict[tuple, list[GpuStats]] = {}
    for (host, idx, uuid, gi), acc in accs.items():
        row = _row(acc, source, source_url)
        if gi is None:
            parents[(host, idx, uuid)] = row
        else:
            migs.setdefault((host, idx, uuid), []).append(row)
    for pkey, children in migs.items():
        children.sort(key=lambda m: (m.gpu_instance_id if m.gpu_instance_id is not None else -1))
        parent = parents.get(pkey)
        if parent is None:
            c = children[0]
            parent = clean_gpu(GpuStats(
                source=source, source_url=source_url, host=c.host, index=c.index, uuid=c.uuid,
                name=accs[(c.host, c.index, c.uuid, c.gpu_instance_id)].labels.get("modelName") or None,
                pci_bus_id=c.pci_bus_id, driver_version=c.driver_version))
        # MIG rows carry the parent's UUID; their identity is the GPU instance.
        parents[pkey] = replace(parent, mig_mode=True, mig_devices=tuple(children))
    return sorted(parents.values(), key=lambda g: (g.host or "", g.index if g.index is not None else 1 << 30, g.uuid or ""))


def _fint(x: float) -> int | None:
    """int of a finite float (sums of huge values can overflow to inf)."""
    return int(x) if math.isfinite(x) else None


def _row(acc: _Acc, source: str, source_url: str | None) -> GpuStats:
    v = acc.values
    lab = acc.labels
    kw: dict[str, Any] = {}  # GpuStats fields of several types
    for k, x in v.items():
        if k.startswith("_"):
            continue
        kw[k] = int(x) if k in _INT_FIELDS else float(x)
    used = v.get("mem_used_bytes")
    total = v.get("_fb_total")
    if total is None and used is not None and "_fb_free" in v:
        total = used + v["_fb_free"] + v.get("_fb_reserved", 0.0)
    if total is not None:
        kw["mem_total_bytes"] = _fint(total)
    if "_reasons" in v:
        kw["throttle_reasons"] = decode_throttle(v["_reasons"])
    if "ecc_corrected" not in kw and "_ecc_sbe_agg" in v:
        kw["ecc_corrected"] = int(v["_ecc_sbe_agg"])
    if "ecc_uncorrected" not in kw and "_ecc_dbe_agg" in v:
        kw["ecc_uncorrected"] = int(v["_ecc_dbe_agg"])
    if "_retired_sbe" in v or "_retired_dbe" in v:
        kw["retired_pages"] = _fint(v.get("_retired_sbe", 0) + v.get("_retired_dbe", 0))
    elif "_remap_c" in v or "_remap_u" in v:
        kw["retired_pages"] = _fint(v.get("_remap_c", 0) + v.get("_remap_u", 0))
    if kw.get("pstate") is not None and not 0 <= kw["pstate"] <= 15:
        kw["pstate"] = None
    pod_sets: dict[str, set[str]] = {}
    for pod_labels in acc.pods:
        for label, text in pod_labels:
            pod_sets.setdefault(label, set()).add(text)
    pods = {label: ",".join(sorted(texts)) for label, texts in pod_sets.items()}
    profile = lab.get("GPU_I_PROFILE") or None
    name = lab.get("modelName") or None
    if name and profile and acc.gi is not None:
        name = f"{name} MIG {profile}"
    return clean_gpu(GpuStats(
        source=source, source_url=source_url, host=acc.host, index=acc.index, uuid=acc.uuid, name=name,
        pci_bus_id=lab.get("pci_bus_id") or None, driver_version=lab.get("DCGM_FI_DRIVER_VERSION") or None,
        mig_profile=profile if acc.gi is not None else None, gpu_instance_id=acc.gi,
        pod=pods.get("pod"), namespace=pods.get("namespace"), container=pods.get("container"),
        **kw,
    ))


def triples_from_exposition(exp: Exposition) -> Iterator[tuple[str, dict[str, str], float]]:
    """The dcgm samples of one parsed scrape as ``(metric, labels, value)``."""
    for name in METRICS:
        for labels, value in exp.series(name):
            yield name, labels, value


def parse_dcgm(exp: Exposition, *, source_url: str | None = None, default_host: str | None = None,
               cache: LabelCache | None = None) -> list[GpuStats]:
    """Rows from one parsed dcgm-exporter scrape.

    With a ``cache``, what :func:`build_rows` works out per sample (which GPU, which field)
    is planned once per document layout: while an exporter's layout holds (the parser hands
    out the same layout), a scrape only reads its values."""
    if cache is None:
        return build_rows(triples_from_exposition(exp), source="dcgm", source_url=source_url,
                          default_host=default_host)
    plan = cache.plan
    if plan is None or plan.layout is not exp.layout or plan.default_host != default_host:
        plan = cache.plan = _LayoutPlan(exp.layout, default_host)
    values = exp.values
    accs: dict[tuple, _Acc] = {}
    per_gpu: list[dict[str, float]] = []
    for key, labels, pods in plan.gpus:
        acc = accs[key] = _Acc(key[0], key[1], key[2], key[3], labels, {}, pods)
        per_gpu.append(acc.values)
    for k, fname, scale, i in plan.steps:
        got = per_gpu[k]
        # as build_rows: the first metric for a field wins; NaN, ±Inf and "blank" sentinels = no data
        if fname not in got:
            value = values[i]
            if value == value and not _is_blank(value):
                scaled = value * scale
                if math.isfinite(scaled):
                    got[fname] = scaled
    return _rows(accs, "dcgm", source_url)


class _LayoutPlan:
    """build_rows' grouping of one document layout: the GPUs in order of first sample
    (key, labels of that sample, pod label sets) and, per sample read in build_rows'
    order, (GPU, field, scale, sample index)."""

    __slots__ = ("layout", "default_host", "gpus", "steps")

    def __init__(self, layout: Layout, default_host: str | None) -> None:
        self.layout = layout
        self.default_host = default_host
        index, all_labels = layout.index, layout.labels
        gpus: dict[tuple, tuple[int, dict[str, str], set]] = {}
        steps: list[tuple[int, str, float, int]] = []
        for name in METRICS:
            fname, scale = FIELDS[name]
            for i in index.get(name, ()):
                labels = all_labels[i]
                key, pods = _identity(labels, _HOST_LABELS, default_host)
                got = gpus.get(key)
                if got is None:
                    got = gpus[key] = (len(gpus), labels, set())
                if pods:
                    got[2].add(pods)
                steps.append((got[0], fname, scale, i))
        self.gpus = [(key, labels, frozenset(pods)) for key, (_, labels, pods) in gpus.items()]
        self.steps = steps


def normalize_url(url: str) -> str:
    """"gpu-node:9400" → "http://gpu-node:9400/metrics"; a given path is kept."""
    u = url.strip()
    if "://" not in u:
        u = "http://" + u
    parts = urlsplit(u)
    if parts.path in ("", "/"):
        u = u.rstrip("/") + "/metrics"
    return u


class DcgmEndpoint:
    """One dcgm-exporter URL: its parser (layout reuse across scrapes) and health."""

    def __init__(self, url: str, timeout_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = normalize_url(url)
        self.timeout_s = timeout_s
        self.clock = clock
        self.host = urlsplit(self.url).hostname
        self.parser = Parser()
        self.cache = LabelCache()
        self.health = SourceHealth(name=self.url, kind="dcgm", ok=False)
        self.rows: list[GpuStats] = []
        self.documents_parsed = 0  # bodies parsed (a body the same as the last one is not)
        # dcgm-exporter serves its last collection until the next one (every 30 s by default): most
        # polls get the same body back, whose rows are the same as the last time
        self._last_body: tuple[str, list[GpuStats]] | None = None
        self._client: LeanHttpClient | None = None

    def client(self) -> LeanHttpClient:
        """This endpoint's own keep-alive client (when :meth:`poll` is given none)."""
        if self._client is None:
            self._client = lean_client()
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def poll(self, client: LeanHttpClient | httpx.AsyncClient | None = None,
                   limit: int = MAX_BODY_BYTES) -> list[GpuStats]:
        """Scrape once: the rows, or [] with the error in :attr:`health`.

        ``client``: the lean keep-alive client of the per-second polls (its own when None);
        an httpx client is accepted too (scripts, tests), with the same bounds and errors."""
        started = self.clock()
        if client is None:
            client = self.client()
        try:
            async with asyncio.timeout(self.timeout_s):
                text = await get_text(client, self.url, limit)  # the lean client, or an httpx one: one GET
            last = self._last_body
            if last is not None and last[0] == text:
                rows = last[1]
            else:
                self._last_body = None
                try:
                    exp = self.parser.parse(text)
                except ParseError as e:
                    raise ScrapeError(f"garbage metrics ({e})") from None
                self.documents_parsed += 1
                rows = parse_dcgm(exp, source_url=self.url, default_host=self.host, cache=self.cache)
                if not rows:
                    raise ScrapeError("no DCGM_FI_ metrics (is this a dcgm-exporter?)")
                self._last_body = (text, rows)
            total = len(rows)
            rows = rows[:MAX_GPU_ROWS]
        except Exception as exc:  # noqa: BLE001 — every failure is shown, none crashes
            now = self.clock()
            h = self.health
            self.health = SourceHealth(name=self.url, kind="dcgm", ok=False, last_ok_at=h.last_ok_at,
                                       last_error=describe_error(exc, self.timeout_s), last_error_at=now,
                                       latency_s=now - started, consecutive_failures=h.consecutive_failures + 1)
            self.rows = []
            return []
        now = self.clock()
        too_many = f"too many GPUs ({total}) — showing the first {len(rows)}" if total > len(rows) else None
        self.health = SourceHealth(name=self.url, kind="dcgm", ok=True, last_ok_at=now, latency_s=now - started,
                                   last_error=too_many, last_error_at=now if too_many else None)
        self.rows = rows
        return rows


class DcgmSource:
    """Several dcgm-exporter endpoints scraped concurrently, each with its own timeout."""

    kind = "dcgm"

    def __init__(self, urls: Iterable[str], timeout_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoints = [DcgmEndpoint(u, timeout_s, clock) for u in urls]

    @property
    def health(self) -> list[SourceHealth]:
        return [e.health for e in self.endpoints]

    async def poll(self, client: LeanHttpClient | httpx.AsyncClient | None = None
                   ) -> tuple[list[GpuStats], list[SourceHealth]]:
        """Every endpoint once, concurrently (one endpoint: without a task); (rows, health)."""
        eps = self.endpoints
        if len(eps) == 1:
            rows = list(await eps[0].poll(client))  # a list of its own, as with several
        else:
            results = await asyncio.gather(*(e.poll(client) for e in eps))
            rows = [g for r in results for g in r]
        return rows, self.health

    async def aclose(self) -> None:
        for e in self.endpoints:
            await e.aclose()


def lean_client() -> LeanHttpClient:
    """The keep-alive client dcgm scrapes go through (connect bound 1 s, exchange 5 s, as before)."""
    return LeanHttpClient(connect_timeout_s=1.0, timeout_s=5.0)
