"""The gateway's own HTTP/1.1 path, over raw loopback sockets: what a server library used to do for it.

Clients here are plain sockets writing bytes (pipelined, split, chunked, garbage), so every
framing case is exercised as sent; engines are the test upstream (aiohttp) or a raw socket
server that misbehaves on purpose (closes mid-answer).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from gateway_upstream import Upstream, start_gateway, wait_for


@pytest.fixture
async def upstream():
    up = await Upstream("a").start()
    yield up
    await up.stop()


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, complete: bool) -> None:
        self.status, self.headers, self.body, self.complete = status, headers, body, complete

    def json(self) -> dict:
        return json.loads(self.body)


async def read_response(reader: asyncio.StreamReader, head_only: bool = False) -> Response:
    """One HTTP/1.1 answer; ``complete`` is False when the connection ended inside its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ln)}
    if head_only:
        return Response(status, headers, b"", True)
    if "content-length" in headers:
        try:
            return Response(status, headers, await reader.readexactly(int(headers["content-length"])), True)
        except asyncio.IncompleteReadError as e:
            return Response(status, headers, e.partial, False)
    assert headers.get("transfer-encoding") == "chunked", headers
    body = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return Response(status, headers, body, False)
        size = int(size_line.strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return Response(status, headers, body, True)
        body += data[:-2]


def post_bytes(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def completion(prompt: str, **kw) -> bytes:
    return json.dumps({"prompt": prompt, "max_tokens": 2, **kw}).encode()


async def connect(g) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = g.url.rsplit("//", 1)[1].rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 10) == b""


async def test_pipelined_requests_and_bytes_split_anywhere_are_answered_in_order(upstream):
    g = await start_gateway([upstream])
    try:
        r, w = await connect(g)
        data = b"".join(post_bytes("/v1/completions", completion(f"p{i}")) for i in range(3))
        data += b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n"
        w.write(data)  # four requests in one write
        answers = [await read_response(r) for _ in range(4)]
        assert [a.status for a in answers] == [200] * 4
        assert answers[3].json() == {"status": "ok"}
        assert [b["prompt"] for b in upstream.received] == ["p0", "p1", "p2"]
        one = post_bytes("/v1/chat/completions", completion("split"))
        for i in range(len(one)):  # the same connection, one byte per write
            w.write(one[i:i + 1])
            await w.drain()
        a = await read_response(r)
        assert a.status == 200 and a.json()["upstream"] == "a"
        assert upstream.received[-1]["prompt"] == "split"
        w.close()
    finally:
        await g.stop()


async def test_a_chunked_request_body_is_read_whole_and_a_large_one_gets_413(upstream):
    g = await start_gateway([upstream], max_body_bytes=2048)
    try:
        r, w = await connect(g)
        body = completion("chunked body")
        pieces = [body[:10], body[10:]]
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n")
        a = await read_response(r)
        assert a.status == 200 and upstream.received[-1]["prompt"] == "chunked body"
        big = b"x" * 1500
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n%s\r\n" % (len(big), big) * 2 + b"0\r\n\r\n")
        a = await read_response(r)
        assert a.status == 413 and "larger than 2048" in a.json()["error"]["message"]
        assert a.headers["connection"] == "close" and await closed_by_peer(r)
        assert len(upstream.received) == 1
        text = (await asyncio.to_thread(_get, g.url + "/metrics")).decode()
        assert 'infertop_gateway_requests_total{class="batch",code="413"} 1' in text
    finally:
        await g.stop()


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as f:
        return f.read()


async def test_oversized_headers_get_431_and_garbage_gets_400_then_the_connection_closes(upstream):
    g = await start_gateway([upstream])
    try:
        r, w = await connect(g)
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\n" + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n")
        a = await read_response(r)
        assert a.status == 431 and a.json()["error"]["code"] == 431
        assert await closed_by_peer(r)
        r, w = await connect(g)
        w.write(b"\x16\x03\x01\x02\x00garbage that is not HTTP\r\n\r\n")
        a = await read_response(r)
        assert a.status == 400 and a.json()["error"]["type"] == "invalid_request_error"
        assert await closed_by_peer(r)
        r, w = await connect(g)  # a good request, then garbage: the first is answered, then the 400
        w.write(post_bytes("/v1/completions", completion("ok")) + b"NOT HTTP AT ALL\r\n\r\n")
        assert (await read_response(r)).status == 200
        assert (await read_response(r)).status == 400
        assert await closed_by_peer(r)
        assert [b["prompt"] for b in upstream.received] == ["ok"]
        assert await asyncio.to_thread(_get, g.url + "/health") == b'{"status": "ok"}'  # the gateway serves on
    finally:
        await g.stop()


