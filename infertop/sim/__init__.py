"""Simulator of a fleet of vLLM 0.32 engines, their GPUs and their load.

Used by ``infertop --demo``, ``infertop sim`` and the test suite. Every
engine is a real HTTP server on 127.0.0.1 speaking vLLM's API and metric
format; each has a simulated GPU exported in dcgm-exporter format::

    from infertop.sim import SimCluster

    with SimCluster(n_engines=6, seed=1, load="bursty") as cluster:
        for e in cluster.engines:
            print(e.url, e.model, e.max_num_seqs)   # http://127.0.0.1:PORT ...
        print(cluster.dcgm_url)                      # all GPUs, one exporter

With ``realtime=False`` nothing moves on its own: call
:meth:`SimCluster.advance` to step the virtual clock (deterministic tests).

This package never imports textual or rich.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence

from .dcgm import SimGpu, render_dcgm
from .load import LOAD_MODES, LoadGenerator
from .metrics import HttpStats, render_metrics
from .model import DEFAULT_EPOCH_S, EngineConfig, EngineModel, SimRequest
from .scenarios import SCENARIOS, ScenarioPlayer
from .server import FAULTS, DcgmServer, FleetServer, SimEngine

__all__ = [
    "SimCluster",
    "SimEngine",
    "EngineModel",
    "EngineConfig",
    "SimRequest",
    "SimGpu",
    "LoadGenerator",
    "DcgmServer",
    "HttpStats",
    "render_metrics",
    "render_dcgm",
    "FAULTS",
    "LOAD_MODES",
    "DEFAULT_MODELS",
    "SCENARIOS",
    "ScenarioPlayer",
]

DEFAULT_MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct")


def _per_engine(value: Any, n: int, name: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) == 0:
            raise ValueError(f"{name} must not be empty")
        return [value[i % len(value)] for i in range(n)]
    return [value] * n


class SimCluster:
    """N simulated engines (+ GPUs, + one node dcgm-exporter) and a load generator.

    Parameters
    ----------
    n_engines, seed:
        Fleet size; everything random derives from ``seed``.
    base_port:
        0 for ephemeral ports; otherwise engine *i* listens on
        ``base_port + i`` and the dcgm exporter on ``base_port + n_engines``
        (unless ``dcgm_port`` is given).
    models:
        Served model name(s), cycled over the engines.
    max_num_seqs:
        An int for all engines or a sequence (cycled).
    metrics_version:
        ``"v1"`` (vLLM 0.32 names) or ``"v0"`` (legacy names).
    realtime:
        True: a driver thread advances every engine on the wall clock (times
        ``speed``) in ticks of ``tick_s``. False: call :meth:`advance`.
    load:
        ``"bursty"``, ``"diurnal"``, ``"steady"`` or ``"none"``.
    hot_engine:
        Index of the engine that gets more (and longer) load; None for none.
    throttle_gpu:
        Index of a GPU with poor cooling that thermally throttles under load
        (default: engine 1 when there are at least 2 engines; None for none).
    warmup_s:
        Virtual seconds simulated (fast) in :meth:`start` before serving, so
        counters and histograms already have history.
    shared_port:
        None: every engine listens on its own port. A port (0: ephemeral):
        every engine is served by one :class:`FleetServer` under
        ``/engine/<i>`` on that port, its ``/metrics`` rendered at most once
        per ``metrics_cache_s`` — hundreds of engines for a real Prometheus.
    engine_overrides:
        Per-engine dicts of :class:`EngineConfig` fields, e.g.
        ``[{"num_gpu_blocks": 2048}, {}]``.
    """

    def __init__(
        self,
        n_engines: int = 3,
        seed: int = 0,
        base_port: int = 0,
        models: str | Sequence[str] | None = None,
        max_num_seqs: int | Sequence[int] = 64,
        metrics_version: str = "v1",
        realtime: bool = True,
        load: str = "bursty",
        *,
        speed: float = 1.0,
        tick_s: float = 0.05,
        host: str = "127.0.0.1",
        dcgm: bool = True,
        dcgm_port: int | None = None,
        hostname: str = "sim-node-0",
        hostname_label: str = "Hostname",
        kubernetes_labels: bool = False,
        namespace: str = "inference",
        hot_engine: int | None = 0,
        throttle_gpu: int | None | str = "auto",
        base_rate: float = 3.0,
        max_model_len: int | Sequence[int] = 8192,
        num_gpu_blocks: int | Sequence[int] = 7168,
        scheduling_policy: str = "priority",
        enable_prefix_caching: bool = True,
        engine_overrides: Sequence[dict[str, Any]] | None = None,
        warmup_s: float = 0.0,
        epoch_s: float | None = None,
        http_metrics: bool = True,
        process_metrics: bool = True,
        shared_port: int | None = None,
        metrics_cache_s: float = 1.0,
    ) -> None:
        if n_engines < 1:
            raise ValueError("n_engines must be >= 1")
        if load not in LOAD_MODES:
            raise ValueError(f"load must be one of {LOAD_MODES}, not {load!r}")
        self.n_engines = n_engines
        self.seed = seed
        self.realtime = realtime
        self.speed = float(speed)
        self.tick_s = float(tick_s)
        self.warmup_s = float(warmup_s)
        if epoch_s is None:
            epoch_s = (time.time() - self.warmup_s) if realtime else DEFAULT_EPOCH_S
        self.epoch_s = epoch_s
        if throttle_gpu == "auto":
            throttle_gpu = 1 if n_engines >= 2 else None
        self.hot_engine = hot_engine if (hot_engine is not None and hot_engine < n_engines) else None
        self.throttle_gpu = throttle_gpu
        names = _per_engine(models if models is not None else list(DEFAULT_MODELS), n_engines, "models")
        seqs = _per_engine(max_num_seqs, n_engines, "max_num_seqs")
        lens = _per_engine(max_model_len, n_engines, "max_model_len")
        blocks = _per_engine(num_gpu_blocks, n_engines, "num_gpu_blocks")
        overrides = list(engine_overrides or [])
        self.load = LoadGenerator(n_engines, seed, load, base_rate=base_rate, hot_engine=self.hot_engine)
        # the replicas of a model share its load balancer, and so its bursts: peers look alike when healthy
        self.load.phase_groups = [sorted(set(names), key=names.index).index(m) for m in names]
        self.engines: list[SimEngine] = []
        for i in range(n_engines):
            cfg = EngineConfig(model_name=names[i], max_num_seqs=int(seqs[i]), max_model_len=int(lens[i]),
                               num_gpu_blocks=int(blocks[i]), metrics_version=metrics_version,
                               scheduling_policy=scheduling_policy, enable_prefix_caching=enable_prefix_caching,
                               max_num_batched_tokens=max(2048, int(seqs[i])))
            if i < len(overrides) and overrides[i]:
                cfg = EngineConfig(**{**cfg.__dict__, **overrides[i]})
            core = EngineModel(cfg, seed=seed * 1000 + i, epoch_s=self.epoch_s)
            gpu = SimGpu(i, seed, hostname=hostname, gpu_memory_utilization=cfg.gpu_memory_utilization,
                         force_throttle=(i == throttle_gpu),
                         pod=f"vllm-{i}-{seed:04x}" if kubernetes_labels else None,
                         namespace=namespace if kubernetes_labels else None,
                         container="vllm" if kubernetes_labels else None)
            port = (base_port + i) if base_port else 0
            eng = SimEngine(core, gpu, index=i, host=host, port=port, hostname_label=hostname_label,
                            http_metrics=http_metrics, process_metrics=process_metrics)
            self.engines.append(eng)
        if dcgm_port is None:
            dcgm_port = (base_port + n_engines) if base_port else 0
        self.dcgm: DcgmServer | None = (
            DcgmServer(self.engines, host=host, port=dcgm_port, hostname_label=hostname_label) if dcgm else None)
        # shared_port: every engine on one port, by path (FleetServer), instead of a port each
        self.fleet: FleetServer | None = (FleetServer(self.engines, host=host, port=shared_port,
                                                      cache_s=metrics_cache_s, hostname_label=hostname_label)
                                          if shared_port is not None else None)
        #: The incident being played (:meth:`play`), None for a healthy fleet.
        self.scenario: ScenarioPlayer | None = None
        self._scenario_lock = threading.Lock()  # the driver's steps vs a scenario switched from another thread
        self._stop = threading.Event()
        self._driver: threading.Thread | None = None
        self._started = False
        self.ticks = 0

    # ------------------------------------------------------------ properties

    @property
    def gpus(self) -> list[SimGpu]:
        return [e.gpu for e in self.engines]

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self.engines]

    @property
    def dcgm_url(self) -> str | None:
        return self.dcgm.url if self.dcgm is not None else None

    @property
    def now(self) -> float:
        """Virtual time of engine 0 (all engines advance together)."""
        return self.engines[0].core.now

    # ------------------------------------------------------------- lifecycle

    def start(self) -> SimCluster:
        if self._started:
            return self
        if self.warmup_s > 0:
            self.advance(self.warmup_s, tick=0.25)
        try:
            if self.fleet is not None:
                self.fleet.start()
            for e in self.engines:
                e.start()
            if self.dcgm is not None:
                self.dcgm.start()
        except Exception:
            self.stop()
            raise
        self._started = True
        if self.realtime:
            self._stop.clear()
            self._driver = threading.Thread(target=self._drive, name=f"infertop-sim-driver-{id(self):x}", daemon=True)
            self._driver.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._driver is not None:
            self._driver.join(5.0)
            self._driver = None
        for e in self.engines:
            e.stop()
        if self.fleet is not None:
            self.fleet.stop()
        if self.dcgm is not None:
            self.dcgm.stop()
        self._started = False

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------------------- clock

    def _step_all(self, dt: float) -> None:
        load = self.load
        with self._scenario_lock:
            if self.scenario is not None:
                self.scenario.apply()
            for i, e in enumerate(self.engines):
                with e.lock:
                    load.generate(i, e.core, e.core.now + dt, submit=e.alive and not e.stalled)
                    e.advance_locked(dt)
        self.ticks += 1

    def advance(self, seconds: float, tick: float = 0.05) -> None:
        """Advance every engine by ``seconds`` of virtual time in ``tick`` steps.

        For ``realtime=False`` clusters (and warm-up); deterministic given the
        seed and the same sequence of calls.
        """
        if self._driver is not None and threading.current_thread() is not self._driver:
            raise RuntimeError("advance() is for realtime=False clusters; the driver thread owns the clock")
        remaining = float(seconds)
        while remaining > 1e-12:
            dt = min(tick, remaining)
            self._step_all(dt)
            remaining -= dt

    def _drive(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            dt = min(now - last, 1.0) * self.speed
            last = now
            try:
                self._step_all(dt)
            except Exception:  # pragma: no cover - keep the fleet alive, but loudly
                import traceback
                traceback.print_exc()

    # -------------------------------------------------------------- actions

    def play(self, scenario: str | None, *, engine: int = 1, onset_s: float | None = None,
             **timing: float) -> ScenarioPlayer | None:
        """Play an incident (a name in :data:`SCENARIOS`) on ``engine`` from ``onset_s`` (virtual
        seconds; None: now), ending the one playing; None ends it and plays nothing. ``timing``:
        ``ramp_s``, ``hold_s``, ``recovery_s`` instead of the scenario's own."""
        player = (ScenarioPlayer(self, scenario, engine=engine, onset_s=onset_s, seed=self.seed, **timing)
                  if scenario is not None else None)
        with self._scenario_lock:
            if self.scenario is not None:
                self.scenario.stop()
            self.scenario = player
            if player is not None:
                player.apply()
        return player

    def set_fault(self, engine: int, fault: str | None) -> None:
        self.engines[engine].set_fault(fault)

    def restart_engine(self, engine: int, **config_changes: Any) -> None:
        """Restart one engine (counters reset), optionally with new arguments (``max_num_seqs=32``)."""
        self.engines[engine].restart(**config_changes)

    def kill_engine(self, engine: int) -> None:
        """Simulate a crashed engine: connection refused, queues lost, its GPU idles with memory freed."""
        self.engines[engine].kill()

    def revive_engine(self, engine: int, **config_changes: Any) -> None:
        """Start a killed engine again (fresh counters), optionally with new arguments."""
        self.engines[engine].revive(**config_changes)

    def set_load(self, mode: str) -> None:
        for e in self.engines:
            e.lock.acquire()
        try:
            self.load.set_mode(mode)
        finally:
            for e in self.engines:
                e.lock.release()

    def __repr__(self) -> str:
        return f"SimCluster(n_engines={self.n_engines}, seed={self.seed}, load={self.load.mode!r})"
