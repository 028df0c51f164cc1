"""Summarise a py-spy profile kept by ``bench_tui.py --py-spy DIR`` (collapsed stacks).

    .venv/bin/python benchmarks/pyspy_top.py /tmp/spy/after-64.txt [--match infertop/] [--top 40]

Prints each function's inclusive share of the samples (the time spent in it
and below), then the largest self times — enough to rank the hot spots of a
tick without a flame-graph viewer.

On a loaded machine, read the self time of a syscall site (``time.thread_time``,
a socket write) with care: a process that is preempted there (the write woke
the simulator; the clock read returned to a busy run queue) is sampled there
while it waits for a core, not while it burns one. Compare CPU seconds
(``bench_tui_ticks.py``) before trusting such a share.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

SITE = re.compile(r" \(.*?/(?:site-packages|lib/python3\.\d+)/")
LINE = re.compile(r":\d+\)$")


def frame_name(frame: str) -> str:
    return LINE.sub(")", SITE.sub(" (", frame))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--match", default="", help="only functions whose name or file contains this")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in args.profile.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        count = int(n)
        total += count
        frames = [frame_name(f) for f in stack.split(";")]
        for f in set(frames):
            inclusive[f] += count
        own[frames[-1]] += count
    if not total:
        print("no samples")
        return 1
    print(f"{total} samples; inclusive share:")
    for f, n in [kv for kv in inclusive.most_common() if args.match in kv[0]][: args.top]:
        print(f"  {100 * n / total:5.1f}%  {f}")
    print("self:")
    for f, n in own.most_common(15):
        print(f"  {100 * n / total:5.1f}%  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
