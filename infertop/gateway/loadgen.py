"""An HTTP load generator for the gateway: closed-loop clients per class (the demo's traffic).

Each class has N clients; a client sends one streamed completion at a time through
the gateway (``x-infertop-class``, a tenant as fairness id), reads it to the end,
then pauses ``think_s`` (exponential) — so while the clients outnumber the engines'
slots, every class stays backlogged and the weights decide the shares.

    python -m infertop.gateway.loadgen http://127.0.0.1:8100 [--clients realtime=6,batch=16,background=8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from dataclasses import dataclass, field

import aiohttp

DEFAULT_CLIENTS = {"realtime": 6, "batch": 16, "background": 8}
_WORDS = ("queue", "batch", "token", "engine", "cache", "prefill", "decode", "latency", "priority", "weight")


@dataclass
class LoadStats:
    sent: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)

    def count(self, table: dict[str, int], cls: str) -> None:
        table[cls] = table.get(cls, 0) + 1


class LoadGen:
    def __init__(self, url: str, clients: dict[str, int] | None = None, *, think_s: float = 0.2,
                 max_tokens: tuple[int, int] = (8, 40), seed: int = 7, tenants: int = 3) -> None:
        self.url = url.rstrip("/") + "/v1/completions"
        self.clients = dict(clients or DEFAULT_CLIENTS)
        self.think_s = think_s
        self.max_tokens = max_tokens
        self.rng = random.Random(seed)
        self.tenants = tenants
        self.stats = LoadStats()

    async def run(self, duration_s: float | None = None) -> LoadStats:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(self._client(session, cls, i))
                     for cls, n in self.clients.items() for i in range(n)]
            try:
                if duration_s is None:
                    await asyncio.gather(*tasks)
                else:
                    await asyncio.sleep(duration_s)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return self.stats

    async def _client(self, session: aiohttp.ClientSession, cls: str, i: int) -> None:
        rng = random.Random(self.rng.random())
        headers = {"x-infertop-class": cls, "x-infertop-tenant": f"tenant-{i % self.tenants}"}
        while True:
            body = {"prompt": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 40))),
                    "max_tokens": rng.randint(*self.max_tokens), "stream": True}
            self.stats.count(self.stats.sent, cls)
            try:
                async with session.post(self.url, data=json.dumps(body), headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=300)) as r:
                    async for _ in r.content.iter_any():
                        pass
                    self.stats.count(self.stats.ok if r.status == 200 else self.stats.failed, cls)
                    if r.status != 200:
                        await asyncio.sleep(0.5)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                self.stats.count(self.stats.failed, cls)
                await asyncio.sleep(0.5)
            await asyncio.sleep(rng.expovariate(1.0 / self.think_s) if self.think_s > 0 else 0)


def parse_clients(text: str) -> dict[str, int]:
    """``realtime=6,batch=16`` → {"realtime": 6, "batch": 16}; raises ValueError."""
    out = {}
    for part in text.split(","):
        name, sep, n = part.partition("=")
        if not sep or not name.strip() or not n.strip().isdigit():
            raise ValueError(f"expected CLASS=N[,CLASS=N...], got {text!r}")
        out[name.strip()] = int(n)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infertop.gateway.loadgen", description=__doc__.split("\n")[0])
    p.add_argument("url", help="the gateway, e.g. http://127.0.0.1:8100")
    p.add_argument("--clients", default="realtime=6,batch=16,background=8", help="clients per class")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds")
    p.add_argument("--think", type=float, default=0.2, metavar="S", help="mean pause between requests")
    args = p.parse_args(argv)
    try:
        clients = parse_clients(args.clients)
    except ValueError as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return 2
    try:
        stats = asyncio.run(LoadGen(args.url, clients, think_s=args.think).run(args.duration))
    except KeyboardInterrupt:
        return 130
    print(json.dumps({"sent": stats.sent, "ok": stats.ok, "failed": stats.failed}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
