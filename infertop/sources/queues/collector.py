"""Poll gateways and endpoint pickers for their queues.

A :class:`QueueCollector` reads one source: an infertop gateway's ``/metrics``
(and its admin ``/admin/state`` when a token is configured), or an endpoint
picker's ``/metrics`` (optionally with a bearer token from a file), in either
generation of flow-control names. :class:`~.prom.PromQueueCollector`
reads the same series through Prometheus. Each source is polled by its own
loop (:class:`QueueFleet`): the next poll starts when the last one finished
plus the interval, so polls never overlap and one dead source never delays
another. A failure is that source's state with its reason; the last good
view is kept (the fleet state marks it stale).

Rates, shares and wait quantiles are computed over a sliding window from the
cumulative counters (:class:`~infertop.domain.window.CounterWindow`), the same
way as for engines. No data is ``None``, never 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ...domain.quantiles import histogram_quantile
from ...domain.source import SourceHealth
from ...domain.queues import DEFAULT_BUDGETS_S, QueueClass, QueueEngine, QueueSource
from ...domain.window import CounterWindow
from ..expfmt import ParseError, Parser
from ..http_client import HttpError, LeanHttpClient, ResponseTooLarge
from .names import EPP, GATEWAY, MAX_COUNTED_CLASSES, SEP, QueueSample, extract
from ..sanitize import error_text, finite, non_negative, plain_text
from ..vllm import MAX_BODY_BYTES, ScrapeError, describe_error

ADMIN_MAX_BYTES = 1024 * 1024
RETRY_JITTER = 0.2


class TokenError(Exception):
    """The configured token cannot be read (the message never contains the token)."""


@dataclass(frozen=True)
class QueueEndpoint:
    """Where a gateway or endpoint picker is, and how to authenticate (never the secret itself)."""

    name: str
    kind: str  # gateway, epp
    metrics_url: str  # the full /metrics URL
    admin_url: str | None = None  # the gateway's admin API base URL
    token_env: str | None = None
    token_file: str | None = None
    timeout_s: float = 2.0
    budgets: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_BUDGETS_S))

    def token(self) -> str | None:
        """The bearer token, read now (a mounted secret may rotate); None when none is configured."""
        if self.token_env:
            value = os.environ.get(self.token_env)
            if not value:
                raise TokenError(f"environment variable {self.token_env} is not set")
            return value.strip()
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as fh:
                    value = fh.read(64 * 1024).strip()
            except OSError as e:
                raise TokenError(f"cannot read the token file {self.token_file}: {e.strerror or e}") from None
            if not value:
                raise TokenError(f"the token file {self.token_file} is empty")
            return value
        return None

    @property
    def has_token(self) -> bool:
        return bool(self.token_env or self.token_file)


def metrics_url(url: str) -> str:
    """``url`` as a /metrics URL: a base URL gets ``/metrics`` appended."""
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    base = url.rstrip("/")
    return base if base.endswith("/metrics") else base + "/metrics"


def base_url(url: str) -> str:
    """The scheme://host:port/prefix of a /metrics URL (where the gateway's own routes are)."""
    u = url.rstrip("/")
    return u[: -len("/metrics")] if u.endswith("/metrics") else u


def budget_for(budgets: Mapping[str, float], name: str, priority: float | None) -> float | None:
    """A class's queue P99 budget: by its name, else (a band) by its priority number."""
    if name in budgets:
        return budgets[name]
    if priority is not None:
        key = f"{priority:g}"
        return budgets.get(key, budgets.get(f"priority {key}"))
    return None


