"""Build a running gateway from its config: policy, proxy, admin API, engine pollers, file watchers.

:class:`GatewayRunner` is an async context manager (tests start one in-process on
port 0); :func:`resolve_engines` turns the ``engines:`` entries — URLs, or names of
the config's ``engines:`` / launch ``profiles:`` — into upstreams.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from .admin import Admin
from .config import DEFAULT_CAP, GatewayConfig, split_address
from .files import FileWatch, load_api_keys, load_weights
from .policy import ClassState, EngineState, Policy, PolicyError
from .server import EngineOptions, Gateway, GatewayState, note
from .upstream import EngineProbe


@dataclass
class Upstream:
    name: str
    url: str
    cap: int
    priority_scheduling: bool | None
    timeout_s: float
    connect_timeout_s: float


def resolve_engines(gw: GatewayConfig, engines: list | None = None, profiles: dict | None = None) -> list[Upstream]:
    """Upstreams from ``gw.engines``; ``engines``/``profiles`` are the config's sections of those
    names. Raises ValueError naming an entry that is neither a URL nor a known name."""
    by_name = {e.name: e for e in engines or []}
    profiles = profiles or {}
    out = []
    for i, g in enumerate(gw.engines):
        cap, prio, url = g.cap, g.priority_scheduling, g.url
        if not url.startswith(("http://", "https://")):
            if url in by_name:
                ref = by_name[url]
                url, cap = ref.url, cap or ref.max_num_seqs
            elif url in profiles:
                prof = profiles[url]
                host = f"[{prof.host}]" if ":" in prof.host else prof.host
                url, cap = f"http://{host}:{prof.port}", cap or prof.max_num_seqs
                if prio is None and prof.scheduling_policy:
                    prio = prof.scheduling_policy == "priority"
            else:
                raise ValueError(f"gateway.engines[{i}].url: {url!r} is not a URL nor the name of an engine "
                                 "or a launch profile")
        name = g.name or g.url
        out.append(Upstream(name, url.rstrip("/"), cap or DEFAULT_CAP, prio, g.timeout_s, g.connect_timeout_s))
    return out


def build_policy(gw: GatewayConfig, upstreams: list[Upstream]) -> Policy:
    classes = [ClassState(c.name, c.priority, c.weight, c.max_wait_s, c.reserved_slots, c.batch_wait_s)
               for c in gw.all_classes()]
    engines = [EngineState(u.name, u.url, u.cap, priority_scheduling=u.priority_scheduling) for u in upstreams]
    return Policy(classes, engines, default_class=gw.default_class, strict_top=gw.strict_top,
                  top_backlog=gw.top_backlog, kv_cache_max_pct=gw.kv_cache_max_pct,
                  vllm_waiting_max=gw.vllm_waiting_max, max_queue=gw.max_queue)


def _bound_port(runner: web.AppRunner) -> int:
    return runner.addresses[0][1]


class GatewayRunner:
    """``async with GatewayRunner(gw, upstreams, token) as g``: serving at ``g.url`` / ``g.admin_url``."""

    def __init__(self, gw: GatewayConfig, upstreams: list[Upstream], token: str | None) -> None:
        if not upstreams:
            raise ValueError("gateway.engines is empty: name at least one engine")
        self.gw = gw
        self.policy = build_policy(gw, upstreams)
        options = {u.name: EngineOptions(u.timeout_s, u.connect_timeout_s) for u in upstreams}
        self.state = GatewayState(self.policy, options=options, max_body_bytes=gw.max_body_bytes,
                                  header_timeout_s=gw.client_header_timeout_s,
                                  max_connections=gw.max_client_connections)
        self.gateway = Gateway(self.state)
        self.admin = Admin(self.gateway, token) if token else None
        self.probes = [EngineProbe(e) for e in self.policy.engines.values()]
        self._runners: list[web.AppRunner] = []
        self._tasks: list[asyncio.Task] = []
        self.url = self.admin_url = ""
        self._keys_watch = FileWatch(gw.api_keys_file) if gw.api_keys_file else None
        self._weights_watch = FileWatch(gw.weights_file) if gw.weights_file else None
        self.file_errors: list[str] = []

    async def _serve(self, app: web.Application, listen: str) -> str:
        host, port = split_address(listen)
        # handler_cancellation: a client that disconnects cancels its handler, and so its upstream request
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, backlog=1024, reuse_address=True).start()
        self._runners.append(runner)
        h = f"[{host}]" if ":" in host else host
        return f"http://{h}:{_bound_port(runner)}"

    async def start(self) -> GatewayRunner:
        self.check_files(initial=True)
        host, port = split_address(self.gw.listen)
        h = f"[{host}]" if ":" in host else host
        self.url = f"http://{h}:{await self.gateway.serve(host, port)}"
        if self.admin is not None:
            self.admin_url = await self._serve(self.admin.app, self.gw.admin_listen)
        self._tasks.append(asyncio.create_task(self._poll_engines()))
        if self._keys_watch or self._weights_watch:
            self._tasks.append(asyncio.create_task(self._watch_files()))
        return self

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop; with ``grace_s``, first stop taking requests and let queued and in-flight ones finish."""
        if grace_s > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace_s
            self.gateway.stop_listening()
            while loop.time() < deadline and (self.policy.queued or
                                               any(e.in_flight for e in self.policy.engines.values())):
                await asyncio.sleep(0.05)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for r in reversed(self._runners):
            await r.cleanup()
        self._runners.clear()
        await self.gateway.close()

    async def __aenter__(self) -> GatewayRunner:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def _poll_engines(self) -> None:
        session = aiohttp.ClientSession()
        try:
            while True:
                results = await asyncio.gather(*(p.poll(session, max(0.5, self.gw.metrics_poll_s * 2))
                                                 for p in self.probes))
                if any(results):
                    for p in self.probes:
                        if p.last_error and not p.engine.up:
                            note(f"engine {p.engine.name} is down: {p.last_error}")
                    self.gateway.engines_changed()
                else:
                    self.gateway.pump()  # fresher KV-cache/waiting figures may open an engine
                await asyncio.sleep(self.gw.metrics_poll_s)
        finally:
            await session.close()

    async def _watch_files(self) -> None:
        while True:
            await asyncio.sleep(self.gw.files_poll_s)
            self.check_files()

    def check_files(self, initial: bool = False) -> None:
        """Reload the API-keys and weights files when they changed; a bad file keeps the old
        values and says why on stderr, once per change."""
        if self._keys_watch is not None and self._keys_watch.changed():
            try:
                self.state.api_keys = load_api_keys(self._keys_watch.path)
            except ValueError as e:
                self._file_error(str(e))
        if self._weights_watch is not None and self._weights_watch.changed():
            try:
                weights = load_weights(self._weights_watch.path, set(self.policy.classes))
                for name, changes in weights.items():
                    self.policy.check_class_change(name, changes)
                for name, changes in weights.items():
                    self.policy.change_class(name, changes)
                if not initial:
                    note(f"weights reloaded from {self._weights_watch.path}")
                    self.gateway.pump()
            except (ValueError, PolicyError) as e:
                self._file_error(str(e))

    def _file_error(self, msg: str) -> None:
        self.file_errors.append(msg)
        note(msg)
