"""One GPU snapshot as plain JSON-able data (``infertop snapshot --json``).

Also a script, to run once on a real GPU machine::

    python -m infertop.gpu_snapshot                    # NVML on this host
    python -m infertop.gpu_snapshot --dcgm http://node:9400/metrics
    python -m infertop.gpu_snapshot --prometheus http://prom:9090 --no-nvml
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from typing import Any

from .config import Config, GpuConfig, PrometheusConfig
from .domain.gpu import GpuStats, classify
from .domain.source import SourceHealth
from .sources.gpu import GpuCollector


def gpu_row(g: GpuStats) -> dict[str, Any]:
    """A GPU as a dict: every field, plus ``status`` (:func:`classify`) and derived percentages."""
    d = asdict(g)
    d["mig_devices"] = [gpu_row(m) for m in g.mig_devices]
    d["label"] = g.label
    d["status"] = classify(g)
    d["mem_pct"] = g.mem_pct
    d["power_pct"] = g.power_pct
    d["sm_clock_pct"] = g.sm_clock_pct
    d["throttle"] = g.throttle_words or None
    return d


def source_row(h: SourceHealth, now: float) -> dict[str, Any]:
    return {"name": h.name, "kind": h.kind, "ok": h.ok, "error": h.last_error,
            "age_s": h.age_s(now), "latency_s": h.latency_s}


def snapshot_doc(rows: list[GpuStats], health: list[SourceHealth]) -> dict[str, Any]:
    now = time.monotonic()
    return {"taken_at": time.time(), "gpus": [gpu_row(g) for g in rows],
            "sources": [source_row(h, now) for h in health]}


def _collector(cfg: Config | None, dcgm_urls: list[str], nvml_module: Any = None) -> GpuCollector:
    cfg = cfg or Config()
    return GpuCollector(cfg.gpu, cfg.prometheus, dcgm_urls=dcgm_urls, nvml_module=nvml_module)


def gpu_snapshot(cfg: Config | None, dcgm_urls: list[str] | None = None, *, nvml_module: Any = None) -> dict[str, Any]:
    """Collect every configured GPU source once (blocking; not inside a running event loop).

    Returns ``{"taken_at", "gpus": [row...], "sources": [{"name", "kind", "ok", "error", ...}]}``.
    """
    c = _collector(cfg, list(dcgm_urls or []), nvml_module)
    try:
        rows, health = c.collect()
    finally:
        c.close()
    return snapshot_doc(rows, health)


async def gpu_snapshot_async(cfg: Config | None, dcgm_urls: list[str] | None = None, *,
                             nvml_module: Any = None) -> dict[str, Any]:
    """:func:`gpu_snapshot` for callers already inside an event loop."""
    c = _collector(cfg, list(dcgm_urls or []), nvml_module)
    try:
        rows, health = await c.poll()
    finally:
        await c.aclose()
    return snapshot_doc(rows, health)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infertop.gpu_snapshot",
                                description="Print one GPU snapshot (NVML / dcgm-exporter / Prometheus) as JSON.")
    p.add_argument("--dcgm", action="append", default=[], metavar="URL", help="dcgm-exporter /metrics URL (repeatable)")
    p.add_argument("--prometheus", metavar="URL", help="Prometheus base URL")
    p.add_argument("--no-nvml", action="store_true", help="do not use NVML on this host")
    p.add_argument("--count", type=int, default=2, metavar="N",
                   help="collect N times, 1 s apart, and print the last (rates such as PCIe need 2)")
    p.add_argument("-v", "--verbose", action="store_true", help="log fields that are not supported")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    cfg = Config(gpu=GpuConfig(nvml=not args.no_nvml), prometheus=PrometheusConfig(url=args.prometheus))
    c = _collector(cfg, args.dcgm)
    t0 = time.perf_counter()
    rows: list[GpuStats] = []
    health: list[SourceHealth] = []
    try:
        for i in range(max(1, args.count)):
            if i:
                time.sleep(1.0)
            t0 = time.perf_counter()
            rows, health = c.collect()
    finally:
        c.close()
    doc = snapshot_doc(rows, health)
    doc["collect_s"] = time.perf_counter() - t0
    json.dump(doc, sys.stdout, indent=2, default=str, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0 if any(h.ok for h in health) else 1


if __name__ == "__main__":
    sys.exit(main())
