"""The gateway's connections to its engines: a pool of keep-alive HTTP/1.1 connections per engine,
each an asyncio Protocol parsing answers with httptools.

``await pool.request(url, method, path, body, headers)`` writes the request in one buffer
and returns the :class:`UpstreamConn` once the answer's head has arrived (or raises
:class:`UpstreamError`). The caller then reads a short body (``read_body``) or relays the
answer to a client (``relay``): each piece is written to the client as it arrives — from
the socket callback, no task switch, never buffered or joined — and the upstream's reading
pauses while the client's buffer is full. Then ``release`` (back to the pool when the answer
was complete and the engine keeps the connection) or ``close`` (the engine sees the
disconnect and aborts the request).
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

from .http1 import CHUNKED, HttpConnection, frame_chunk

# An idle connection older than this is closed rather than reused: under the 5 s after which vLLM's server
# (uvicorn, VLLM_HTTP_TIMEOUT_KEEP_ALIVE) closes an idle one, so a request is not sent as that close comes.
IDLE_REUSE_S = 4.0
MAX_BODY_READ_BYTES = 8 * 1024 * 1024  # read_body's limit (error documents, /v1/models)
MAX_HEAD_BYTES = 64 * 1024  # an answer's status line and headers (an engine sending endless headers is cut)
MAX_HEADERS = 100
HEAD_READ_TIMEOUT_S = 10.0  # from the first byte of an answer's head to its end (an engine drips it)


def refused_reason(code: str) -> str:
    """What the client is told of an UpstreamError code (the limit it names, read when used)."""
    return {"head_too_large": f"response headers over {MAX_HEAD_BYTES // 1024} KiB or {MAX_HEADERS} headers",
            "head_timeout": f"response headers not complete within {HEAD_READ_TIMEOUT_S:g} s",
            "malformed": "malformed HTTP response", "timeout": "no byte within its timeout_s",
            "reset": "connection reset"}.get(code, code)


class _BadHead(Exception):
    """Raised in a parser callback (httptools re-raises it wrapped): ``code`` is the UpstreamError code."""

    def __init__(self, code: str) -> None:
        self.code = code


class UpstreamError(Exception):
    """``code``: "connect", "timeout" or "reset"; ``connected``: the connection was made (a timeout
    then means the engine went silent on the request, not that it could not be reached)."""

    def __init__(self, code: str, connected: bool) -> None:
        super().__init__(code)
        self.code = code
        self.connected = connected


@dataclass
class Origin:
    key: str
    host: str
    port: int
    host_header: bytes
    prefix: bytes
    ssl: ssl_module.SSLContext | None


class UpstreamConn(asyncio.Protocol):
    """One keep-alive connection to an engine; holds the state of the answer being read."""

    # set in connection_made, which the loop calls before create_connection returns this connection
    transport: asyncio.Transport

    def __init__(self, pool: UpstreamPool, key: str) -> None:
        self.pool = pool
        self.key = key
        self.loop = pool.loop
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.in_use = False  # between send() and release(): a byte from the engine outside that is an error
        self.reading_paused = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: dict[str, bytes] = {}
        self.keep_alive = True
        self.got_head = False
        self.complete = False
        self.error: str | None = None
        self.body_parts: list[bytes] = []
        self.body_bytes = 0
        self.sink: HttpConnection | None = None
        self._chunked_out = False
        self._head_out: bytes | None = None  # the client's head, sent with the first body bytes
        self._out: list[bytes] | None = None
        self._head_fut: asyncio.Future | None = None
        self._done_fut: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.timeout_s = 0.0
        self.last_rx = 0.0
        self.head_bytes = 0  # bytes received before the final answer's head was complete
        self._interim = False  # parsing a 1xx answer (skipped: never relayed as the final answer)
        self._head_open = False  # a head has begun and not ended (after a 1xx the engine may think long)
        self._head_code: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None

    # -- requests ---------------------------------------------------------------------------------

    def send(self, data: bytes | list[bytes], timeout_s: float) -> asyncio.Future:
        """Write one request; the future resolves when the answer's head has arrived."""
        self._reset()
        self.in_use = True
        self._head_fut = fut = self.loop.create_future()
        self.timeout_s = timeout_s
        self.last_rx = now = self.loop.time()
        self._timer = self.loop.call_at(now + timeout_s, self._on_timer)
        if isinstance(data, list):
            self.transport.writelines(data)
        else:
            self.transport.write(data)
        return fut

    async def read_body(self) -> bytes:
        """The whole body of a short answer (≤ MAX_BODY_READ_BYTES). Raises UpstreamError."""
        if not self.complete and self.error is None:
            self._done_fut = self.loop.create_future()
            await self._done_fut
        if self.error is not None:
            raise UpstreamError(self.error, True)
        return b"".join(self.body_parts)

    def relay(self, client: HttpConnection, head: bytes) -> asyncio.Future | None:
        """Send ``head`` and the body so far to ``client``, then each later piece as it arrives. Returns
        None when the answer is complete already, else a future: None at the end, or the error code."""
        chunked = self._chunked_out = client.framing == CHUNKED
        parts = [head]
        for b in self.body_parts:
            parts.append(frame_chunk(b) if chunked else b)
        self.body_parts = []
        if self.error is not None:
            client.write(parts)
            fut = self.loop.create_future()
            fut.set_result(self.error)
            return fut
        if self.complete:
            client.end(parts)
            return None
        if len(parts) > 1:
            client.write(parts)
        else:
            self._head_out = head  # sent with the first body bytes: one write, not two
        self.sink = client
        client.relay = self
        if client.write_paused:
            self.pause_reading()
        self._done_fut = fut = self.loop.create_future()
        return fut

    def release(self) -> None:
        """Back to the pool when reusable (complete answer, engine keeps the connection), else close."""
        self._stop_timer()
        if self.closed or not self.complete or self.error is not None or not self.keep_alive:
            self.close()
            return
        self.sink = None
        self.body_parts = []
        self.in_use = False
        if self.reading_paused:  # paused for a slow client as its answer ended
            self.resume_reading()
        self.pool._put(self)

    def close(self) -> None:
        self._stop_timer()
        self._detach()
        if not self.closed:
            self.closed = True
            self.transport.close()
        self.pool._forget(self)

    def pause_reading(self) -> None:
        if not self.closed and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if not self.closed and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    # -- transport events -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's (typed as its base in the stub)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.got_head and not self.complete and self.error is None and "content-length" not in self.headers \
                and b"chunked" not in self.headers.get("transfer-encoding", b"").lower():
            self._finish()  # a body that runs until the engine closes the connection
            return
        self._fail("reset")

    def data_received(self, data: bytes) -> None:
        if not self.in_use:  # nothing asked: not an answer to anything
            self.close()
            return
        self.last_rx = self.loop.time()
        if not self.got_head:
            self.head_bytes += len(data)
        sink = self.sink
        if sink is not None:
            self._out = out = []
            if self._head_out is not None:
                out.append(self._head_out)
        try:
            self.parser.feed_data(data)
            if not self.got_head and self.head_bytes:
                if self.head_bytes > MAX_HEAD_BYTES:  # 1xx answers included: endless 100s are bounded too
                    raise _BadHead("head_too_large")  # httptools keeps an unfinished header: bound it here
                if self._head_open and self._head_timer is None:  # armed only now: a whole head costs no timer
                    self._head_timer = self.loop.call_at(self.last_rx + HEAD_READ_TIMEOUT_S, self._on_head_timer)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade, _BadHead) as e:
            self._out = None
            self._fail(e.code if isinstance(e, _BadHead) else self._head_code or "malformed")
            self.close()
            return
        if sink is not None:
            self._out = None
            if self.complete:
                self._head_out = None
                self._finish_relay(out)
            elif out and (self._head_out is None or len(out) > 1):
                self._head_out = None
                sink.write(out)
        elif self.complete and self._done_fut is not None:
            self._finish()

    # -- parser callbacks -------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._head_open = True

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self.headers) >= MAX_HEADERS:
            self._head_code = "head_too_large"
            raise _BadHead("head_too_large")
        self.headers.setdefault(name.decode("latin-1").lower(), value)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue, 103 Early Hints): the final one follows
            if status == 101:
                self._head_code = "malformed"
                raise _BadHead("malformed")  # nothing here asked to switch protocols
            self._interim = True
            self.headers = {}
            self.reason = b""
            return
        self._stop_head_timer()
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        self.got_head = True
        fut, self._head_fut = self._head_fut, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def on_body(self, body: bytes) -> None:
        out = self._out
        if out is not None:
            out.append(frame_chunk(body) if self._chunked_out else body)
            return
        self.body_bytes += len(body)
        if self.body_bytes > MAX_BODY_READ_BYTES:
            self._fail("reset")
            return
        self.body_parts.append(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = self._head_open = False
            self._stop_head_timer()
            return
        self.complete = True

    # -- ends -------------------------------------------------------------------------------------

    def _finish_relay(self, out: list[bytes]) -> None:
        sink = self.sink
        self._detach()
        self._stop_timer()
        if sink is not None:
            sink.end(out)
        self._finish()

    def _finish(self) -> None:
        self.complete = True
        if self.sink is not None:
            head, self._head_out = self._head_out, None
            self._finish_relay([head] if head is not None else [])
            return
        fut, self._done_fut = self._done_fut, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _fail(self, code: str) -> None:
        if self.error is not None or self.complete:
            return
        self.error = code
        self._stop_timer()
        self._detach()
        fut, self._head_fut = self._head_fut, None
        if fut is not None and not fut.done():
            fut.set_exception(UpstreamError(code, True))
        fut, self._done_fut = self._done_fut, None
        if fut is not None and not fut.done():
            fut.set_result(code)

    def _detach(self) -> None:
        sink, self.sink = self.sink, None
        if sink is not None and sink.relay is self:
            sink.relay = None

    def _stop_timer(self) -> None:
        self._stop_head_timer()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _on_head_timer(self) -> None:
        """The answer's head began but did not end within HEAD_READ_TIMEOUT_S (bytes dripping in)."""
        self._head_timer = None
        if not self.got_head and self.error is None and not self.closed:
            self._fail("head_timeout")
            self.close()

    def _on_timer(self) -> None:
        """No byte from the engine for ``timeout_s`` (a client that reads slowly does not count)."""
        self._timer = None
        if self.complete or self.error is not None or self.closed:
            return
        now = self.loop.time()
        due = self.last_rx + self.timeout_s
        if now < due or (self.sink is not None and self.sink.write_paused):
            self._timer = self.loop.call_at(max(due, now + 0.05), self._on_timer)
            return
        self._fail("timeout")
        self.close()


class UpstreamPool:
    """Keep-alive connections per engine URL; no limit of its own (the policy's caps bound the load)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._origins: dict[str, Origin] = {}
        self._idle: dict[str, list[UpstreamConn]] = {}
        self._all: set[UpstreamConn] = set()

    def origin(self, url: str) -> Origin:
        o = self._origins.get(url)
        if o is None:
            u = urlsplit(url)
            tls = u.scheme == "https"
            port = u.port or (443 if tls else 80)
            host = u.hostname or "127.0.0.1"
            o = self._origins[url] = Origin(url, host, port, (u.netloc or host).encode("idna"),
                                            u.path.rstrip("/").encode(),
                                            ssl_module.create_default_context() if tls else None)
        return o

    def head(self, o: Origin, method: bytes, path: str, body_len: int | None, headers: bytes) -> bytes:
        length = b"" if body_len is None else b"Content-Length: %d\r\n" % body_len
        return b"%s %s%s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n" % (method, o.prefix, path.encode("latin-1"),
                                                            o.host_header, headers, length)

    async def request(self, url: str, method: bytes, path: str, body: bytes | None, headers: bytes = b"", *,
                      connect_timeout_s: float, timeout_s: float, fresh: bool = False) -> UpstreamConn:
        """Send a request; returns the connection once the answer's head is in. Raises UpstreamError.
        ``fresh``: on a new connection (a retry after a reset: the other pooled ones may be going too)."""
        o = self.origin(url)
        conn = None if fresh else self._take(o.key)
        if conn is None:
            conn = await self._connect(o, connect_timeout_s)
        head = self.head(o, method, path, None if body is None else len(body), headers)
        data: bytes | list[bytes] = head if not body else head + body if len(body) < 65536 else [head, body]
        try:
            await conn.send(data, timeout_s)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _connect(self, o: Origin, timeout_s: float) -> UpstreamConn:
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await self.loop.create_connection(lambda: UpstreamConn(self, o.key), o.host, o.port,
                                                            ssl=o.ssl)
        except TimeoutError:
            raise UpstreamError("timeout", False) from None
        except OSError:
            raise UpstreamError("connect", False) from None
        self._all.add(conn)
        return conn

    def _take(self, key: str) -> UpstreamConn | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        stale = self.loop.time() - IDLE_REUSE_S
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if conn.idle_since < stale:
                conn.close()
                continue
            return conn
        return None

    def _put(self, conn: UpstreamConn) -> None:
        conn.idle_since = self.loop.time()
        self._idle.setdefault(conn.key, []).append(conn)

    def _forget(self, conn: UpstreamConn) -> None:
        self._all.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def idle_count(self, url: str) -> int:
        return sum(1 for c in self._idle.get(self.origin(url).key, ()) if not c.closed)

    def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._idle.clear()
