"""The proxy's policy glue: client requests (:mod:`.http1`) in, engine connections (:mod:`.upstream_pool`) out.

A completion request (its body ≤ ``max_body_bytes``, read by the connection) is
classified, queued in the :class:`~infertop.gateway.policy.Policy` and waits on a
future until the policy hands it an engine; then the upstream answer is passed
through piece by piece as it arrives. Dispatch runs synchronously whenever
something changes (an arrival, a finished request, an admin change, an engine
coming back) and on a timer for promotions and batching waits — no dispatcher
task, no polling.

Failure rules: a connect error, a connect timeout, a connection reset before the
answer's head or a 5xx — all before any byte went to the client — re-queue the
request for another engine (502 only when none is left); an upstream that stays
silent for its ``timeout_s`` answers 504 (it may be working on the request, so it
is not retried); a client that disconnects cancels its upstream request (that
connection to the engine is closed, not returned to the pool).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from dataclasses import dataclass, field

from .http1 import HttpConnection, Request, error_body
from .metrics import GatewayMetrics
from .policy import EngineState, Pending, Policy, vllm_priority
from .upstream_pool import UpstreamConn, UpstreamError, UpstreamPool, refused_reason

CLASS_HEADERS = ("x-gateway-inference-objective", "x-infertop-class")
FAIRNESS_HEADERS = ("x-gateway-inference-fairness-id", "x-infertop-tenant")
# from the engine's answer to the client: (name as parsed, as sent)
_PASS_HEADERS = (("content-type", b"Content-Type"), ("cache-control", b"Cache-Control"))
_PRIORITY_REFUSED = b"priority scheduling is not enabled"
MAX_ATTEMPTS = 3  # tries of one request on engines that failed it before it started
MODELS_TIMEOUT_S = 5.0
_POST, _GET = b"POST", b"GET"

__all__ = ["EngineOptions", "Gateway", "GatewayState", "error_body", "note"]


class _NotStarted(Exception):
    """The engine failed the request before any byte reached the client (re-queue it)."""

    def __init__(self, code: str) -> None:
        self.code = code


@dataclass
class EngineOptions:
    timeout_s: float = 300.0  # the engine may not go silent for longer (no limit on a long stream)
    connect_timeout_s: float = 2.0


@dataclass
class GatewayState:
    """What the server, the admin API and the pollers share."""

    policy: Policy
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    options: dict[str, EngineOptions] = field(default_factory=dict)  # per engine name
    api_keys: dict[str, str] = field(default_factory=dict)
    max_body_bytes: int = 4 * 1024 * 1024
    header_timeout_s: float = 10.0  # a client's request head must be in within this (else 408)
    max_connections: int = 4096  # client connections at once; more get 503 and are closed


class Gateway:
    """The client-facing proxy: ``await serve(host, port)`` answers /v1/*, /health and /metrics."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self.policy = state.policy
        self.metrics = state.metrics
        self.pool: UpstreamPool | None = None
        self.connections: set[HttpConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # path → (method, handler, answered by a task)
        self._routes = {"/v1/completions": (_POST, self.completions, True),
                        "/v1/chat/completions": (_POST, self.completions, True),
                        "/v1/models": (_GET, self.models, True),
                        "/health": (_GET, self.health, False),
                        "/metrics": (_GET, self.metrics_page, False)}

    def now(self) -> float:
        return (self._loop or asyncio.get_running_loop()).time()

    async def serve(self, host: str, port: int) -> int:
        """Listen for clients; returns the bound port."""
        loop = self._loop = asyncio.get_running_loop()  # kept: looking it up costs a getpid() call each time
        if self.pool is None:
            self.pool = UpstreamPool(loop)
        st = self.state
        limit = st.max_body_bytes
        cap = client_connection_cap(st.max_connections)

        def connection() -> HttpConnection:
            return HttpConnection(self, loop, limit, self.connections, header_timeout_s=st.header_timeout_s,
                                  max_connections=cap)

        self._server = await loop.create_server(connection, host, port, backlog=1024, reuse_address=True)
        return self._server.sockets[0].getsockname()[1]

    def stop_listening(self) -> None:
        """Take no new connection; those open keep being served."""
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        self.stop_listening()
        if self._timer is not None:
            self._timer.cancel()
        for conn in list(self.connections):  # each added in its connection_made, with its transport
            conn.transport.close()
        if self.pool is not None:
            self.pool.close()
        await asyncio.sleep(0)  # let the connections' close callbacks run

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

    def handle(self, req: Request, conn: HttpConnection) -> asyncio.Task | None:
        """Route one request: answered at once, or by the task returned."""
        route = self._routes.get(req.path)
        if req.error is not None:
            status, message = req.error
            if status == 413 and route is not None and route[0] == _POST:
                self.metrics.answered(self._classify(req)[0], 413)
            conn.respond(status, error_body(status, message))
            return None
        if route is None:
            conn.respond(404, error_body(404, f"no route {req.path[:200]}"))
            return None
        method, fn, is_async = route
        if req.method != method:
            conn.respond(405, error_body(405, f"{req.method.decode('latin-1')[:20]} is not allowed on {req.path}"),
                         extra=b"Allow: %s\r\n" % method)
            return None
        if not is_async:
            fn(req, conn)
            return None
        return (self._loop or asyncio.get_running_loop()).create_task(self._answer(fn, req, conn))

    async def _answer(self, fn, req: Request, conn: HttpConnection) -> None:
        try:
            await fn(req, conn)
        except Exception as e:  # a bug must not leave the client waiting (500); the request is never logged
            note(f"internal error answering {req.path[:100]}: {type(e).__name__}")
        finally:
            conn.handler_ended(asyncio.current_task())

    def _classify(self, req: Request) -> tuple[str, str]:
        h = req.headers
        name = None
        for key in CLASS_HEADERS:
            name = h.get(key)
            if name:
                break
        if not name and self.state.api_keys:
            auth = h.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                name = self.state.api_keys.get(auth[7:].strip())
        fid = ""
        for key in FAIRNESS_HEADERS:
            fid = h.get(key, "")
            if fid:
                break
        return self.policy.class_of(name), fid[:256]

    def _error(self, conn: HttpConnection, cls: str, status: int, message: str,
               typ: str = "invalid_request_error") -> None:
        self.metrics.answered(cls, status)
        conn.respond(status, error_body(status, message, typ))

    async def completions(self, req: Request, conn: HttpConnection) -> None:
        cls, fid = self._classify(req)
        body = req.body
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            return self._error(conn, cls, 400, f"Invalid JSON body: {str(e)[:200]}")
        except RecursionError:  # [[[[… thousands deep: the parser's recursion limit, not a gateway bug
            return self._error(conn, cls, 400, "Invalid JSON body: nested too deeply")
        if not isinstance(doc, dict):
            return self._error(conn, cls, 400, "Invalid JSON body: expected a JSON object")
        loop = self._loop or asyncio.get_running_loop()
        p = Pending(origin=cls, fairness_id=fid, arrived_at=loop.time(), token=loop.create_future())
        pol = self.policy
        if not pol.can_route(p):
            return self._error(conn, cls, 502, "no engine can take the request (all down or draining)",
                               "upstream_error")
        if not pol.enqueue(p, p.arrived_at):
            return self._error(conn, cls, 429, f"the gateway queue is full ({pol.max_queue} requests)",
                               "rate_limit_error")
        self.pump()
        code: int | str = 499  # the client went away unless something else is said below
        try:
            while True:
                engine = await p.token
                if engine is None:
                    code = 502
                    conn.respond(502, error_body(502, "no engine can take the request", "upstream_error"))
                    return
                try:
                    code = await self._proxy(req, conn, engine, body, doc, p)
                    return
                except _NotStarted as ns:
                    self.metrics.upstream_error(engine.name, ns.code)
                    if ns.code == "connect" and engine.up:
                        engine.up = False  # until its /metrics answers again
                    # a dropped keep-alive connection is retried once on the same engine, on a new connection
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
                        conn.respond(502, error_body(502, f"the request failed on every engine that could take it "
                                                          f"(last: {engine.name}: {refused_reason(ns.code)})",
                                                     "upstream_error"))
                        return
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

    async def _proxy(self, req: Request, conn: HttpConnection, engine: EngineState, body: bytes, doc: dict,
                     p: Pending) -> int:
        """Send to ``engine`` and relay its answer; returns the status. Raises _NotStarted to re-queue."""
        opts = self.state.options.get(engine.name) or EngineOptions()
        auth = req.headers.get("authorization")
        headers = b"Content-Type: application/json\r\n"
        if auth:
            headers += b"Authorization: %s\r\n" % auth.encode("latin-1")
        assert self.pool is not None
        try:
            while True:
                payload = self._payload(engine, body, doc, p)
                try:
                    up = await self.pool.request(engine.url, _POST, req.path, payload, headers,
                                                 connect_timeout_s=opts.connect_timeout_s, timeout_s=opts.timeout_s,
                                                 fresh=engine.name in p.resets)
                except UpstreamError as e:
                    if e.code == "timeout" and e.connected:
                        self.metrics.upstream_error(engine.name, "timeout")
                        conn.respond(504, error_body(504, f"engine {engine.name} did not answer within "
                                                          f"{opts.timeout_s:g} s", "upstream_error"))
                        return 504
                    if e.code == "head_timeout":  # it answers, too slowly to trust: not retried
                        self.metrics.upstream_error(engine.name, e.code)
                        conn.respond(504, error_body(504, f"engine {engine.name}: {refused_reason(e.code)}",
                                                     "upstream_error"))
                        return 504
                    raise _NotStarted(e.code) from None
                if up.status == 400 and payload is not body and engine.priority_scheduling is None:
                    try:
                        text = await up.read_body()
                    except UpstreamError as e:
                        up.close()
                        raise _NotStarted(e.code) from None
                    up.release()
                    if _PRIORITY_REFUSED in text:  # detected: this engine runs FCFS; send without priority
                        engine.priority_scheduling = False
                        continue
                    conn.respond(400, text)
                    return 400
                break
            if up.status >= 500:
                up.close()
                raise _NotStarted(str(up.status))
            engine.answered_at = self.now()
            if engine.priority_scheduling is None and payload is not body and up.status < 300:
                engine.priority_scheduling = True
            if up.status >= 400:
                self.metrics.upstream_error(engine.name, up.status)
            await self._relay(conn, engine, up)
            return up.status
        finally:
            self.policy.finish(p, engine.name)
            self.pump()

    async def _relay(self, conn: HttpConnection, engine: EngineState, up: UpstreamConn) -> None:
        h = up.headers
        extra = b"".join(b"%s: %s\r\n" % (out, h[k]) for k, out in _PASS_HEADERS if k in h)
        clen = h.get("content-length")
        head = conn.start(up.status, up.reason, extra, int(clen) if clen is not None and clen.isdigit() else None)
        err: str | None = None
        try:
            fut = up.relay(conn, head)
            if fut is not None:
                err = await fut
        finally:
            if err is None and up.complete:
                up.release()
            else:
                up.close()  # the engine sees the disconnect and aborts the request
        if err is not None:
            self.metrics.upstream_error(engine.name, err)
            note(f"answer from engine {engine.name} cut after its head: {refused_reason(err)}")
            conn.abort()

    async def models(self, req: Request, conn: HttpConnection) -> None:
        assert self.pool is not None
        for e in self.policy.engines.values():
            if not e.up:
                continue
            up = None
            try:
                async with asyncio.timeout(MODELS_TIMEOUT_S):
                    up = await self.pool.request(e.url, _GET, "/v1/models", None, connect_timeout_s=MODELS_TIMEOUT_S,
                                                 timeout_s=MODELS_TIMEOUT_S)
                    data = await up.read_body()
            except (UpstreamError, TimeoutError):
                if up is not None:
                    up.close()
                continue
            status = up.status
            up.release()
            if status == 200:
                conn.respond(200, data)
                return
        conn.respond(502, error_body(502, "no engine answered /v1/models", "upstream_error"))

    def health(self, req: Request, conn: HttpConnection) -> None:
        ok = any(e.routable for e in self.policy.engines.values())
        conn.respond(200 if ok else 503, json.dumps({"status": "ok" if ok else "no engine available"}).encode())

    def metrics_page(self, req: Request, conn: HttpConnection) -> None:
        text = self.metrics.render(self.policy, self.now())
        conn.respond(200, text.encode(), b"text/plain; charset=utf-8", b"Cache-Control: no-store\r\n")


def client_connection_cap(configured: int) -> int:
    """``configured``, or half the process's file-descriptor limit when that is lower: the other half is
    for the engine connections (one per request in flight) and files — running out of descriptors would
    refuse every client, good ones too, with an empty reply."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or configured <= soft // 2:
        return configured
    cap = max(16, soft // 2)
    note(f"client connections capped at {cap} (half the file-descriptor limit {soft}; "
         f"max_client_connections is {configured})")
    return cap


def note(msg: str) -> None:
    """One line on stderr (the gateway's only log; never a token or an API key)."""
    print(f"infertop gateway: {msg}", file=sys.stderr, flush=True)
