"""The proxy: aiohttp server for clients, one aiohttp client session to the engines.

A completion request is read (≤ ``max_body_bytes``), classified, queued in the
:class:`~infertop.gateway.policy.Policy` and waits on a future until the policy
hands it an engine; then the upstream answer is passed through chunk by chunk.
Dispatch runs synchronously whenever something changes (an arrival, a finished
request, an admin change, an engine coming back) and on a timer for promotions
and batching waits — no dispatcher task, no polling.

Failure rules: a connect error, a connect timeout or a 5xx before any byte went to
the client re-queues the request for another engine (502 only when none is left);
an upstream that stays silent for its ``timeout_s`` answers 504 (it may be working
on the request, so it is not retried); a client that disconnects cancels its
upstream request (the connection to the engine is closed).
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from yarl import URL

from .metrics import GatewayMetrics
from .policy import EngineState, Pending, Policy, vllm_priority

CLASS_HEADERS = ("x-gateway-inference-objective", "x-infertop-class")
FAIRNESS_HEADERS = ("x-gateway-inference-fairness-id", "x-infertop-tenant")
_PASS_HEADERS = ("Content-Type", "Cache-Control")  # from the engine's answer to the client
_PRIORITY_REFUSED = b"priority scheduling is not enabled"
_JSON_HEADERS = {"Content-Type": "application/json"}  # to the engine; aiohttp copies it, never changes it
MAX_ATTEMPTS = 3  # tries of one request on engines that failed it before it started


def error_body(status: int, message: str, typ: str = "invalid_request_error") -> bytes:
    """An OpenAI-style error document."""
    return json.dumps({"error": {"message": message, "type": typ, "param": None, "code": status}}).encode()


def json_error(status: int, message: str, typ: str = "invalid_request_error") -> web.Response:
    return web.Response(status=status, body=error_body(status, message, typ), content_type="application/json")


class _PassThrough(web.StreamResponse):
    """A streamed answer whose headers leave with its first chunk (one write, not two)."""

    _send_headers_immediately = False


class _NotStarted(Exception):
    """The engine failed the request before any byte reached the client (re-queue it)."""

    def __init__(self, code: str) -> None:
        self.code = code


@dataclass
class EngineOptions:
    timeout_s: float = 300.0
    connect_timeout_s: float = 2.0

    @functools.cached_property
    def client_timeout(self) -> aiohttp.ClientTimeout:
        """No total limit (a long stream is fine); the engine must connect, and never go silent, for long."""
        return aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s, sock_read=self.timeout_s)


@dataclass
class GatewayState:
    """What the server, the admin API and the pollers share."""

    policy: Policy
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    options: dict[str, EngineOptions] = field(default_factory=dict)  # per engine name
    api_keys: dict[str, str] = field(default_factory=dict)
    max_body_bytes: int = 4 * 1024 * 1024


class Gateway:
    """The client-facing proxy. ``app`` serves /v1/*, /health and /metrics."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self.policy = state.policy
        self.metrics = state.metrics
        self.session: aiohttp.ClientSession | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._urls: dict[tuple[str, str], URL] = {}
        self.app = web.Application(client_max_size=state.max_body_bytes)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/chat/completions", self.completions)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/metrics", self.metrics_page)
        self.app.on_startup.append(self._start)
        self.app.on_cleanup.append(self._stop)

    def now(self) -> float:
        return (self._loop or asyncio.get_running_loop()).time()

    async def _start(self, app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()  # kept: looking it up costs a getpid() call each time
        if self.session is None:
            # no pool limit: the policy's caps bound what goes to each engine
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30),
                auto_decompress=False, skip_auto_headers=("User-Agent",))

    async def _stop(self, app: web.Application) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.session is not None:
            await self.session.close()

    # -- dispatch ---------------------------------------------------------------------------------

    def pump(self) -> None:
        """Hand every request that can leave now to its engine, then re-arm the timer."""
        pol = self.policy
        if not pol.queued:
            return
        now = self.now()
        pol.promote_due(now)
        for p, e in pol.dispatch(now):
            fut: asyncio.Future = p.token
            if fut.done():  # its client left between dispatch and now
                pol.finish(p, e.name)
                continue
            self.metrics.observe_wait(p.origin, now - p.arrived_at)
            fut.set_result(e)
        wake = pol.next_wakeup(now) if pol.queued else None
        if wake is not None and (self._timer_at is None or wake < self._timer_at or self._timer_at <= now):
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = wake
            self._timer = (self._loop or asyncio.get_running_loop()).call_at(wake + 0.0005, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, None
        self.pump()

    def engines_changed(self) -> None:
        """An engine went down, came up, drained or undrained: dispatch, and answer 502 to
        queued requests no engine can take any more."""
        for p in self.policy.unroutable():
            fut: asyncio.Future = p.token
            if not fut.done():
                fut.set_result(None)
        self.pump()

    # -- client routes ----------------------------------------------------------------------------

    def _classify(self, request: web.Request) -> tuple[str, str]:
        h = request.headers
        name = None
        for key in CLASS_HEADERS:
            name = h.get(key)
            if name:
                break
        if not name and self.state.api_keys:
            auth = h.get("Authorization", "")
            if auth[:7].lower() == "bearer ":
                name = self.state.api_keys.get(auth[7:].strip())
        fid = ""
        for key in FAIRNESS_HEADERS:
            fid = h.get(key, "")
            if fid:
                break
        return self.policy.class_of(name), fid[:256]

    async def _read_body(self, request: web.Request) -> bytes | None:
        """The body, or None when it is larger than allowed."""
        limit = self.state.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return None
        chunks, size = [], 0
        while True:
            chunk = await request.content.readany()
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        cls, fid = self._classify(request)
        body = await self._read_body(request)
        if body is None:
            self.metrics.answered(cls, 413)
            return json_error(413, f"request body larger than {self.state.max_body_bytes} bytes")
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            self.metrics.answered(cls, 400)
            return json_error(400, f"Invalid JSON body: {str(e)[:200]}")
        if not isinstance(doc, dict):
            self.metrics.answered(cls, 400)
            return json_error(400, "Invalid JSON body: expected a JSON object")
        loop = self._loop or asyncio.get_running_loop()
        p = Pending(origin=cls, fairness_id=fid, arrived_at=loop.time(), token=loop.create_future())
        pol = self.policy
        if not pol.can_route(p):
            self.metrics.answered(cls, 502)
            return json_error(502, "no engine can take the request (all down or draining)", "upstream_error")
        if not pol.enqueue(p, p.arrived_at):
            self.metrics.answered(cls, 429)
            return json_error(429, f"the gateway queue is full ({pol.max_queue} requests)", "rate_limit_error")
        self.pump()
        code: int | str = 499  # the client went away unless something else is said below
        try:
            while True:
                engine = await p.token
                if engine is None:
                    code = 502
                    return json_error(502, "no engine can take the request", "upstream_error")
                try:
                    resp, code = await self._proxy(request, engine, body, doc, p)
                    return resp
                except _NotStarted as ns:
                    self.metrics.upstream_error(engine.name, ns.code)
                    if ns.code == "connect" and engine.up:
                        engine.up = False  # until its /metrics answers again
                    # a dropped keep-alive connection is retried once on the same engine
                    exclude = ns.code != "reset" or engine.name in p.resets
                    p.resets.add(engine.name)
                    p.attempts += 1
                    again = pol.requeue(p, engine.name, loop.time(), exclude=exclude)
                    if not again and ns.code != "connect" and p.attempts < MAX_ATTEMPTS:
                        # no other engine: a transient failure (timeout, 5xx) is retried where it was
                        p.excluded.discard(engine.name)
                        again = pol.requeue(p, engine.name, loop.time(), exclude=False)
                    p.token = loop.create_future()
                    if not again:
                        code = 502
                        return json_error(502, f"the request failed on every engine that could take it "
                                               f"(last: {engine.name}: {ns.code})", "upstream_error")
                    if engine.up:
                        self.pump()
                    else:
                        self.engines_changed()  # queued requests only it could take get their 502
        except asyncio.CancelledError:
            fut = p.token
            if p.queued:
                pol.cancel(p)
            elif fut.done() and not fut.cancelled() and isinstance(fut.result(), EngineState) and p.dispatched_cls:
                pol.finish(p, fut.result().name)  # dispatched, but the client left before we used it
                self.pump()
            raise
        finally:
            self.metrics.answered(cls, code)

    def _url(self, engine: EngineState, path: str) -> URL:
        """The engine's URL for ``path``, parsed once (aiohttp would parse a string per request)."""
        key = (engine.url, path)
        url = self._urls.get(key)
        if url is None:
            url = self._urls[key] = URL(engine.url + path)
        return url

    def _payload(self, engine: EngineState, body: bytes, doc: dict, p: Pending) -> bytes:
        if engine.priority_scheduling is False:
            return body
        prio = vllm_priority(self.policy.classes[p.dispatched_cls or p.cls].priority)
        if "priority" in doc:
            return json.dumps({**doc, "priority": prio}).encode()
        # splice instead of re-encoding: the body is a JSON object, so it ends with "}"
        raw = body.rstrip()
        sep = b"," if doc else b""
        return raw[:-1] + b'%s"priority":%d}' % (sep, prio)

    async def _proxy(self, request: web.Request, engine: EngineState, body: bytes, doc: dict,
                     p: Pending) -> tuple[web.StreamResponse, int]:
        """Send to ``engine`` and stream its answer back. Raises _NotStarted to re-queue."""
        pol = self.policy
        opts = self.state.options.get(engine.name) or EngineOptions()
        timeout = opts.client_timeout
        auth = request.headers.get("Authorization")
        headers = {"Content-Type": "application/json", "Authorization": auth} if auth else _JSON_HEADERS
        assert self.session is not None
        try:
            while True:
                payload = self._payload(engine, body, doc, p)
                try:
                    resp = await self.session.post(self._url(engine, request.path), data=payload,
                                                   headers=headers, timeout=timeout)
                except aiohttp.ConnectionTimeoutError:
                    raise _NotStarted("timeout") from None
                except asyncio.TimeoutError:
                    self.metrics.upstream_error(engine.name, "timeout")
                    return json_error(504, f"engine {engine.name} did not answer within {opts.timeout_s:g} s",
                                      "upstream_error"), 504
                except aiohttp.ClientConnectorError:
                    raise _NotStarted("connect") from None
                except (aiohttp.ClientError, OSError):
                    raise _NotStarted("reset") from None
                if resp.status == 400 and payload is not body and engine.priority_scheduling is None:
                    text = await resp.content.read(65536)
                    resp.release()
                    if _PRIORITY_REFUSED in text:  # detected: this engine runs FCFS; send without priority
                        engine.priority_scheduling = False
                        continue
                    return web.Response(status=400, body=text, content_type="application/json"), 400
                break
            if resp.status >= 500:
                resp.close()
                raise _NotStarted(str(resp.status))
            engine.answered_at = self.now()
            if engine.priority_scheduling is None and payload is not body and resp.status < 300:
                engine.priority_scheduling = True
            if resp.status >= 400:
                self.metrics.upstream_error(engine.name, resp.status)
            return await self._stream(request, engine, resp, opts), resp.status
        finally:
            pol.finish(p, engine.name)
            self.pump()

    async def _stream(self, request: web.Request, engine: EngineState, resp: aiohttp.ClientResponse,
                      opts: EngineOptions) -> web.StreamResponse:
        out = _PassThrough(status=resp.status, reason=resp.reason)
        for key in _PASS_HEADERS:
            v = resp.headers.get(key)
            if v is not None:
                out.headers[key] = v
        clen = resp.headers.get("Content-Length")
        if clen is not None and clen.isdigit():
            out.content_length = int(clen)
        done = False
        try:
            await out.prepare(request)
            content = resp.content
            async for chunk in content.iter_any():
                if content.is_eof():  # the last chunk: it and the end of the answer in one write
                    done = True
                    await out.write_eof(chunk)
                    break
                await out.write(chunk)
            else:
                done = True
                await out.write_eof()
        except asyncio.TimeoutError:
            self.metrics.upstream_error(engine.name, "timeout")
            out.force_close()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if not done:
                self.metrics.upstream_error(engine.name, "reset")
            out.force_close()
        finally:
            if done:
                resp.release()
            else:
                resp.close()  # the engine sees the disconnect and aborts the request
        return out

    async def models(self, request: web.Request) -> web.Response:
        assert self.session is not None
        for e in self.policy.engines.values():
            if not e.up:
                continue
            try:
                async with self.session.get(e.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=5)) as r:
                    data = await r.read()
                    if r.status == 200:
                        return web.Response(body=data, content_type="application/json")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                continue
        return json_error(502, "no engine answered /v1/models", "upstream_error")

    async def health(self, request: web.Request) -> web.Response:
        ok = any(e.routable for e in self.policy.engines.values())
        return web.json_response({"status": "ok" if ok else "no engine available"}, status=200 if ok else 503)

    async def metrics_page(self, request: web.Request) -> web.Response:
        text = self.metrics.render(self.policy, self.now())
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": "no-store"})


def note(msg: str) -> None:
    """One line on stderr (the gateway's only log; never a token or an API key)."""
    print(f"infertop gateway: {msg}", file=sys.stderr, flush=True)
