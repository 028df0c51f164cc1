"""CPU per tick of keeping the recent ticks for an incident bundle (``StateLog``), several trees side by side.

    .venv/bin/python benchmarks/bench_state_log.py --tree base=/old/checkout --tree mine=. \
        [--engines 6,64] [--ticks 900] [--rounds 3]

Capture (once per engine count, with the first tree): the simulator
(``infertop sim --kubernetes-labels``) serves N engines and a dcgm endpoint;
the engine collector, the dcgm collector and ``FleetJoiner`` build ``--capture``
real fleet states, as the console does.

Measure: each tree, in a child process of its own, in turn (A B A B … for
``--rounds``), keeps ``--ticks`` ticks in a ``StateLog`` as the console does
(no recording, 15 minutes kept, spilled to a temporary directory): each tick
is a copy of a captured state (objects of its own, ``taken_at`` one second
apart), added, then a ``--pace-ms`` sleep (the console adds one a second:
its background thread works in the gaps); one ``flush()`` at the end. CPU is ``time.process_time`` of the
child (every thread) over the adds, divided by the ticks. Also reported: the
gc-tracked objects the log holds (the most seen, sampled every 97 ticks, and
after the final flush), bytes on disk per tick, and the
CPU of ``window(900)`` + ``documents`` (an incident bundle's read-back).
Report ratios within one run, never absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from process_group import stop_group

CAPTURE = r"""
import asyncio, pickle, sys
from infertop.config import Config, GpuConfig
from infertop.sources.gpu import GpuCollector
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector
from infertop.state.fleet_join import FleetJoiner

urls, dcgm, n_states, out = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), sys.argv[4]

async def main():
    cfg = Config()
    eps = [EngineEndpoint(f"vllm-{i}", u, max_num_seqs=64) for i, u in enumerate(urls)]
    fc = FleetCollector(eps, interval_s=cfg.refresh_s, window_s=cfg.window_s)
    gc_ = GpuCollector(GpuConfig(nvml=False), dcgm_urls=[dcgm])
    j = FleetJoiner(fc, slo=cfg.slo, refresh_s=cfg.refresh_s, window_s=cfg.window_s, mode="demo")
    states = []
    for i in range(n_states + 3):
        await fc.poll_once()
        rows, health = await gc_.poll()
        j.set_gpus(rows, health)
        st = j.build()
        if i >= 3:  # rates need a few polls
            states.append(st)
        await asyncio.sleep(0.5)
    await gc_.aclose()
    with open(out, "wb") as fh:
        pickle.dump(states, fh, protocol=pickle.HIGHEST_PROTOCOL)

asyncio.run(main())
"""

CHILD = r"""
import dataclasses, gc, json, pickle, sys, tempfile, time
from infertop.state.recording.state_log import StateLog, documents

states_path, ticks, pace_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(states_path, "rb") as fh:
    captured = pickle.load(fh)
t0 = 1_800_000_000.0
gc.collect()
objs0 = len(gc.get_objects())
# every tick its own objects, as the joiner builds them
ticks_ = [(t0 + i, pickle.loads(pickle.dumps(dataclasses.replace(captured[i % len(captured)], tick=i + 1,
                                                                  taken_at=t0 + i), -1)))
          for i in range(ticks)]
gc.collect()
per_tick = (len(gc.get_objects()) - objs0) / ticks  # tracked objects of one tick's state
ticks_.reverse()
held_max = 0
with tempfile.TemporaryDirectory() as spill_dir:
    log = StateLog(None, refresh_s=1.0, spill_dir=spill_dir)
    cpu = 0.0
    i = 0
    while ticks_:
        c0 = time.process_time()
        ts, st = ticks_.pop()  # from here on only the log holds it
        log.add(ts, st)
        del st
        time.sleep(pace_s)  # the thread packs in the gaps, as between the console's ticks
        cpu += time.process_time() - c0
        i += 1
        if i % 97 == 0:  # gc-tracked objects the log holds, at every point of a block (not timed)
            gc.collect()
            held_max = max(held_max, len(gc.get_objects()) - objs0 - len(ticks_) * per_tick)
    c0 = time.process_time()
    log.flush()
    cpu += time.process_time() - c0
    gc.collect()
    held = len(gc.get_objects()) - objs0
    spill = log._spill.nbytes if getattr(log, "_spill", None) is not None else 0
    c1 = time.process_time()
    docs = documents(log.window(900))
    bundle_cpu = time.process_time() - c1
    assert len(docs) == min(ticks, 901), len(docs)
    log.close()
