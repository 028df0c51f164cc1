"""``--demo``: run the bundled simulator in a child process and watch it.

The simulator runs in its own process so that its engine models never
compete with the UI's event loop (or the GIL); infertop then talks to it
over loopback HTTP exactly as to real engines.

A demo keeps its local-engine state (and audit log) in its own directory,
:func:`demo_state_dir`, so it never shows — or offers to stop — real
engines another infertop started on this host. The simulator also serves a
Kubernetes API (``infertop sim --kube-port``) whose Deployment's pods are the
engines; its kubeconfig (context ``infertop-demo``) is written in that
directory too, one per demo run (named by the run's PID, removed when the
demo stops): two demos on one host never read each other's cluster or token.

The simulator reads commands on its stdin (``--control-stdin``): :meth:`Demo.inject` switches
it to an incident scenario from now (the palette's "Inject incident: NAME").
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .private_fs import default_state_dir, private_dir
from .sources.vllm import EngineEndpoint

if TYPE_CHECKING:
    from .gateway.demo import DemoGateway  # imported when a demo starts one (the gateway stands alone)


def demo_state_dir() -> Path:
    """Where ``--demo`` keeps local-engine state: the state directory's ``demo/`` (never the real one)."""
    return default_state_dir() / "demo"


def demo_kubeconfig_path() -> Path:
    """This demo run's kubeconfig: one per process, so a second demo on the host cannot overwrite it.
    Those of demo runs that died without stopping (their PID gone) are removed."""
    private_dir(default_state_dir())  # ours: tightened if an older run left it 0755
    folder = private_dir(demo_state_dir())
    (folder / "kubeconfig").unlink(missing_ok=True)  # the one all demo runs shared before
    for old in folder.glob("kubeconfig-*"):
        pid = old.name.rpartition("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            old.unlink(missing_ok=True)
    return folder / f"kubeconfig-{os.getpid()}"


class DemoError(RuntimeError):
    pass


_running: list[Demo] = []  # the demo this process started (one at most): the palette injects into it


def running_demo() -> Demo | None:
    """The demo this process started and has not stopped, if any."""
    return _running[-1] if _running else None


@dataclass
class Demo:
    proc: subprocess.Popen
    endpoints: list[EngineEndpoint] = field(default_factory=list)
    dcgm_url: str | None = None
    engine_pods: dict[str, str] = field(default_factory=dict)  # pod → engine, as Kubernetes would tell
    state_dir: str = field(default_factory=lambda: str(demo_state_dir()))  # for Settings.state_dir
    kubeconfig: str | None = None  # the simulated cluster's, when it serves one
    kube_context: str | None = None
    kube_namespace: str | None = None
    gateway: DemoGateway | None = None  # the gateway and its load
    lines: queue.Queue[str] = field(default_factory=queue.Queue)  # the simulator's stdout, line by line
    _control: threading.Lock = field(default_factory=threading.Lock)

    def inject(self, scenario: str | None, engine: int = 1, timeout_s: float = 10.0) -> str:
        """Switch the running simulator to ``scenario`` from now (None: end the one playing); returns its
        answer ("scenario kv-bound engine=1 onset=… recovery=…"). Raises DemoError when it refuses or
        does not answer."""
        if self.proc.stdin is None or self.proc.poll() is not None:
            raise DemoError("the simulator is not running")
        with self._control:  # one command and its answer at a time
            try:
                self.proc.stdin.write(f"scenario {scenario} {engine}\n" if scenario else "scenario none\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as e:
                raise DemoError(f"the simulator does not listen: {e}") from None
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
                except queue.Empty:
                    raise DemoError(f"the simulator did not answer within {timeout_s:.0f} s") from None
                if not line:
                    raise DemoError("the simulator exited")
                if line.startswith("scenario ") or line.startswith("error: "):
                    break
        line = line.strip()
        if line.startswith("error: "):
            raise DemoError(line.removeprefix("error: "))
        return line

    def stop(self) -> None:
        """Stop the simulator and everything it started, and remove this run's kubeconfig."""
        if self in _running:
            _running.remove(self)
        if self.kubeconfig:
            Path(self.kubeconfig).unlink(missing_ok=True)
        if self.gateway is not None:
            self.gateway.stop()
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()  # the simulator stops at the end of its commands
            except OSError:
                pass
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=5)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def start_demo(n_engines: int = 6, seed: int = 7, load: str = "bursty", timeout_s: float = 30.0,
               kube: bool = True) -> Demo:
    """Start ``infertop sim`` (with a simulated Kubernetes cluster unless ``kube=False``) and return
    its engines once they all listen."""
    cmd = [sys.executable, "-m", "infertop", "sim", "--engines", str(n_engines), "--seed", str(seed),
           "--load", load, "--warmup", "30", "--kubernetes-labels", "--exit-with-parent", "--control-stdin"]
    if kube:
        cmd += ["--kube-port", "0", "--kubeconfig", str(demo_kubeconfig_path())]
    # stdin: the palette's "Inject incident" commands (and its end stops the simulator with us)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.PIPE,
                            text=True, start_new_session=True)
    demo = Demo(proc)
    lines = demo.lines

    out = proc.stdout  # a pipe (stdout=PIPE): never None

    def pump() -> None:  # a thread, because buffered pipes and select() do not mix
        for line in out or ():
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise DemoError(f"simulator did not start within {timeout_s:.0f} s") from None
            if not line:
                raise DemoError(f"simulator exited with code {proc.wait()}")
            parts = line.split()
            if parts[:1] == ["ready"]:
                from .gateway.demo import start_demo_gateway

                try:  # the gateway in front of the engines, with mixed-class load through it
                    demo.gateway = start_demo_gateway([e.url for e in demo.endpoints])
                except RuntimeError as e:
                    raise DemoError(str(e)) from None
                _running.append(demo)
                return demo
            if parts[:1] == ["engine"] and len(parts) >= 3:
                opts = dict(p.split("=", 1) for p in parts[3:] if "=" in p)
                seqs = opts.get("max_num_seqs")
                name = f"vllm-{parts[1]}"
                demo.endpoints.append(EngineEndpoint(name, parts[2],
                                                     max_num_seqs=int(seqs) if seqs and seqs.isdigit() else None))
                if opts.get("pod"):
                    demo.engine_pods[opts["pod"]] = name
            elif parts[:1] == ["dcgm"] and len(parts) >= 2:
                demo.dcgm_url = parts[1]
            elif parts[:1] == ["kube"] and len(parts) >= 2:
                opts = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
                demo.kubeconfig = opts.get("kubeconfig")
                demo.kube_context = opts.get("context")
                demo.kube_namespace = opts.get("namespace")
    except BaseException:
        demo.stop()
        raise
