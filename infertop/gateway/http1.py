"""The gateway's client port: a lean HTTP/1.1 server on an asyncio Protocol, parsing with httptools.

One :class:`HttpConnection` per client connection. Requests are parsed as bytes arrive
(keep-alive, pipelining, Content-Length and chunked bodies) and answered strictly in
order: the application's ``handle(request, conn)`` answers at once (``conn.respond``) or
returns a task that does later; a relayed answer is written with ``conn.start`` /
``conn.write`` / ``conn.end``. Errors of the input are answered here, as JSON:
malformed → 400, a body over the limit → 413, headers over the limit → 431, each
with ``Connection: close``. A client that disconnects cancels its handler's task.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from http import HTTPStatus
from typing import Protocol as TypingProtocol, cast

import httptools

MAX_HEADER_BYTES = 64 * 1024  # request line and headers together
MAX_HEADERS = 128
MAX_PIPELINED = 16  # requests parsed ahead of the one being answered before reading pauses
IDLE_TIMEOUT_S = 75.0  # a keep-alive connection with nothing to do is closed after this
DISCARD_MAX_BYTES = 16 * 1024 * 1024  # body bytes read and dropped after a 413 before the connection is cut
LINGER_S = 2.0  # after refusing a request: how long input is read and dropped before the connection closes
HEADER_TIMEOUT_S = 10.0  # a new connection's first request, and any request's head, must be in within this
MAX_CONNECTIONS = 4096  # client connections open at once; more are answered 503 and closed at once

LENGTH, CHUNKED, CLOSE = 1, 2, 3  # framing of the answer in progress
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def error_body(status: int, message: str, typ: str = "invalid_request_error") -> bytes:
    """An OpenAI-style error document."""
    return json.dumps({"error": {"message": message, "type": typ, "param": None, "code": status}}).encode()


class Request:
    """One parsed request. ``headers``: lower-case name → first value (latin-1)."""

    __slots__ = ("method", "url", "path", "headers", "parts", "body_bytes", "keep_alive", "http10", "error")

    def __init__(self) -> None:
        self.method = b""
        self.url = b""
        self.path = ""
        self.headers: dict[str, str] = {}
        self.parts: list[bytes] = []
        self.body_bytes = 0
        self.keep_alive = True
        self.http10 = False
        self.error: tuple[int, str] | None = None  # answered by the connection's owner with this status

    @property
    def body(self) -> bytes:
        parts = self.parts
        return parts[0] if len(parts) == 1 else b"".join(parts)


class App(TypingProtocol):
    def handle(self, request: Request, conn: HttpConnection) -> asyncio.Task | None: ...


class Relay(TypingProtocol):
    """What feeds a relayed answer (the upstream connection): paused while the client reads slowly."""

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class _HeadersTooLarge(Exception):
    pass


class HttpConnection(asyncio.Protocol):
    """One client connection (see the module's docstring)."""

    # set in connection_made, the first call the loop makes; the connection reaches no one before it
    transport: asyncio.Transport

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop, max_body_bytes: int,
                 conns: set[HttpConnection], *, header_timeout_s: float = HEADER_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.app = app
        self.header_timeout_s = header_timeout_s
        self.max_connections = max_connections
        self.loop = loop
        self.max_body_bytes = max_body_bytes
        self.conns = conns
        self.parser = httptools.HttpRequestParser(self)
        self.closed = False
        self.pending: deque[Request] = deque()
        self.current: Request | None = None  # being answered
        self.task: asyncio.Task | None = None  # answering ``current``
        self.framing = 0
        self.write_paused = False
        self.relay: Relay | None = None  # the upstream connection feeding the answer
        self._req: Request | None = None  # being parsed
        self._header_bytes = 0
        self._header_count = 0
        self._headers_too_large = False
        self._close_resp = False
        self._linger = False  # after refusing input: end our side, then drop input for a while before closing
        self._no_more_input = False
        self._reading_paused = False
        self._in_next = False
        self._idle: asyncio.TimerHandle | None = None
        self._in_head = False  # between a request's first byte and the end of its headers
        self._head_rx = 0  # bytes received while in a head (httptools buffers an unfinished header itself)
        # a request still incomplete after a read: its head must end within header_timeout_s of its first
        # read, and its body may not go silent for as long (armed only then: not on the hot path)
        self._read_timer: asyncio.TimerHandle | None = None
        self._head_since = 0.0
        self._rx_at = 0.0

    # -- transport events -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream server's transport: the asyncio stub types the argument as its base class
        self.transport = t = cast(asyncio.Transport, transport)
        if len(self.conns) >= self.max_connections:
            self._no_more_input = True  # over the cap: a short refusal, never parsed, never counted
            body = error_body(503, f"too many client connections (limit {self.max_connections})", "overloaded")
            t.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            t.close()
            return
        self.conns.add(self)
        self._idle = self.loop.call_later(self.header_timeout_s, self._idle_close)  # the first request

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.conns.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        self._stop_read_timer()
        self.pending.clear()
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()  # its upstream request is cancelled with it

    def eof_received(self) -> bool:
        return False  # the client ended its side: close (a half-closed client is treated as gone)

    def data_received(self, data: bytes) -> None:
        if self._no_more_input:
            return
        in_head = self._in_head  # then and still after it: every byte of ``data`` was head
        try:
            self.parser.feed_data(data)
            if in_head and self._in_head:
                self._head_rx += len(data)
                if self._head_rx > MAX_HEADER_BYTES:
                    self._headers_too_large = True
                    raise _HeadersTooLarge
            if self._req is not None:
                self._incomplete_request()
        except httptools.HttpParserUpgrade:
            # a complete request asking to switch protocols: answered as HTTP/1.1, then the connection closes
            self._no_more_input = True
            if self._req is not None:
                self._refuse(400, "protocol upgrade is not supported")
            elif self.pending:
                self.pending[-1].keep_alive = False
        except (httptools.HttpParserError, _HeadersTooLarge) as e:  # a callback's exception arrives wrapped
            if self._headers_too_large:
                self._refuse(431, f"request headers larger than {MAX_HEADER_BYTES} bytes or more than {MAX_HEADERS}")
            else:
                self._refuse(400, f"malformed HTTP request: {str(e)[:120]}")
        if self.current is None and self.pending:
            self._next()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.relay is not None:
            self.relay.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.relay is not None:
            self.relay.resume_reading()

    # -- parser callbacks -------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._req = Request()
        self._header_bytes = self._header_count = 0
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._in_head, self._head_rx = True, 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        r = self._req
        assert r is not None  # set by on_message_begin, which the parser calls first
        r.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._count(len(name) + len(value) + 4)
        key = name.decode("latin-1").lower()
        r = self._req
        assert r is not None
        headers = r.headers
        if key not in headers:
            headers[key] = value.decode("latin-1")

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_HEADER_BYTES or self._header_count > MAX_HEADERS:
            self._headers_too_large = True
            raise _HeadersTooLarge

    def on_headers_complete(self) -> None:
        self._in_head = False
        r = self._req
        assert r is not None
        p = self.parser
        r.method = p.get_method()
        r.keep_alive = p.should_keep_alive()
        r.http10 = p.get_http_version() == "1.0"
        q = r.url.find(b"?")
        r.path = (r.url if q < 0 else r.url[:q]).decode("latin-1")
        length = r.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            self._too_large(r)
        elif (r.headers.get("expect", "").lower() == "100-continue" and self.current is None
              and not self.pending):
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        r = self._req
        assert r is not None
        r.body_bytes += len(body)
        if r.error is not None:
            if r.body_bytes > DISCARD_MAX_BYTES:
                self._no_more_input = True
                self.transport.close()
            return
        if r.body_bytes > self.max_body_bytes:
            r.parts.clear()
            self._too_large(r)
            return
        r.parts.append(body)

    def on_message_complete(self) -> None:
        self._stop_read_timer()
        r, self._req = self._req, None
        assert r is not None
        if r.error is not None:  # already queued, answered early
            return
        self.pending.append(r)
        if len(self.pending) >= MAX_PIPELINED and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def _too_large(self, r: Request) -> None:
        """Queue the 413 now (its answer need not wait for a body that will be dropped)."""
        r.error = (413, f"request body larger than {self.max_body_bytes} bytes")
        r.keep_alive = False
        self._linger = True
        self.pending.append(r)

    def _refuse(self, status: int, message: str) -> None:
        """Bad input: answer it in order, read nothing more, then close."""
        self._no_more_input = self._linger = True
        r, self._req = self._req, None
        if r is not None and r.error is not None:
            return  # its 413 is queued already; the connection closes after it
        r = r or Request()
        r.error = (status, message)
        r.keep_alive = False
        self.pending.append(r)

    # -- answering --------------------------------------------------------------------------------

    def _next(self) -> None:
        self._in_next = True
        try:
            while self.current is None and self.pending and not self.closed:
                r = self.current = self.pending.popleft()
                task = self.app.handle(r, self)
                if task is not None and self.current is r:
                    self.task = task
        finally:
            self._in_next = False
        if self._reading_paused and len(self.pending) < MAX_PIPELINED // 2 and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()

    def handler_ended(self, task: asyncio.Task | None) -> None:
        """Called by the task answering a request as it ends (no done-callback: that would cost a loop
        iteration per request): an answer it left unfinished is ended here."""
        if self.task is task and task is not None:
            self.task = None
            if self.closed:
                return
            if self.framing:
                self.abort()
            else:
                self.respond(500, error_body(500, "internal error in the gateway", "internal_error"))

    def _head_close(self, r: Request) -> bytes:
        if not r.keep_alive or (self._no_more_input and not self.pending):
            self._close_resp = True
            return b"Connection: close\r\n"
        self._close_resp = False
        return b"Connection: keep-alive\r\n" if r.http10 else b""

    def respond(self, status: int, body: bytes, content_type: bytes = b"application/json",
                extra: bytes = b"") -> None:
        """A whole answer with a Content-Length (no body for HEAD)."""
        r = self.current
        if r is None or self.closed:
            return
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n" % (
            status, _REASONS.get(status, b"Unknown"), content_type, len(body), extra, self._head_close(r))
        self.transport.write(head if r.method == b"HEAD" else head + body)
        self._done()

    def start(self, status: int, reason: bytes, headers: bytes, length: int | None) -> bytes:
        """The head of a relayed answer (the caller sends it with the first body bytes); the framing of
        the body follows: ``length``, else chunked, else (an HTTP/1.0 client) until the close."""
        r = self.current
        assert r is not None
        conn = self._head_close(r)
        if length is not None:
            self.framing, framing = LENGTH, b"Content-Length: %d\r\n" % length
        elif r.http10:
            self.framing, framing, conn, self._close_resp = CLOSE, b"", b"Connection: close\r\n", True
        else:
            self.framing, framing = CHUNKED, b"Transfer-Encoding: chunked\r\n"
        return b"HTTP/1.1 %d %s\r\n%s%s%s\r\n" % (status, reason or _REASONS.get(status, b""), headers, framing, conn)

    def write(self, parts: list[bytes]) -> None:
        if not self.closed:
            self.transport.writelines(parts)

    def end(self, parts: list[bytes]) -> None:
        """The last bytes of a relayed answer (with the end of the chunked body), in one write."""
        if self.framing == CHUNKED:
            parts.append(b"0\r\n\r\n")
        self.write(parts)
        if self.framing == CLOSE:
            self._close_resp = True
        self._done()

    def abort(self) -> None:
        """End an answer that cannot be completed: what was written is flushed, then the connection closes
        (a chunked body without its last chunk, so the client sees it cut)."""
        self.relay = None
        self.task = None
        self._no_more_input = True
        if not self.closed:
            self.transport.close()

    def _done(self) -> None:
        self.current = None
        self.task = None
        self.relay = None
        self.framing = 0
        if self._close_resp:
            self._no_more_input = True
            if self._linger:
                # refused input may still be arriving: closing with unread bytes resets the connection,
                # and the client could lose the answer — so end our side and drop what comes until its end
                self.transport.write_eof()
                self._idle = self.loop.call_later(LINGER_S, self.transport.close)
            else:
                self.transport.close()
            return
        if self.pending:
            if not self._in_next:
                self._next()
        elif self._req is None and not self.closed:
            self._idle = self.loop.call_later(IDLE_TIMEOUT_S, self._idle_close)

    def _incomplete_request(self) -> None:
        now = self._rx_at = self.loop.time()
        if self._read_timer is None:
            self._head_since = now
            self._read_timer = self.loop.call_at(now + self.header_timeout_s, self._read_timeout)

    def _stop_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timeout(self) -> None:
        """A request head not in within ``header_timeout_s``, or its body silent as long (a client dripping
        it, a slowloris): 408, then the connection closes."""
        self._read_timer = None
        if self._req is None or self.closed or self._no_more_input:
            return
        t = self.header_timeout_s
        if self._in_head:
            due, why = self._head_since + t, f"request headers not complete within {t:g} s"
        else:
            due, why = self._rx_at + t, f"request body: no byte for {t:g} s"
        now = self.loop.time()
        if self._reading_paused:  # we stopped reading (pipelined requests ahead): not the client's delay
            self._head_since = self._rx_at = now
            due = now + t
        if now < due:
            self._read_timer = self.loop.call_at(due, self._read_timeout)
            return
        self._in_head = False
        self._refuse(408, why)
        if self.current is None and self.pending:
            self._next()

    def _idle_close(self) -> None:
        self._idle = None
        if self.current is None and not self.pending and self._req is None and not self.closed:
            self.transport.close()


def frame_chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)
