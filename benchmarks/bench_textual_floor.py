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
  tiles-alerts  as tiles, and 3 of the 12 alert lines change each tick (the
          real Overview's share: ~12 tiles and ~3 alert lines)
  lines-alerts  the same changes, but the 18 tiles are ONE line-API widget
          (a Strip per row, refresh of only the rows whose text changed) and
          the alerts title and lines another
  all-lines  as all, with the two line-API widgets of lines-alerts

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

MODES = ("idle", "clock", "tiles", "tiles-alerts", "lines-alerts", "all", "all-lines")


def run_app(mode: str, run: bool = True):
    from rich.text import Text
    from textual.app import App, ComposeResult
    from textual.containers import Grid, Horizontal, Vertical
    from rich.cells import cell_len, set_cell_size
    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip
    from textual.widget import Widget
    from textual.widgets import DataTable, Label, Static, TabbedContent, TabPane

    lines_mode = mode in ("lines-alerts", "all-lines")

    class Lines(Widget):
        """Rows of cells, each cell a few (text, style) parts: a Strip per row,
        and only rows whose parts changed are refreshed."""

        DEFAULT_CSS = "Lines { height: auto; }"

        def __init__(self, rows: int, **kw) -> None:
            super().__init__(**kw)
            self.rows: list[tuple] = [()] * rows
            self.strips: list[Strip | None] = [None] * rows

        def get_content_height(self, container, viewport, width: int) -> int:
            return len(self.rows)

        def set_row(self, y: int, cells: tuple) -> None:
            if self.rows[y] != cells:
                self.rows[y] = cells
                self.strips[y] = None
                self.refresh(Region(0, y, self.size.width, 1))

        def render_line(self, y: int) -> Strip:
            width = self.size.width
            if y >= len(self.rows):
                return Strip.blank(width)
            strip = self.strips[y]
            if strip is None or strip.cell_length != width:
                strip = self.strips[y] = Strip(self.segments(self.rows[y], width), width)
            return strip

        def segments(self, cells: tuple, width: int) -> list:
            out, n = [], len(cells) or 1
            for i, parts in enumerate(cells):
                x0, x1 = width * i // n, width * (i + 1) // n
                room, used = x1 - x0 - 1, 0
                out.append(Segment(" "))
                for text, style in parts:
                    w = cell_len(text)
                    if used + w > room:
                        out.append(Segment(set_cell_size(text, max(0, room - used - 1)) + "…", style))
                        used = room
                        break
                    out.append(Segment(text, style))
                    used += w
                if used < room:
                    out.append(Segment(" " * (room - used)))
            return out

    BOLD, DIM, MUTED = Style(bold=True), Style(dim=True), Style(color="grey50")

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
                        if lines_mode:
                            yield Lines(6, id="tilelines")
                        else:
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
                        if lines_mode:
                            yield Lines(13, id="alertlines")
                        else:
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
            if lines_mode:
                self.tl = self.query_one("#tilelines", Lines)
                self.al = self.query_one("#alertlines", Lines)
                for r in range(3):
                    self.tl.set_row(2 * r, tuple(((f"Tile {6 * r + c}", MUTED),) for c in range(6)))
                self.al.set_row(0, ((("Alerts none", BOLD),),))
            else:
                self.values = [self.query_one(f"#v{i}", Static) for i in range(18)]
                self.alerts = list(self.query(".alert").results(Static))
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
            if mode in ("tiles", "all", "tiles-alerts"):
                for i, v in enumerate(self.values):
                    v.update(Text(f"{(n * 7 + i) % 1000}.{n % 10}", style="bold"), layout=False)
            if mode == "tiles-alerts":
                for i in range(3):
                    self.alerts[i].update(Text(f"● engine-{i} — waiting {n % 50} > 0", style="bold"), layout=False)
            if lines_mode:
                for r in range(3):
                    self.tl.set_row(2 * r + 1, tuple(((f"{(n * 7 + 6 * r + c) % 1000}.{n % 10}", BOLD),)
                                                     for c in range(6)))
                for i in range(3):
                    self.al.set_row(1 + i, (((f"● engine-{i}", BOLD), (f" — waiting {n % 50} > 0", DIM)),))
            if mode in ("all", "all-lines"):
                for i, s in enumerate(self.sparks):
                    self.bars[i] = (self.bars[i] + "▁▂▃▄▅▆▇█"[(n + i) % 8])[-20:]
                    s.update(self.bars[i] + "\n" + self.bars[i], layout=False)
                table = self.query_one(DataTable)
                for r in range(6):
                    for c in range(10):
                        table.update_cell(f"r{r}", f"c{c}", f"{(n + r + c) % 100}")

    app = Floor()
    if run:
        app.run()
    return app


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
