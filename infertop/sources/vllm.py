"""Scrape one vLLM engine (a lean keep-alive client) and derive its stats; the fleet's poll loops are
:mod:`.fleet_collector`'s.

Everything an engine sends is bounded and cleaned here (see
:mod:`.sanitize`): every response has a byte limit enforced while it is read,
at most ``MAX_LABEL_SETS`` label sets are kept per endpoint, label values and
errors are plain text, numbers are finite and in their domain. Any exception
in one engine's poll becomes that engine's error state; its loop goes on.
"""

from __future__ import annotations

import asyncio
from collections import deque
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast
from urllib.parse import urlencode

import httpx

from ..domain.engine_stats import derived_fields
from ..domain.engine import DEGRADED, DOWN, UP, EngineStats
from ..domain.source import SourceHealth
from ..domain.window import BUCKETS_RESTARTED, CounterWindow
from .expfmt import ParseError, Parser
from .http_client import HttpError, LeanHttpClient, httpx_get
from .sanitize import clean_engine, error_text, plain_text
from .vllm_names import MAX_LABEL_SETS, SCRAPE_NAMES, EngineSample, Extractor

MAX_BODY_BYTES = 8 * 1024 * 1024  # /metrics and dcgm: a real vLLM document is ~50 KB
MODELS_MAX_BYTES = 1024 * 1024  # /v1/models (many LoRA adapters)
SMALL_MAX_BYTES = 64 * 1024  # /health, /version
MAX_MODELS = 256
HEALTH_EVERY = 5
#: While an engine's token counters move it is serving, and /health is asked this rarely: vLLM's
#: /health answers 503 only once its engine core is dead (EngineDeadError), and a dead engine core
#: counts no more tokens.
HEALTH_BUSY_EVERY = 30
#: Only the samples infertop reads (see EngineCollector.filtered_scrape). vLLM serves its metrics
#: twice: ``/metrics`` through its request instrumentator, which ignores any query, and
#: prometheus_client's own app mounted at ``/metrics/``, which answers a ``name[]`` query.
FILTERED_METRICS = "/metrics/?" + urlencode([("name[]", n) for n in SCRAPE_NAMES])
# A failing engine is retried every interval, less up to this fraction (jitter,
# so engines behind one gateway that fails together do not retry in lockstep).
RETRY_JITTER = 0.2
# An engine whose document costs CPU to read is polled at most every COST_FACTOR
# times that cost (≤ 5 % of a core each): one engine with 20 000 label sets
# must not starve the others, nor the UI, on the shared event loop.
COST_FACTOR = 20.0
# Documents larger than this are parsed in a worker thread, so the event loop
# (the UI, the other engines) keeps running while a big one is read.
THREAD_PARSE_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class EngineEndpoint:
    """Where an engine is and what infertop knows about it from config."""

    name: str
    url: str
    max_num_seqs: int | None = None
    timeout_s: float = 2.0


async def _none() -> None:
    return None


class ScrapeError(Exception):
    """A scrape failed; the message is what the UI shows."""


def describe_error(exc: BaseException, timeout_s: float) -> str:
    """One short line of plain text for the status bar."""
    return error_text(_describe(exc, timeout_s))


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, (ScrapeError, HttpError)):
        return str(exc)
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError, TimeoutError)):
        return f"timeout after {timeout_s:g} s"
    if isinstance(exc, httpx.ConnectError):
        cause: BaseException | None = exc
        while cause is not None:
            if isinstance(cause, ConnectionRefusedError):
                return "connection refused"
            cause = cause.__cause__ or cause.__context__
        text = str(exc).lower()
        if "refused" in text:
            return "connection refused"
        if "name or service" in text or "nodename" in text:
            return "unknown host"
        return "cannot connect"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "bad HTTP response"
    if isinstance(exc, httpx.HTTPError):
        return type(exc).__name__
    return f"{type(exc).__name__}: {exc}"[:120]


async def _get(client: LeanHttpClient | httpx.AsyncClient, url: str, limit: int, *,
               any_status: bool = False) -> tuple[int, bytes]:
    """One bounded GET (:mod:`.http_client`): the lean client of the polls, or an httpx client
    (scripts, tests) with the same bounds and errors."""
    if isinstance(client, LeanHttpClient):
        return await client.get(url, limit, any_status=any_status)
    return await httpx_get(client, url, limit, any_status=any_status)


