"""A loopback HTTP server that answers Prometheus API queries with recorded JSON.

``answers[promql] = body`` (a dict, served as JSON) for ``/api/v1/query`` and
``/api/v1/query_range`` (GET or POST form); an unknown query gets Prometheus'
own 400 answer, so a test fails loudly when the client sends anything else.
``delay_s`` delays every answer, ``status`` overrides the status code;
``queries`` lists every query received (the tests count them).
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that gave up on a delayed answer (the tests of timeouts): expected
        super().handle_error(request, client_address)


class PromApiServer:
    def __init__(self, port: int = 0) -> None:
        self.answers: dict[str, dict] = {}
        self.range_answers: dict[str, dict] = {}
        self.queries: list[tuple[str, str]] = []  # (endpoint, promql)
        self.delay_s = 0.0
        self.status: int | None = None
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _handler(self):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self, params: dict[str, list[str]]) -> None:
                path = urlsplit(self.path).path
                promql = (params.get("query") or [""])[0]
                outer.queries.append((path, promql))
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                table = outer.range_answers if path.endswith("query_range") else outer.answers
                body = table.get(promql)
                status = 200
                if body is None:
                    status, body = 400, {"status": "error", "errorType": "bad_data",
                                         "error": f"unknown query (not recorded): {promql[:80]}"}
                if outer.status is not None:
                    status = outer.status
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                # one connection per query: a stopped server then refuses the next one at once
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(parse_qs(urlsplit(self.path).query))

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                params = parse_qs(self.rfile.read(n).decode())
                params.update(parse_qs(urlsplit(self.path).query))
                self._answer(params)

        return Handler

    def start(self) -> PromApiServer:
        srv = _Server(("127.0.0.1", self.port), self._handler())
        self._server = srv
        self.port = srv.server_address[1]
        self._thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
