"""What a bare Textual app with the Overview's widget tree costs, side by side with htop.

    .venv/bin/python benchmarks/bench_textual_floor.py --seconds 40

No infertop code runs: the app below composes what the 6-engine Overview
composes at 120x40 (header and status line, 18 label/value tiles in a grid,
4 titled sparklines, a 6x10 DataTable, an alerts title and 12 alert lines,
in a TabbedContent) and changes it once a second from one timer, in one of
these modes, each in its own pseudo-terminal, all at once, with htop -d 10:

  idle    the timer fires, nothing changes (the floor of a ticking Textual app)
  clock   only the header's clock changes (one Static per tick)
  tiles   the clock and every tile value change each tick
  all     the clock, every tile, each sparkline's newest bar and every table
          cell change each tick (more than the real Overview changes)

CPU is the process's utime+stime from /proc over the same seconds (see
benchmarks/bench_tui.py, whose pty runner this uses). ``--mode M --app``
runs one app in the current terminal (what the runner starts).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

MODES = ("idle", "clock", "tiles", "all")


def run_app(mode: str) -> None:
    from rich.text import Text
    from textual.app import App, ComposeResult
    from textual.containers import Grid, Horizontal, Vertical
    from textual.widgets import DataTable, Label, Static, TabbedContent, TabPane

    class Floor(App):
        CSS = """
        #tiles { grid-size: 6; grid-gutter: 0 0; height: auto; grid-rows: 2; }
        .tile { height: 2; padding: 0 0 0 1; }
        .tile > Static { text-wrap: nowrap; text-overflow: ellipsis; }
        #trends { height: 3; }
        .trend { height: 3; width: 1fr; padding: 0 1; }
        .trend > Static { height: 1fr; }
        DataTable { height: auto; max-height: 17; }
        .alert { height: 1; padding: 0 1; }
        #top, #status { height: 1; width: 1fr; }
        """

        def compose(self) -> ComposeResult:
            yield Static("infertop-floor", id="top")
            with TabbedContent():
                with TabPane("Overview"):
                    with Vertical():
                        with Grid(id="tiles"):
                            for i in range(18):
                                with Vertical(classes="tile"):
                                    yield Static(f"Tile {i}")
                                    yield Static("0", id=f"v{i}")
                        with Horizontal(id="trends"):
                            for i in range(4):
                                with Vertical(classes="trend"):
                                    yield Label(f"Trend {i}")
                                    yield Static("", id=f"s{i}")
                        yield Static("[b]Under most pressure[/b]")
                        yield DataTable(id="hot", cursor_type="none")
                        yield Static("Alerts none")
                        for i in range(12):
                            yield Static("", classes="alert")
                with TabPane("Engines"):
                    yield Static("engines")
            yield Static("", id="status")

        def on_mount(self) -> None:
            table = self.query_one(DataTable)
            for i in range(10):
                table.add_column(f"c{i}", key=f"c{i}")
            for r in range(6):
                table.add_row(*(f"{r}.{c}" for c in range(10)), key=f"r{r}")
            self.n = 0
            self.values = [self.query_one(f"#v{i}", Static) for i in range(18)]
            self.sparks = [self.query_one(f"#s{i}", Static) for i in range(4)]
            self.top = self.query_one("#top", Static)
            self.bars: list[str] = [""] * 4
            self.set_interval(1.0, self.tick)

        def tick(self) -> None:
            self.n += 1
            n = self.n
            if mode == "idle":
                return
            self.top.update(f"infertop-floor {time.strftime('%H:%M:%S')}", layout=False)
            if mode in ("tiles", "all"):
                for i, v in enumerate(self.values):
                    v.update(Text(f"{(n * 7 + i) % 1000}.{n % 10}", style="bold"), layout=False)
            if mode == "all":
                for i, s in enumerate(self.sparks):
                    self.bars[i] = (self.bars[i] + "▁▂▃▄▅▆▇█"[(n + i) % 8])[-20:]
                    s.update(self.bars[i] + "\n" + self.bars[i], layout=False)
                table = self.query_one(DataTable)
                for r in range(6):
                    for c in range(10):
                        table.update_cell(f"r{r}", f"c{c}", f"{(n + r + c) % 100}")

    Floor().run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--settle", type=float, default=8)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--mode", choices=MODES, help="with --app: the app itself")
    ap.add_argument("--app", action="store_true")
    args = ap.parse_args(argv)
    if args.app:
        run_app(args.mode or "idle")
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_tui as bt

    if shutil.which("htop") is None:
        print("bench_textual_floor: htop is not installed", file=sys.stderr)
        return 2
    home = tempfile.mkdtemp(prefix="bench-floor-home-")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8",
           "TERM": "xterm-256color", "COLORTERM": "truecolor"}
    me = str(Path(__file__).resolve())
    programs = [bt.Program(m, [sys.executable, me, "--app", "--mode", m], dict(env)) for m in args.modes.split(",")]
    programs.append(bt.Program("htop -d 10", ["htop", "-d", "10"], dict(env)))
    drain = bt.Drain()
    drain.start()
    try:
        for p in programs:
            p.start(120, 40)
            drain.add(p)
        bt.settle(programs, args.settle)
        results = bt.measure(programs, args.seconds, None, "floor")
        htop = results[-1]
        bt.table(f"bare Textual {'.'.join(map(str, __import__('textual').__version__.split('.')[:3]))}"
                 f", Overview-like tree, 120x40, {args.seconds:.0f} s, load {os.getloadavg()[0]:.1f}", results, htop)
    finally:
        for p in programs:
            p.stop()
        drain.stopping = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
