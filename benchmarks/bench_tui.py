"""Terminal bytes/s, CPU and RSS of the TUI against htop, side by side in one run.

    .venv/bin/python benchmarks/bench_tui.py                  # 60 s per phase
    .venv/bin/python benchmarks/bench_tui.py --seconds 20     # quick run
    .venv/bin/python benchmarks/bench_tui.py --tree before=/path/to/old/checkout --tree after=.

Each program runs in its own pseudo-terminal of 120x40 (TIOCSWINSZ before
exec) whose master end this process drains, counting every byte written to
the terminal. CPU is utime+stime of the program's own process from
/proc/PID/stat over the measured interval: the simulator behind ``--demo`` is
a child process and is not counted. Startup (imports, first full paint) is
left out: measuring starts ``--settle`` seconds after the program first
wrote to its terminal.

Phase 1: ``infertop --demo`` (6 engines, the demo's dcgm endpoint, 1 s
refresh) of every ``--tree`` and ``htop -d 10``, all at once, for
``--seconds``. Phase 2: ``infertop --demo --demo-engines 64`` of every tree
(with htop again for scale) for ``--seconds-64`` (default 2 × ``--seconds``),
RSS sampled one minute (or half-way, if shorter) into the run and at its end.

Every process started here (the TUIs, their simulators, htop, py-spy) is
stopped on exit, also on Ctrl+C; the run ends with a check that none is left.
``--dump DIR`` keeps each program's measured terminal stream, which
``benchmarks/tui_bytes.py`` breaks down by screen row.

htop's own CPU follows the machine's process table (it reads ``/proc`` for every
task at each refresh); infertop's does not. ``--idle-processes N`` starts N
sleeping processes for the whole run, as a node running an inference stack has
(kubelet, container shims, exporters, an engine's workers): the ratio is then
measured against htop on a machine of that size. The header line gives the
task count either way.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
REPO = Path(__file__).resolve().parent.parent
# Both programs write a wall-clock time once per refresh (infertop's header: the
# tick on screen; htop's uptime meter): distinct times seen = frames painted.
CLOCK = re.compile(rb"\d\d:\d\d:\d\d")


# ----- /proc ------------------------------------------------------------------
def cpu_s(pid: int) -> float:
    """utime+stime of one process (not its children), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE_KIB / 1024


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid``, depth first (a simulator in its own session included)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(parents.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot: tells our process from a later one with its PID."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


# ----- programs in pseudo-terminals ----------------------------------------------
@dataclass
class Program:
    label: str
    argv: list[str]
    env: dict[str, str]
    pid: int = 0
    fd: int = -1
    bytes_total: int = 0
    clocks: set[bytes] = field(default_factory=set)
    _tail: bytes = b""  # a time split across two reads
    keep_text: bool = False
    text: bytes = b""
    first_output_at: float | None = None
    dump: object = None  # an open file while the stream is kept
    known_pids: dict[int, int | None] = field(default_factory=dict)  # pid → start time
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, cols: int, rows: int) -> None:
        winsize = struct.pack("HHHH", rows, cols, 0, 0)
        pid, fd = pty.fork()
        if pid == 0:  # child: the pty is already its controlling terminal and stdio
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, winsize)
                # `python -m` puts the working directory first on sys.path: run
                # where no checkout is, so that PYTHONPATH picks the tree.
                os.chdir(self.env.get("HOME", "/"))
                os.execvpe(self.argv[0], self.argv, self.env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, winsize)
        self.known_pids[pid] = start_time(pid)

    def feed(self, data: bytes) -> None:
        with self.lock:
            if self.first_output_at is None:
                self.first_output_at = time.monotonic()
            self.bytes_total += len(data)
            if self.keep_text:
                self.text += data
            self.clocks.update(CLOCK.findall(self._tail + data))
            self._tail = data[-7:]
            if self.dump is not None:
                self.dump.write(data)

    def counted(self) -> int:
        with self.lock:
            return self.bytes_total

    def ticks(self) -> set[bytes]:
        with self.lock:
            return set(self.clocks)

    def keep_stream(self, path: Path | None) -> None:
        with self.lock:
            if self.dump is not None:
                self.dump.close()
            self.dump = open(path, "wb") if path is not None else None

    def remember_children(self) -> None:
        if alive(self.pid):
            for c in children_of(self.pid):
                self.known_pids.setdefault(c, start_time(c))

    def left(self) -> list[int]:
        """Processes of ours still running (same PID and start time as when seen)."""
        return [p for p, t in self.known_pids.items() if alive(p) and start_time(p) == t]

    def signal_all(self, sig: int) -> None:
        for p in self.left():
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """SIGTERM the program and everything it started, SIGKILL what is left after 5 s."""
        self.remember_children()
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.left():
            try:
                os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
        self.signal_all(signal.SIGKILL)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.keep_stream(None)


