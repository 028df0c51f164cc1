"""The engine HTTP client against engines that answer malformed HTTP: a raw loopback server per case.

Each answer must end as one clear :class:`HttpError` line (never a ValueError's text), and
an unsolicited ``100 Continue`` before the real answer is skipped.
"""

from __future__ import annotations

import asyncio

import pytest

from infertop.sources.http_client import HttpError, LeanHttpClient

BODY = b"ok"


async def raw_server(answer: bytes):
    """A loopback server that reads one request head and writes ``answer`` as is, then closes."""
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"


async def fetch(answer: bytes) -> tuple[int, bytes]:
    server, url = await raw_server(answer)
    client = LeanHttpClient(timeout_s=5.0)
    try:
        return await client.get(url, 1 << 20)
    finally:
        client.close()
        server.close()
        await server.wait_closed()


MALFORMED = [
    ("superscript status", b"HTTP/1.1 \xb200 OK\r\nContent-Length: 2\r\n\r\nok", "malformed status line"),
    ("two-digit status", b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nok", "malformed status line"),
    ("superscript length", b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nok", "malformed Content-Length"),
    ("negative length", b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok", "malformed Content-Length"),
    ("conflicting lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 1\r\n\r\nok",
     "conflicting Content-Length"),
    ("negative chunk", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\nok\r\n0\r\n\r\n", "chunk size"),
    ("0x chunk", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n", "chunk size"),
    ("switching protocols", b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101"),
    ("endless 100s", b"HTTP/1.1 100 Continue\r\n\r\n" * 50, "interim"),
]


@pytest.mark.parametrize("answer,why", [(a, w) for _, a, w in MALFORMED], ids=[n for n, _, _ in MALFORMED])
async def test_a_malformed_answer_is_one_clear_error_line(answer, why):
    with pytest.raises(HttpError) as err:
        await fetch(answer)
    text = str(err.value)
    assert why in text and "\n" not in text
    assert "invalid literal" not in text  # a ValueError's text never reaches the status bar


async def test_an_unsolicited_100_continue_is_skipped_and_the_final_answer_read():
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    assert await fetch(answer) == (200, BODY)


async def test_a_repeated_equal_content_length_is_accepted():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"
    assert await fetch(answer) == (200, BODY)
