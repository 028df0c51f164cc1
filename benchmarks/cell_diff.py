"""Prototype: send a terminal only the cells that changed, as curses does.

Textual repaints every dirty widget line in full: a tile whose value went
from 116ms to 117ms costs its whole width plus a 24-bit colour escape per
segment and a reset after each. :class:`CellDiff` keeps a model of what the
terminal shows; each frame (one driver write) is parsed into cells and only
cells whose character or style changed are sent, with one SGR per style change.
Escape sequences other than cursor moves and SGR pass through in order (the
model is forgotten when one may have changed the screen).

Evaluate offline on a stream kept by ``bench_tui.py --dump``:

    .venv/bin/python benchmarks/cell_diff.py "/tmp/tui/6-after (6).bin" --seconds 60

It prints the bytes/s before and after and checks that replaying either
stream gives the same screen after every frame. Wiring it into the TUI is a
driver subclass whose ``write`` passes each frame through ``CellDiff.frame``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from rich.cells import cell_len

TOKEN = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+].|\x1b[^\[\]]"
                   r"|[\x00-\x1f]|[^\x00-\x1f\x1b]+")
CUP = re.compile(r"\x1b\[(\d*)(?:;(\d*))?H")
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
GAP = 6  # rewrite up to this many unchanged cells rather than move the cursor over them


class CellDiff:
    def __init__(self, cols: int, rows: int) -> None:
        self.resize(cols, rows)

    def resize(self, cols: int, rows: int) -> None:
        """A new size: the terminal's content is unknown, so the next frame is sent in full."""
        self.cols, self.rows = cols, rows
        self.want = [[None] * cols for _ in range(rows)]  # (text, style) the app wrote
        self.shown = [[None] * cols for _ in range(rows)]  # what the terminal shows
        self.r = self.c = 0  # the app's cursor
        self.style = ()  # the app's SGR since its last reset
        self.term_r = self.term_c = -1  # the terminal's cursor (unknown)
        self.term_style: tuple | None = None

    def forget(self) -> None:
        self.shown = [[None] * self.cols for _ in range(self.rows)]
        self.term_r = self.term_c = -1
        self.term_style = None

    # ----- input: what the app writes ---------------------------------------------------
    def frame(self, data: str) -> str:
        """The bytes to send for ``data`` (one frame of the app)."""
        out: list[str] = []
        dirty: set[int] = set()
        for tok in TOKEN.findall(data):
            if tok[0] != "\x1b" and tok[0] >= " ":
                self._text(tok, dirty)
                continue
            m = CUP.fullmatch(tok)
            if m is not None:
                self.r = min(max(int(m.group(1) or 1) - 1, 0), self.rows - 1)
                self.c = min(max(int(m.group(2) or 1) - 1, 0), self.cols - 1)
                continue
            m = SGR.fullmatch(tok)
            if m is not None:
                params = m.group(1)
                if params in ("", "0"):
                    self.style = ()
                elif params.startswith("0;"):
                    self.style = (params[2:],)
                else:
                    self.style = self.style + (params,)
                continue
            if tok == "\r":
                self.c = 0
                continue
            if tok == "\n":
                self.r = min(self.r + 1, self.rows - 1)
                continue
            # Anything else goes out in order, after the cells written before it.
            self._flush(dirty, out)
            dirty.clear()
            if self.term_style != self.style:  # an erase fills with the current background
                out.append(self._sgr(self.style))
                self.term_style = self.style
            out.append(tok)
            if tok.endswith(("J", "K", "r", "S", "T", "L", "M", "P", "@", "X")) or tok in ("\x1bc", "\x1bM"):
                self.forget()
            elif tok.startswith("\x1b[?") and tok[-1] in "hl" and ("1049" in tok or "47" in tok):
                self.forget()  # the alternate screen starts blank
        self._flush(dirty, out)
        if (self.term_r, self.term_c) != (self.r, self.c):  # where the app left its cursor
            out.append(f"\x1b[{self.r + 1};{self.c + 1}H")
            self.term_r, self.term_c = self.r, self.c
        return "".join(out)

    def _text(self, text: str, dirty: set[int]) -> None:
        row = self.want[self.r]
        style = self.style
        for ch in text:
            w = cell_len(ch)
            if w == 0:  # a combining mark joins the previous cell
                if self.c > 0 and row[self.c - 1] is not None:
                    row[self.c - 1] = (row[self.c - 1][0] + ch, style)
                continue
            if self.c + w > self.cols:
                break
            row[self.c] = (ch, style)
            if w == 2:
                row[self.c + 1] = ("", style)  # the right half of a wide character
            self.c += w
        dirty.add(self.r)

    # ----- output: what the terminal needs --------------------------------------------
    @staticmethod
    def _sgr(style: tuple) -> str:
        return "\x1b[0;" + ";".join(style) + "m" if style else "\x1b[0m"

    def _flush(self, dirty: set[int], out: list[str]) -> None:
        for r in sorted(dirty):
            want, shown = self.want[r], self.shown[r]
            changed = [c for c in range(self.cols) if want[c] is not None and want[c] != shown[c]]
            if not changed:
                continue
            runs: list[list[int]] = [[changed[0], changed[0]]]
            for c in changed[1:]:
                if c - runs[-1][1] <= GAP and all(want[x] is not None for x in range(runs[-1][1], c)):
                    runs[-1][1] = c
                else:
                    runs.append([c, c])
            for start, end in runs:
                if want[start][0] == "" and start > 0:  # begin at the left half of a wide character
                    start -= 1
                if (self.term_r, self.term_c) != (r, start):
                    out.append(f"\x1b[{r + 1};{start + 1}H")
                c = start
                while c <= end:
                    ch, style = want[c]
                    if style != self.term_style:
                        out.append(self._sgr(style))
                        self.term_style = style
                    out.append(ch)
                    shown[c] = want[c]
                    c += 1
                    if ch and cell_len(ch) == 2:
                        shown[c] = want[c]
                        c += 1
                self.term_r, self.term_c = r, c
                if c >= self.cols:
                    self.term_r = self.term_c = -1  # pending wrap: the cursor position is unclear


