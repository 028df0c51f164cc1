"""HTTP face of the simulator: vLLM's OpenAI-compatible server and dcgm-exporter.

One stdlib ``ThreadingHTTPServer`` per simulated engine, on 127.0.0.1:

=========================  ====================================================
``GET /health``            200, empty body
``GET /version``           ``{"version": "0.32.0"}``
``GET /v1/models``         OpenAI model list with ``max_model_len``
``GET /metrics``           vLLM 0.32 exposition (``text/plain; version=0.0.4``)
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

import hashlib
import json
import queue
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from . import dcgm as _dcgm
from .dcgm import SimGpu, render_dcgm
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import HttpStats, render_metrics
from .model import EngineModel, SimRequest

__all__ = ["SimEngine", "DcgmServer", "FAULTS", "VLLM_VERSION", "approx_tokens"]

VLLM_VERSION = "0.32.0"
FAULTS = (None, "garbage", "http500", "hang", "huge", "huge_labels", "down")
HUGE_BODY_BYTES = 50 * 1024 * 1024
HUGE_LABEL_COUNT = 10_000

_WORDS = ("the", "model", "token", "cache", "batch", "queue", "latency", "engine", "GPU", "prefill", "decode",
          "request", "stream", "block", "kernel", "memory", "prompt", "answer", "fast", "and", "of", "to", "a",
          "is", "in", "that", "with", "for", "it", "as", "on", "by")


def approx_tokens(text: str) -> int:
    """Token count estimate: ~4 characters per token, at least 1."""
    return max(1, (len(text) + 3) // 4)


def _token_text(seed: int, i: int) -> str:
    return " " + _WORDS[(seed + i * 7919) % len(_WORDS)]


# ---------------------------------------------------------------------------
# Server plumbing shared by the engine and dcgm servers


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, addr, handler, owner: _Listener) -> None:
        self.owner = owner
        super().__init__(addr, handler)

    def process_request(self, request, client_address) -> None:
        t = threading.Thread(target=self._serve_one, args=(request, client_address), daemon=True,
                             name=f"sim-http-{self.server_address[1]}")
        with self.owner._conn_lock:
            self.owner._conns[request] = t
        t.start()

    def _serve_one(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            pass
        finally:
            with self.owner._conn_lock:
                self.owner._conns.pop(request, None)
            self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:  # pragma: no cover - keep stderr quiet
        pass


class _Listener:
    """Owns one listening port: start, stop, close/reopen (for the "down" fault)."""

    def __init__(self, handler_cls, host: str, port: int, owner) -> None:
        self._handler_cls = handler_cls
        self.host = host
        self.port = port
        self.owner = owner
        self._server: _QuietServer | None = None
        self._thread: threading.Thread | None = None
        self._conn_lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self.stopping = threading.Event()

    @property
    def listening(self) -> bool:
        return self._server is not None

    def open(self) -> None:
        if self._server is not None:
            return
        last: OSError | None = None
        for _ in range(50):
            try:
                srv = _QuietServer((self.host, self.port), self._handler_cls, self)
                break
            except OSError as e:  # port still in TIME_WAIT/bound elsewhere: retry briefly
                last = e
                if self.port == 0:
                    raise
                time.sleep(0.02)
        else:
            raise last  # type: ignore[misc]
        srv.sim = self.owner  # type: ignore[attr-defined]
        self.port = srv.server_address[1]
        self._server = srv
        self._thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                                        name=f"sim-listen-{self.port}")
        self._thread.start()

    def close(self, join_s: float = 3.0) -> None:
        """Stop listening and drop every open connection."""
        srv, self._server = self._server, None
        if srv is not None:
            srv.shutdown()
            srv.server_close()
        if self._thread is not None:
            self._thread.join(join_s)
            self._thread = None
        with self._conn_lock:
            conns = list(self._conns.items())
        for sock, _ in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + join_s
        for _, t in conns:
            t.join(max(0.0, deadline - time.monotonic()))

    @property
    def threads(self) -> list[threading.Thread]:
        with self._conn_lock:
            return list(self._conns.values())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    timeout = 120  # idle keep-alive connections

    def log_message(self, format, *args) -> None:  # noqa: A002 - stdlib signature
        pass

    def version_string(self) -> str:
        return self.server_version

    # helpers --------------------------------------------------------------

    def _read_body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    #: (handler label, method, start, request bytes) of the request being answered, for HttpStats.
    _stat: tuple | None = None

    def _record(self, status: int, size: int) -> None:
        """Record the request in the engine's HttpStats (before the body goes out, so a client
        that has its answer also sees it counted)."""
        stat, self._stat = self._stat, None
        if stat is None:
            return
        handler, method, t0, req_bytes = stat
        sim = getattr(self.server, "sim", None)
        stats = getattr(sim, "http_stats", None)
        if stats is not None:
            stats.record(handler if status != 404 else "none", method, status, time.monotonic() - t0, req_bytes,
                         size)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> int:
        self._record(status, len(body))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return len(body)

    def _send_json(self, status: int, obj) -> int:
        return self._send(status, json.dumps(obj, separators=(",", ":")).encode())


# ---------------------------------------------------------------------------
# vLLM engine server


class _EngineHandler(_Handler):
    def _sim(self) -> SimEngine:
        return self.server.sim  # type: ignore[attr-defined]

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
        elif path == "/metrics":
            fault = sim.fault
            if fault == "garbage":
                self._send(200, _GARBAGE, METRICS_CONTENT_TYPE)
            elif fault == "huge":
                self._send_huge(sim)
            else:
                text = sim.render_metrics()
                if fault == "huge_labels":
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

    # completions -----------------------------------------------------------

    def _error(self, status: int, message: str, typ: str = "BadRequestError", param: str | None = None) -> tuple:
        return status, self._send_json(status, {"error": {"message": message, "type": typ, "param": param,
                                                          "code": status}})

    def _completion(self, sim: SimEngine, raw: bytes, chat: bool) -> tuple[int, int]:
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            return self._error(400, f"Invalid JSON body: {e}")
        core = sim.core
        cfg = core.config
        model = body.get("model")
        if model is not None and model != cfg.model_name:
            return self._error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        try:
            if chat:
                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    return self._error(400, "messages must be a non-empty list", param="messages")
                texts = [_content_text(m.get("content")) if isinstance(m, dict) else "" for m in msgs]
                prompt_tokens = sum(approx_tokens(t) + 4 for t in texts) + 3
                system = [t for m, t in zip(msgs, texts) if isinstance(m, dict) and m.get("role") == "system"]
                prefix_text = system[0] if system else (texts[0] if len(texts) > 1 else "")
                prefix_tokens = approx_tokens(prefix_text) + 4 if prefix_text else 0
                key_text = "\x00".join(texts)
            else:
                prompt = body.get("prompt", "")
                if isinstance(prompt, list):
                    if prompt and all(isinstance(x, int) for x in prompt):
                        prompt_tokens = len(prompt)
                        key_text = ",".join(map(str, prompt))
                    elif len(prompt) == 1 and isinstance(prompt[0], str):
                        prompt_tokens = approx_tokens(prompt[0])
                        key_text = prompt[0]
                    else:
                        return self._error(400, "the simulator accepts one prompt per request", param="prompt")
                elif isinstance(prompt, str):
                    prompt_tokens = approx_tokens(prompt)
                    key_text = prompt
                else:
                    return self._error(400, "prompt must be a string or a list of token ids", param="prompt")
                prefix_text = key_text
                prefix_tokens = prompt_tokens - 1
            n = int(body.get("n") or 1)
            priority = int(body.get("priority") or 0)
            max_tokens = body.get("max_completion_tokens") if chat else None
            if max_tokens is None:
                max_tokens = body.get("max_tokens")
            stream = bool(body.get("stream"))
            stream_opts = body.get("stream_options") or {}
            include_usage = bool(stream_opts.get("include_usage")) if isinstance(stream_opts, dict) else False
        except (TypeError, ValueError, AttributeError) as e:
            return self._error(400, f"Invalid request: {e}")
        if n != 1:
            return self._error(400, "the simulator supports n=1 only", param="n")
        seed = int.from_bytes(hashlib.blake2b(key_text.encode(), digest_size=4).digest(), "big")
        stop_at = None
        if max_tokens is None:
            if chat:
                max_tokens = cfg.max_model_len - prompt_tokens
                stop_at = 24 + seed % 160
            else:
                max_tokens = 16
        max_tokens = int(max_tokens)
        if max_tokens < 1:
            return self._error(400, "max_tokens must be at least 1", param="max_tokens")
        if prompt_tokens + max_tokens > cfg.max_model_len:
            return self._error(
                400,
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                f"completion). Please reduce the length of the messages or completion.",
                param="max_tokens")
        if priority != 0 and cfg.scheduling_policy != "priority":
            return self._error(400, f"Got priority {priority} != 0, but priority scheduling is not enabled.",
                               param="priority")
        prefix_id = None
        if prefix_tokens >= cfg.block_size:
            prefix_id = "h:" + hashlib.blake2b(prefix_text.encode(), digest_size=8).hexdigest()
        events: queue.SimpleQueue = queue.SimpleQueue()
        req = SimRequest(
            prompt_tokens, max_tokens, stop_at=stop_at, prefix_id=prefix_id, prefix_tokens=prefix_tokens,
            priority=priority,
            on_token=(lambda r, k, t: events.put(k)) if stream else None,
            on_finish=lambda r: events.put(None),
        )
        rid = ("chatcmpl-" if chat else "cmpl-") + hashlib.blake2b(
            f"{req.request_id}:{time.time_ns()}".encode(), digest_size=16).hexdigest()
        created = int(time.time())
        try:
            accepted = sim.submit(req)
        except ValueError as e:
            return self._error(400, str(e))
        if not accepted:
            return self._error(503, "The server is overloaded: the waiting queue is full.", "ServiceUnavailable")
        name = cfg.model_name
        if stream:
            return self._stream(sim, req, events, rid, created, name, chat, seed, include_usage)
        # non-streaming: wait for the end
        if not self._wait_finish(sim, req, events):
            return 0, 0
        if req.finished_reason == "abort":
            self.close_connection = True
            return 0, 0
        out = req.out
        text = "".join(_token_text(seed, i) for i in range(out))
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + out, "completion_tokens": out,
                 "prompt_tokens_details": None}
        if chat:
            payload = {
                "id": rid, "object": "chat.completion", "created": created, "model": name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text.lstrip(), "refusal": None,
                                                     "annotations": None, "audio": None, "function_call": None,
                                                     "tool_calls": [], "reasoning_content": None},
                             "logprobs": None, "finish_reason": req.finished_reason, "stop_reason": None}],
                "service_tier": None, "system_fingerprint": None, "usage": usage, "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        else:
            payload = {
                "id": rid, "object": "text_completion", "created": created, "model": name,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": req.finished_reason,
                             "stop_reason": None, "prompt_logprobs": None}],
                "usage": usage, "kv_transfer_params": None,
            }
        return 200, self._send_json(200, payload)

    def _wait_finish(self, sim: SimEngine, req: SimRequest, events: queue.SimpleQueue) -> bool:
        stopping = sim._listener.stopping
        while True:
            try:
                item = events.get(timeout=0.2)
            except queue.Empty:
                if stopping.is_set() or not sim._listener.listening:
                    sim.abort(req)
                    self.close_connection = True
                    return False
                continue
            if item is None:
                return True

    def _stream(self, sim, req, events, rid, created, name, chat, seed, include_usage) -> tuple[int, int]:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        size = 0
        obj_type = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choices, usage=None) -> bytes:
            d = {"id": rid, "object": obj_type, "created": created, "model": name, "choices": choices}
            if usage is not None:
                d["usage"] = usage
            data = b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n"
            return b"%x\r\n%s\r\n" % (len(data), data)

        def write(buf: bytes) -> None:
            nonlocal size
            self.wfile.write(buf)
            size += len(buf)

        stopping = sim._listener.stopping
        emitted = 0
        finished = False
        try:
            if chat:
                write(chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None}]))
            while not finished:
                try:
                    items = [events.get(timeout=0.2)]
                except queue.Empty:
                    if stopping.is_set() or not sim._listener.listening:
                        sim.abort(req)
                        self.close_connection = True
                        return 200, size
                    continue
                while True:  # drain what is there: one write per batch
                    try:
                        items.append(events.get_nowait())
                    except queue.Empty:
                        break
                if None in items:
                    finished = True
                buf = []
                upto = max([k for k in items if k is not None], default=emitted)
                while emitted < upto:
                    is_last = finished and emitted + 1 >= req.out
                    reason = req.finished_reason if is_last else None
                    txt = _token_text(seed, emitted)
                    if chat:
                        choice = {"index": 0, "delta": {"content": txt}, "logprobs": None, "finish_reason": reason}
                        if is_last:
                            choice["stop_reason"] = None
                    else:
                        choice = {"index": 0, "text": txt, "logprobs": None, "finish_reason": reason,
                                  "stop_reason": None}
                    buf.append(chunk([choice]))
                    emitted += 1
                if finished and req.finished_reason == "abort":
                    if buf:
                        write(b"".join(buf))
                    self.close_connection = True
                    return 200, size
                if buf:
                    write(b"".join(buf))
            out = req.out
            self._record(200, size)
            if include_usage:
                write(chunk([], {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + out,
                                 "completion_tokens": out}))
            write(b"%x\r\n%s\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n"))
            write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            sim.abort(req)
            self.close_connection = True
        return 200, size


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


_GARBAGE = (b"\x00\x01\x02\xff\xfe<html><head><title>502 Bad Gateway</title></head>\n"
            b"<body>\x89PNG\r\n\x1a\n{{{ this is not an exposition }}} \xde\xad\xbe\xef\n"
            b"vllm:num_requests_running{engine=\"0\" 1 2 3 four\n\xc3\x28\n")

_huge_cache: dict[str, bytes] = {}
_huge_lock = threading.Lock()


def _huge_body(head: str) -> bytes:
    """``head`` plus a valid padding family, to exactly HUGE_BODY_BYTES."""
    with _huge_lock:
        pad = _huge_cache.get("pad")
        if pad is None:
            line = b'sim_padding_bytes{chunk="%08d",filler="' + b"x" * 200 + b'"} 0.0\n'
            n = HUGE_BODY_BYTES // len(line % 0) + 1
            pad = b"# HELP sim_padding_bytes Padding (fault injection).\n# TYPE sim_padding_bytes gauge\n" + \
                b"".join(line % i for i in range(n))
            _huge_cache["pad"] = pad
    h = head.encode()
    return h + pad[: max(0, HUGE_BODY_BYTES - len(h))]


def _huge_labels_text() -> str:
    with _huge_lock:
        t = _huge_cache.get("labels")
        if t is None:
            labels = ",".join(f'label_{i:05d}="v{i}"' for i in range(HUGE_LABEL_COUNT))
            t = ("# HELP sim_huge_labels One sample with 10000 labels (fault injection).\n"
                 "# TYPE sim_huge_labels gauge\n"
                 f"sim_huge_labels{{{labels}}} 1.0\n")
            _huge_cache["labels"] = t  # type: ignore[assignment]
    return t  # type: ignore[return-value]


class SimEngine:
    """One simulated vLLM server process: engine model + GPU + HTTP server.

    Thread-safe: every access to the model goes through ``self.lock``.
    """

    def __init__(self, core: EngineModel, gpu: SimGpu, *, index: int = 0, host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], float] | None = None, hostname_label: str = "Hostname",
                 http_metrics: bool = True, process_metrics: bool = True) -> None:
        self.index = index
        self.core = core
        self.gpu = gpu
        self.lock = threading.RLock()
        self.http_stats = HttpStats()
        self.http_metrics = http_metrics
        self.process_metrics = process_metrics
        self.hostname_label = hostname_label
        self._clock = clock
        self._fault: str | None = None
        self._fault_lock = threading.Lock()
        self._hang_release = threading.Event()
        self._listener = _Listener(_EngineHandler, host, port, self)
        self.host = host
        self.model_created = int(time.time())
        #: False after :meth:`kill` (process gone) until :meth:`revive`.
        self.alive = True

    # properties used by the CLI, the demo and tests
    @property
    def port(self) -> int:
        return self._listener.port

    @property
    def url(self) -> str:
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
        if self._fault != "down":
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
            if fault == "down" and old != "down":
                self._listener.close()
            elif old == "down" and fault != "down" and not self._listener.stopping.is_set():
                self._listener.open()

    # model access
    def virtual_now(self) -> float:
        return self._clock() if self._clock is not None else self.core.now

    def submit(self, req: SimRequest) -> bool:
        with self.lock:
            if req.arrival_t is None:
                req.arrival_t = max(self.core.now, self.virtual_now())
            return self.core.submit(req)

    def abort(self, req: SimRequest) -> bool:
        with self.lock:
            return self.core.abort(req)

    def advance(self, dt: float) -> None:
        """Step the model ``dt`` virtual seconds and let the GPU follow (caller holds no lock)."""
        with self.lock:
            self.advance_locked(dt)

    def advance_locked(self, dt: float) -> None:
        core = self.core
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

    def kill(self) -> None:
        """The engine process dies: connections refused, in-flight requests lost, GPU memory freed."""
        with self.lock:
            self.alive = False
            self.core.restart()
            self.gpu.engine_loaded = False
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
        with self.lock:
            return render_metrics(self.core, http_stats=self.http_stats if self.http_metrics else None,
                                  process_metrics=self.process_metrics)

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


# ---------------------------------------------------------------------------
# Combined dcgm-exporter for all GPUs


class _DcgmHandler(_Handler):
    def do_GET(self) -> None:  # noqa: N802
        srv: DcgmServer = self.server.sim  # type: ignore[attr-defined]
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