class Drain(threading.Thread):
    """Reads every pty master so that no program ever blocks on a full terminal."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.programs: dict[int, Program] = {}
        self.stopping = False
        self.lock = threading.Lock()

    def add(self, prog: Program) -> None:
        with self.lock:
            self.programs[prog.fd] = prog

    def run(self) -> None:
        while not self.stopping:
            with self.lock:
                fds = list(self.programs)
            if not fds:
                time.sleep(0.05)
                continue
            ready, _, _ = select.select(fds, [], [], 0.1)
            for fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: the program exited
                    data = b""
                if not data:
                    with self.lock:
                        self.programs.pop(fd, None)
                    continue
                self.programs[fd].feed(data)


# ----- measuring ------------------------------------------------------------------
@dataclass
class Result:
    label: str
    seconds: float
    bytes_per_s: float
    cpu_pct: float
    frames_per_s: float
    rss_early_mib: float | None = None
    rss_end_mib: float | None = None
    rss_trace: list[tuple[float, float]] = field(default_factory=list)  # (s into the run, MiB)


def settle(programs: list[Program], settle_s: float, timeout_s: float = 120.0) -> None:
    """Wait until every program has written to its terminal, then ``settle_s`` more."""
    deadline = time.monotonic() + timeout_s
    while any(p.first_output_at is None for p in programs):
        for p in programs:
            if not alive(p.pid):
                raise SystemExit(f"bench_tui: {p.label} exited during startup: {' '.join(p.argv)}")
        if time.monotonic() > deadline:
            raise SystemExit("bench_tui: a program wrote nothing to its terminal within "
                             f"{timeout_s:.0f} s: " + ", ".join(p.label for p in programs if p.first_output_at is None))
        time.sleep(0.1)
    last = max(p.first_output_at for p in programs)
    time.sleep(max(0.0, last + settle_s - time.monotonic()))
    for p in programs:
        p.remember_children()
        if not alive(p.pid):
            raise SystemExit(f"bench_tui: {p.label} exited during startup")


def measure(programs: list[Program], seconds: float, dump_dir: Path | None, phase: str,
            rss_at_s: float | None = None, pyspy: list[tuple[Program, Path]] = ()) -> list[Result]:
    """Bytes, CPU and RSS of every program over the same ``seconds``."""
    spies = []
    for prog, out in pyspy:
        spies.append(subprocess.Popen(
            [pyspy_bin(), "record", "--nonblocking", "--rate", "50", "--duration", str(int(seconds)),
             "--format", {".json": "speedscope", ".svg": "flamegraph"}.get(out.suffix, "raw"), "--output", str(out),
             "--pid", str(prog.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        prog.known_pids[spies[-1].pid] = start_time(spies[-1].pid)
    for p in programs:
        if dump_dir is not None:
            p.keep_stream(dump_dir / f"{phase}-{p.label}.bin")
    t0 = time.monotonic()
    b0 = {p.label: p.counted() for p in programs}
    c0 = {p.label: cpu_s(p.pid) for p in programs}
    k0 = {p.label: p.ticks() for p in programs}
    rss_early: dict[str, float] = {}
    traces: dict[str, list[tuple[float, float]]] = {p.label: [] for p in programs}
    next_trace = t0
    end = t0 + seconds
    while time.monotonic() < end:
        time.sleep(min(0.5, max(0.0, end - time.monotonic())))
        if rss_at_s is not None and not rss_early and time.monotonic() - t0 >= rss_at_s:
            rss_early = {p.label: rss_mib(p.pid) for p in programs}
        if rss_at_s is not None and time.monotonic() >= next_trace:
            for p in programs:
                traces[p.label].append((time.monotonic() - t0, rss_mib(p.pid)))
            next_trace += 30
        for p in programs:
            if not alive(p.pid):
                raise SystemExit(f"bench_tui: {p.label} exited during the measurement")
    dt = time.monotonic() - t0
    out = []
    for p in programs:
        out.append(Result(p.label, dt, (p.counted() - b0[p.label]) / dt, 100 * (cpu_s(p.pid) - c0[p.label]) / dt,
                          len(p.ticks() - k0[p.label]) / dt, rss_early.get(p.label), rss_mib(p.pid),
                          traces[p.label]))
        p.keep_stream(None)
    for s in spies:
        try:
            s.wait(timeout=30)
        except subprocess.TimeoutExpired:
            s.kill()
            s.wait()
    return out


def pyspy_bin() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.access(found, os.X_OK):
        raise SystemExit("bench_tui: --py-spy needs py-spy (pip install py-spy; it is not a project dependency)")
    return found


# ----- report -----------------------------------------------------------------------
def table(title: str, results: list[Result], htop: Result | None, show_rss: bool = False) -> None:
    print(f"\n{title}")
    head = (f"  {'program':<22} {'bytes/s':>9} {'vs htop':>8} {'CPU %core':>10} {'vs htop':>8} {'frames/s':>8}"
            f" {'B/frame':>8} {'CPU ms/frame':>12}")
    if show_rss:
        head += f" {'RSS early':>10} {'RSS end':>9}"
    print(head)
    for r in results:
        line = f"  {r.label:<22} {r.bytes_per_s:9.0f}"
        if htop is not None and r is not htop:
            line += f" {ratio(r.bytes_per_s, htop.bytes_per_s):>8} {r.cpu_pct:10.2f} {ratio(r.cpu_pct, htop.cpu_pct):>8}"
        else:
            line += f" {'':>8} {r.cpu_pct:10.2f} {'':>8}"
        if r.frames_per_s:  # htop's frames are not counted (curses writes only changed digits of its clock)
            per = r.frames_per_s
            line += f" {per:8.2f} {r.bytes_per_s / per:8.0f} {10 * r.cpu_pct / per:12.1f}"
        else:
            line += f" {'—':>8} {'—':>8} {'—':>12}"
        if show_rss:
            early = f"{r.rss_early_mib:.1f}M" if r.rss_early_mib is not None else "—"
            line += f" {early:>10} {r.rss_end_mib:8.1f}M"
        print(line)


def rss_traces(results: list[Result]) -> None:
    for r in results:
        if len(r.rss_trace) > 2:
            print(f"  RSS of {r.label} every 30 s (MiB): " + " ".join(f"{m:.0f}" for _, m in r.rss_trace))


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "—"


def verdicts(phase1: list[Result], phase2: list[Result], htop1: Result) -> None:
    print("\nTargets (issue 8): bytes/s ≤ htop; CPU at 6 engines ≤ 2x htop; CPU at 64 engines ≤ 10 % of a core")
    for r in phase1:
        if r is htop1:
            continue
        ok_b = r.bytes_per_s <= htop1.bytes_per_s
        ok_c = r.cpu_pct <= 2 * htop1.cpu_pct
        print(f"  {r.label:<22} bytes {'met' if ok_b else 'MISSED'}  CPU(6) {'met' if ok_c else 'MISSED'}")
    for r in phase2:
        if r.label.startswith("htop"):
            continue
        flat = ""
        if r.rss_early_mib is not None:
            flat = f"  RSS {r.rss_end_mib - r.rss_early_mib:+.1f} MiB after the early sample"
        print(f"  {r.label:<22} CPU(64) {'met' if r.cpu_pct <= 10 else 'MISSED'} ({r.cpu_pct:.1f} %){flat}")


def task_count() -> int:
    """Threads of every process now: what htop reads at each refresh."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                n += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:  # gone meanwhile
                pass
    return n


