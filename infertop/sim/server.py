"""HTTP face of the simulator: vLLM's OpenAI-compatible server and dcgm-exporter.

One stdlib ``ThreadingHTTPServer`` per simulated engine, on 127.0.0.1:

=========================  ====================================================
``GET /health``            200, empty body
``GET /version``           ``{"version": "0.32.0"}``
``GET /v1/models``         OpenAI model list with ``max_model_len``
``GET /metrics``           vLLM 0.32 exposition (``text/plain; version=0.0.4``)
``GET /metrics/``          the same; ``?name[]=N&name[]=…`` keeps only the samples named N…
``GET /dcgm/metrics``      this engine's GPU in dcgm-exporter format
``POST /v1/completions``   OpenAI completions, plain or ``"stream": true`` (SSE)
``POST /v1/chat/completions``  chat completions, plain or streamed
=========================  ====================================================

Requests go into the engine model and are answered as the model produces
tokens (streamed chunks arrive as the driver advances the virtual clock).

Fault injection (:meth:`SimEngine.set_fault`, at run time):

* ``"garbage"``: ``/metrics`` answers 200 with bytes that are not an exposition
* ``"http500"``: every endpoint answers 500
* ``"hang"``: requests are accepted and read, then never answered until the
  fault is cleared or the server stops (the connection is then closed)
* ``"huge"``: ``/metrics`` answers a 50 MB body
* ``"huge_labels"``: ``/metrics`` carries one extra sample with 10,000 labels
* ``"down"``: the listening socket is closed (connection refused); clearing
  the fault listens again on the same port
"""

from __future__ import annotations

import threading
import time

from . import dcgm as _dcgm
from .dcgm import SimGpu, render_dcgm
from .exposition import query_names, restrict
from .faults import _GARBAGE, FAULTS, HUGE_BODY_BYTES, HUGE_LABEL_COUNT, _huge_body, _huge_labels_text
from .http_base import _Handler, _Listener
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import HttpStats, render_metrics
from .model import EngineModel, SimRequest
from .openai_api import _OpenAIHandler, approx_tokens
from .requests import FINISHED

# HTTP plumbing (http_base), the completions endpoints (openai_api) and the
# fault bodies (faults) live in sibling modules; their public names are
# re-exported here.
__all__ = ["SimEngine", "DcgmServer", "FleetServer", "FAULTS", "VLLM_VERSION", "approx_tokens", "HUGE_BODY_BYTES",
           "HUGE_LABEL_COUNT"]

VLLM_VERSION = "0.32.0"


# ---------------------------------------------------------------------------
# vLLM engine server


