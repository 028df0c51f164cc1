"""CPU per tick of the whole TUI (collection, state, paint), several trees side by side.

    .venv/bin/python benchmarks/bench_tui_ticks.py --tree before=/old/checkout --tree after=. [--engines 64]
        [--seconds 60] [--pane overview|engines] [--cprofile DIR]

``bench_tui.py`` measures CPU as % of a core in a real terminal; on a loaded
machine a starved TUI paints fewer ticks and its % drops with them. This one
divides instead: one simulator (``infertop sim``, started from the first tree)
serves the engines and a dcgm endpoint; every tree's app runs headless
(``App.run_test``, 120x40, its own poll loops and 1 s ticks) in its own child
process, all at the same time against the same engines; each child reports
the CPU seconds of its own process over the measured interval and the ticks
it built (``FleetJoiner.tick``). CPU ms per tick is what one refresh costs,
whatever the load; ticks/s says how starved each one was.

``--rounds N`` repeats the run N times, the trees started in turn in a rotated
order (the one started second ran ~3 % dearer in A/A runs of one tree against
itself), and prints each round's ratio of the second tree to the first and their
mean: a 2-3 % change shows through the noise of one run this way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from process_group import stop_group

CHILD = r"""
import asyncio, json, sys, time
from infertop.config import Config
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.app import InfertopApp, Settings

urls, dcgm, pane, warm_s, seconds, state_dir, profile = json.loads(sys.argv[1])

async def main():
    eps = [EngineEndpoint(f"vllm-{i}", u, max_num_seqs=64) for i, u in enumerate(urls)]
    app = InfertopApp(Settings(config=Config(), endpoints=eps, mode="demo", dcgm_urls=[dcgm], state_dir=state_dir))
    async with app.run_test(size=(120, 40)) as pilot:
        if pane == "engines":
            await pilot.press("2")
        await asyncio.sleep(warm_s)
        prof = None
        if profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t0, c0, k0 = time.monotonic(), time.process_time(), app.joiner.tick
        await asyncio.sleep(seconds)
        t1, c1, k1 = time.monotonic(), time.process_time(), app.joiner.tick
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile)
        print(json.dumps({"cpu_s": c1 - c0, "wall_s": t1 - t0, "ticks": k1 - k0}), flush=True)
        app.exit()

asyncio.run(main())
"""


def run_round(args, trees: list[list[str]], urls: list[str], home: str, env0: dict) -> dict[str, dict]:
    """Every tree's app against the simulator at once, started in the order given; their results."""
    children: list[tuple[str, subprocess.Popen]] = []
    try:
        for label, tree in trees:
            profile = str(Path(args.cprofile).resolve() / f"{label}.prof") if args.cprofile else ""
            job = json.dumps([urls[: args.engines], urls[args.engines], args.pane, args.warmup, args.seconds,
                              str(Path(home) / "state"), profile])
            env = dict(env0, PYTHONPATH=str(Path(tree).resolve()))
            children.append((label, subprocess.Popen([args.python, "-c", CHILD, job], env=env, cwd=home,
                                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
            time.sleep(0.5)  # started in turn: which one goes first is what the rounds rotate
        print(f"bench_tui_ticks: {args.engines} engines + dcgm, {args.pane} pane, {args.seconds:.0f} s side by side "
              f"(load {os.getloadavg()[0]:.1f}), started in order {', '.join(label for label, _ in trees)}")
        print(f"  {'tree':<10} {'CPU ms/tick':>12} {'ticks/s':>8} {'CPU %core':>10}")
        results = {}
        for label, p in children:
            out, err = p.communicate(timeout=args.warmup + args.seconds + 300)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if not lines:
                print(f"  {label:<10} failed: {err.strip().splitlines()[-1:] }")
                continue
            r = json.loads(lines[-1])
            results[label] = r
            per = 1000 * r["cpu_s"] / max(1, r["ticks"])
            print(f"  {label:<10} {per:12.1f} {r['ticks'] / r['wall_s']:8.2f} {100 * r['cpu_s'] / r['wall_s']:10.1f}")
        return results
    finally:
        for _, p in children:
            if p.poll() is None:
                p.kill()
                p.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR", required=True)
    ap.add_argument("--engines", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring (windows fill, first paints)")
    ap.add_argument("--pane", choices=("overview", "engines"), default="overview")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=1, help="runs, the trees' start order rotated each time")
    ap.add_argument("--cprofile", metavar="DIR", help="keep a cProfile of each tree's measured interval "
                    "(DIR/LABEL.prof; it slows every tree alike: rank hot spots with it, not CPU per tick)")
    args = ap.parse_args(argv)
    trees = [t.split("=", 1) for t in args.tree]
    home = tempfile.mkdtemp(prefix="bench-ticks-")
    env0 = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8"}
    first = str(Path(trees[0][1]).resolve())
    sim = subprocess.Popen([args.python, "-m", "infertop", "sim", "--engines", str(args.engines), "--seed", "7",
                            "--load", "bursty", "--warmup", "30", "--kubernetes-labels", "--print-urls"],
                           env=dict(env0, PYTHONPATH=first), cwd=home, stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        urls: list[str] = []
        deadline = time.monotonic() + 300
        while len(urls) < args.engines + 1:
            line = sim.stdout.readline()
            if not line or time.monotonic() > deadline:
                raise SystemExit("bench_tui_ticks: the simulator did not start")
            urls += re.findall(r"http://[0-9.:]+[^\s]*", line)
        ratios: list[float] = []
        for round_no in range(args.rounds):
            order = trees[round_no % len(trees):] + trees[:round_no % len(trees)]
            results = run_round(args, order, urls, home, env0)
            a, b = trees[0][0], (trees[1][0] if len(trees) > 1 else None)  # the ratio: second to first, as given
            if b is not None and a in results and b in results:
                ra, rb = results[a], results[b]
                ratio = (rb["cpu_s"] / max(1, rb["ticks"])) / (ra["cpu_s"] / max(1, ra["ticks"]))
                ratios.append(ratio)
                print(f"  {b}/{a} CPU per tick: {ratio:.3f}x" + (f" (round {round_no + 1})" if args.rounds > 1 else ""))
        if len(ratios) > 1:
            print(f"  mean of {len(ratios)} rounds: {sum(ratios) / len(ratios):.3f}x")
        print(f"load after: {os.getloadavg()[0]:.1f}")
    finally:
        stop_group(sim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