async def fetch_bounded(client: LeanHttpClient, url: str, limit: int,
                        headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``url`` with ``headers``: (status, body), reading at most ``limit`` bytes (the body of
    an answer other than 200 is not read)."""
    try:
        return await client.get(url, limit, any_status=True, headers=headers)
    except ResponseTooLarge as e:
        raise ScrapeError(str(e)) from None


class QueueWindow:
    """The counters of one source over the window, and what they say per class."""

    def __init__(self, window_s: float) -> None:
        self.window = CounterWindow(window_s)

    def add(self, t_s: float, counters: dict[str, float]) -> None:
        self.window.add(t_s, counters)

    def derive(self, cls: str, all_classes: list[str]) -> dict[str, float | None]:
        w = self.window
        edges = w.edges()
        if edges is None:
            return {}
        (_, first), (_, last) = edges

        def inc(key: str) -> float | None:
            if key not in last:
                return None
            return last[key] - first.get(key, 0.0) if key in first else None

        out: dict[str, float | None] = {}
        buckets = []
        prefix = f"h{SEP}{cls}{SEP}"
        for key in last:
            if key.startswith(prefix):
                n = inc(key)
                if n is not None:
                    buckets.append((float(key[len(prefix):]), n))
        if buckets and max(n for _, n in buckets) > 0:
            out["wait_p50_s"] = histogram_quantile(0.5, buckets)
            out["wait_p99_s"] = histogram_quantile(0.99, buckets)
        d = inc(f"d{SEP}{cls}")
        if d is not None:
            out["dispatches_per_s"] = w.rate(f"d{SEP}{cls}")
            total = [inc(f"d{SEP}{c}") for c in all_classes]
            known = sum(v for v in total if v is not None)
            out["share_pct"] = 100.0 * d / known if known > 0 else None
        p = inc(f"p{SEP}{cls}")
        if p is not None:
            out["promotions"] = p
        return out


def _num(v: object) -> float | None:
    return non_negative(v)


def _flag(v: float | None) -> bool | None:
    return None if v is None else v >= 0.5


def build_view(ep: QueueEndpoint, sample: QueueSample, window: QueueWindow, admin: dict | None,
               admin_state: str, admin_error: str | None, *, url: str, via: str) -> QueueSource:
    """The source as shown: the scrape, the window's rates and quantiles, the admin state (if read)."""
    admin_classes = {plain_text(c.get("name", "")): c for c in (admin or {}).get("classes") or []
                     if isinstance(c, dict)}
    admin_engines = {plain_text(e.get("name", "")): e for e in (admin or {}).get("engines") or []
                     if isinstance(e, dict)}
    names = list(sample.classes)
    for n in admin_classes:
        if n and n not in sample.classes and len(names) < 64:
            names.append(n)
    classes = []
    for name in names:
        g = sample.classes.get(name, {})
        a = admin_classes.get(name, {})
        d = window.derive(name, names)
        priority = finite(g["priority"]) if "priority" in g else finite(a.get("priority"))  # bands may be < 0
        classes.append(QueueClass(
            name=name, priority=priority, depth=_num(g.get("depth", a.get("queued"))),
            oldest_wait_s=_num(g.get("oldest_wait_s", a.get("oldest_wait_s"))),
            wait_p50_s=_num(d.get("wait_p50_s")), wait_p99_s=_num(d.get("wait_p99_s")),
            budget_s=budget_for(ep.budgets, name, priority),
            weight=_num(g.get("weight", a.get("weight"))), max_wait_s=_num(g.get("max_wait_s", a.get("max_wait_s"))),
            reserved_slots=_num(a.get("reserved_slots")), share_pct=_num(d.get("share_pct")),
            dispatches_per_s=_num(d.get("dispatches_per_s")), promotions=_num(d.get("promotions")),
            queue_bytes=_num(g.get("bytes")),
        ))
    classes.sort(key=lambda c: (-(c.priority if c.priority is not None else -1e18), c.name))
    engines = []
    for name in list(sample.engines) + [n for n in admin_engines if n and n not in sample.engines][:256]:
        g = sample.engines.get(name, {})
        a = admin_engines.get(name, {})
        in_flight = _num(g.get("in_flight", a.get("in_flight")))
        cap = _num(g.get("cap", a.get("cap")))
        draining = _flag(_num(g["draining"])) if "draining" in g else (
            a.get("draining") if isinstance(a.get("draining"), bool) else None)
        up = _flag(_num(g["up"])) if "up" in g else (a.get("up") if isinstance(a.get("up"), bool) else None)
        url_a = a.get("url")
        engines.append(QueueEngine(
            name=name, url=plain_text(url_a, 200) if isinstance(url_a, str) and url_a else None,
            in_flight=in_flight, cap=cap,
            saturation_pct=100.0 * in_flight / cap if in_flight is not None and cap else None,
            vllm_waiting=_num(g.get("waiting")), draining=draining, up=up,
        ))
    depths = [c.depth for c in classes if c.depth is not None]
    oldest = [c.oldest_wait_s for c in classes if c.oldest_wait_s is not None]
    queued, oldest_s, note = _over_all_classes(sample, depths, oldest)
    sat = sample.pool.get("saturation")
    view = QueueSource(
        name=ep.name, kind=ep.kind, url=url, via=via, generation=sample.generation or None,
        classes=tuple(classes), engines=tuple(engines),
        queued=queued, oldest_wait_s=oldest_s, note=note,
        pool_saturation_pct=_num(100.0 * sat) if sat is not None else None,
        pool_kv_cache_pct=_num(sample.pool.get("kv_cache_pct")),
        strict_top=admin.get("strict_top") if admin and isinstance(admin.get("strict_top"), bool) else None,
        default_class=plain_text(admin["default_class"], 80) if admin and isinstance(admin.get("default_class"), str)
        else None,
        admin=admin_state, admin_error=admin_error,
    )
    return replace(view, missing=missing_reasons(view, window))


def _over_all_classes(sample: QueueSample, depths: list[float], oldest: list[float]
                      ) -> tuple[float | None, float | None, str | None]:
    """(queued, oldest wait, note) over every class of ``sample``, those past the display cap too."""
    queued = sum(depths) if depths or sample.depth_beyond else None
    if queued is not None:
        queued += sample.depth_beyond
    if sample.oldest_beyond_s is not None:
        oldest = [*oldest, sample.oldest_beyond_s]
    note = None
    if sample.beyond:
        word = "classes" if sample.kind == GATEWAY else "priority bands"
        more = "+" if len(sample.beyond) >= MAX_COUNTED_CLASSES else ""
        note = f"{len(sample.classes) + len(sample.beyond)}{more} {word}, first {len(sample.classes)} shown"
    return queued, (max(oldest) if oldest else None), note


def missing_reasons(view: QueueSource, window: QueueWindow) -> dict[str, str]:
    """Why the values the pane shows as — have none (per class field, ``class.field``)."""
    out: dict[str, str] = {}
    history = window.window.edges() is not None
    for c in view.classes:
        for f in ("wait_p99_s", "share_pct", "promotions", "weight", "oldest_wait_s", "budget_s"):
            if getattr(c, f) is not None:
                continue
            if f == "budget_s":
                why = "no budget for this class: set queues.budgets in the config"
            elif f in ("weight", "promotions") and view.kind == EPP:
                why = "an endpoint picker serves bands by strict priority: no weights, no promotions"
            elif f == "oldest_wait_s" and view.kind == EPP:
                why = "not exported by an endpoint picker"
            elif not history:
                why = "not enough history yet"
            elif f == "wait_p99_s":
                why = "no request left the queue in the window"
            elif f == "share_pct":
                why = "no dispatches in the window"
            else:
                why = "not exported"
            out[f"{c.name}.{f}"] = why
    if view.queued is None:
        out["queued"] = "no queue size series"
    return out


class QueueCollector:
    """One gateway or endpoint picker, read directly: parser, window, health, the last good view."""

    via = "direct"

    def __init__(self, endpoint: QueueEndpoint, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.name = endpoint.name
        self.kind = endpoint.kind
        self.url = endpoint.metrics_url
        self.clock = clock
        self.parser = Parser()
        self.window = QueueWindow(window_s)
        self.health = SourceHealth(name=endpoint.name, kind=endpoint.kind, ok=False)
        self.view: QueueSource | None = None
        self.completed_polls = 0
        self._down_since: float | None = None  # monotonic
        self._client: LeanHttpClient | None = None

    def down_since_wall(self, now: float, mono: float) -> float | None:
        return None if self._down_since is None else now - max(0.0, mono - self._down_since)

    def client(self) -> LeanHttpClient:
        # the lean client the engine polls use: httpx's machinery per request cost more than the socket work
        # of these polls, every second (benchmarks/bench_http.py)
        if self._client is None:
            self._client = LeanHttpClient(connect_timeout_s=1.0, timeout_s=self.endpoint.timeout_s)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def next_delay_s(self, interval_s: float) -> float:
        if self.health.consecutive_failures == 0:
            return interval_s
        return interval_s * (1.0 - RETRY_JITTER * (hash((self.name, self.completed_polls)) % 1000) / 1000)

    async def poll(self) -> QueueSource | None:
        """One bounded poll; never raises (a failure is this source's state)."""
        ep = self.endpoint
        started = self.clock()
        try:
            async with asyncio.timeout(ep.timeout_s):
                client = self.client()
                metrics_headers = {}
                if ep.kind == EPP and ep.has_token:
                    metrics_headers["Authorization"] = f"Bearer {ep.token()}"
                admin_job = (self._admin(client, ep.admin_url) if ep.kind == GATEWAY and ep.admin_url and ep.has_token
                             else None)
                text_job = self._metrics(client, metrics_headers)
                if admin_job is not None:
                    text, admin = await asyncio.gather(text_job, admin_job)
                else:
                    text, admin = await text_job, (None, "none", None)
            sample = self._read(text)
            now = self.clock()
            self.window.add(now, sample.counters)
            self.view = build_view(ep, sample, self.window, admin[0], admin[1], admin[2], url=self.url,
                                   via=self.via)
        except Exception as exc:  # noqa: BLE001 — every failure is shown, none crashes
            return self._failed(exc, started)
        self._ok(started, now, admin[2])
        return self.view

    def _read(self, text: str) -> QueueSample:
        try:
            exp = self.parser.parse(text)
        except ParseError as e:
            raise ScrapeError(f"garbage /metrics ({e})") from None
        sample = extract(exp, self.kind)
        if sample.empty():
            what = "infertop_gateway_*" if self.kind == GATEWAY else "flow-control"
            raise ScrapeError(f"no {what} metrics at {self.url}")
        return sample

    async def _metrics(self, client: LeanHttpClient, headers: dict[str, str]) -> str:
        status, body = await fetch_bounded(client, self.url, MAX_BODY_BYTES, headers)
        if status != 200:
            raise ScrapeError(f"HTTP {status}" + (": the token was refused" if status in (401, 403) else ""))
        return body.decode("utf-8", errors="replace")

    async def _admin(self, client: LeanHttpClient, admin_url: str) -> tuple[dict | None, str, str | None]:
        """(state, admin word, error) — the admin API is optional: its failure is a warning, not a down source."""
        ep = self.endpoint
        try:
            token = ep.token()
        except TokenError as e:
            return None, "error", error_text(f"admin API: {e}")
        url = admin_url.rstrip("/") + "/admin/state"
        try:
            status, body = await fetch_bounded(client, url, ADMIN_MAX_BYTES, {"Authorization": f"Bearer {token}"})
            if status == 401:
                return None, "refused", "admin API: 401 — the gateway refused the token"
            if status != 200:
                return None, "error", f"admin API: HTTP {status}"
            doc = json.loads(body)
        except (HttpError, OSError, TimeoutError, ScrapeError, ValueError, RecursionError) as e:
            return None, "error", error_text(f"admin API: {describe_error(e, ep.timeout_s)}")
        if not isinstance(doc, dict):
            return None, "error", "admin API: not a JSON object"
        return doc, "ok", None

    def _ok(self, started: float, now: float, warning: str | None) -> None:
        self._down_since = None
        self.completed_polls += 1
        self.health = SourceHealth(name=self.name, kind=self.kind, ok=True, last_ok_at=now, latency_s=now - started,
                                   last_error=warning, last_error_at=None if warning is None else now)

    def _failed(self, exc: BaseException, started: float) -> QueueSource | None:
        now = self.clock()
        self.completed_polls += 1
        msg = str(exc) if isinstance(exc, TokenError) else describe_error(exc, self.endpoint.timeout_s)
        if self._down_since is None:
            self._down_since = now
        h = self.health
        self.health = replace(h, ok=False, last_error=error_text(msg), last_error_at=now, latency_s=now - started,
                              consecutive_failures=h.consecutive_failures + 1)
        return self.view


class QueueFleet:
    """Every queue source, each polled by its own loop."""

    def __init__(self, collectors: list, interval_s: float = 1.0) -> None:
        self.collectors = collectors
        self.interval_s = interval_s
        self.on_polled: Callable[[object], None] | None = None

    async def poll_once(self) -> None:
        await asyncio.gather(*(self._poll(c) for c in self.collectors))

    async def _poll(self, c) -> None:
        await c.poll()
        if self.on_polled is not None:
            self.on_polled(c)

    async def _loop(self, c) -> None:
        while True:
            started = c.clock()
            try:
                await self._poll(c)
            except Exception as exc:  # noqa: BLE001 — a bug must not end this source's loop
                c._failed(exc, started)
            elapsed = c.clock() - started
            await asyncio.sleep(max(0.05, c.next_delay_s(self.interval_s) - elapsed))

    async def run(self, seconds: float | None = None) -> None:
        """Poll until cancelled (or for ``seconds``, then until each source answered or failed once)."""
        tasks = [asyncio.create_task(self._loop(c)) for c in self.collectors]
        try:
            if seconds is None:
                await asyncio.gather(*tasks)
            else:
                await asyncio.sleep(max(0.0, seconds))
                deadline = time.monotonic() + max((c.endpoint.timeout_s for c in self.collectors), default=0) + 1
                while any(c.completed_polls == 0 for c in self.collectors) and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.collectors))