class _EngineHandler(_OpenAIHandler):
    def _sim(self) -> SimEngine:
        sim = self.server.sim
        assert isinstance(sim, SimEngine)  # an engine's listener serves its SimEngine
        return sim

    def _fault_gate(self) -> bool:
        """Apply the request-wide faults; True if the request was handled."""
        sim = self._sim()
        fault = sim.fault
        if fault == "hang":
            release = sim._hang_release
            while not release.wait(0.1):
                if sim._listener.stopping.is_set():
                    break
            self.close_connection = True
            return True
        if fault == "http500":
            self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802
        sim = self._sim()
        path = self.path.split("?", 1)[0]
        if self._fault_gate():
            return
        self._stat = (path, "GET", time.monotonic(), 0)
        if path == "/health":
            self._send(200, b"")
        elif path == "/version":
            self._send_json(200, {"version": VLLM_VERSION})
        elif path == "/v1/models":
            self._send_json(200, sim.models_payload())
        elif path in ("/metrics", "/metrics/"):  # as vLLM: only prometheus_client's app at /metrics/ filters
            fault = sim.fault
            if fault == "garbage":
                self._send(200, _GARBAGE, METRICS_CONTENT_TYPE)
            elif fault == "huge":
                self._send_huge(sim)
            else:
                text = sim.render_metrics()
                names = query_names(self.path) if path == "/metrics/" else None
                if names is not None:
                    text = restrict(text, names)
                if fault == "huge_labels":  # a hostile exporter honours no filter
                    text += _huge_labels_text()
                self._send(200, text.encode(), METRICS_CONTENT_TYPE)
        elif path == "/dcgm/metrics":
            self._send(200, sim.render_dcgm().encode(), _dcgm.CONTENT_TYPE)
        else:
            self._send_json(404, {"detail": "Not Found"})

    def _send_huge(self, sim: SimEngine) -> int:
        body = _huge_body(sim.render_metrics())
        self._record(200, len(body))
        self.send_response(200)
        self.send_header("Content-Type", METRICS_CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        view = memoryview(body)
        step = 1 << 20
        for i in range(0, len(body), step):
            if sim._listener.stopping.is_set():
                self.close_connection = True
                break
            self.wfile.write(view[i:i + step])
        return len(body)

    def do_POST(self) -> None:  # noqa: N802
        sim = self._sim()
        path = self.path.split("?", 1)[0]
        raw = self._read_body()
        if self._fault_gate():
            return
        self._stat = (path, "POST", time.monotonic(), len(raw))
        if path in ("/v1/completions", "/v1/chat/completions"):
            self._completion(sim, raw, chat=path.endswith("/chat/completions"))
        else:
            self._send_json(404, {"detail": "Not Found"})
        self._stat = None  # a request dropped without an answer is not counted

    do_HEAD = do_GET  # noqa: N815


class SimEngine:
    """One simulated vLLM server process: engine model + GPU + HTTP server.

    Thread-safe: every access to the model goes through ``self.lock``.
    """

    def __init__(self, core: EngineModel, gpu: SimGpu, *, index: int = 0, host: str = "127.0.0.1", port: int = 0,
                 hostname_label: str = "Hostname",
                 http_metrics: bool = True, process_metrics: bool = True) -> None:
        self.index = index
        self.core = core
        self.gpu = gpu
        self.lock = threading.RLock()
        self.http_stats = HttpStats()
        self.http_metrics = http_metrics
        self.process_metrics = process_metrics
        self.hostname_label = hostname_label
        self._fault: str | None = None
        self._fault_lock = threading.Lock()
        self._hang_release = threading.Event()
        self._listener = _Listener(_EngineHandler, host, port, self)
        self.host = host
        self.model_created = int(time.time())
        #: False after :meth:`kill` (process gone) until :meth:`revive`.
        self.alive = True
        #: True while the engine core is hung (:meth:`hang_core`): it answers HTTP, nothing moves.
        self.stalled = False
        self._held: list[SimRequest] = []  # requests handed in while hung: they never reach the core
        #: Served by a :class:`FleetServer` under this URL (no port of its own) when set.
        self.shared_url: str | None = None
        #: A rendered ``/metrics`` is reused for this many seconds (0: rendered on every request):
        #: 500 engines scraped by Prometheus then cost one render per engine per interval.
        self.metrics_cache_s = 0.0
        self._cached: tuple[float, str] | None = None

    # properties used by the CLI, the demo and tests
    @property
    def port(self) -> int:
        return self._listener.port

    @property
    def url(self) -> str:
        if self.shared_url is not None:
            return self.shared_url
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    @property
    def dcgm_url(self) -> str:
        return self.url + "/dcgm/metrics"

    @property
    def model(self) -> str:
        """Served model name."""
        return self.core.config.model_name

    @property
    def max_num_seqs(self) -> int:
        return self.core.config.max_num_seqs

    @property
    def fault(self) -> str | None:
        return self._fault

    @property
    def running(self) -> bool:
        return self._listener.listening

    # lifecycle
    def start(self) -> SimEngine:
        self._listener.stopping.clear()
        if self._fault != "down" and self.shared_url is None:
            self._listener.open()
        return self

    def stop(self) -> None:
        self._listener.stopping.set()
        self._hang_release.set()
        self._listener.close()

    def set_fault(self, fault: str | None) -> None:
        """Inject a fault (see module docstring); None clears it."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")
        with self._fault_lock:
            old, self._fault = self._fault, fault
            if old == "hang" and fault != "hang":
                self._hang_release.set()
            if fault == "hang" and old != "hang":
                self._hang_release = threading.Event()
            if self.shared_url is not None:
                return  # a FleetServer answers 503 for a "down" engine (its port stays open for the others)
            if fault == "down" and old != "down":
                self._listener.close()
            elif old == "down" and fault != "down" and not self._listener.stopping.is_set():
                self._listener.open()

    # model access
    def submit(self, req: SimRequest) -> bool:
        """Hand a request to the engine: with no ``arrival_t`` it arrives at the engine's present
        (``core.now``), so it is counted as waiting at once and its TTFT is queue + prefill; a time
        ahead of the engine's clock would leave it in neither gauge until the driver's next tick."""
        with self.lock:
            if self.stalled:  # the API server took it; the stuck core never sees it (no gauge moves)
                self._held.append(req)
                return True
            return self.core.submit(req)

    def abort(self, req: SimRequest) -> bool:
        with self.lock:
            if req in self._held:
                self._held.remove(req)
                _finish_unseen(req)
                return True
            return self.core.abort(req)

    def advance(self, dt: float) -> None:
        """Step the model ``dt`` virtual seconds and let the GPU follow (caller holds no lock)."""
        with self.lock:
            self.advance_locked(dt)

    def advance_locked(self, dt: float) -> None:
        core = self.core
        if self.stalled:
            core.stall(dt)
        else:
            core.step(dt)
        busy, tokens, _ = core.take_activity()
        gpu = self.gpu
        gpu.sleep_level = core.sleep_level
        gpu.advance(dt, busy, tokens)
        core.speed = gpu.speed

    def restart(self, **config_changes) -> None:
        """Restart the engine process (counters reset, queues dropped), optionally with new arguments."""
        with self.lock:
            self.core.restart(**config_changes)
            self.http_stats = HttpStats()
            self.model_created = int(time.time())

    def hang_core(self) -> None:
        """The engine core hangs: ``/metrics`` and ``/health`` still answer, no token is produced, the
        running and waiting requests stay as they are, new ones are taken and never scheduled."""
        with self.lock:
            self.stalled = True

    def unhang_core(self, restart: bool = True) -> None:
        """End a hang: by a restart (what an operator does: counters reset, in-flight requests cut),
        or, ``restart=False``, by the core moving again (the held requests then reach it)."""
        with self.lock:
            self.stalled = False
            held, self._held = self._held, []
            if restart:
                self.core.restart()
                self.http_stats = HttpStats()
                self.model_created = int(time.time())
                for req in held:
                    _finish_unseen(req)
            else:
                for req in held:
                    self.core.submit(req)

    def kill(self) -> None:
        """The engine process dies: connections refused, in-flight requests lost, GPU memory freed."""
        with self.lock:
            self.alive = False
            self.stalled = False
            held, self._held = self._held, []
            self.core.restart()
            self.gpu.engine_loaded = False
        for req in held:
            _finish_unseen(req)
        self.set_fault("down")

    def revive(self, **config_changes) -> None:
        """Start the engine process again (fresh counters), optionally with new arguments."""
        with self.lock:
            self.core.restart(**config_changes)
            self.gpu.engine_loaded = True
            self.http_stats = HttpStats()
            self.model_created = int(time.time())
            self.alive = True
        self.set_fault(None)

    def render_metrics(self) -> str:
        cache_s = self.metrics_cache_s
        if cache_s > 0:
            got = self._cached
            now = time.monotonic()
            if got is not None and now - got[0] < cache_s:
                return got[1]
        with self.lock:
            text = render_metrics(self.core, http_stats=self.http_stats if self.http_metrics else None,
                                  process_metrics=self.process_metrics)
        if cache_s > 0:
            self._cached = (time.monotonic(), text)
        return text

    def render_dcgm(self) -> str:
        with self.lock:
            return render_dcgm([self.gpu], hostname_label=self.hostname_label)

    def models_payload(self) -> dict:
        cfg = self.core.config
        return {"object": "list", "data": [{
            "id": cfg.model_name, "object": "model", "created": self.model_created, "owned_by": "vllm",
            "root": cfg.model_name, "parent": None, "max_model_len": cfg.max_model_len,
            "permission": [{
                "id": f"modelperm-{self.index:04d}{self.port:06d}", "object": "model_permission",
                "created": self.model_created, "allow_create_engine": False, "allow_sampling": True,
                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}],
        }]}

    def __repr__(self) -> str:
        return f"SimEngine({self.index}, {self.model!r}, url={self.url!r}, fault={self._fault!r})"


def _finish_unseen(req: SimRequest) -> None:
    """A request the engine core never saw ends as vLLM's API server ends it: aborted, nothing counted."""
    req.state = FINISHED
    req.finished_reason = "abort"
    if req.on_finish is not None:
        req.on_finish(req)


# ---------------------------------------------------------------------------
# Combined dcgm-exporter for all GPUs


class _DcgmHandler(_Handler):
    def do_GET(self) -> None:  # noqa: N802
        srv = self.server.sim
        assert isinstance(srv, DcgmServer)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, srv.render().encode(), _dcgm.CONTENT_TYPE)
        elif path == "/health":
            self._send(200, b"OK", "text/plain; charset=utf-8")
        else:
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET  # noqa: N815


