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

With ``--kube-port P`` it also serves a Kubernetes API (the emulator in
``infertop.sim.kube``) whose Deployment's pods are the engines, writes a
kubeconfig (context ``infertop-demo``; ``--kubeconfig F``) and prints, before
``ready``::

    kube http://127.0.0.1:P kubeconfig=F context=infertop-demo namespace=inference
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--load", choices=("steady", "bursty", "none"), default="bursty", help="load pattern")
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
    p.add_argument("--kube-port", type=int, default=None, metavar="P",
                   help="also serve a Kubernetes API on 127.0.0.1:P (0: any free port) whose Deployment's pods "
                        "are the engines, with an HPA, GPU nodes and events")
    p.add_argument("--kubeconfig", default=None, metavar="F",
                   help="where --kube-port writes its kubeconfig (default: <state dir>/sim/kubeconfig)")
    p.add_argument("--kube-replicas", type=int, default=None, metavar="N",
                   help="the Deployment's starting replicas (default: every engine)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.engines < 1:
        print("infertop sim: --engines must be at least 1", file=sys.stderr)
        return 2
    if args.max_num_seqs < 1:
        print("infertop sim: --max-num-seqs must be at least 1", file=sys.stderr)
        return 2
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
                                 kubernetes_labels=args.kubernetes_labels,
                                 load=args.load, speed=args.speed, warmup_s=args.warmup)
            cluster.start()
        except OSError as e:
            print(f"infertop sim: cannot listen: {e}", file=sys.stderr)
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
            for e in cluster.engines:
                if args.print_urls:
                    out.write(e.url + "\n")
                else:
                    pod = f" pod={e.gpu.pod}" if getattr(e.gpu, "pod", None) else ""
                    out.write(f"engine {e.index} {e.url} model={e.model} max_num_seqs={e.max_num_seqs}{pod}\n")
            if cluster.dcgm_url:
                out.write((cluster.dcgm_url if args.print_urls else f"dcgm {cluster.dcgm_url}") + "\n")
            if kube is not None:
                path = kube.write_kubeconfig(args.kubeconfig or _default_kubeconfig())
                out.write(f"kube {kube.url} kubeconfig={path} context={DEMO_CONTEXT} namespace={kube.namespace}\n")
            out.write("ready\n")
            out.flush()
            parent = os.getppid()
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


def _default_kubeconfig():
    from ..config import default_state_dir

    return default_state_dir() / "sim" / "kubeconfig"


DEMO_CONTEXT = "infertop-demo"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
