"""A tiny loopback HTTP server whose answers a test scripts, path by path.

It speaks real HTTP (stdlib ThreadingHTTPServer) so the collector is
exercised through httpx exactly as against a real engine.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass
class Stream:
    """A body sent with chunked transfer encoding, no Content-Length: ``chunks()``
    may be endless; ``delay_s`` between chunks (a slowloris drips one byte at a time)."""

    chunks: Callable[[], Iterable[bytes]]
    delay_s: float = 0.0


class ScriptedServer:
    """``routes[path] = (status, body)``; body may be bytes, str, a :class:`Stream`, or a
    callable returning bytes or str. A route may also be a callable returning ``(status, body)``.

    ``hang`` (a set of paths) accepts the request and never answers until ``stop()``.
    ``by_query[path]`` (a callable of the query string, returning ``(status, body)``) answers
    that path instead of ``routes``; ``requests`` lists every request target, query included.
    """

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes | str | Callable[[], bytes | str]]] = {}
        self.hang: set[str] = set()
        self.hits: dict[str, int] = {}
        self.by_query: dict[str, Callable[[str], tuple[int, bytes | str]]] = {}
        self.requests: list[str] = []
        self._release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                path, _, query = self.path.partition("?")
                outer.hits[path] = outer.hits.get(path, 0) + 1
                outer.requests.append(self.path)
                if path in outer.hang:
                    outer._release.wait()
                    return
                if path in outer.by_query:
                    status, body = outer.by_query[path](query)
                else:
                    route = outer.routes.get(path, (404, b"not found"))
                    status, body = route() if callable(route) else route
                if isinstance(body, Stream):
                    self._stream(status, body)
                    return
                if callable(body):
                    body = body()
                if isinstance(body, str):
                    body = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _stream(self, status: int, body: Stream) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in body.chunks():
                        if outer._release.is_set():
                            return
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                        if body.delay_s:
                            time.sleep(body.delay_s)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def serve_engine(self, metrics: str | Callable[[], str], model: str = "tiny") -> "ScriptedServer":
        """Answer like a vLLM engine: /metrics, /health, /v1/models, /version."""
        self.routes["/metrics"] = (200, metrics)
        self.routes["/health"] = (200, b"")
        self.routes["/v1/models"] = (200, '{"object":"list","data":[{"id":"%s","object":"model"}]}' % model)
        self.routes["/version"] = (200, b'{"version":"0.32.0"}')
        return self

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
