"""The emulator's HTTP/1.1 server on loopback: one thread a connection, TCP_NODELAY,
JSON or text answers, chunked streams for watches, and every request logged and
authenticated before :class:`~.routing.Dispatch` routes it. An emulator bug answers
500 and is kept in ``KubeEmulator.errors`` for the tests."""

from __future__ import annotations

import json
import socket
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from .errors import ApiError
from .routing import Dispatch, PlainText

if TYPE_CHECKING:
    from .server import KubeEmulator


class Request(NamedTuple):
    """One logged API request; ``query`` maps each parameter to its first value."""

    method: str
    path: str
    query: dict
    content_type: str


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, emu: "KubeEmulator"):
        self.emu = emu
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, Handler)

    def finish_request(self, request, client_address):
        with self.connections_lock:
            self.connections.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with self.connections_lock:
                self.connections.discard(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator/1.33"
    sys_version = ""
    server: EmulatorHTTPServer

    def setup(self):
        super().setup()
        # headers and body go out in separate writes: without TCP_NODELAY,
        # Nagle + delayed ACKs cost ~40 ms per request
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        emu = self.server.emu
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        emu._log_request(Request(method, url.path, query, ctype))
        try:
            emu._authenticate(self.headers.get("Authorization"))
            result = Dispatch(emu, self, method, url.path, query, ctype, raw).run()
        except ApiError as exc:
            self.send_json(exc.code, exc.status(), exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the emulator: answer 500 and keep it for the tests
            emu.errors.append(traceback.format_exc())
            err = ApiError(500, "InternalError", f"emulator error: {exc!r}")
            self.send_json(500, err.status())
        else:
            if result is not None:
                self.send_json(*result)

    def send_json(self, code: int, body: Any, headers: dict | None = None) -> None:
        if isinstance(body, PlainText):
            data, ctype = body.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(body, separators=(",", ":")).encode(), "application/json"
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-cache, private")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # chunked streaming for watches
    def start_stream(self, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def write_chunk(self, data: bytes) -> bool:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
            return False

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
