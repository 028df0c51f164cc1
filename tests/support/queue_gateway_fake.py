"""A loopback stand-in for the infertop gateway's /metrics and admin API (aiohttp, in its own thread).

It speaks the gateway contract (metric names and labels, admin routes,
bearer token, ``?dry_run=1``, JSON errors); what it queues and dispatches is
set by the test. While an engine is draining, every admin read of it finishes
one of its in-flight requests, so a drain's follow sees the count fall to 0.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field

from aiohttp import web

TOKEN = "s3cret-admin-token"


@dataclass
class FakeClass:
    name: str
    priority: int
    weight: float
    max_wait_s: float
    reserved_slots: int = 0
    queued: int = 0
    oldest_wait_s: float = 0.0
    dispatches: dict[str, int] = field(default_factory=dict)  # engine → count
    promotions: int = 0
    waits: list[float] = field(default_factory=list)  # observed queue waits (seconds)


@dataclass
class FakeEngine:
    name: str
    url: str
    cap: int = 8
    in_flight: int = 0
    draining: bool = False
    up: bool = True


BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class FakeGateway:
    def __init__(self, token: str | None = TOKEN) -> None:
        self.token = token
        self.classes = {c.name: c for c in (FakeClass("realtime", 100, 8, 2), FakeClass("batch", 50, 2, 30),
                                            FakeClass("background", 10, 1, 120))}
        self.engines = {e.name: e for e in (FakeEngine("a", "http://127.0.0.1:9/a"),
                                            FakeEngine("b", "http://127.0.0.1:9/b"))}
        self.requests: list[tuple[str, str]] = []  # (method, path with query)
        self.changes: list[tuple[str, str, dict]] = []  # what was changed for real (not dry runs)
        self.lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ----- what the test sets
    def burst(self, cls: str, n: int, oldest_s: float) -> None:
        with self.lock:
            self.classes[cls].queued += n
            self.classes[cls].oldest_wait_s = max(self.classes[cls].oldest_wait_s, oldest_s)

    def dispatch(self, cls: str, engine: str, n: int, wait_s: float) -> None:
        with self.lock:
            c = self.classes[cls]
            c.dispatches[engine] = c.dispatches.get(engine, 0) + n
            c.waits.extend([wait_s] * n)
            c.queued = max(0, c.queued - n)
            if c.queued == 0:
                c.oldest_wait_s = 0.0

    # ----- the exposition
    def metrics(self) -> str:
        out = []
        with self.lock:
            out.append("# TYPE infertop_gateway_queue_size gauge")
            for c in self.classes.values():
                out.append(f'infertop_gateway_queue_size{{class="{c.name}",priority="{c.priority}"}} {c.queued}')
            out.append("# TYPE infertop_gateway_queue_oldest_wait_seconds gauge")
            for c in self.classes.values():
                out.append(f'infertop_gateway_queue_oldest_wait_seconds{{class="{c.name}"}} {c.oldest_wait_s}')
            out.append("# TYPE infertop_gateway_queue_wait_seconds histogram")
            for c in self.classes.values():
                for le in BUCKETS:
                    n = sum(1 for w in c.waits if w <= le)
                    out.append(f'infertop_gateway_queue_wait_seconds_bucket{{class="{c.name}",le="{le}"}} {n}')
                out.append(f'infertop_gateway_queue_wait_seconds_bucket{{class="{c.name}",le="+Inf"}} {len(c.waits)}')
                out.append(f'infertop_gateway_queue_wait_seconds_sum{{class="{c.name}"}} {sum(c.waits)}')
                out.append(f'infertop_gateway_queue_wait_seconds_count{{class="{c.name}"}} {len(c.waits)}')
            out.append("# TYPE infertop_gateway_dispatches_total counter")
            for c in self.classes.values():
                for e in self.engines:
                    out.append(f'infertop_gateway_dispatches_total{{class="{c.name}",engine="{e}"}} '
                               f'{c.dispatches.get(e, 0)}')
            out.append("# TYPE infertop_gateway_promotions_total counter")
            for c in self.classes.values():
                out.append(f'infertop_gateway_promotions_total{{class="{c.name}"}} {c.promotions}')
            for metric, attr in (("class_weight", "weight"), ("class_priority", "priority"),
                                 ("class_max_wait_seconds", "max_wait_s")):
                out.append(f"# TYPE infertop_gateway_{metric} gauge")
                for c in self.classes.values():
                    out.append(f'infertop_gateway_{metric}{{class="{c.name}"}} {getattr(c, attr)}')
            for metric, attr in (("engine_in_flight", "in_flight"), ("engine_cap", "cap"),
                                 ("engine_draining", "draining"), ("engine_up", "up")):
                out.append(f"# TYPE infertop_gateway_{metric} gauge")
                for e in self.engines.values():
                    out.append(f'infertop_gateway_{metric}{{engine="{e.name}"}} {int(getattr(e, attr))}')
        return "\n".join(out) + "\n"

    # ----- the admin API
    def _class_doc(self, c: FakeClass) -> dict:
        return {"name": c.name, "priority": c.priority, "weight": c.weight, "max_wait_s": c.max_wait_s,
                "reserved_slots": c.reserved_slots, "queued": c.queued, "oldest_wait_s": c.oldest_wait_s}

    def _engine_doc(self, e: FakeEngine) -> dict:
        return {"name": e.name, "url": e.url, "cap": e.cap, "in_flight": e.in_flight, "draining": e.draining,
                "up": e.up}

    @staticmethod
    def _error(status: int, message: str, typ: str) -> web.Response:
        return web.json_response({"error": {"message": message, "type": typ, "code": status}}, status=status)

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        self.requests.append((request.method, request.path_qs))
        if request.path.startswith("/admin"):
            if self.token is None or request.headers.get("Authorization") != f"Bearer {self.token}":
                return self._error(401, "missing or wrong admin token", "authentication_error")
        return await handler(request)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics(), content_type="text/plain")

    async def _state(self, request: web.Request) -> web.Response:
        with self.lock:
            for e in self.engines.values():
                if e.draining and e.in_flight > 0:
                    e.in_flight -= 1  # the requests in flight finish while it drains
            return web.json_response({"classes": [self._class_doc(c) for c in self.classes.values()],
                                      "engines": [self._engine_doc(e) for e in self.engines.values()],
                                      "strict_top": False, "default_class": "batch"})

    async def _patch_class(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        c = self.classes.get(name)
        if c is None:
            return self._error(404, f"no class {name}", "not_found")
        try:
            body = json.loads(await request.text())
        except ValueError:
            return self._error(400, "body is not JSON", "invalid_request_error")
        for k, v in body.items():
            ok = (k in ("weight", "max_wait_s") and isinstance(v, (int, float)) and v > 0) or (
                k == "reserved_slots" and isinstance(v, int) and v >= 0)
            if not ok:
                return self._error(400, f"bad value for {k}: {v!r}", "invalid_request_error")
        with self.lock:
            doc = {**self._class_doc(c), **body}
            if request.query.get("dry_run") != "1":
                for k, v in body.items():
                    setattr(c, k, v)
                self.changes.append(("class", name, body))
        return web.json_response(doc)

    async def _drain(self, request: web.Request) -> web.Response:
        name, verb = request.match_info["name"], request.match_info["verb"]
        e = self.engines.get(name)
        if e is None:
            return self._error(404, f"no engine {name}", "not_found")
        with self.lock:
            doc = {**self._engine_doc(e), "draining": verb == "drain"}
            if request.query.get("dry_run") != "1":
                e.draining = verb == "drain"
                self.changes.append(("engine", name, {"draining": e.draining}))
        return web.json_response(doc)

    # ----- lifecycle
    def start(self) -> "FakeGateway":
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application(middlewares=[self._auth])
            app.router.add_get("/metrics", self._metrics)
            app.router.add_get("/admin/state", self._state)
            app.router.add_patch("/admin/classes/{name}", self._patch_class)
            app.router.add_post("/admin/engines/{name}/{verb:drain|undrain}", self._drain)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-gateway", daemon=True)
        self._thread.start()
        assert ready.wait(10), "the fake gateway did not start"
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> "FakeGateway":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
