"""CPU of fetching /metrics from 64 simulated engines: httpx, infertop's lean client
(sources/http_client.py, what the engine polls use) and a bare keep-alive HTTP/1.1
GET on asyncio streams, side by side in one run.

    .venv/bin/python benchmarks/bench_http.py [--engines 64] [--cycles 20]

Only the fetch is measured (no parsing): how much of a collection cycle is
the HTTP client's own overhead. The bare client is a measuring stick, not a
proposal to drop httpx: it bounds what a lighter transport could save.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from urllib.parse import urlsplit

import httpx

from infertop.demo import start_demo
from infertop.sources.http_client import LeanHttpClient


class BareConnection:
    """One keep-alive connection; GET with Content-Length or chunked bodies."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> bytes:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAccept-Encoding: identity\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)}
        if b"content-length" in headers:
            return await self.reader.readexactly(int(headers[b"content-length"]))
        body = bytearray()
        while True:  # chunked
            size = int((await self.reader.readline()).strip(), 16)
            if size == 0:
                await self.reader.readline()
                return bytes(body)
            body += await self.reader.readexactly(size)
            await self.reader.readline()


async def measure(urls: list[str], cycles: int) -> tuple[float, float, float, int]:
    clients = [httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=4, max_keepalive_connections=4))
               for _ in urls]  # one client per engine, as EngineCollector has
    bare = [BareConnection(u) for u in urls]
    lean = [LeanHttpClient() for _ in urls]

    async def lean_cycle() -> int:
        rs = await asyncio.gather(*(c.get(u + "/metrics", 8 << 20) for c, u in zip(lean, urls)))
        return sum(len(body) for _, body in rs)

    async def httpx_cycle() -> int:
        rs = await asyncio.gather(*(c.get(u + "/metrics") for c, u in zip(clients, urls)))
        return sum(len(r.content) for r in rs)

    async def bare_cycle() -> int:
        bodies = await asyncio.gather(*(b.get("/metrics") for b in bare))
        return sum(len(x) for x in bodies)

    size = await httpx_cycle()
    size_bare = await bare_cycle()
    assert abs(size - size_bare) < 0.2 * size, (size, size_bare)
    await lean_cycle()
    a, b, c3 = [], [], []
    for _ in range(cycles):  # interleaved, so that load on the machine hits both alike
        t0 = time.process_time()
        await httpx_cycle()
        a.append(time.process_time() - t0)
        t0 = time.process_time()
        await bare_cycle()
        b.append(time.process_time() - t0)
        t0 = time.process_time()
        await lean_cycle()
        c3.append(time.process_time() - t0)
        await asyncio.sleep(0.2)
    for c in clients:
        await c.aclose()
    for x in bare:
        if x.writer is not None:
            x.writer.close()
    for c in lean:
        await c.aclose()
    return statistics.median(a), statistics.median(b), statistics.median(c3), size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", type=int, default=64)
    ap.add_argument("--cycles", type=int, default=20)
    args = ap.parse_args(argv)
    demo = start_demo(args.engines, seed=3, load="steady", timeout_s=120)
    try:
        ours, bare, lean, size = asyncio.run(measure([e.url for e in demo.endpoints], args.cycles))
    finally:
        demo.stop()
    print(f"{args.engines} engines, {size / args.engines / 1024:.1f} KiB of /metrics each, CPU ms per cycle (median):")
    print(f"  httpx {ours * 1e3:.1f}   bare asyncio {bare * 1e3:.1f}   ratio {ours / bare:.1f}x"
          f"   → httpx {ours * 100:.1f}% vs {bare * 100:.1f}% of a core at 1 s refresh")
    print(f"  lean client {lean * 1e3:.1f} ms per cycle = {lean * 100:.1f}% of a core; httpx/lean {ours / lean:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
