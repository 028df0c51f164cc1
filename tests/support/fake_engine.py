"""A fake vLLM OpenAI api_server for engine-control tests.

Accepts the command line of ``python -m vllm.entrypoints.openai.api_server``
(``--model``, ``--port``, ``--max-num-seqs``, ... ; unknown flags are
ignored), prints vLLM-looking log lines, and serves ``/health``,
``/metrics`` (vLLM V1 gauge and counter names), ``/v1/models`` and
``/version`` over stdlib HTTP.  Run it as a script
(``python tests/support/fake_engine.py --port 8123``) or as a module
(``python -m fake_engine`` with ``tests`` on PYTHONPATH).

Behaviour, from environment variables (or the same-named ``--fake-*``
flags, e.g. ``--fake-start-delay 3``):

``FAKE_ENGINE_START_DELAY=S``   log "loading" lines for S seconds before
                                binding the port (slow start).
``FAKE_ENGINE_CRASH=1``         print a CUDA out-of-memory traceback and
                                exit 1 during start.
``FAKE_ENGINE_OOM_ABOVE=N``     the same crash, only when --max-num-seqs > N.
``FAKE_ENGINE_IGNORE_TERM=1``   ignore SIGTERM (only SIGKILL ends it); its
                                child (see below) ignores it too.
``FAKE_ENGINE_DRAIN_S=S``       on SIGTERM keep serving for S seconds while
                                "in-flight" requests finish, then exit 0.
``FAKE_ENGINE_RUNNING=N``       vllm:num_requests_running (default 0).
``FAKE_ENGINE_WAITING=N``       vllm:num_requests_waiting (default 0).
``FAKE_ENGINE_ABORTED_ON_TERM=N`` once SIGTERM arrives, N requests finished
                                with reason abort (request_success_total).
``FAKE_ENGINE_HANG_AFTER_STOP=1`` on SIGTERM log vLLM's "engine client stopped"
                                line, then never exit (like vLLM 0.32's HTTP
                                server waiting for clients' connections).
``FAKE_ENGINE_SNAPSHOT=SRC>DST`` append a copy of file SRC to DST (after a
                                ``== start`` / ``== SIGTERM`` line) when it
                                starts and when SIGTERM arrives: what an audit
                                log held at those moments.
``FAKE_ENGINE_TOKEN_S=S``       POST /v1/completions streams ``max_tokens``
                                (≤ 200) tokens, one every S seconds (default
                                0.02); requests beyond --max-num-seqs wait.
                                Like vLLM 0.32, once SIGTERM arrives new
                                requests get HTTP 500 while the accepted ones
                                finish (count in ``vllm:num_requests_running``).
``FAKE_ENGINE_KV=F``            vllm:kv_cache_usage_perc is F (0..1) instead of
                                running / max_num_seqs (a full batch with KV
                                headroom: out of capacity, not KV-bound).
``FAKE_ENGINE_STUCK=1``         the configured running/waiting requests never finish
                                during a drain: the drain runs out with them in
                                flight (vLLM then aborts them as it exits).
``FAKE_ENGINE_CHILD=1``         start a child process in the same process
                                group (like vLLM's EngineCore) that lives
                                until the server exits or is killed;
                                ``=2``: it outlives the server (an orphan).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAKE_OPTIONS = {
    "start_delay": ("FAKE_ENGINE_START_DELAY", float, 0.0),
    "crash": ("FAKE_ENGINE_CRASH", int, 0),
    "oom_above": ("FAKE_ENGINE_OOM_ABOVE", int, 0),
    "ignore_term": ("FAKE_ENGINE_IGNORE_TERM", int, 0),
    "drain_s": ("FAKE_ENGINE_DRAIN_S", float, 0.0),
    "running": ("FAKE_ENGINE_RUNNING", int, 0),
    "waiting": ("FAKE_ENGINE_WAITING", int, 0),
    "child": ("FAKE_ENGINE_CHILD", int, 0),
    "hang_after_stop": ("FAKE_ENGINE_HANG_AFTER_STOP", int, 0),
    "snapshot": ("FAKE_ENGINE_SNAPSHOT", str, ""),
    "token_s": ("FAKE_ENGINE_TOKEN_S", float, 0.02),
    "aborted_on_term": ("FAKE_ENGINE_ABORTED_ON_TERM", int, 0),
    "kv": ("FAKE_ENGINE_KV", float, -1.0),
    "stuck": ("FAKE_ENGINE_STUCK", int, 0),
}


def log(msg: str, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"(APIServer pid={os.getpid()}) {level} {stamp} [fake_engine.py] {msg}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_engine")
    p.add_argument("--model", default="fake-model")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--shutdown-timeout", type=int, default=0)
    for key, (env, typ, default) in FAKE_OPTIONS.items():
        p.add_argument("--fake-" + key.replace("_", "-"), dest=key, type=typ,
                       default=typ(os.environ.get(env, default)))
    args, unknown = p.parse_known_args(argv)
    args.unknown = unknown
    return args


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name = args.served_model_name or args.model
        self.running = args.running
        self.waiting = args.waiting
        self.draining_since: float | None = None
        self.generation_tokens = 0
        self.lock = threading.Lock()
        self.serving = 0  # completions in flight (real requests)
        self.slots = threading.BoundedSemaphore(max(1, args.max_num_seqs))

    def in_flight_now(self) -> tuple[int, int]:
        """Running and waiting (configured + real requests); during a drain the configured ones fall
        linearly to 0."""
        with self.lock:
            real = self.serving
            running, waiting = self.running, self.waiting
            if self.draining_since is not None and self.args.drain_s > 0 and not self.args.stuck:
                left = max(0.0, 1 - (time.monotonic() - self.draining_since) / self.args.drain_s)
                running, waiting = round(running * left), round(waiting * left)
        seqs = max(1, self.args.max_num_seqs)
        return running + min(real, seqs), waiting + max(0, real - seqs)

    def kv_fraction(self, running: int) -> float:
        if self.args.kv >= 0:
            return min(1.0, self.args.kv)
        return min(1.0, running / max(1, self.args.max_num_seqs))

    def metrics(self) -> str:
        running, waiting = self.in_flight_now()
        self.generation_tokens += 7 * running
        lab = f'engine="0",model_name="{self.name}"'
        return "\n".join([
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {float(running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {float(waiting)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lab}}} {self.kv_fraction(running):.3f}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{lab},finished_reason="abort"}} '
            f"{float(self.args.aborted_on_term if self.draining_since is not None else 0)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(self.generation_tokens)}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} 0.0",
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="16",enable_prefix_caching="False",{lab},'
            f'num_gpu_blocks="512"}} 1.0',
            "",
        ])


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # noqa: D401 — quiet access log
            pass

        def _send(self, code: int, body: str, ctype: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            if self.path == "/health":
                self._send(200, "")
            elif self.path == "/metrics":
                self._send(200, state.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models":
                body = {"object": "list", "data": [{"id": state.name, "object": "model",
                                                     "max_model_len": state.args.max_model_len}]}
                self._send(200, json.dumps(body), "application/json")
            elif self.path == "/version":
                self._send(200, json.dumps({"version": "0.0.0-fake"}), "application/json")
            else:
                self._send(404, "not found")

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, json.dumps({"error": {"message": "bad JSON"}}), "application/json")
                return
            if self.path != "/v1/completions":
                self._send(404, "not found")
                return
            if state.draining_since is not None:  # vLLM 0.32 after SIGTERM
                self._send(500, json.dumps({"error": {"message": "cannot schedule new futures after shutdown",
                                                      "type": "InternalServerError", "code": 500}}),
                           "application/json")
                return
            with state.lock:
                state.serving += 1
            try:
                self._complete(body)
            finally:
                with state.lock:
                    state.serving -= 1

        def _complete(self, body: dict) -> None:
            n = max(1, min(200, int(body.get("max_tokens") or 16)))
            with state.slots:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for i in range(n):
                    time.sleep(state.args.token_s)
                    chunk = {"id": "cmpl-fake", "object": "text_completion", "model": state.name,
                             "choices": [{"index": 0, "text": " x", "finish_reason": "length" if i == n - 1 else None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

    return Handler


def snapshot(spec: str, event: str) -> None:
    if not spec or ">" not in spec:
        return
    src, dst = spec.split(">", 1)
    try:
        with open(src, encoding="utf-8") as f:
            data = f.read()
    except OSError:
        data = ""
    with open(dst, "a", encoding="utf-8") as f:
        f.write(f"== {event}\n{data}")


def crash_oom() -> int:
    log("Loading weights took 0.01 seconds")
    print("Traceback (most recent call last):", flush=True)
    print('  File "vllm/v1/worker/gpu_worker.py", line 231, in determine_available_memory', flush=True)
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
          "GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.", flush=True)
    return 1


def child_main(ignore_term: bool, orphan: bool) -> int:
    """The stand-in for EngineCore: lives until killed or its parent dies (orphan: 60 s)."""
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    deadline = time.monotonic() + 60
    while (orphan or os.getppid() == parent) and time.monotonic() < deadline:
        time.sleep(0.1)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--fake-child-process"]:
        return child_main(argv[1:2] == ["1"], argv[2:3] == ["orphan"])
    args = parse_args(argv)
    log(f"vLLM API server version 0.0.0-fake; args: {' '.join(argv)}")
    snapshot(args.snapshot, "start")
    log(f"non-default args: max_num_seqs={args.max_num_seqs} model={args.model!r}")
    if args.crash or (args.oom_above and args.max_num_seqs > args.oom_above):
        time.sleep(0.2)
        return crash_oom()

    stop = threading.Event()
    state = State(args)

    def on_term(signum, frame):
        snapshot(args.snapshot, "SIGTERM")
        if args.ignore_term:
            log("SIGTERM received: ignoring it", "WARNING")
            return
        if args.hang_after_stop:
            log("[shutdown] API server: engine client stopped")
            log("[shutdown] API server: shutting down FastAPI HTTP server")
            return
        if args.drain_s > 0:
            log(f"[shutdown] API server: stopping engine client mode=drain timeout={args.drain_s:g}s")
            with state.lock:
                state.draining_since = time.monotonic()
            threading.Timer(args.drain_s, stop.set).start()
        else:
            log("[shutdown] API server: shutdown triggered")
            stop.set()

    signal.signal(signal.SIGTERM, on_term)
    if args.ignore_term:
        log("SIGTERM will be ignored", "WARNING")

    child = None
    if args.child:
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--fake-child-process",
             "1" if args.ignore_term else "0", "orphan" if args.child == 2 else "-"]
        )
        log(f"started EngineCore stand-in pid={child.pid}")

    deadline = time.monotonic() + args.start_delay
    step = 0
    while time.monotonic() < deadline and not stop.is_set():
        step += 1
        log(f"Loading model weights ... step {step}")
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
    if stop.is_set():
        return 0

    try:
        server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    except OSError as e:
        log(f"OSError: [Errno {e.errno}] {e.strerror}", "ERROR")
        return 1
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    log(f"Starting vLLM API server 0 on http://{args.host}:{args.port}")
    log("Application startup complete.")
    while not stop.wait(0.2):
        pass
    server.shutdown()
    log("[shutdown] API server: engine client stopped")
    if child is not None:
        child.terminate()
        child.wait(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
