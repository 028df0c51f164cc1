"""The gateway against hostile engines and hostile clients, all on loopback.

Engines: endless or dripping response heads, an unsolicited ``100 Continue``. Clients: a deeply
nested JSON body, heads dripped or endless, more connections than the cap. Each ends in a clear
answer naming the limit (502/504/400/408/431/503), memory stays flat, and good requests keep working.
"""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp
import pytest

import infertop.gateway.upstream_pool as upstream_pool
from gateway_upstream import Upstream, start_gateway, wait_for

MIB = 1024 * 1024
HOSTILE_BUDGET_BYTES = 64 * MIB  # the most a hostile engine sends before giving up by itself


class RawEngine:
    """An engine speaking raw HTTP: /metrics answers an empty document; a POST is answered by ``answer``
    (a coroutine of the writer), which may misbehave. ``sent_bytes``: what ``answer`` wrote in all."""

    def __init__(self, answer) -> None:
        self.name = "raw"
        self.answer = answer
        self.sent_bytes = 0
        self.url = ""
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> RawEngine:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        self.sent_bytes += len(data)
        await writer.drain()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                if head.startswith(b"GET /metrics"):
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    continue
                await self.answer(self, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def post(url: str, body: bytes = b'{"prompt": "hi"}', timeout_s: float = 20.0) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
        async with s.post(url + "/v1/completions", data=body) as r:
            return r.status, await r.text()


async def endless_names(engine: RawEngine, writer) -> None:
    await engine.write(writer, b"HTTP/1.1 200 OK\r\n")
    for i in range(HOSTILE_BUDGET_BYTES // 32):
        await engine.write(writer, b"X-Header-%08d: %s\r\n" % (i, b"v" * 12))


async def endless_value(engine: RawEngine, writer) -> None:
    await engine.write(writer, b"HTTP/1.1 200 OK\r\nX-Endless: ")
    for _ in range(HOSTILE_BUDGET_BYTES // 4096):
        await engine.write(writer, b"v" * 4096)


@pytest.mark.parametrize("answer", [endless_names, endless_value], ids=["many headers", "one endless header"])
async def test_endless_response_headers_are_cut_with_a_502_naming_the_limit_and_memory_stays_flat(answer):
    engine = await RawEngine(answer).start()
    g = await start_gateway([engine], timeouts={"raw": 30.0})
    try:
        rss_before = rss_bytes()
        status, text = await post(g.url)
        grown = rss_bytes() - rss_before
        print(f"engine sent {engine.sent_bytes / MIB:.2f} MiB; RSS grew {grown / MIB:.1f} MiB")
        assert status == 502
        assert "response headers over 64 KiB" in json.loads(text)["error"]["message"]
        assert engine.sent_bytes < 32 * MIB  # 3 tries, each cut at 64 KiB (the rest sat in socket buffers)
        assert grown < 32 * MIB
    finally:
        await g.stop()
        await engine.stop()


async def test_a_dripping_response_head_is_cut_with_a_504_naming_the_timeout(monkeypatch):
    monkeypatch.setattr(upstream_pool, "HEAD_READ_TIMEOUT_S", 0.5)  # our own limit, shortened for the test

    async def drip(engine: RawEngine, writer) -> None:
        await engine.write(writer, b"HTTP/1.1 200 OK\r\n")
        for i in range(2000):  # 100 s at most: a byte every 50 ms keeps the idle timeout from firing
            await engine.write(writer, b"X-%d: v\r\n" % i)
            await asyncio.sleep(0.05)

    engine = await RawEngine(drip).start()
    g = await start_gateway([engine], timeouts={"raw": 30.0})
    try:
        status, text = await post(g.url, timeout_s=15.0)
        assert status == 504
        assert "response headers not complete within 0.5 s" in json.loads(text)["error"]["message"]
    finally:
        await g.stop()
        await engine.stop()


async def test_an_unsolicited_100_continue_is_skipped_and_the_final_answer_relayed(monkeypatch):
    # the pause after the 100 is longer than the head-read timeout: that bounds one head, not the wait after a 1xx
    monkeypatch.setattr(upstream_pool, "HEAD_READ_TIMEOUT_S", 0.1)
    doc = b'{"object": "text_completion", "choices": []}'

    async def continue_then_ok(engine: RawEngine, writer) -> None:
        await engine.write(writer, b"HTTP/1.1 100 Continue\r\n\r\n")
        await asyncio.sleep(0.2)  # scripted: the final answer in a later packet, as a busy engine would
        await engine.write(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(doc), doc))

    engine = await RawEngine(continue_then_ok).start()
    g = await start_gateway([engine])
    request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    try:
        for _ in range(2):  # read raw: aiohttp would itself skip a relayed 1xx
            reader, writer = await raw_client(port_of(g.url), request)
            answer = await asyncio.wait_for(reader.read(), 10.0)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(doc), answer[:200]
    finally:
        await g.stop()
        await engine.stop()


async def test_a_101_answer_is_not_relayed_but_a_502():
    async def switch(engine: RawEngine, writer) -> None:
        await engine.write(writer, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n")

    engine = await RawEngine(switch).start()
    g = await start_gateway([engine])
    try:
        status, text = await post(g.url)
        assert status == 502 and "malformed HTTP response" in text
    finally:
        await g.stop()
        await engine.stop()


async def test_a_deeply_nested_json_body_is_a_400_not_a_500():
    up = await Upstream("a").start()
    g = await start_gateway([up])
    try:
        status, text = await post(g.url, b"[" * 100_000 + b"]" * 100_000)
        assert status == 400 and "nested too deeply" in json.loads(text)["error"]["message"]
        assert (await post(g.url))[0] == 200  # the gateway still serves
    finally:
        await g.stop()
        await up.stop()


async def raw_client(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def test_a_client_dripping_its_head_gets_408_and_is_closed():
    up = await Upstream("a").start()
    g = await start_gateway([up], client_header_timeout_s=0.5)
    try:
        reader, writer = await raw_client(port_of(g.url), b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        answer = await asyncio.wait_for(reader.read(), 10.0)  # to the close
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 ") and b"not complete within 0.5 s" in answer
    finally:
        await g.stop()
        await up.stop()


async def test_a_client_whose_body_goes_silent_gets_408_and_is_closed():
    up = await Upstream("a").start()
    g = await start_gateway([up], client_header_timeout_s=0.5)
    try:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        reader, writer = await raw_client(port_of(g.url), head + b'{"prompt":')
        answer = await asyncio.wait_for(reader.read(), 10.0)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 ") and b"request body: no byte for 0.5 s" in answer
        assert up.received == []
    finally:
        await g.stop()
        await up.stop()


async def test_an_endless_request_header_is_a_431_not_a_growing_buffer():
    up = await Upstream("a").start()
    g = await start_gateway([up])
    try:
        reader, writer = await raw_client(port_of(g.url), b"GET /health HTTP/1.1\r\nX-Endless: ")
        try:
            for _ in range(2048):  # 8 MiB at most
                writer.write(b"a" * 4096)
                await writer.drain()
        except ConnectionError:
            pass  # cut by the gateway
        answer = await asyncio.wait_for(reader.read(), 10.0)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431 ")
    finally:
        await g.stop()
        await up.stop()


async def test_dripping_clients_over_the_cap_are_refused_and_good_requests_keep_working():
    up = await Upstream("a").start()
    cap = 50
    g = await start_gateway([up], max_client_connections=cap, client_header_timeout_s=1.0)
    port = port_of(g.url)
    held: list[asyncio.StreamWriter] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as good:
            async with good.post(g.url + "/v1/completions", json={"prompt": "x"}) as r:
                assert r.status == 200
                await r.read()
            readers = []
            for _ in range(300):  # a slowloris: each sends part of a head and then nothing
                reader, writer = await raw_client(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                readers.append(reader)
                held.append(writer)
            assert len(g.gateway.connections) <= cap
            # the kept-alive good connection is served while the cap is full
            async with good.post(g.url + "/v1/completions", json={"prompt": "y"}) as r:
                assert r.status == 200
                await r.read()
            answers = await asyncio.wait_for(asyncio.gather(*(rd.read() for rd in readers)), 20.0)
            refused = [a for a in answers if a.startswith(b"HTTP/1.1 503 ")]
            timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408 ")]
            assert len(refused) >= 300 - cap and b"too many client connections (limit 50)" in refused[0]
            assert len(refused) + len(timed_out) == 300
        await wait_for(lambda: len(g.gateway.connections) == 0, what="the held connections closed")
        assert (await post(g.url))[0] == 200  # a new client is served once they are gone
    finally:
        for w in held:
            w.close()
        await g.stop()
        await up.stop()


def test_the_client_connection_cap_leaves_half_the_descriptors_to_the_engines(capsys):
    import resource

    from infertop.gateway.server import client_connection_cap

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert client_connection_cap(10) == 10
    if soft != resource.RLIM_INFINITY:
        assert client_connection_cap(soft * 4) == max(16, soft // 2)
        assert "client connections capped at" in capsys.readouterr().err


async def test_a_malformed_body_after_the_head_cuts_the_stream_with_one_log_line(capfd):
    async def negative_chunk(engine: RawEngine, writer) -> None:
        await engine.write(writer, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await asyncio.sleep(0.2)  # scripted: the head reaches the client first
        await engine.write(writer, b"-2\r\nok\r\n0\r\n\r\n")

    engine = await RawEngine(negative_chunk).start()
    g = await start_gateway([engine])
    try:
        with pytest.raises(aiohttp.ClientError):  # the client sees its answer cut, never completed
            await post(g.url)
        err = capfd.readouterr().err
        assert "answer from engine raw cut after its head: malformed HTTP response" in err
        assert "Traceback" not in err
    finally:
        await g.stop()
        await engine.stop()


async def test_a_stream_that_goes_silent_is_cut_at_its_timeout_with_one_log_line(capfd):
    up = await Upstream("a").start()
    up.chunk_gate = asyncio.Event()  # never set: the stream stops after its first chunk
    g = await start_gateway([up], timeouts={"a": 0.5})
    try:
        body = json.dumps({"prompt": "hi", "stream": True, "max_tokens": 3}).encode()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
            async with s.post(g.url + "/v1/completions", data=body) as r:
                assert r.status == 200
                with pytest.raises(aiohttp.ClientPayloadError):  # cut: no last chunk
                    await r.read()
        assert "answer from engine a cut after its head: no byte within its timeout_s" in capfd.readouterr().err
        up.chunk_gate.set()
    finally:
        await g.stop()
        await up.stop()
