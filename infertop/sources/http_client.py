"""A lean keep-alive HTTP/1.1 GET client for the per-second polls (engines, dcgm-exporter).

Why hand-written: infertop polls every engine every second, and httpx's
request machinery (request/response models, the connection pool, anyio
streams, per-request timeouts) costs several times the socket work itself —
at 64 engines httpx alone took 4-6 % of a core (``benchmarks/bench_http.py``).
This client does the one thing the polls need: ``GET`` over asyncio streams,
one kept-alive connection per concurrent request to one engine, identity
encoding, plain or TLS.

The bounds of :mod:`.sanitize` hold here too: a body is read at most
``limit`` bytes (a larger declared length is refused before reading, an
endless chunked body is cut at the limit), the status line and headers are
at most :data:`MAX_HEAD_BYTES`, and every request is bounded in time (connect,
then the whole exchange). Errors are :class:`HttpError` whose text is what
the UI shows, or ``TimeoutError``.

Every other GET that reads a body goes through the two httpx helpers at the
end, with the same bounds: :func:`httpx_get` (async, for a caller that hands
an ``httpx.AsyncClient``: scripts, tests) and :func:`blocking_request` /
:func:`blocking_get` (the actions' reads, which run in threads: /health
probes, a drain's /metrics, the gateway's admin API, the autoscaler's
metrics). Redirects are never followed (a 3xx is a status like any other).
Outside this module on purpose: the Kubernetes client (its own session and
body bound, ``sources/kube/session.py``) and Prometheus (``sources/prometheus/
connect.py``: requests, through prometheus-api-client).
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

MAX_HEAD_BYTES = 64 * 1024  # status line and headers
MAX_IDLE = 4  # kept-alive connections per client
MAX_INTERIM = 8  # 1xx answers skipped before the final one (a server sending endless 100s is refused)
_DIGITS = re.compile(rb"[0-9]+")  # ASCII only: str.isdigit() accepts '²', which int() then refuses
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")  # a chunk size: no sign, no spaces, at most 2**64


class HttpError(Exception):
    """A request failed; the message is one short line for the status bar."""


class ResponseTooLarge(HttpError):
    pass


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 — the transport may already be gone
            pass


def size_text(n: int) -> str:
    """1 KiB, 8 MiB, 8.4 MiB: a tenth shown below 10 units, so a size just over a limit never
    reads as the limit itself ("8 MiB, limit 8 MiB")."""
    unit, name = (2**20, "MiB") if n >= 2**20 else (2**10, "KiB")
    v = n / unit
    text = f"{v:.0f}" if v >= 10 else f"{v:.1f}".removesuffix(".0")
    return f"{text} {name}"


def too_large(limit: int, declared: int | None = None) -> ResponseTooLarge:
    if declared is not None:
        return ResponseTooLarge(f"response too large ({size_text(declared)} announced; the limit is {size_text(limit)})")
    return ResponseTooLarge(f"response too large (> {size_text(limit)})")


class LeanHttpClient:
    """GETs to one host (scheme, host, port), over at most :data:`MAX_IDLE` kept-alive connections."""

    def __init__(self, *, connect_timeout_s: float = 1.0, timeout_s: float = 5.0, user_agent: str = "infertop") -> None:
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self.user_agent = user_agent
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._targets: dict[str, tuple[tuple[str, str, int], bytes]] = {}  # url → (origin, request bytes)
        self._ssl: ssl.SSLContext | None = None
        self.opened = 0  # connections opened (tests: keep-alive works)
        self._closed = False

    # ----- public --------------------------------------------------------------------
    async def get(self, url: str, limit: int, *, any_status: bool = False,
                  headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """(status, body) of ``GET url``; the body is read only for a 200 (at most ``limit`` bytes).

        A status other than 200 raises ``HttpError("HTTP <status>")`` unless ``any_status``.
        ``headers``: more request headers (e.g. a bearer token), sent as given; a name or value with a
        line break or another control character is refused, not sent.
        """
        origin, request = self._target(url)
        if headers:
            request = request[:-2] + _header_lines(headers) + b"\r\n"
        async with asyncio.timeout(self.timeout_s):
            idle = self._idle.get(origin)
            if idle:
                conn = idle.pop()
                try:
                    return await self._exchange(origin, conn, request, limit, any_status)
                except _StaleConnection:
                    pass  # the server closed the idle connection: once more on a new one
            conn = await self._connect(origin)
            try:
                return await self._exchange(origin, conn, request, limit, any_status)
            except _StaleConnection:
                raise HttpError("connection closed by the server") from None

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections; one in use closes when its request ends."""
        self._closed = True
        for conns in self._idle.values():
            for c in conns:
                c.close()
        self._idle.clear()

    # ----- internals -------------------------------------------------------------------
    def _target(self, url: str) -> tuple[tuple[str, str, int], bytes]:
        got = self._targets.get(url)
        if got is not None:
            return got
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"unsupported URL {url[:80]!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        default = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
        host_header = host if default else f"{host}:{port}"
        request = (f"GET {path} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {self.user_agent}\r\n"
                   "Accept: */*\r\nAccept-Encoding: identity\r\n\r\n").encode("ascii", "replace")
        got = ((scheme, parts.hostname, port), request)
        if len(self._targets) < 64:
            self._targets[url] = got
        return got

    async def _connect(self, origin: tuple[str, str, int]) -> _Conn:
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(host, port, ssl=tls, limit=MAX_HEAD_BYTES)
        except ConnectionRefusedError:
            raise HttpError("connection refused") from None
        except socket.gaierror:
            raise HttpError("unknown host") from None
        except ssl.SSLError as e:
            raise HttpError(f"TLS: {e.reason or e}") from None
        except OSError as e:
            if "refused" in str(e).lower():  # several addresses tried, each refused
                raise HttpError("connection refused") from None
            raise HttpError("cannot connect") from None
        self.opened += 1
        return _Conn(reader, writer)

    async def _exchange(self, origin, conn: _Conn, request: bytes, limit: int, any_status: bool) -> tuple[int, bytes]:
        """One request on ``conn``; the connection is kept only after a complete, reusable answer."""
        keep = False
        try:
            try:
                conn.writer.write(request)
                head = await conn.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if not e.partial:
                    raise _StaleConnection from None
                raise HttpError("bad HTTP response") from None
            except (ConnectionResetError, BrokenPipeError):
                raise _StaleConnection from None
            except asyncio.LimitOverrunError:
                raise HttpError("bad HTTP response (headers too large)") from None
            status, headers, http10 = await _final_head(conn.reader, head)
            if status != 200:
                if any_status:
                    return status, b""  # body not read: the connection is not reused
                raise HttpError(f"HTTP {status}")
            body, framed = await _body(conn.reader, headers, limit)
            conn_header = headers.get("connection", "").lower()
            keep = framed and "close" not in conn_header and (not http10 or "keep-alive" in conn_header)
            return status, body
        except (ConnectionResetError, BrokenPipeError):
            raise HttpError("connection lost") from None
        except asyncio.IncompleteReadError:
            raise HttpError("connection closed mid-response") from None
        except asyncio.LimitOverrunError:
            raise HttpError("bad HTTP response") from None
        finally:
            if keep and not self._closed:
                idle = self._idle.setdefault(origin, [])
                if len(idle) < MAX_IDLE:
                    idle.append(conn)
                else:
                    conn.close()
            else:
                conn.close()


