"""Offline check of the cell-diffing driver (``infertop/ui/fastpaint/driver.py``) on a kept stream.

Evaluate on a stream kept by ``bench_tui.py --dump``:

    .venv/bin/python benchmarks/cell_diff.py "/tmp/tui/6-after (6).bin" --seconds 60

It prints the bytes/s as the app wrote them and as the driver sends them, and
checks that replaying either stream gives the same screen at checkpoints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infertop.ui.fastpaint.driver import CUP, CellDiff


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
