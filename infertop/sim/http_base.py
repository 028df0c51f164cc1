"""HTTP plumbing shared by the simulated engine and dcgm-exporter servers.

A stdlib ``ThreadingHTTPServer`` that tracks its connections (so a stop can
drop them), a :class:`_Listener` owning one port (start, stop, close/reopen
for the "down" fault) and a :class:`_Handler` base with send helpers and
HttpStats recording.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__: list[str] = []


class _QuietServer(ThreadingHTTPServer):
    #: What the handlers serve (a SimEngine, DcgmServer or FleetServer): the listener's owner.
    sim: object = None
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
            assert last is not None  # each failed try kept its error
            raise last
        srv.sim = self.owner
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
    server: _QuietServer  # the stdlib types it BaseServer; ours always is a _QuietServer

    def setup(self) -> None:
        super().setup()
        # like uvicorn's: headers and each chunk go out in separate writes; with Nagle's algorithm a
        # chunk would wait for the ACK of the headers, which the client delays ~40 ms
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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