async def test_routes_methods_head_and_connection_close(upstream):
    g = await start_gateway([upstream])
    try:
        r, w = await connect(g)
        w.write(b"GET /nowhere HTTP/1.1\r\nHost: gw\r\n\r\n")
        a = await read_response(r)
        assert a.status == 404 and "no route" in a.json()["error"]["message"]
        w.write(b"GET /v1/completions HTTP/1.1\r\nHost: gw\r\n\r\n")
        a = await read_response(r)
        assert a.status == 405 and a.headers["allow"] == "POST"
        w.write(b"HEAD /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        a = await read_response(r, head_only=True)  # a head, and no body after it
        assert a.status == 405 and int(a.headers["content-length"]) > 0
        w.write(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        a = await read_response(r)
        assert a.status == 200 and a.json()["data"][0]["id"] == "tiny"
        assert a.headers["connection"] == "close" and await closed_by_peer(r)
    finally:
        await g.stop()


class CountingEngine:
    """A vLLM-like engine (aiohttp) that records the client port of each request: one port = one connection."""

    def __init__(self) -> None:
        self.name = "a"
        self.ports: list[int] = []
        self.disconnects = 0
        self.release: asyncio.Event = asyncio.Event()
        self.url = ""

    async def start(self) -> CountingEngine:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completion)
        app.router.add_get("/metrics", self.metrics)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def completion(self, request: web.Request) -> web.StreamResponse:
        self.ports.append(request.transport.get_extra_info("peername")[1])
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            await resp.write(b"data: first\n\n")
            for _ in range(body.get("big", 0)):
                await resp.write(b"data: " + b"x" * 65536 + b"\n\n")
            if body.get("hold"):
                await self.release.wait()
            await resp.write(b"data: [DONE]\n\n")
        except asyncio.CancelledError:
            self.disconnects += 1
            raise
        await resp.write_eof()
        return resp


async def test_keep_alive_reuses_both_connections_and_a_client_gone_mid_stream_closes_its_upstream():
    eng = await CountingEngine().start()
    g = await start_gateway([eng])
    try:
        r, w = await connect(g)
        for i in range(5):
            w.write(post_bytes("/v1/completions", completion(f"k{i}", stream=True)))
            a = await read_response(r)
            assert a.status == 200 and a.body == b"data: first\n\ndata: [DONE]\n\n"
            assert a.headers["content-type"] == "text/event-stream" and a.headers["transfer-encoding"] == "chunked"
        assert len(eng.ports) == 5 and len(set(eng.ports)) == 1  # one engine connection for all five
        assert len(g.gateway.connections) == 1  # and one client connection
        w.write(post_bytes("/v1/completions", completion("held", stream=True, hold=True)))
        head = await r.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0]
        assert b"data: first" in await r.readuntil(b"data: first\n\n\r\n")  # the first chunk, before the rest
        w.close()  # the client leaves mid-stream
        await wait_for(lambda: eng.disconnects == 1, what="the engine to see its request cancelled")
        await wait_for(lambda: g.policy.engines["a"].in_flight == 0, what="the slot to be freed")
        assert g.gateway.pool.idle_count(eng.url) == 0  # that connection was closed, not pooled
        r, w = await connect(g)
        w.write(post_bytes("/v1/completions", completion("after", stream=True)))
        assert (await read_response(r)).status == 200
        assert eng.ports[-1] != eng.ports[0]  # a new engine connection
        assert g.state.metrics.requests.get(("batch", "499")) == 1
    finally:
        await g.stop()
        await eng.runner.cleanup()


async def test_an_engine_closing_mid_answer_cuts_the_clients_stream_and_is_counted():
    async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"d\r\ndata: first\n\n\r\n")
        await writer.drain()
        writer.close()  # mid-answer: no [DONE], no last chunk

    server = await asyncio.start_server(engine, "127.0.0.1", 0)
    up = Upstream("a")
    up.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    g = await start_gateway([up])
    try:
        r, w = await connect(g)
        w.write(post_bytes("/v1/completions", completion("cut", stream=True)))
        a = await read_response(r)
        assert a.status == 200 and not a.complete
        assert a.body == b"data: first\n\n" and b"[DONE]" not in a.body
        assert await closed_by_peer(r)
        assert g.state.metrics.upstream_errors == {("a", "reset"): 1}
        await wait_for(lambda: g.policy.engines["a"].in_flight == 0, what="the slot to be freed")
    finally:
        await g.stop()
        server.close()