class DcgmServer:
    """One node's dcgm-exporter: ``GET /metrics`` for every GPU in ``engines``."""

    def __init__(self, engines: list[SimEngine], *, host: str = "127.0.0.1", port: int = 0,
                 hostname_label: str = "Hostname") -> None:
        self.engines = engines
        self.hostname_label = hostname_label
        self.host = host
        self._listener = _Listener(_DcgmHandler, host, port, self)

    @property
    def port(self) -> int:
        return self._listener.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def render(self) -> str:
        gpus = []
        for e in self.engines:
            with e.lock:
                gpus.append(e.gpu)
            # values are read inside render_dcgm; a torn read of floats is harmless
        return render_dcgm(gpus, hostname_label=self.hostname_label)

    def start(self) -> DcgmServer:
        self._listener.stopping.clear()
        self._listener.open()
        return self

    def stop(self) -> None:
        self._listener.stopping.set()
        self._listener.close()


# ---------------------------------------------------------------------------
# Many engines behind one port (for a Prometheus scraping hundreds of them)


class _FleetHandler(_EngineHandler):
    """``/engine/<i>/…`` is engine *i*'s whole API (``/engine/3/metrics``, ``/engine/3/v1/completions``);
    ``/dcgm/metrics`` is every GPU."""

    _engine: SimEngine | None = None

    def _sim(self) -> SimEngine:
        assert self._engine is not None
        return self._engine

    def _route(self) -> bool:
        """Pick the engine and strip its prefix; False when the request was answered here."""
        fleet = self.server.sim
        assert isinstance(fleet, FleetServer)
        path = self.path
        if path.split("?", 1)[0] == "/dcgm/metrics":
            self._send(200, fleet.render_dcgm().encode(), _dcgm.CONTENT_TYPE)
            return False
        parts = path.split("/", 3)  # "", "engine", "<i>", rest
        engine = None
        if len(parts) >= 3 and parts[1] == "engine" and parts[2].isdigit():
            i = int(parts[2])
            engine = fleet.engines[i] if i < len(fleet.engines) else None
        if engine is None:
            self._send_json(404, {"detail": "Not Found"})
            return False
        if engine.fault == "down":  # its process is gone: Prometheus records up == 0
            self._send(503, b"engine down", "text/plain; charset=utf-8")
            return False
        self._engine = engine
        self.path = "/" + (parts[3] if len(parts) > 3 else "")
        return True

    def do_GET(self) -> None:  # noqa: N802
        if self._route():
            super().do_GET()

    def do_POST(self) -> None:  # noqa: N802
        if self._route():
            super().do_POST()

    do_HEAD = do_GET  # noqa: N815


