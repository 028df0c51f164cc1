"""``text_strip`` with its layout cache against the uncached slow path, side by side in one run.

    .venv/bin/python benchmarks/bench_text_strip.py [--calls 20000] [--rounds 5]

Inside a headless app (so styles parse and ANSI colours map as in the TUI), the same inputs go
through both paths in alternating rounds: a tile value whose digits change on every call
("123 ms" with a dim note), a tile label, and an Overview alert line whose numbers change.
Each round checks that both paths give the same segments, then prints the microseconds per
call of each and the ratio new/old (the median of the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.text import Text  # noqa: E402
from textual.app import App  # noqa: E402

from infertop.ui.widgets import tiles  # noqa: E402


def inputs(calls: int) -> list[tuple[Text, int, int]]:
    """(text, width, lead) per call: values whose digits change each call, as a tick brings."""
    out = []
    for i in range(calls):
        kind = i % 3
        if kind == 0:
            text = Text(f"{100 + i % 900}", style="bold red" if i % 7 == 0 else "bold")
            text.append(" ms", style="dim")
            out.append((text, 20, 1))
        elif kind == 1:
            out.append((Text("TTFT p99 ≤2s"), 20, 1))
        else:
            text = Text("● ", style="red")
            text.append(f"engine-{i % 6}", style="bold")
            text.append(f" — ttft p99 {1 + i % 9}.{i % 100:02d}s > 2s · kv cache {50 + i % 50}%")
            out.append((text, 118, 0))
    return out


def run_paths(calls: int, rounds: int) -> dict[str, float]:
    app = App()
    result: dict[str, float] = {}

    async def measure() -> None:
        async with app.run_test(size=(120, 40)):
            base = app.screen.visual_style
            console = app.console
            work = inputs(calls)
            for text, width, lead in work[:50]:  # equal output, or the timing means nothing
                assert tiles.text_strip(text, width, base, console, lead) == \
                    tiles._text_strip_slow(text, width, base, console, lead)
            paths = {"old": tiles._text_strip_slow, "new": tiles.text_strip}
            times: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(rounds):
                for name, fn in paths.items():
                    start = time.perf_counter()
                    for text, width, lead in work:
                        fn(text, width, base, console, lead)
                    times[name].append((time.perf_counter() - start) / calls * 1e6)
            for name, per_call in times.items():
                result[f"{name}_us"] = statistics.median(per_call)
            result["ratio"] = statistics.median(n / o for n, o in zip(times["new"], times["old"]))

    asyncio.run(measure())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    r = run_paths(args.calls, args.rounds)
    print(f"old (slow path) {r['old_us']:.2f} us/call   new (layout cache) {r['new_us']:.2f} us/call   "
          f"new/old {r['ratio']:.2f}x")


if __name__ == "__main__":
    main()
