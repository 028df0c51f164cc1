"""The Overview's screen, cell by cell (character and style), for fixed fleet states: two trees compared.

    PYTHONPATH=/work/main .venv/bin/python benchmarks/bench_tui_screen.py dump /tmp/before.json
    PYTHONPATH=.          .venv/bin/python benchmarks/bench_tui_screen.py dump /tmp/after.json
    .venv/bin/python benchmarks/bench_tui_screen.py compare /tmp/before.json /tmp/after.json

Three sizes (80x24: 6 tile columns; 120x40; 160x50: 9 columns and the wide trends), each
with 3 engines up and one down (red values, SLO notes) and with six down (alerts that do not
fit: "… N more engines"). No HTTP and fixed clocks: the screens depend on the code only.
A restructure that must not change the screen (Statics → line-API widgets) shows 0 and 0.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys

from infertop.config import Config, GpuConfig
from infertop.domain.engine import EngineStats
from infertop.domain.source import SourceHealth
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_join import FleetJoiner
from infertop.ui.app import InfertopApp, Settings

EPOCH = 1796025600.0


def make_app(n_down: int, waiting: int):
    """An app and a joiner over 3 engines up and ``n_down`` down, from fixed values and clocks."""
    endpoints = [EngineEndpoint(f"alpha-{i}", f"http://127.0.0.1:{8000 + i}", max_num_seqs=8)
                 for i in range(3 + n_down)]

    class Collector:
        def __init__(self, i: int, ep: EngineEndpoint) -> None:
            up = i < 3
            error = None if up else "connection refused"
            self.endpoint = ep
            self.stats = [EngineStats(name=ep.name, url=ep.url, state="up" if up else "down", running=4 + i,
                                      waiting=waiting * i, kv_cache_pct=25.0 + 30 * i, max_num_seqs=8,
                                      scraped_at=EPOCH, error=error, ttft_p99_s=0.5 * i)]
            self.health = SourceHealth(ep.name, "vllm", up, last_ok_at=100.0, last_error=error,
                                       last_error_at=None if up else 99.0)
            self.windows: dict = {}

    class Fleet:
        collectors = [Collector(i, ep) for i, ep in enumerate(endpoints)]

    joiner = FleetJoiner(Fleet(), slo=Config().slo, refresh_s=1.0, window_s=60.0, wall=lambda: EPOCH,
                         mono=lambda: 100.5)
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=endpoints), poll=False)
    return app, joiner


async def screen(size: tuple[int, int], n_down: int, waiting: int) -> list[tuple[str, list[str]]]:
    """Each screen row: its text and each cell's style."""
    app, joiner = make_app(n_down, waiting)
    async with app.run_test(size=size) as pilot:
        for _ in range(2):  # the second tick: the layout fitted to the engine count
            app.show_state(joiner.build())
            await pilot.pause()
        rows = []
        for strip in app.screen._compositor.render_strips():
            rows.append(("".join(seg.text for seg in strip),
                         [str(seg.style) for seg in strip for _ in range(seg.cell_length)]))
        return rows


async def dump(path: str) -> None:
    out = {}
    for cols, lines in ((80, 24), (120, 40), (160, 50)):
        for n_down, waiting in ((1, 1), (6, 0)):
            out[f"{cols}x{lines}, {n_down} down"] = await screen((cols, lines), n_down, waiting)
    with open(path, "w") as f:
        json.dump(out, f)


def compare(a_path: str, b_path: str) -> int:
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    differ = 0
    for case, rows_a in a.items():
        rows_b = b[case]
        texts = [(y, ra[0], rb[0]) for y, (ra, rb) in enumerate(zip(rows_a, rows_b)) if ra[0] != rb[0]]
        styles: collections.Counter = collections.Counter()
        example = {}
        for y, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            for x, pair in enumerate(zip(ra[1], rb[1])):
                if pair[0] != pair[1]:
                    styles[pair] += 1
                    example.setdefault(pair, (y, x, ra[0][x:x + 1]))
        print(f"== {case}: {len(texts)} rows with other text, {sum(styles.values())} cells with another style")
        for y, ta, tb in texts[:6]:
            print(f"  row {y}\n   - {ta.rstrip()}\n   + {tb.rstrip()}")
        for pair, n in styles.most_common(6):
            print(f"  {n} cells, e.g. {example[pair]}: {pair[0]!r} -> {pair[1]!r}")
        differ += len(texts) + sum(styles.values()) + abs(len(rows_a) - len(rows_b))
    return 1 if differ else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"]:
        asyncio.run(dump(sys.argv[2]))
        sys.exit(0)
    sys.exit(compare(sys.argv[2], sys.argv[3]))
