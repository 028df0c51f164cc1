"""``infertop sim``: run the simulated fleet until SIGINT/SIGTERM.

When every server listens, prints one line per engine and one for the dcgm
exporter, then ``ready``, and flushes, so a parent process can read the URLs
from stdout::

    engine 0 http://127.0.0.1:8000 model=meta-llama/Llama-3.1-8B-Instruct max_num_seqs=64
    ...
    dcgm http://127.0.0.1:8006/metrics
    ready

With ``--print-urls`` the lines are the bare URLs (engines first, the dcgm
URL last), then ``ready``.

For hundreds of engines behind a real Prometheus::

    infertop sim --engines 500 --shared-port 0 --file-sd targets.json --kubernetes-labels --lean

serves every engine on one port by path (``http://HOST:P/engine/<i>``, its
``/metrics`` rendered at most once a second) and writes the file_sd targets
(one per engine, with pod / namespace / instance labels) before ``ready``.

With ``--kube-port P`` it also serves a Kubernetes API (the emulator in
``infertop.sim.kube``) whose Deployment's pods are the engines, writes a
kubeconfig (context ``infertop-demo``; ``--kubeconfig F``) and prints, before
``ready``::

    kube http://127.0.0.1:P kubeconfig=F context=infertop-demo namespace=inference
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="infertop sim", description="Run simulated vLLM engines, GPUs and load.")
    p.add_argument("--engines", type=int, default=3, metavar="N", help="number of engines (default 3)")
    p.add_argument("--base-port", type=int, default=0, metavar="P",
                   help="engine i listens on P+i, the dcgm exporter on P+N (default: ephemeral ports)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    p.add_argument("--load", choices=("steady", "bursty", "diurnal", "none"), default="bursty",
                   help="load pattern (diurnal: the bursts on a 30-minute day)")
    p.add_argument("--max-num-seqs", type=int, default=64, metavar="N", help="max_num_seqs of every engine")
    p.add_argument("--v0", action="store_true", help="expose legacy (V0) metric names")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop when the process that started it dies (used by --demo: a closed SSH "
                        "session must not leave a simulator behind)")
    p.add_argument("--kubernetes-labels", action="store_true",
                   help="GPU metrics carry pod/namespace/container labels, as dcgm-exporter -k does")
    p.add_argument("--print-urls", action="store_true", help="print bare URLs only (engines, then dcgm)")
    p.add_argument("--speed", type=float, default=1.0, help="virtual seconds per wall-clock second")
    p.add_argument("--warmup", type=float, default=0.0, metavar="S",
                   help="simulate S seconds of history before serving")
    p.add_argument("--hot-engine", type=int, default=None, metavar="I",
                   help="engine I gets more load and stronger bursts, past its capacity (default: none)")
    p.add_argument("--throttle-gpu", type=int, default=None, metavar="I",
                   help="GPU I has poor cooling and throttles under load (default: none)")
    inc = p.add_argument_group("incidents (on the virtual clock; the fleet is healthy without one)")
    inc.add_argument("--scenario", default=None, metavar="NAME",
                     help="play an incident on one engine: onset, ramp, hold, recovery (--list-scenarios)")
    inc.add_argument("--list-scenarios", action="store_true", help="print the scenarios and exit")
    inc.add_argument("--scenario-engine", type=int, default=1, metavar="I",
                     help="the engine the scenario acts on (default 1)")
    inc.add_argument("--onset", type=float, default=60.0, metavar="S",
                     help="virtual seconds after the start (warm-up excluded) when it begins (default 60)")
    inc.add_argument("--hold", type=float, default=None, metavar="S",
                     help="virtual seconds it holds at full strength (default: the scenario's own)")
    inc.add_argument("--control-stdin", action="store_true",
                     help="read commands from stdin: 'scenario NAME [ENGINE]' plays one from now, "
                          "'scenario none' ends it; each is answered on stdout (used by --demo)")
    fleet = p.add_argument_group("many engines (for a Prometheus scraping them)")
    fleet.add_argument("--shared-port", type=int, default=None, metavar="P",
                       help="serve every engine on ONE port by path (/engine/<i>/metrics …; 0: ephemeral) "
                            "instead of a port each — cheap enough for 500 engines")
    fleet.add_argument("--file-sd", metavar="FILE",
                       help="write a Prometheus file_sd targets file (JSON) listing every engine, "
                            "with pod/namespace/instance labels (needs --shared-port)")
    fleet.add_argument("--metrics-cache", type=float, default=None, metavar="S",
                       help="render each engine's /metrics at most every S seconds (default: 1 with "
                            "--shared-port, else 0)")
    fleet.add_argument("--tick", type=float, default=None, metavar="S",
                       help="simulation step in seconds (default 0.05; 0.25 with --shared-port)")
    fleet.add_argument("--lean", action="store_true",
                       help="leave out the HTTP-server and process metric families (smaller documents)")
    p.add_argument("--kube-port", type=int, default=None, metavar="P",
                   help="also serve a Kubernetes API on 127.0.0.1:P (0: any free port) whose Deployment's pods "
                        "are the engines, with an HPA, GPU nodes and events")
    p.add_argument("--kubeconfig", default=None, metavar="F",
                   help="where --kube-port writes its kubeconfig (default: <state dir>/sim/kubeconfig)")
    p.add_argument("--kube-replicas", type=int, default=None, metavar="N",
                   help="the Deployment's starting replicas (default: every engine)")
    return p


def _write_file_sd(path: str, groups: list) -> None:
    """Atomically: Prometheus re-reads the file when it changes and must never see half of it."""
    import json
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".file_sd-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(groups, fh, indent=1)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    # Read before "ready" is printed: a parent that dies as soon as it reads "ready" must not
    # be replaced here by whatever adopted us (the simulator would then outlive it).
    parent = os.getppid()
    args = build_parser().parse_args(argv)
    from .scenarios import SCENARIOS, scenario_table

    if args.list_scenarios:
        sys.stdout.write(scenario_table())
        return 0
    if args.scenario is not None and args.scenario not in SCENARIOS:
        print(f"infertop sim: unknown scenario {args.scenario!r}; one of: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    for flag, index in (("--scenario-engine", args.scenario_engine if args.scenario else None),
                        ("--hot-engine", args.hot_engine),
                        ("--throttle-gpu", args.throttle_gpu)):
        if index is not None and not 0 <= index < args.engines:
            print(f"infertop sim: {flag} must be 0..{args.engines - 1}", file=sys.stderr)
            return 2
    for flag, value in (("--onset", args.onset), ("--hold", args.hold)):
        if value is not None and not (math.isfinite(value) and 0 <= value <= 86400):
            print(f"infertop sim: {flag} must be 0..86400 seconds", file=sys.stderr)
            return 2
    if args.engines < 1:
        print("infertop sim: --engines must be at least 1", file=sys.stderr)
        return 2
    if args.max_num_seqs < 1:
        print("infertop sim: --max-num-seqs must be at least 1", file=sys.stderr)
        return 2
    if args.file_sd and args.shared_port is None:
        print("infertop sim: --file-sd needs --shared-port", file=sys.stderr)
        return 2
    if args.shared_port is not None and not 0 <= args.shared_port <= 65535:
        print("infertop sim: --shared-port must be 0..65535", file=sys.stderr)
        return 2
    for flag, value in (("--metrics-cache", args.metrics_cache), ("--tick", args.tick)):
        if value is not None and not (0 <= value <= 60 and (flag != "--tick" or value > 0)):
            print(f"infertop sim: {flag} must be {'> 0' if flag == '--tick' else '>= 0'} and <= 60", file=sys.stderr)
            return 2
    shared = args.shared_port is not None
    extra = {"shared_port": args.shared_port,
             "metrics_cache_s": args.metrics_cache if args.metrics_cache is not None else (1.0 if shared else 0.0),
             "tick_s": args.tick if args.tick is not None else (0.25 if shared else 0.05)}
    if args.lean:
        extra.update(http_metrics=False, process_metrics=False)
    if args.kube_port is not None and not 0 <= args.kube_port <= 65535:
        print("infertop sim: --kube-port must be 0..65535", file=sys.stderr)
        return 2
    from . import SimCluster

    stop = threading.Event()

    def on_signal(signum, frame) -> None:
        stop.set()

    old = {}
    if threading.current_thread() is threading.main_thread():
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            cluster = SimCluster(args.engines, seed=args.seed, base_port=args.base_port,
                                 max_num_seqs=args.max_num_seqs, metrics_version="v0" if args.v0 else "v1",
                                 kubernetes_labels=args.kubernetes_labels, hot_engine=args.hot_engine,
                                 throttle_gpu=args.throttle_gpu,
                                 load=args.load, speed=args.speed, warmup_s=args.warmup, **extra)
            cluster.start()
            if args.scenario is not None:
                cluster.play(args.scenario, engine=args.scenario_engine, onset_s=cluster.now + args.onset,
                             **({"hold_s": args.hold} if args.hold is not None else {}))
            if args.file_sd and cluster.fleet is not None:  # file_sd needs --shared-port (checked above)
                _write_file_sd(args.file_sd, cluster.fleet.file_sd())
        except OSError as e:
            print(f"infertop sim: cannot listen or write: {e}", file=sys.stderr)
            return 1
        kube = None
        try:
            if args.kube_port is not None:
                from .kube.cluster import SimKube

                try:
                    kube = SimKube(cluster, port=args.kube_port, replicas=args.kube_replicas).start()
                except OSError as e:
                    print(f"infertop sim: cannot listen on the Kubernetes port: {e}", file=sys.stderr)
                    return 1
                kube.wait_bound()
            out = sys.stdout
            for eng in cluster.engines:
                if args.print_urls:
                    out.write(eng.url + "\n")
                else:
                    pod = f" pod={eng.gpu.pod}" if getattr(eng.gpu, "pod", None) else ""
                    out.write(f"engine {eng.index} {eng.url} model={eng.model} max_num_seqs={eng.max_num_seqs}{pod}\n")
            if cluster.dcgm_url:
                out.write((cluster.dcgm_url if args.print_urls else f"dcgm {cluster.dcgm_url}") + "\n")
            if args.file_sd and not args.print_urls:
                out.write(f"file_sd {args.file_sd}\n")
            if kube is not None:
                path = kube.write_kubeconfig(args.kubeconfig or _default_kubeconfig())
                out.write(f"kube {kube.url} kubeconfig={path} context={DEMO_CONTEXT} namespace={kube.namespace}\n")
            if cluster.scenario is not None:
                out.write(cluster.scenario.describe() + "\n")
            out.write("ready\n")
            out.flush()
            if args.control_stdin:
                threading.Thread(target=_control, args=(cluster, sys.stdin, out, stop), daemon=True,
                                 name="infertop-sim-control").start()
            while not stop.wait(0.5):
                if args.exit_with_parent and os.getppid() != parent:
                    break  # re-parented: infertop died without stopping us
        finally:
            if kube is not None:
                kube.stop()
            cluster.stop()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 0


_out_lock = threading.Lock()


def _control(cluster, inp, out, stop: threading.Event) -> None:
    """``--control-stdin``: one command a line; the end of stdin (the parent went away) stops the simulator."""
    for line in inp:
        words = line.split()
        reply = _command(cluster, words) if words else None
        if reply:
            with _out_lock:
                out.write(reply + "\n")
                out.flush()
    stop.set()


def _command(cluster, words: list[str]) -> str:
    from .scenarios import SCENARIOS

    if words[0] != "scenario" or len(words) not in (2, 3):
        return "error: expected 'scenario NAME [ENGINE]' or 'scenario none'"
    name = words[1]
    if name == "none":
        cluster.play(None)
        return "scenario none"
    if name not in SCENARIOS:
        return f"error: unknown scenario {name[:40]!r}"
    engine = words[2] if len(words) == 3 else "1"
    if not engine.isdigit() or int(engine) >= len(cluster.engines):
        return f"error: engine must be 0..{len(cluster.engines) - 1}"
    return cluster.play(name, engine=int(engine)).describe()


def _default_kubeconfig():
    from ..private_fs import default_state_dir

    return default_state_dir() / "sim" / "kubeconfig"


DEMO_CONTEXT = "infertop-demo"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
