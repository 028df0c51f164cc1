"""Where a TUI's terminal bytes go: bytes/s per screen row, beside the row's text.

    .venv/bin/python benchmarks/bench_tui.py --seconds 60 --dump /tmp/tui
    .venv/bin/python benchmarks/tui_bytes.py /tmp/tui/6-after\\ \\(6\\).bin --seconds 60

Reads a terminal stream kept by ``bench_tui.py --dump`` and replays just
enough of it (cursor moves and text) to know which screen row each byte was
written to. Escape sequences count towards the row the cursor is on. Prints,
for every row: bytes/s, the share of those bytes that are escape codes, how
many passes wrote text to it (a pass ends when the cursor jumps back up
the screen: about one per frame), and the row's last text — so a row's cost can
be read against what it shows (a tile, a sparkline, the status bar).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TOKEN = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+].|\x1b[^\[\]]"
                   r"|[\r\n\b]|[^\x1b\r\n\b]+")
CSI = re.compile(r"\x1b\[([0-?]*)[ -/]*([@-~])")


def analyse(stream: str, cols: int, rows: int):
    grid = [[" "] * cols for _ in range(rows)]
    row_bytes = [0] * rows
    row_esc = [0] * rows
    row_frames = [set() for _ in range(rows)]
    r = c = 0
    frame = 0  # a new pass starts when the cursor jumps back up the screen

    def num(s: str, default: int = 1) -> int:
        return int(s) if s.isdigit() else default

    for tok in TOKEN.findall(stream):
        n = len(tok.encode())
        if tok.startswith("\x1b"):
            m = CSI.fullmatch(tok)
            if m is not None:
                params, final = m.group(1).split(";"), m.group(2)
                new_r = r
                if final in "Hf":
                    new_r, c = num(params[0]) - 1, num(params[1] if len(params) > 1 else "") - 1
                elif final == "d":
                    new_r = num(params[0]) - 1
                elif final == "G":
                    c = num(params[0]) - 1
                elif final == "C":
                    c += num(params[0])
                elif final == "D":
                    c -= num(params[0])
                elif final == "A":
                    new_r -= num(params[0])
                elif final == "B":
                    new_r += num(params[0])
                new_r, c = min(max(new_r, 0), rows - 1), min(max(c, 0), cols - 1)
                if new_r < r:
                    frame += 1
                r = new_r
            row_bytes[r] += n
            row_esc[r] += n
            continue
        if tok == "\r":
            c = 0
            row_bytes[r] += n
            continue
        if tok == "\n":
            r = min(r + 1, rows - 1)
            row_bytes[r] += n
            continue
        if tok == "\b":
            c = max(0, c - 1)
            continue
        row_bytes[r] += n
        row_frames[r].add(frame)
        for ch in tok:
            if c < cols:
                grid[r][c] = ch
            c += 1
    return grid, row_bytes, row_esc, [len(f) for f in row_frames], frame


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stream", type=Path)
    ap.add_argument("--seconds", type=float, required=True, help="length of the kept stream (bench_tui's --seconds)")
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--width", type=int, default=84, help="characters of each row's text to print")
    args = ap.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    stream = args.stream.read_bytes().decode("utf-8", errors="replace")
    grid, row_bytes, row_esc, frames, n_frames = analyse(stream, cols, rows)
    total = sum(row_bytes)
    print(f"{args.stream.name}: {total / args.seconds:.0f} bytes/s, {n_frames / args.seconds:.2f} passes/s, "
          f"{100 * sum(row_esc) / max(total, 1):.0f} % escape codes")
    print(f"{'row':>3} {'B/s':>6} {'esc%':>4} {'passes':>6}  text")
    for i in range(rows):
        text = "".join(grid[i]).rstrip()[: args.width]
        esc = 100 * row_esc[i] / row_bytes[i] if row_bytes[i] else 0
        print(f"{i + 1:3d} {row_bytes[i] / args.seconds:6.0f} {esc:4.0f} {frames[i]:6d}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
