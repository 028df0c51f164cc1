"""A small vLLM-like upstream for the gateway tests: real HTTP on loopback (aiohttp).

It answers /v1/completions and /v1/chat/completions (plain or streamed), serves a
vLLM-shaped /metrics, and records what it received. Behaviour is switched per test:
``hold`` (an asyncio.Event each request waits on), ``mode`` ("ok", "hang", "fail503"),
``chunk_gate`` (a streamed answer waits on it between its first and second chunk).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from vllm_text import v1_doc


class Upstream:
    def __init__(self, name: str = "up") -> None:
        self.name = name
        self.mode = "ok"
        self.delay_s = 0.0
        self.hold: asyncio.Event | None = None
        self.chunk_gate: asyncio.Event | None = None
        self.received: list[dict] = []  # request bodies, in arrival order
        self.in_flight = 0
        self.cancelled = 0  # requests whose client (the gateway) went away
        self.finished = 0
        self.kv = 0.1
        self.waiting = 0
        self.refuse_priority = False
        self.metrics_status = 200
        self.arrived = asyncio.Event()
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completion)
        app.router.add_post("/v1/chat/completions", self.completion)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        return app

    async def start(self) -> Upstream:
        self._runner = web.AppRunner(self.app(), handler_cancellation=True, shutdown_timeout=0.05)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._port).start()
        self._port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{self._port}"
        return self

    async def stop(self) -> None:
        """Die: close the port and drop every connection (the same port can start again)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def metrics(self, request: web.Request) -> web.Response:
        if self.metrics_status != 200:
            return web.Response(status=self.metrics_status, text="busy")
        doc = v1_doc(engines={"0": {"running": self.in_flight, "waiting": self.waiting, "kv": self.kv}})
        return web.Response(text=doc, content_type="text/plain")

    async def completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.refuse_priority and body.get("priority", 0) != 0:
            return web.json_response({"error": {"message": f"Got priority {body['priority']} != 0, but priority "
                                                           "scheduling is not enabled.", "code": 400}}, status=400)
        self.received.append(body)
        self.arrived.set()
        self.in_flight += 1
        try:
            if self.mode == "fail503":
                return web.json_response({"error": {"message": "overloaded"}}, status=503)
            if self.mode == "hang":
                await asyncio.Event().wait()
            if self.hold is not None:
                await self.hold.wait()
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if not body.get("stream"):
                self.finished += 1
                return web.json_response({"object": "text_completion", "upstream": self.name,
                                          "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}]})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(int(body.get("max_tokens") or 3)):
                chunk = {"object": "text_completion", "choices": [{"index": 0, "text": f" t{i}"}]}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                if i == 0 and self.chunk_gate is not None:
                    await self.chunk_gate.wait()
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.finished += 1
            return resp
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1


async def wait_for(cond, timeout_s: float = 15.0, what: str = "condition") -> None:
    """Poll ``cond()`` until true, failing after a bounded deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def start_gateway(upstreams, *, token: str | None = "tok", caps=None, classes=None, timeouts=None,
                        prio=None, **kw):
    """A gateway in this process on ephemeral loopback ports in front of ``upstreams``."""
    from infertop.gateway.config import GatewayClass, GatewayConfig, GatewayEngine
    from infertop.gateway.runner import GatewayRunner, resolve_engines

    kw.setdefault("metrics_poll_s", 0.1)
    gw = GatewayConfig(listen="127.0.0.1:0", admin_listen="127.0.0.1:0",
                       classes=[GatewayClass(**c) for c in classes or []], **kw)
    for i, u in enumerate(upstreams):
        gw.engines.append(GatewayEngine(url=u.url, name=u.name, cap=(caps or {}).get(u.name, 4),
                                        timeout_s=(timeouts or {}).get(u.name, 30.0),
                                        priority_scheduling=prio))
    assert not gw.validate(), gw.validate()
    return await GatewayRunner(gw, resolve_engines(gw), token).start()
