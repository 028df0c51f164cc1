"""Memory of the history store: 64 engines x 1 h at 1 s, every recorded series.

    .venv/bin/python benchmarks/bench_store.py
"""

from __future__ import annotations

import sys
import tracemalloc

from infertop.state.fleet_history import ENGINE_FIELDS as HISTORY_FIELDS
from infertop.state.history import HistoryStore


def main() -> int:
    engines, seconds = 64, 3600
    tracemalloc.start()
    store = HistoryStore(capacity=seconds)
    for t in range(seconds):
        for e in range(engines):
            for f in HISTORY_FIELDS:
                store.record(f"engine-{e}", f, float(t))
    current, peak = tracemalloc.get_traced_memory()
    series = len(store)
    print(f"{engines} engines x {len(HISTORY_FIELDS)} series x {seconds} points = {series * seconds:,} values")
    print(f"ring buffers: {store.nbytes / 2**20:.1f} MiB payload, {current / 2**20:.1f} MiB traced (peak {peak / 2**20:.1f})")
    print(f"per value: {current / (series * seconds):.2f} bytes")
    # A second hour costs nothing more: memory is bounded by series x capacity.
    for t in range(seconds):
        for e in range(engines):
            for f in HISTORY_FIELDS:
                store.record(f"engine-{e}", f, float(t))
    after, _ = tracemalloc.get_traced_memory()
    print(f"after a second hour: {after / 2**20:.1f} MiB traced (growth {(after - current) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
