"""The one cleaning boundary between what endpoints send and what infertop shows.

Every value a source yields passes through here once: numbers come out
finite and inside their domain, or ``None`` ("no data"); label values and
error texts come out as one line of plain text with control characters made
visible (an ESC byte is shown as ``\\x1b``, never sent to the terminal).
Rendering still treats them as plain text, never as markup.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

from ..domain.engine import EngineStats
from ..domain.gpu import GpuProcess, GpuStats
from ..domain.text import MAX_LABEL_CHARS, plain_or_none, plain_text

MAX_ERROR_CHARS = 200
FLOAT32_MAX = 3.4028234663852886e38
# No count, rate, duration, byte size or clock infertop shows gets anywhere near
# this (1e15 bytes is a petabyte); a value above it is a broken exporter.
ABSURD = 1e15

def error_text(value: object) -> str:
    return plain_text(value, MAX_ERROR_CHARS)


# redacted URL → the URL as configured, credential included: in this process's memory
# only, for the clients that connect (never shown, logged, recorded or bundled).
_IO_URLS: dict[str, str] = {}


def redact_url(url: str) -> str:
    """``url`` without its ``user:password@`` part (a URL is also a name: shown, logged,
    recorded). The full URL stays in memory for :func:`io_url`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    clean = f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"
    _IO_URLS[clean] = url
    return clean


def io_url(url: str) -> str:
    """The URL to connect to for a (redacted) configured ``url``: its credential put back."""
    return _IO_URLS.get(url, url)


def finite(v: Any) -> float | None:
    """``v`` as a finite float, or None (NaN, ±Inf, not a number)."""
    # Any, not object: whatever a source hands over goes to float(), whose TypeError is the answer
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def non_negative(v: object) -> float | None:
    """A count, a rate, a duration, a size: finite, ≥ 0 and below :data:`ABSURD`, else None."""
    f = finite(v)
    return f if f is not None and 0.0 <= f < ABSURD else None


def percent(v: object, top: float = 100.0) -> float | None:
    """A percentage in [0, top], else None (a value outside is a broken exporter, not data)."""
    f = finite(v)
    return f if f is not None and 0.0 <= f <= top else None


# -- engines ---------------------------------------------------------------------

_ENGINE_PCT = frozenset({"kv_cache_pct", "prefix_cache_hit_pct"})
_ENGINE_NUMBERS = tuple(
    f.name for f in fields(EngineStats)
    if f.name not in ("name", "url", "state", "error", "model", "engine_label", "metrics_version",
                      "vllm_version", "scraped_at", "max_num_seqs", "extra", "quantile_edges")
)
_ENGINE_TEXT = ("model", "engine_label", "vllm_version")


def clean_engine(s: EngineStats) -> EngineStats:
    """Every number finite and in its domain (counts, rates and latencies ≥ 0,
    percentages 0..100), every text plain; anything else becomes None."""
    changes: dict[str, Any] = {}
    for name in _ENGINE_NUMBERS:
        v = getattr(s, name)
        if v is None:
            continue
        c = percent(v) if name in _ENGINE_PCT else non_negative(v)
        if c != v:
            changes[name] = c
    for name in _ENGINE_TEXT:
        v = getattr(s, name)
        if v is not None:
            text = plain_or_none(v)
            if text != v:
                changes[name] = text
    if s.error is not None:
        e = error_text(s.error)
        if e != s.error:
            changes["error"] = e
    if s.extra:
        extra = {plain_text(k, 40): plain_text(v, 40) for k, v in s.extra.items()}
        if extra != s.extra:
            changes["extra"] = extra
    return replace(s, **changes) if changes else s


# -- GPUs ----------------------------------------------------------------------

_GPU_PCT = frozenset({"util_pct", "mem_util_pct", "fan_pct", "gr_engine_active_pct", "sm_active_pct",
                      "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct"})
_GPU_INT = frozenset({"index", "mem_used_bytes", "mem_total_bytes", "ecc_corrected", "ecc_uncorrected",
                      "retired_pages", "last_xid", "pstate", "gpu_instance_id", "compute_instance_id"})
_GPU_SIGNED = frozenset({"temp_c", "mem_temp_c"})  # a sensor can read below zero
_GPU_TEXT = ("host", "uuid", "name", "pod", "namespace", "container", "engine", "source_url", "pci_bus_id",
             "driver_version", "mig_profile")
_GPU_SKIP = frozenset({"source", "state", "error", "throttle_reasons", "processes", "mig_devices", "mig_mode",
                       *_GPU_TEXT})
_GPU_NUMBERS = tuple(f.name for f in fields(GpuStats) if f.name not in _GPU_SKIP)
_MAX_INT = 2**63 - 1


def _gpu_number(name: str, v: object) -> object:
    if name in _GPU_PCT:
        return percent(v)
    if name in _GPU_SIGNED:
        f = finite(v)
        return f if f is not None and -ABSURD < f < ABSURD else None
    f = non_negative(v)
    if f is None:
        return None
    if name in _GPU_INT:
        return int(f) if f <= _MAX_INT else None
    return f


def clean_gpu(g: GpuStats) -> GpuStats:
    """A GPU row with every number finite and in its domain and every text plain."""
    changes: dict[str, Any] = {}
    for name in _GPU_NUMBERS:
        v = getattr(g, name)
        if v is None:
            continue
        c = _gpu_number(name, v)
        if c != v or type(c) is not type(v):
            changes[name] = c
    pstate = changes.get("pstate", g.pstate)
    if pstate is not None and not 0 <= pstate <= 15:
        changes["pstate"] = None
    for name in _GPU_TEXT:
        v = getattr(g, name)
        if v is not None:
            c = plain_or_none(v, 400 if name == "source_url" else MAX_LABEL_CHARS)
            if c != v:
                changes[name] = c
    if g.error is not None:
        e = error_text(g.error)
        if e != g.error:
            changes["error"] = e
    if g.processes:
        procs = tuple(_clean_process(p) for p in g.processes)
        if procs != g.processes:
            changes["processes"] = procs
    if g.mig_devices:
        kids = tuple(clean_gpu(m) for m in g.mig_devices)
        if any(a is not b for a, b in zip(kids, g.mig_devices)):
            changes["mig_devices"] = kids
    return replace(g, **changes) if changes else g


def _clean_process(p: GpuProcess) -> GpuProcess:
    used = p.used_bytes
    if used is not None:
        f = non_negative(used)
        used = int(f) if f is not None and f <= _MAX_INT else None
    name = plain_or_none(p.name, 200) if p.name is not None else None
    engine = plain_or_none(p.engine) if p.engine is not None else None
    if used == p.used_bytes and name == p.name and engine == p.engine:
        return p
    return replace(p, used_bytes=used, name=name, engine=engine)