def _header_lines(headers: dict[str, str]) -> bytes:
    out = []
    for name, value in headers.items():
        line = f"{name}: {value}"
        if not name or any(ord(ch) < 32 and ch != "\t" for ch in line) or "\x7f" in line:
            raise HttpError(f"refused header {name[:40]!r}: a control character")
        out.append(line.encode("latin-1", "replace") + b"\r\n")
    return b"".join(out)


class _StaleConnection(Exception):
    """A kept-alive connection the server had closed: nothing of an answer was read."""


async def _final_head(reader: asyncio.StreamReader, head: bytes) -> tuple[int, dict[str, str], bool]:
    """The final answer's head: interim 1xx answers (an unsolicited ``100 Continue``) are skipped, at most
    :data:`MAX_INTERIM` of them; ``101`` is refused (nothing here switches protocols)."""
    for _ in range(MAX_INTERIM + 1):
        status, headers, http10 = _head(head)
        if status >= 200:
            return status, headers, http10
        if status == 101:
            raise HttpError("bad HTTP response (unexpected 101 Switching Protocols)")
        head = await reader.readuntil(b"\r\n\r\n")
    raise HttpError(f"bad HTTP response (more than {MAX_INTERIM} interim 1xx answers)")


def _head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """(status, lower-cased headers, HTTP/1.0?) of a response head."""
    lines = head.decode("latin-1").split("\r\n")  # latin-1 decodes every byte
    status_line = lines[0].split(" ", 2)
    code = status_line[1].encode("latin-1") if len(status_line) >= 2 else b""
    if not status_line[0].startswith("HTTP/1.") or len(code) != 3 or not _DIGITS.fullmatch(code) \
            or code[0:1] == b"0":
        raise HttpError("bad HTTP response (malformed status line)")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError("bad HTTP response (malformed header line)")
        key, value = name.strip().lower(), value.strip()
        if key == "content-length" and headers.get(key, value) != value:
            raise HttpError("bad HTTP response (conflicting Content-Length headers)")
        headers[key] = value
    return int(code), headers, status_line[0] == "HTTP/1.0"