# ----- main ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60, help="measured seconds of phase 1 (default 60)")
    ap.add_argument("--seconds-64", type=float, default=None, help="measured seconds of phase 2 (default 2 × --seconds)")
    ap.add_argument("--settle", type=float, default=10, help="seconds after the first output before measuring")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                    help="an infertop checkout to run (repeatable; default: this one); DIR may be a PYTHONPATH (a:b),"
                         " followed by ,KEY=VALUE settings for that TUI's environment")
    ap.add_argument("--size", default="120x40", help="terminal COLSxROWS (default 120x40)")
    ap.add_argument("--engines", type=int, default=64, help="engines in phase 2 (default 64)")
    ap.add_argument("--pane", default="overview", choices=("overview", "engines"),
                    help="the pane on view while measuring (engines: the TUIs are sent the key 2 after startup)")
    ap.add_argument("--skip-64", action="store_true", help="phase 1 only")
    ap.add_argument("--only-64", action="store_true", help="phase 2 only")
    ap.add_argument("--dump", type=Path, help="keep each program's measured terminal stream in DIR")
    ap.add_argument("--py-spy", type=Path, metavar="DIR", help="profile each TUI with py-spy into DIR (collapsed stacks, LABEL-ENGINES.txt)")
    ap.add_argument("--shared-sim", action="store_true",
                    help="one simulator per phase for every TUI (--config with its URLs) instead of --demo each:"
                         " less load when comparing several trees")
    ap.add_argument("--python", default=sys.executable, help="interpreter for infertop (default: this one)")
    ap.add_argument("--idle-processes", type=int, default=0, metavar="N",
                    help="N sleeping processes for the whole run (htop reads every task; see above)")
    args = ap.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    trees = [t.split("=", 1) if "=" in t else (Path(t).name or "infertop", t) for t in args.tree] or [("infertop", str(REPO))]
    for d in (args.dump, args.py_spy):
        if d is not None:
            d.mkdir(parents=True, exist_ok=True)
    if args.py_spy is not None:
        pyspy_bin()
    if shutil.which("htop") is None:
        print("bench_tui: htop is not installed (apt-get install -y htop)", file=sys.stderr)
        return 2
    seconds_64 = args.seconds_64 if args.seconds_64 is not None else 2 * args.seconds

    home = tempfile.mkdtemp(prefix="bench-tui-home-")  # no user config, audit log or htoprc leaks in
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8",
                "TERM": "xterm-256color", "COLORTERM": "truecolor"}

    def pythonpath(tree: str) -> str:
        return os.pathsep.join(str(Path(d).resolve()) for d in tree.split(os.pathsep))

    sims: dict[int, Path] = {}  # engines → config of a shared simulator

    def tui(label: str, tree: str, engines: int) -> Program:
        tree, *extra = tree.split(",")  # DIR,KEY=VALUE,...: environment of this tree's TUI only
        env = dict(base_env, PYTHONPATH=pythonpath(tree), **dict(e.split("=", 1) for e in extra))
        if not args.shared_sim:
            return Program(label, [args.python, "-m", "infertop", "--demo", "--demo-engines", str(engines),
                                   "--refresh", "1"], env)
        if engines not in sims:
            sims[engines] = start_shared_sim(engines)
        return Program(label, [args.python, "-m", "infertop", "--config", str(sims[engines]), "--refresh", "1"], env)

    def start_shared_sim(engines: int) -> Path:
        """One simulator for every TUI of a phase (as --demo starts it), and a config that watches it."""
        sim = Program(f"sim ({engines})", [args.python, "-m", "infertop", "sim", "--engines", str(engines),
                                           "--seed", "7", "--load", "bursty", "--warmup", "30",
                                           "--kubernetes-labels", "--print-urls"],
                      dict(base_env, PYTHONPATH=pythonpath(trees[0][1].split(",")[0])), keep_text=True)
        launch([sim])
        deadline = time.monotonic() + 120
        while True:
            with sim.lock:
                urls = [u.decode() for u in re.findall(rb"http://[0-9.:]+[^\s]*", sim.text)]
            if len(urls) >= engines + 1:
                break
            if time.monotonic() > deadline or not alive(sim.pid):
                raise SystemExit(f"bench_tui: the shared simulator did not start ({engines} engines)")
            time.sleep(0.2)
        cfg = Path(home) / f"shared-{engines}.yaml"
        lines = ["engines:"] + [f"  - {{name: vllm-{i}, url: '{u}', max_num_seqs: 64}}" for i, u in enumerate(urls[:engines])]
        lines += ["slo: {e2e_p99_s: 20.0}  # the demo's", "gpu:", f"  dcgm: ['{urls[engines]}']"]
        cfg.write_text("\n".join(lines) + "\n")
        return cfg

    def show_pane(tuis: list[Program]) -> None:
        if args.pane == "engines":
            for p in tuis:
                os.write(p.fd, b"2")
            time.sleep(3)  # the pane's first paint is not measured

    started: list[Program] = []
    launched: list[Program] = []  # for the final check that nothing is left
    drain = Drain()
    drain.start()

    def launch(progs: list[Program]) -> None:
        for p in progs:
            p.start(cols, rows)
            started.append(p)
            launched.append(p)
            drain.add(p)

    def interrupted(*_sig) -> None:
        raise KeyboardInterrupt

    def stop_all() -> None:
        for p in started:
            p.stop()
        started.clear()
        sims.clear()

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    idle = [subprocess.Popen(["sleep", "infinity"], stdin=subprocess.DEVNULL, start_new_session=True)
            for _ in range(max(0, args.idle_processes))]
    print(f"bench_tui: {cols}x{rows}, TERM=xterm-256color COLORTERM=truecolor, 1 s refresh; "
          f"phase 1 {args.seconds:.0f} s, phase 2 {seconds_64:.0f} s; load before: {os.getloadavg()[0]:.2f}; "
          f"{task_count()} tasks on the machine ({len(idle)} idle processes started here)")
    phase1: list[Result] = []
    phase2: list[Result] = []
    htop1 = None
    try:
        if not args.only_64:
            progs = [Program("htop -d 10", ["htop", "-d", "10"], dict(base_env))]
            progs += [tui(f"{label} (6)", tree, 6) for label, tree in trees]
            launch(progs)
            settle(progs, args.settle)
            show_pane(progs[1:])
            spies = [(p, args.py_spy / f"{p.label.split()[0]}-6.txt") for p in progs[1:]] \
                if args.py_spy is not None else []
            phase1 = measure(progs, args.seconds, args.dump, "6", pyspy=spies)
            htop1 = phase1[0]
            table(f"Phase 1: 6 engines + dcgm, {phase1[0].seconds:.0f} s side by side", phase1, htop1)
            stop_all()
        if not args.skip_64:
            progs = [Program("htop -d 10", ["htop", "-d", "10"], dict(base_env))]
            progs += [tui(f"{label} ({args.engines})", tree, args.engines) for label, tree in trees]
            launch(progs)
            settle(progs, args.settle)
            show_pane(progs[1:])
            spies = [(p, args.py_spy / f"{p.label.split()[0]}-{args.engines}.txt") for p in progs[1:]] \
                if args.py_spy is not None else []
            phase2 = measure(progs, seconds_64, args.dump, str(args.engines), rss_at_s=min(60.0, seconds_64 / 2),
                             pyspy=spies)
            table(f"Phase 2: {args.engines} engines + dcgm, {phase2[0].seconds:.0f} s side by side "
                  f"(RSS early = at {min(60.0, seconds_64 / 2):.0f} s)", phase2, phase2[0], show_rss=True)
            rss_traces(phase2)
            stop_all()
        if htop1 is not None:
            verdicts(phase1, phase2, htop1)
    except KeyboardInterrupt:
        print("bench_tui: interrupted", file=sys.stderr)
        return 130
    finally:
        stop_all()
        for p in idle:
            p.kill()
            p.wait()
        drain.stopping = True
        shutil.rmtree(home, ignore_errors=True)
        left = [pid for p in launched for pid in p.left()]
        if left:
            print(f"bench_tui: processes still alive: {left}", file=sys.stderr)
        else:
            print(f"bench_tui: all {sum(len(p.known_pids) for p in launched)} processes started here are gone")
    print(f"load after: {os.getloadavg()[0]:.2f} (2-core machines under load skew CPU %; compare ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