def driver_class():
    """A Textual LinuxDriver whose frames go through :class:`CellDiff`. Try it
    without changing infertop: ``TEXTUAL_DRIVER=cell_diff:CellDiffDriver`` with
    benchmarks/ on PYTHONPATH (bench_tui: ``--tree LABEL=DIR:benchmarks,TEXTUAL_DRIVER=cell_diff:CellDiffDriver``)."""
    import os

    from textual.drivers.linux_driver import LinuxDriver

    class _CellDiffDriver(LinuxDriver):
        _diff: CellDiff | None = None

        def write(self, data: str) -> None:
            size = os.get_terminal_size(self._file.fileno())
            if self._diff is None or (self._diff.cols, self._diff.rows) != (size.columns, size.lines):
                self._diff = CellDiff(size.columns, size.lines)
            super().write(self._diff.frame(data))

    return _CellDiffDriver


def __getattr__(name: str):
    if name == "CellDiffDriver":  # built on first use: importing this module needs no Textual
        return driver_class()
    raise AttributeError(name)


def frames_of(stream: str) -> list[str]:
    """Split a kept stream into frames: a frame ends where the cursor jumps back up the screen."""
    frames, start, last_row = [], 0, -1
    for m in CUP.finditer(stream):
        row = int(m.group(1) or 1)
        if row < last_row:
            frames.append(stream[start:m.start()])
            start = m.start()
        last_row = row
    frames.append(stream[start:])
    return frames


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tui_bytes import analyse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stream", type=Path)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--size", default="120x40")
    args = ap.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    stream = args.stream.read_bytes().decode("utf-8", errors="replace")
    frames = frames_of(stream)
    diff = CellDiff(cols, rows)
    # The kept stream starts mid-session: prime the model with a first full replay, unsent.
    out = []
    sent = 0
    mismatches = 0
    seen_in, seen_out = "", ""
    for i, f in enumerate(frames):
        o = diff.frame(f)
        out.append(o)
        sent += len(o.encode())
        seen_in += f
        seen_out += o
        if i % 50 == 49 or i == len(frames) - 1:
            a = analyse(seen_in, cols, rows)[0]
            b = analyse(seen_out, cols, rows)[0]
            # Cells never written in the kept stream stay blank in both.
            mismatches += sum(1 for r in range(rows) for c in range(cols) if a[r][c] != b[r][c])
    before = len(stream.encode())
    print(f"{args.stream.name}: {before / args.seconds:.0f} B/s as written by the app, "
          f"{sent / args.seconds:.0f} B/s cell-diffed ({sent / before:.0%}); {len(frames)} frames; "
          f"screen mismatches at checkpoints: {mismatches}")
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