async def get_text(client: LeanHttpClient | httpx.AsyncClient, url: str, limit: int = MAX_BODY_BYTES) -> str:
    """GET ``url`` and return its body, refusing bodies over ``limit`` bytes."""
    _, body = await _get(client, url, limit)
    return body.decode("utf-8", errors="replace")


async def get_json(client: LeanHttpClient | httpx.AsyncClient, url: str, limit: int) -> object:
    """GET ``url`` as JSON (any shape; the caller checks it), at most ``limit`` bytes."""
    _, body = await _get(client, url, limit)
    return json.loads(body)


async def get_health(client: LeanHttpClient | httpx.AsyncClient, url: str) -> bool:
    """True when ``/health`` answers 200 (its body, bounded, is ignored)."""
    status, _ = await _get(client, url, SMALL_MAX_BYTES, any_status=True)
    return status == 200


def model_ids(doc: object) -> list[str]:
    """Model ids from a ``/v1/models`` answer of any shape; [] when it has none."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return []
    out = []
    for m in data[:MAX_MODELS]:
        mid = m.get("id") if isinstance(m, dict) else None
        if isinstance(mid, str) and mid:
            out.append(plain_text(mid))
    return out


#: No vLLM engine counts this many tokens (or requests) a second: a rate above it comes of a broken
#: counter and is not shown (an H200 prefills ~1e5 tokens/s).
MAX_RATE_PER_S = 1e7
_RATE_FIELDS = ("prompt_tokens_per_s", "generation_tokens_per_s", "requests_per_s", "preemptions_per_s")


def changed_histograms(before: tuple[str, ...], after: tuple[str, ...]) -> tuple[str, ...]:
    """Key prefixes (``"ttft@"``) of the histograms whose bucket bounds differ between two counter
    layouts; one found in only one of them has no window to restart."""
    def bounds(keys: tuple[str, ...]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for k in keys:
            hist, sep, _ = k.partition("@")
            if sep:
                out.setdefault(hist, set()).add(k)
        return out
    b, a = bounds(before), bounds(after)
    return tuple(f"{h}@" for h in a if h in b and a[h] != b[h])


def window_notes(window: CounterWindow, fields: dict, now: float) -> list[str]:
    """What the engine row says of its window: a histogram restarted (until its quantiles are back,
    at most a window), a rate too large to be true (set to None in ``fields``)."""
    notes = []
    for prefix, t in list(window.restarted.items()):
        hist = prefix[:-1]
        if now - t >= window.window_s or any(v is not None for f, v in fields.items() if f.startswith(hist + "_p")):
            del window.restarted[prefix]
    if window.restarted:
        notes.append(f"{BUCKETS_RESTARTED} ({', '.join(sorted(p[:-1] for p in window.restarted))})")
    bad = [f for f in _RATE_FIELDS if (fields.get(f) or 0.0) > MAX_RATE_PER_S]
    for f in bad:
        fields[f] = None
    if bad:
        notes.append(f"implausible rate (> {MAX_RATE_PER_S:g}/s) not shown")
    return notes


class EngineCollector:
    """State of one endpoint across polls: parser, windows, health."""

    def __init__(self, endpoint: EngineEndpoint, window_s: float, clock: Callable[[], float] = time.monotonic,
                 *, reserved: Callable[[], set[str]] | None = None, max_label_sets: int = MAX_LABEL_SETS) -> None:
        self.endpoint = endpoint
        self.window_s = window_s
        self.clock = clock
        self.parser = Parser(lazy_values=True)  # only the values the extractor reads are converted
        self.extractor = Extractor(max_label_sets)
        self.windows: dict[tuple[str | None, str], CounterWindow] = {}  # by engine identity (see _identity)
        self.stats: list[EngineStats] = [EngineStats(name=endpoint.name, url=endpoint.url)]
        self.health = SourceHealth(name=endpoint.name, kind="vllm", ok=False)
        self.models: list[str] = []  # model ids from /v1/models, plain text
        self.vllm_version: str | None = None
        self.completed_polls = 0  # polls finished, successful or not
        self.cost_s = 0.0  # CPU seconds the last document took to parse and derive
        # The last few costs: pacing goes by their minimum, so a document that is costly every
        # time slows its own polls, while one garbage-collection pause in a parse does not.
        self._costs: deque[float] = deque(maxlen=3)
        # names other endpoints use: a derived name never takes one
        self._reserved = reserved or (lambda: set())
        self._names: dict[tuple[str | None, str], str] = {}  # engine identity → its unique display name
        self._names_multi = False
        self._layouts: dict[tuple[str | None, str], tuple[str, ...]] = {}  # identity → its last counter keys
        self._polls = 0
        self._healthy: bool | None = None
        self._health_error: str | None = None
        self._tokens: float | None = None  # prompt and generated tokens counted at the last poll
        self._serving = False  # those counters moved between the last two polls
        self._client: LeanHttpClient | None = None
        self._last_text: tuple[int, int | None] | None = None  # (length, hash or None) of the last /metrics body
        self._last_read: tuple[str, list[EngineSample]] | None = None
        # Ask /metrics for only the samples infertop reads (prometheus_client's name[] filter):
        # about a fifth of vLLM's document, to send, receive and parse every second.
        self.filtered_scrape = True
        self._rng = random.Random(hash(endpoint.name))

    def client(self) -> LeanHttpClient:
        """This engine's own keep-alive HTTP client (see :mod:`.http_client`)."""
        if self._client is None:
            self._client = LeanHttpClient(connect_timeout_s=1.0, timeout_s=5.0)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def next_delay_s(self, interval_s: float) -> float:
        """The interval when healthy; when failing, the interval less a random jitter.

        No exponential backoff: a failed poll costs one refused connection or one
        pending timeout (no CPU while it waits, and the loop waits for it before
        the next try), and backing off is what made a flapping engine show up
        late — with this, an engine that recovers is seen within one interval.
        The jitter spreads the retries of engines that failed together.
        """
        if self.health.consecutive_failures == 0:
            return max(interval_s, COST_FACTOR * min(self._costs, default=0.0))
        return interval_s * (1.0 - RETRY_JITTER * self._rng.random())

    async def poll(self, client: LeanHttpClient | None = None) -> list[EngineStats]:
        """One bounded poll of /metrics, /health (and /v1/models, /version now and then)."""
        client = client or self.client()
        ep = self.endpoint
        base = ep.url.rstrip("/")
        started = self.clock()
        self._polls += 1
        want_meta = not self.models or self._polls % 30 == 0
        # /health costs a request per engine per poll; while /metrics answers it is checked every
        # HEALTH_EVERY polls (HEALTH_BUSY_EVERY while tokens flow), and on every poll after a failure.
        want_health = (self._healthy is not True
                       or self._polls % (HEALTH_BUSY_EVERY if self._serving else HEALTH_EVERY) == 0)
        metrics_url = base + (FILTERED_METRICS if self.filtered_scrape else "/metrics")
        try:
            try:
                async with asyncio.timeout(ep.timeout_s):
                    if want_health or want_meta:
                        jobs = [get_text(client, metrics_url),
                                get_health(client, base + "/health") if want_health else _none()]
                        if want_meta:
                            jobs.append(self._meta(client, base))
                        got = await asyncio.gather(*jobs, return_exceptions=True)
                        # gather over a list types every answer as the union of them all: say which is which
                        text, health = cast("str | BaseException", got[0]), got[1]
                    else:  # most polls: /metrics alone, without a task per request
                        text, health = await get_text(client, metrics_url), None
                filtered = self.filtered_scrape
                try:
                    if isinstance(text, BaseException):
                        raise text
                    version, samples, cost_s = await self._read_document(text)
                except (HttpError, ScrapeError) as exc:
                    # an HTTP status or a garbled body for /metrics/ may be this server's answer to the path
                    if not (filtered and (isinstance(exc, ScrapeError) or str(exc).startswith("HTTP "))):
                        raise
                    samples = []
                if filtered and not samples:
                    # Nothing we read came back filtered: a server other than vLLM, or vLLM's multiprocess
                    # registry (several API servers), which answers name[] with nothing. Ask for the whole
                    # document; if that has engines, this server gets whole documents until it fails.
                    async with asyncio.timeout(ep.timeout_s):
                        text = await get_text(client, base + "/metrics")
                    version, samples, cost_s = await self._read_document(text)
                    if samples:
                        self.filtered_scrape = False
                self.cost_s = cost_s
                if not samples:
                    raise ScrapeError("no vllm: metrics at /metrics")
            except Exception as exc:  # noqa: BLE001 — every failure is shown, none crashes
                return self._failed(exc, started)
            tokens = 0.0
            for sample in samples:
                c = sample.counters
                tokens += c.get("generation_tokens", 0.0) + c.get("prompt_tokens", 0.0)
            self._serving, self._tokens = self._tokens is not None and tokens > self._tokens, tokens
            if want_health:
                if isinstance(health, BaseException):
                    self._healthy = False
                    self._health_error = f"/health failing: {describe_error(health, ep.timeout_s)}"
                else:
                    self._healthy = bool(health)
                    self._health_error = None if health else "/health failing"
            healthy = bool(self._healthy)
            problem = None if healthy else (self._health_error or "/health failing")
            total = self.extractor.total_label_sets
            if total > len(samples):
                problem = (f"too many series ({total}) — showing the first {len(samples)}"
                           + (f"; {problem}" if problem else ""))
            now = self.clock()
            t0 = time.thread_time()
            multi = len(samples) > 1
            by_engine = len({s.key[1] for s in samples}) == len(samples)
            stats = [self._derive(s, self._identity(s.key, by_engine), version, now, problem, multi)
                     for s in samples]
            self.cost_s += time.thread_time() - t0
            self._costs.append(self.cost_s)
        except Exception as exc:  # noqa: BLE001 — a bug or an input nobody foresaw: shown, polling goes on
            return self._failed(exc, started, internal=True)
        self.health = SourceHealth(
            name=ep.name, kind="vllm", ok=True, last_ok_at=now, latency_s=now - started,
            last_error=problem, last_error_at=None if problem is None else now,
        )
        self.stats = stats
        self.completed_polls += 1
        return self.stats

    async def _read_document(self, text: str) -> tuple[str, list[EngineSample], float]:
        """(version, samples, CPU seconds) of one /metrics body; an unchanged body is not parsed again."""
        # hashing 60 KiB costs more than the rest of the check: only a body of the same length can be the same
        last = self._last_text
        seen = (len(text), hash(text) if last is not None and last[0] == len(text) else None)
        if seen == last and seen[1] is not None and self._last_read is not None:
            # byte-identical to the last document (an idle engine): same samples, no parse
            (version, samples), cost_s = self._last_read, 0.0
        elif len(text) > THREAD_PARSE_BYTES:
            version, samples, cost_s = await asyncio.to_thread(self._read, text)
        else:
            version, samples, cost_s = self._read(text)
        self._last_text, self._last_read = seen, (version, samples)
        return version, samples, cost_s

    def _read(self, text: str) -> tuple[str, list[EngineSample], float]:
        """Parse and extract one document: (version, samples, CPU seconds it took)."""
        t0 = time.thread_time()
        try:
            version, samples = self.extractor.extract(self.parser.parse(text))
        except ParseError as e:  # also a value that is no number, found when read
            raise ScrapeError(f"garbage /metrics ({e})") from None
        return version, samples, time.thread_time() - t0

    async def _meta(self, client: LeanHttpClient, base: str) -> None:
        # Optional endpoints: /metrics decides health; any odd answer is ignored.
        try:
            self.models = model_ids(await get_json(client, base + "/v1/models", MODELS_MAX_BYTES))
        except (HttpError, OSError, ValueError, RecursionError):
            pass
        if self.vllm_version is None:
            try:
                doc = await get_json(client, base + "/version", SMALL_MAX_BYTES)
            except (HttpError, OSError, ValueError, RecursionError):
                return
            v = doc.get("version") if isinstance(doc, dict) else None
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                self.vllm_version = plain_text(v, 40)

    @staticmethod
    def _identity(key: tuple[str, str], by_engine: bool) -> tuple[str | None, str]:
        """Which engine of this endpoint a label set is: its ``engine`` label when those are distinct
        on the endpoint (the served model may change, the engine stays), else model and label."""
        return (None, key[1]) if by_engine else key

    def _name(self, ident: tuple[str | None, str], model: str, multi: bool) -> str:
        """This engine's display name, unique on this endpoint and across endpoints; it keeps the
        name it was first given (a model that changes renames nothing)."""
        ep = self.endpoint
        if not multi:
            return ep.name  # one label set is the endpoint itself
        if multi != self._names_multi or len(self._names) >= 4 * self.extractor.max_label_sets:
            self._names.clear()  # one label set became several (or the sets keep changing): name afresh
            self._names_multi = multi
        got = self._names.get(ident)
        if got is not None:
            return got
        name = f"{ep.name}/{plain_text(model, 80) or '?'}#{plain_text(ident[1], 40) or '0'}"
        taken = set(self._names.values())
        if name in taken or name in self._reserved():
            n = 2
            while f"{name}~{n}" in taken:
                n += 1
            name = f"{name}~{n}"
        self._names[ident] = name
        return name

    def _derive(self, s: EngineSample, ident: tuple[str | None, str], version: str, now: float,
                problem: str | None, multi: bool) -> EngineStats:
        ep = self.endpoint
        window = self.windows.get(ident)
        if window is None:
            if len(self.windows) >= 2 * self.extractor.max_label_sets:
                self.windows.clear()  # label sets keep changing: start over rather than grow
                self._layouts.clear()
            window = self.windows[ident] = CounterWindow(self.window_s)
        keys = tuple(s.counters)
        before = self._layouts.get(ident)
        self._layouts[ident] = keys
        window.add(now, s.counters)
        if before is not None and before != keys:
            window.restart(changed_histograms(before, keys), now)
        fields = derived_fields(window, s.gauges)
        notes = window_notes(window, fields, now)
        model, engine_label = s.key
        if not model and self.models:
            model = self.models[0]
        extra = {k: v for k, v in s.cache_config.items() if k in ("num_gpu_blocks", "block_size", "enable_prefix_caching")}
        if window.restarts:
            extra["histogram_restarts"] = str(window.restarts)  # the Log tells each new one (state.membership)
        # one construction with every field (a base then derive's replace built each engine twice)
        return clean_engine(EngineStats(
            name=self._name(ident, model, multi),
            url=ep.url,
            state=UP if problem is None else DEGRADED,
            error="; ".join(x for x in (problem, *notes) if x) or None,
            model=model or None,
            engine_label=engine_label or None,
            metrics_version=version,
            vllm_version=self.vllm_version,
            scraped_at=time.time(),
            max_num_seqs=ep.max_num_seqs,
            extra=extra,
            **fields,
        ))

    def _failed(self, exc: BaseException, started: float, internal: bool = False) -> list[EngineStats]:
        self._healthy = None
        self._tokens, self._serving = None, False
        self.filtered_scrape = True  # what answers after a failure may be another server
        self.completed_polls += 1
        now = self.clock()
        msg = describe_error(exc, self.endpoint.timeout_s)
        if internal:
            msg = error_text(f"internal error: {type(exc).__name__}: {exc}")
        h = self.health
        self.health = replace(
            h, ok=False, last_error=msg, last_error_at=now, latency_s=now - started,
            consecutive_failures=h.consecutive_failures + 1,
        )
        state = DEGRADED if internal or (isinstance(exc, (ScrapeError, HttpError)) and msg.startswith(("garbage", "HTTP", "response", "no vllm"))) else DOWN
        # Keep identity (model, version) but never show stale numbers as current.
        self.stats = [
            EngineStats(name=s.name, url=s.url, state=state, error=msg, model=s.model,
                        engine_label=s.engine_label, metrics_version=s.metrics_version,
                        vllm_version=s.vllm_version, scraped_at=s.scraped_at, max_num_seqs=s.max_num_seqs)
            for s in self.stats
        ]
        return self.stats
