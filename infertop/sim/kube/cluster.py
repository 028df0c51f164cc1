"""A simulated Kubernetes cluster whose Deployment's pods are a :class:`~infertop.sim.SimCluster`'s engines.

``infertop sim --kube-port P`` (and so ``infertop --demo``) serves it: the
Kubernetes API emulator on 127.0.0.1 holding

- one node per simulated host (``sim-node-0``) with as many ``nvidia.com/gpu``
  as there are simulated GPUs;
- a Deployment (``inference/vllm``) of one-GPU pods; each running pod is bound
  to a free simulated engine (its podIP:port is the engine's URL, its GPU's
  dcgm ``pod`` label becomes the pod's name);
- an HPA on it (Pods metric ``vllm:num_requests_running``, averaged over the
  bound engines, evaluated every few seconds by the emulator's HPA controller)
  whose maximum is above the GPU count: under load it scales up, the extra
  pods stay Pending for lack of ``nvidia.com/gpu`` and the HPA ends up at its
  maximum, explaining itself;
- an llm-d VariantAutoscaling beside it (the type is installed, as KEDA's is)
  whose desired allocation a stand-in optimiser sets every few seconds from
  the engines' load (total running / the HPA's target): nothing applies it,
  which its explanation says;
- an InferencePool over the Deployment's pods and two InferenceObjectives (interactive, batch);
- the events the controllers write (scheduling, rescale, …).

Scaling the Deployment (by hand, by the HPA or by infertop) starts or stops
engines: a new pod revives a free engine, a deleted pod's engine stops
(connection refused) once the pod is gone. While a pod terminates, or is
drained (infertop's pod drain removes the ``infertop.io/serving`` label the
Service selects on), its engine gets no new requests and empties.

This package never imports textual or rich.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...private_fs import private_dir
from .engine_logs import STATS_EVERY_S, StatsLine, startup_lines
from .pod_runtime import WAIT
from .server import KubeEmulator
from .util import format_time

if TYPE_CHECKING:
    from .. import SimCluster

__all__ = ["DEMO_CONTEXT", "SimKube"]

DEMO_CONTEXT = "infertop-demo"
RUNNING = "vllm:num_requests_running"
SERVING = {"infertop.io/serving": "true"}


class SimKube:
    """The emulator + the binding of its pods to simulated engines.

    ``replicas``: the Deployment's starting size (default: every engine);
    ``hpa_max``: the HPA's maximum (default: engines + 2, more than the GPUs);
    ``hpa_target_running``: the HPA's target for ``vllm:num_requests_running`` per pod;
    ``stats_every_s``: how often each pod's container logs its engine's stats line (vLLM's 10 s).
    """

    def __init__(self, sim: "SimCluster", *, port: int = 0, namespace: str = "inference", name: str = "vllm",
                 replicas: int | None = None, hpa_min: int = 1, hpa_max: int | None = None,
                 hpa_target_running: float = 8.0, hpa_sync_s: float = 5.0, scale_down_window_s: int = 60,
                 termination_delay_s: float = 2.0, start_delay_s: float = 1.0, hpa: bool = True,
                 stats_every_s: float = STATS_EVERY_S) -> None:
        self.sim = sim
        self.namespace = namespace
        self.name = name
        n = len(sim.engines)
        self.replicas = n if replicas is None else max(0, replicas)
        self.token = secrets.token_urlsafe(24)
        # the reconcile loop reacts to every write at once; its interval only drives timed transitions
        # (container start, termination), and each pass costs O(pods): 1 s keeps 500 pods cheap
        self.emu = KubeEmulator(token=self.token, port=port, reconcile_interval=1.0, start_delay=start_delay_s,
                                termination_delay=termination_delay_s, seed=sim.seed,
                                custom_resources=("ScaledObject", "VariantAutoscaling", "InferencePool",
                                                  "InferenceObjective"))
        self.hpa = hpa
        self.hpa_min, self.hpa_max = hpa_min, (n + 2 if hpa_max is None else hpa_max)
        self.hpa_target_running = hpa_target_running
        self.hpa_sync_s = hpa_sync_s
        self.scale_down_window_s = scale_down_window_s
        self.bound: dict[str, int] = {}  # pod name → engine index
        self._stats: dict[str, StatsLine] = {}  # pod name → its engine's periodic stats line
        self.stats_every_s = stats_every_s
        self._stats_at = time.monotonic()
        self._dying: set[int] = set()  # engines whose pod is gone, until their process is stopped
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> "SimKube":
        emu, sim = self.emu.start(), self.sim
        hosts: dict[str, int] = {}
        for e in sim.engines:
            host = getattr(e.gpu, "hostname", None) or "sim-node-0"
            hosts[host] = hosts.get(host, 0) + 1
        for host, gpus in hosts.items():
            emu.add_node(host, gpus=gpus)
        emu.set_endpoint_allocator(self._allocate)
        first = sim.engines[0]
        emu.add_deployment(self.namespace, self.name, replicas=self.replicas, gpu_per_pod=1,
                           args=["--model", first.model, "--max-num-seqs", str(first.max_num_seqs)],
                           labels={"app": self.name, "app.kubernetes.io/name": "vllm", **SERVING},
                           selector={"app": self.name})
        # the Service selects one label more than the Deployment: infertop's pod drain removes it
        emu.add_service(self.namespace, self.name, selector={"app": self.name, **SERVING}, ports=(8000,))
        # the Gateway API Inference Extension objects an llm-d rollout has: its pool and two priorities
        emu.add_inference_pool(self.namespace, self.name, {"app": self.name}, (8000,), picker=f"{self.name}-epp")
        emu.add_inference_objective(self.namespace, "interactive", self.name, priority=100)
        emu.add_inference_objective(self.namespace, "batch", self.name, priority=0)
        emu.add_variant_autoscaling(self.namespace, self.name, self.name, model_id=first.model,
                                    current_replicas=self.replicas, desired_replicas=self.replicas,
                                    min_replicas=self.hpa_min, max_replicas=self.hpa_max)
        self._wva_at = 0.0
        if self.hpa:
            emu.add_hpa(self.namespace, self.name, self.name, min_replicas=self.hpa_min, max_replicas=self.hpa_max,
                        metrics=[{"type": "Pods", "pods": {"metric": {"name": RUNNING}, "target": {
                            "type": "AverageValue", "averageValue": f"{self.hpa_target_running:g}"}}}],
                        behavior={"scaleDown": {"stabilizationWindowSeconds": self.scale_down_window_s}})
        for e in sim.engines[self.replicas:]:  # engines without a pod are stopped until one needs them
            e.kill()
        self._thread = threading.Thread(target=self._run, name="infertop-sim-kube", daemon=True)
        self._thread.start()
        return self

    def wait_bound(self, timeout: float = 15.0) -> bool:
        """Wait until every pod the Deployment asks for at start (up to the GPUs) runs an engine."""
        want = min(self.replicas, len(self.sim.engines))
        pods = self.emu.store._objects[("", "pods")]

        def running() -> bool:
            with self.emu.store.lock, self._lock:
                return sum(1 for name in self.bound if ((pods.get((self.namespace, name)) or {}).get("status") or {})
                           .get("phase") == "Running") >= want

        try:
            self.emu.wait_until(running, timeout=timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self.start_hpa()

    def start_hpa(self) -> None:
        """The HPA controller starts once the engines are bound (a first evaluation before would
        only find no metrics)."""
        if self.hpa and self.emu.hpa_controller is None:
            self.emu.set_hpa_metrics(self._metric, sync_s=self.hpa_sync_s, seed_current=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        self.emu.stop()

    @property
    def url(self) -> str:
        return self.emu.url

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig for the context ``infertop-demo`` (namespace ``inference``), readable by its owner only."""
        path = Path(path)
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
        return self.emu.write_kubeconfig(path, context=DEMO_CONTEXT, namespace=self.namespace, user="demo")

    def pod_of(self, engine: int) -> str | None:
        with self._lock:
            return next((p for p, i in self.bound.items() if i == engine), None)

    # ---------------------------------------------------------------- binding

    def _metric(self, namespace: str, hpa: str, metric: dict, pods: list[dict]) -> Any:
        name = ((metric.get("pods") or {}).get("metric") or {}).get("name")
        if name != RUNNING:
            return None  # no such metric in this cluster: the HPA says so
        with self._lock:
            idx = [self.bound.get(p["metadata"]["name"]) for p in pods]
        values = [float(self.sim.engines[i].core.num_running) for i in idx if i is not None]
        return values or None

    def _allocate(self, namespace: str, pod_name: str) -> tuple[str, int] | str | None:
        """The kubelet gives a new pod of the Deployment its address: a free engine's (started if stopped).
        None free — every engine still serves a pod, one that terminates included (a scale-up right after a
        scale-down) — WAIT: the pod stays ContainerCreating until one is; it never runs without an engine."""
        if namespace != self.namespace or not pod_name.startswith(self.name + "-"):
            return None
        engines = self.sim.engines
        with self._lock:
            if pod_name in self.bound:
                return "127.0.0.1", engines[self.bound[pod_name]].port
            used = set(self.bound.values())
            # an engine whose pod has just gone only when no other is free: stopped here, then restarted
            free = next((i for i in range(len(engines)) if i not in used and i not in self._dying),
                        next((i for i in sorted(self._dying) if i not in used), None))
            if free is None:
                return WAIT
            self.bound[pod_name] = free
            if free in self._dying:
                self._dying.discard(free)
                self._stop_engine(free)
        e = engines[free]
        e.gpu.pod, e.gpu.namespace, e.gpu.container = pod_name, self.namespace, "vllm"
        if not e.alive or e.fault is not None:
            e.revive()  # a fresh engine process; the first pods take over the warmed-up engines as they are
        now = self.emu.clock()
        self.emu.append_pod_log(pod_name, startup_lines(now, model=e.model, max_num_seqs=e.max_num_seqs,
                                                        port=e.port), self.namespace, "vllm")
        with self._lock:
            self._stats[pod_name] = StatsLine(e.core, now)
        return "127.0.0.1", e.port

    def _run(self) -> None:
        store = self.emu.store
        seen = -1
        while not self._stop.is_set():
            with store.lock:
                store.changed.wait_for(lambda: store.resource_version != seen or self._stop.is_set(), timeout=0.5)
                seen = store.resource_version
                try:
                    gone, leaving, back = self._scan()
                except Exception:  # noqa: BLE001 — keep binding; the emulator records its own errors
                    import traceback

                    self.emu.errors.append(traceback.format_exc())
                    continue
            for i in leaving:
                self.sim.engines[i].alive = False  # out of the Service: no new requests, in-flight ones drain
            for i in back:
                self.sim.engines[i].alive = True
            if time.monotonic() - self._wva_at >= self.hpa_sync_s:
                self._wva_at = time.monotonic()
                self._optimise()
            if time.monotonic() - self._stats_at >= self.stats_every_s:
                self._stats_at = time.monotonic()
                self._log_stats()
            for i in gone:
                with self._lock:
                    if i in self._dying:  # else a new pod has taken (and restarted) it already
                        self._dying.discard(i)
                        self._stop_engine(i)

    def _log_stats(self) -> None:
        """Each bound pod's container writes its engine's stats line, as vLLM does every 10 s."""
        now = self.emu.clock()
        with self._lock:
            lines = [(pod, stats.line(self.sim.engines[i].core, now)) for pod, i in self.bound.items()
                     if (stats := self._stats.get(pod)) is not None]
            for pod in set(self._stats) - set(self.bound):
                del self._stats[pod]
        for pod, line in lines:
            self.emu.append_pod_log(pod, line, self.namespace, "vllm")

    def _stop_engine(self, i: int) -> None:
        """Its pod is gone: so is its engine process, and its GPU is no pod's (hold ``_lock``)."""
        e = self.sim.engines[i]
        e.kill()
        e.gpu.pod = e.gpu.namespace = e.gpu.container = None

    def _optimise(self) -> None:
        """The variant autoscaler's stand-in: enough replicas for the running requests at the HPA's target."""
        with self._lock:
            running = sum(self.sim.engines[i].core.num_running for i in self.bound.values())
        deployment = self.emu.get("deployments", self.name, self.namespace)
        if deployment is None:
            return
        want = max(self.hpa_min, min(self.hpa_max, math.ceil(running / self.hpa_target_running)))
        va = self.emu.get("variantautoscalings", self.name, self.namespace) or {}
        st = va.get("status") or {}
        current = int((deployment.get("spec") or {}).get("replicas", 0))
        if (st.get("currentAlloc") or {}).get("numReplicas") == current and \
                (st.get("desiredOptimizedAlloc") or {}).get("numReplicas") == want:
            return
        self.emu.update_status("VariantAutoscaling", self.name, {
            "currentAlloc": {"numReplicas": current, "accelerator": "H100"},
            "desiredOptimizedAlloc": {"numReplicas": want, "accelerator": "H100",
                                      "lastRunTime": format_time(self.emu.clock())},
            "actuation": {"applied": True}}, self.namespace)

    def _scan(self) -> tuple[list[int], list[int], list[int]]:
        """(engines whose pod is gone, engines whose pod left the Service — terminating or drained —,
        engines whose pod is back in it); hold the store lock. No copies: a few dict lookups per pod."""
        pods = self.emu.store._objects[("", "pods")]
        gone: list[int] = []
        leaving: list[int] = []
        back: list[int] = []
        with self._lock:
            for pod_name, i in list(self.bound.items()):
                pod = pods.get((self.namespace, pod_name))
                if pod is None:
                    del self.bound[pod_name]
                    self._dying.add(i)
                    gone.append(i)
                else:
                    labels = pod["metadata"].get("labels") or {}
                    serving = not pod["metadata"].get("deletionTimestamp") and all(
                        labels.get(k) == v for k, v in SERVING.items())
                    if serving != self.sim.engines[i].alive:
                        (back if serving else leaving).append(i)
        return gone, leaving, back