class FleetServer:
    """Every engine of a fleet on ONE port, by path: engine *i* is ``http://HOST:PORT/engine/i``.

    Prometheus scrapes each as its own target (``__metrics_path__`` =
    ``/engine/i/metrics``, see :meth:`file_sd`); each engine's ``/metrics``
    is rendered at most once per ``cache_s``.
    """

    def __init__(self, engines: list[SimEngine], *, host: str = "127.0.0.1", port: int = 0, cache_s: float = 1.0,
                 hostname_label: str = "Hostname") -> None:
        self.engines = engines
        self.host = host
        self.hostname_label = hostname_label
        self.cache_s = cache_s
        self._listener = _Listener(_FleetHandler, host, port, self)

    @property
    def port(self) -> int:
        return self._listener.port

    def engine_url(self, i: int) -> str:
        return f"http://{self.host}:{self.port}/engine/{i}"

    @property
    def dcgm_url(self) -> str:
        return f"http://{self.host}:{self.port}/dcgm/metrics"

    def render_dcgm(self) -> str:
        return render_dcgm([e.gpu for e in self.engines], hostname_label=self.hostname_label)

    def start(self) -> FleetServer:
        self._listener.stopping.clear()
        self._listener.open()
        for i, e in enumerate(self.engines):
            e.shared_url = self.engine_url(i)
            e.metrics_cache_s = self.cache_s
        return self

    def stop(self) -> None:
        self._listener.stopping.set()
        self._listener.close()

    def file_sd(self, namespace: str = "inference") -> list[dict]:
        """Prometheus ``file_sd_configs`` target groups: one per engine, with the labels a
        Kubernetes service discovery would give (``instance`` = the engine's base URL, pod, namespace)."""
        groups = []
        addr = f"{self.host}:{self.port}"
        for i, e in enumerate(self.engines):
            labels = {"__metrics_path__": f"/engine/{i}/metrics", "instance": f"{addr}/engine/{i}",
                      "namespace": e.gpu.namespace or namespace,
                      "pod": e.gpu.pod or f"vllm-{i}"}
            groups.append({"targets": [addr], "labels": labels})
        return groups
