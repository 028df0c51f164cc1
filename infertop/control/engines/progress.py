"""Progress events of long engine actions, and /metrics observation while they run.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from ...domain.engine import EngineStats
from ...sources.expfmt import ParseError, Parser
from ...sources.http_client import HttpError, blocking_get
from ...sources.vllm import EngineEndpoint
from ...sources.fleet_collector import FleetCollector

Progress = Callable[["EngineProgress"], None]


@dataclass(frozen=True, slots=True)
class EngineProgress:
    """One progress event of a long action."""

    name: str
    action: str  # start | stop | restart | set
    phase: str  # spawned | waiting | healthy | draining | killing | stopped | verifying | rollback | failed | done
    elapsed_s: float  # since the action began
    message: str
    log_line: str | None = None  # the engine's latest log line (start)
    in_flight: int | None = None  # running + waiting from /metrics (stop), None when unknown
    pid: int | None = None
    countdown_s: float | None = None  # seconds left of the step's bound (drain grace, health timeout)

    def line(self) -> str:
        """One printable line, as the headless CLI shows it."""
        text = f"[{self.elapsed_s:6.1f}s] {self.name}: {self.message}"
        if self.countdown_s is not None:
            s = max(0, int(round(self.countdown_s)))
            text += f" ({s // 60}:{s % 60:02d} left)"
        if self.log_line:
            text += f"  | {self.log_line}"
        return text


class _Emitter:
    """Calls a progress callback: phase changes at once, otherwise ≤ 4/s, ≥ 1/s."""

    def __init__(self, cb: Progress | None, name: str, action: str) -> None:
        self.cb, self.name, self.action = cb, name, action
        self.t0 = time.monotonic()
        self._last: tuple | None = None
        self._last_t = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, phase: str, message: str, *, log_line: str | None = None,
                 in_flight: int | None = None, pid: int | None = None, force: bool = False,
                 countdown_s: float | None = None) -> None:
        if self.cb is None:
            return
        now = time.monotonic()
        key = (phase, message, log_line, in_flight)
        phase_changed = self._last is None or self._last[0] != phase
        if not (force or phase_changed or now - self._last_t >= 1.0
                or (key != self._last and now - self._last_t >= 0.25)):
            return
        self._last, self._last_t = key, now
        event = EngineProgress(self.name, self.action, phase, now - self.t0, message, log_line, in_flight, pid,
                               countdown_s)
        try:
            self.cb(event)
        except Exception:  # noqa: BLE001 — a broken callback never breaks an action
            pass


def _in_thread(fn: Callable[[], Any], timeout: float) -> Any:
    """Run ``fn`` in a fresh thread (own event loop possible) and wait for it."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["v"] = fn()
        except Exception as e:  # noqa: BLE001
            box["e"] = e

    t = threading.Thread(target=run, daemon=True, name="infertop-engine-observe")
    t.start()
    t.join(timeout)
    return box.get("v")


def observe_once(endpoint: EngineEndpoint) -> EngineStats | None:
    """One scrape of an engine's /metrics through :class:`FleetCollector`; None on failure."""

    def run() -> EngineStats | None:
        loop = asyncio.new_event_loop()
        col = FleetCollector([endpoint], interval_s=1.0, window_s=60.0)
        try:
            snap = loop.run_until_complete(col.poll_once())
        finally:
            loop.run_until_complete(col.aclose())
            loop.close()
        s = snap.engines[0] if snap.engines else None
        return s if s is not None and s.running is not None else None

    return _in_thread(run, endpoint.timeout_s + 5.0)


def drain_counts(url: str, timeout_s: float = 2.0, client: httpx.Client | None = None) -> tuple[int | None, float | None]:
    """(running + waiting, requests finished as aborted so far) from an engine's /metrics.

    Either is None when unknown (no answer, no such series).  The abort
    count is vLLM's ``request_success_total{finished_reason="abort"}``
    summed over its label sets: its growth during a stop is how many
    requests the stop cut short.
    """
    try:
        status, body = blocking_get(url + "/metrics", _METRICS_MAX_BYTES, timeout_s=timeout_s, client=client,
                                    error_body=False)
        if status != 200:
            return None, None
        expo = Parser().parse(body.decode("utf-8", errors="replace"))
    except (httpx.HTTPError, HttpError, ParseError, ValueError, UnicodeDecodeError):
        return None, None

    def total(name: str, pred=lambda labels: True) -> float | None:
        vals = [v for labels, v in expo.series(name) if pred(labels) and math.isfinite(v) and v >= 0]
        return sum(vals) if vals else None

    running = total("vllm:num_requests_running")
    waiting = total("vllm:num_requests_waiting")
    aborted = total("vllm:request_success_total", lambda labels: labels.get("finished_reason") == "abort")
    if aborted is None and running is not None:
        aborted = 0.0 if expo.series("vllm:request_success_total") else None
    in_flight = None if running is None else int(round(running + (waiting or 0)))
    return in_flight, aborted


_METRICS_MAX_BYTES = 16 * 1024 * 1024


class _InFlightWatcher:
    """Polls an engine's running + waiting (and its abort counter) in a background thread while it drains."""

    def __init__(self, endpoint: EngineEndpoint, interval_s: float = 1.0, at_signal: int | None = None) -> None:
        self.endpoint = endpoint
        self.interval_s = interval_s
        self.value: int | None = None
        # What was in flight at the signal is part of the drain even when this thread's first
        # scrape comes late (a starved machine) and sees the drain already under way.
        self.max_seen: int | None = at_signal
        self.last_value: int | None = None  # the last value read before the server went away
        self.aborted: float | None = None  # the abort counter at the last scrape
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"infertop-drain-{endpoint.name}")
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=self.endpoint.timeout_s, trust_env=False) as client:
            while not self._stop.is_set():
                n, aborted = drain_counts(self.endpoint.url, self.endpoint.timeout_s, client)
                self.value = n
                if n is not None:
                    self.last_value = n
                    self.max_seen = n if self.max_seen is None else max(self.max_seen, n)
                if aborted is not None:
                    self.aborted = aborted
                self._stop.wait(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=0.5)  # a scrape in flight finishes on its own (daemon thread)