async def test_an_answer_with_a_length_is_relayed_as_is_and_expect_continue_is_honoured(upstream):
    g = await start_gateway([upstream])
    try:
        r, w = await connect(g)
        body = completion("expect")
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body))
        assert (await r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 Continue")
        w.write(body)
        a = await read_response(r)
        assert a.status == 200 and "transfer-encoding" not in a.headers
        assert int(a.headers["content-length"]) == len(a.body) and a.json()["choices"][0]["text"] == " ok"
    finally:
        await g.stop()


async def test_a_client_that_reads_slowly_pauses_the_engine_connection_and_the_answer_arrives_whole():
    eng = await CountingEngine().start()
    g = await start_gateway([eng])
    try:
        r, w = await connect(g)
        w.write(post_bytes("/v1/completions", completion("big", stream=True, big=200)))  # ~13 MB
        # the client reads nothing: the gateway's buffer to it fills and it stops reading the engine
        await wait_for(lambda: any(c.reading_paused for c in g.gateway.pool._all), what="the engine read to pause")
        a = await read_response(r)  # now the client reads everything
        assert a.status == 200 and a.complete
        assert a.body.count(b"data: ") == 202 and a.body.endswith(b"data: [DONE]\n\n")
        await wait_for(lambda: g.gateway.pool.idle_count(eng.url) == 1, what="the connection back in the pool")
        assert not any(c.reading_paused for c in g.gateway.pool._all)  # resumed before it was pooled
        w.write(post_bytes("/v1/completions", completion("next", stream=True)))
        assert (await read_response(r)).body == b"data: first\n\ndata: [DONE]\n\n"
        assert len(set(eng.ports)) == 1  # the same engine connection served both
    finally:
        await g.stop()
        await eng.runner.cleanup()


async def test_a_request_reset_on_kept_alive_connections_is_retried_on_a_new_one():
    """An engine closes a kept-alive connection as the next request arrives on it (uvicorn closes one idle
    for its keep-alive timeout, 5 s in vLLM): several pooled connections can go at once. The retry goes on
    a new connection, not on the next pooled one (a CI run got three resets in a row and a 502)."""
    arrived: list[asyncio.StreamWriter] = []
    gate = asyncio.Event()
    served = []

    async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = True
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if head.startswith(b"GET"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                writer.close()
                return
            length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length")))
            await reader.readexactly(length)
            if not first:  # the idle timeout struck as this request came: closed, unanswered
                writer.close()
                return
            first = False
            arrived.append(writer)
            if len(arrived) == 3:
                gate.set()
            await gate.wait()  # three requests at once: three connections, all pooled after
            body = b'{"object": "text_completion", "choices": []}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
            served.append(writer)

    server = await asyncio.start_server(engine, "127.0.0.1", 0)
    up = Upstream("a")
    up.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    g = await start_gateway([up], caps={"a": 4})
    try:
        async def one(prompt: str) -> Response:
            r, w = await connect(g)
            w.write(post_bytes("/v1/completions", completion(prompt)))
            try:
                return await read_response(r)
            finally:
                w.close()

        assert [a.status for a in await asyncio.gather(*(one(f"p{i}") for i in range(3)))] == [200] * 3
        await wait_for(lambda: g.gateway.pool.idle_count(up.url) == 3, what="three pooled connections")
        a = await one("after")
        assert a.status == 200, a.body
        assert len(served) == 4  # on a fourth connection, after one reset
        assert g.state.metrics.upstream_errors == {("a", "reset"): 1}
        # pooled connections idle for longer than vLLM keeps them are not tried at all
        from infertop.gateway.upstream_pool import IDLE_REUSE_S
        assert IDLE_REUSE_S < 5.0  # VLLM_HTTP_TIMEOUT_KEEP_ALIVE's default
        for conn in g.gateway.pool._idle[g.gateway.pool.origin(up.url).key]:
            conn.idle_since -= IDLE_REUSE_S + 0.01
        assert (await one("later")).status == 200
        assert len(served) == 5 and g.state.metrics.upstream_errors == {("a", "reset"): 1}
    finally:
        await g.stop()
        server.close()