async def _body(reader: asyncio.StreamReader, headers: dict[str, str], limit: int) -> tuple[bytes, bool]:
    """(body, whether its end was framed — so that the connection can be reused)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _chunked(reader, limit), True
    declared = headers.get("content-length")
    if declared is not None:
        if not _DIGITS.fullmatch(declared.encode("latin-1")):
            raise HttpError("bad HTTP response (malformed Content-Length)")
        n = int(declared)
        if n > limit:
            raise too_large(limit, n)
        return await reader.readexactly(n), True
    # Neither: the body ends when the server closes the connection.
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            return b"".join(chunks), False
        size += len(chunk)
        if size > limit:
            chunks.clear()  # the error's traceback keeps this frame (a cycle the collector may reach late)
            raise too_large(limit)
        chunks.append(chunk)


async def _chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        n_text = line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(n_text):  # int(x, 16) also takes '-5', '+5', '0x5' and '5_0'
            raise HttpError("bad HTTP response (chunk size)")
        n = int(n_text, 16)
        if n == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(chunks)
        size += n
        if size > limit:
            chunks.clear()  # as in _body: what was read is not kept alive by the error
            raise too_large(limit)
        chunks.append(await reader.readexactly(n))
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError("bad HTTP response (chunk end)")


# ----- the httpx helpers: the same bounds for every other GET ----------------------------------

def _declared_too_large(headers: httpx.Headers, limit: int) -> None:
    declared = headers.get("content-length", "")
    if _DIGITS.fullmatch(declared.encode("latin-1", "replace")) and int(declared) > limit:
        raise too_large(limit, int(declared))


async def httpx_get(client: httpx.AsyncClient, url: str, limit: int, *, any_status: bool = False) -> tuple[int, bytes]:
    """:meth:`LeanHttpClient.get` over an httpx client: (status, body), at most ``limit`` bytes read
    (an endless body costs ``limit`` bytes and is "response too large", not a timeout). A status
    other than 200 raises ``HttpError("HTTP <status>")`` unless ``any_status`` (the body not read)."""
    async with client.stream("GET", url, follow_redirects=False) as resp:
        status = resp.status_code
        if status != 200:
            if any_status:
                return status, b""
            raise HttpError(f"HTTP {status}")
        _declared_too_large(resp.headers, limit)
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > limit:
                chunks.clear()
                raise too_large(limit)
            chunks.append(chunk)
    return status, b"".join(chunks)


def blocking_request(method: str, url: str, limit: int, *, timeout_s: float, connect_timeout_s: float | None = None,
                     headers: dict[str, str] | None = None, params: dict[str, str] | None = None,
                     json_body: Any = None, client: httpx.Client | None = None,
                     error_body: bool = True) -> tuple[int, bytes]:
    """(status, body) of one blocking request; the body of an answer other than 200 is read only
    with ``error_body`` (an admin API's error message), else it is ``b""``.

    At most ``limit`` bytes are read (a larger declared length is refused before reading, an
    endless body cut at the limit: :class:`ResponseTooLarge`); the whole exchange takes at most
    about ``timeout_s`` (httpx's timeout bounds each read, so a body dripping a byte a second
    would never end: the sum is bounded here); redirects are not followed. httpx's own errors
    (``httpx.HTTPError``: refused, timeout…) pass through: each caller words them as it always has.
    ``client``: a kept-alive httpx client (a poll loop); one of its own otherwise.
    """
    timeout = httpx.Timeout(timeout_s, connect=timeout_s if connect_timeout_s is None else connect_timeout_s)
    own = client is None
    c = httpx.Client(timeout=timeout, trust_env=False) if client is None else client
    deadline = time.monotonic() + timeout_s
    try:
        with c.stream(method, url, params=params, json=json_body, headers=headers, timeout=timeout,
                      follow_redirects=False) as resp:
            if resp.status_code != 200 and not error_body:
                return resp.status_code, b""
            _declared_too_large(resp.headers, limit)
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > limit:
                    chunks.clear()
                    raise too_large(limit)
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    chunks.clear()
                    raise httpx.ReadTimeout(f"the answer took longer than {timeout_s:g} s")
            return resp.status_code, b"".join(chunks)
    finally:
        if own:
            c.close()


def blocking_get(url: str, limit: int, **kwargs: Any) -> tuple[int, bytes]:
    """:func:`blocking_request` with GET."""
    return blocking_request("GET", url, limit, **kwargs)