print(json.dumps({"cpu_s": cpu, "ticks": ticks, "held_objects": held, "held_max": held_max, "spill_bytes": spill,
                  "bundle_cpu_s": bundle_cpu, "error": log.error}))
"""


def capture(python: str, tree: str, engines: int, n_states: int, out: str, home: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8", "PYTHONPATH": tree}
    sim = subprocess.Popen([python, "-m", "infertop", "sim", "--engines", str(engines), "--seed", "7", "--load",
                            "bursty", "--warmup", "30", "--kubernetes-labels", "--print-urls"],
                           env=env, cwd=home, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        urls: list[str] = []
        deadline = time.monotonic() + 300
        while len(urls) < engines + 1:
            line = sim.stdout.readline()
            if not line or time.monotonic() > deadline:
                raise SystemExit("bench_state_log: the simulator did not start")
            urls += re.findall(r"http://[0-9.:]+[^\s]*", line)
        subprocess.run([python, "-c", CAPTURE, ",".join(urls[:engines]), urls[engines], str(n_states), out],
                       env=env, cwd=home, check=True, timeout=600)
    finally:
        stop_group(sim)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR", required=True)
    ap.add_argument("--engines", default="6,64")
    ap.add_argument("--ticks", type=int, default=900)
    ap.add_argument("--capture", type=int, default=30, help="real states captured per engine count")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pace-ms", type=float, default=3.0, help="sleep after each tick added")
    ap.add_argument("--states", metavar="DIR", help="keep (and reuse) the captured states here")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    trees = [(label, str(Path(d).resolve())) for label, d in (t.split("=", 1) for t in args.tree)]
    home = tempfile.mkdtemp(prefix="bench-state-log-")
    store = Path(args.states or home)
    store.mkdir(parents=True, exist_ok=True)
    env0 = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8"}
    print(f"bench_state_log: {args.ticks} ticks per run, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    for n in (int(x) for x in args.engines.split(",")):
        states = store / f"states-{n}.pickle"
        if not states.exists():
            capture(args.python, trees[0][1], n, args.capture, str(states), home)
        with open(states, "rb") as fh:
            one = pickle.load(fh)[0]
        print(f"{n} engines: a state pickled alone is {len(pickle.dumps(one, -1)):,} bytes")
        print(f"  {'tree':<10} {'CPU ms/tick':>12} {'objs held':>10} {'after flush':>11} {'disk B/tick':>12} {'bundle CPU s':>13}")
        results: dict[str, list[dict]] = {label: [] for label, _ in trees}
        for _ in range(args.rounds):
            for label, tree in trees:
                p = subprocess.run([args.python, "-c", CHILD, str(states), str(args.ticks), str(args.pace_ms / 1e3)], env=dict(
                    env0, PYTHONPATH=tree), cwd=home, capture_output=True, text=True, timeout=1200)
                lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
                if p.returncode or not lines:
                    print(f"  {label:<10} failed: {p.stderr.strip().splitlines()[-1:]}")
                    continue
                results[label].append(json.loads(lines[-1]))
        per = {}
        for label, rs in results.items():
            if not rs:
                continue
            per[label] = min(r["cpu_s"] / r["ticks"] for r in rs)  # the least disturbed run
            r = rs[-1]
            print(f"  {label:<10} {1e3 * per[label]:12.3f} {max(x['held_max'] for x in rs):10,.0f} {r['held_objects']:11,} "
                  f"{r['spill_bytes'] / r['ticks']:12,.0f} {min(x['bundle_cpu_s'] for x in rs):13.2f}"
                  + (f"  error: {r['error']}" if r["error"] else ""))
        if len(per) >= 2:
            (a, pa), (b, pb) = list(per.items())[:2]
            print(f"  {b}/{a} CPU per tick: {pb / pa:.2f}x")
    print(f"load after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
