"""A real vLLM engine on CPU, driven through infertop's EngineManager.

* Under 16 concurrent long streamed completions sent through ``infertop
  gateway``, ``set_args(max_num_seqs=8)`` drains the engine at the gateway
  (requests wait in its queue), follows the gateway's in-flight to 0, sends
  SIGTERM to the API server, restarts it, verifies the change and undrains:
  the load generator records every request's fate and none fails — zero
  HTTP 5xx, zero cut streams, nothing refused. ``running`` goes from 4 to 8.
* The same change on a bare host (no gateway), measured for the record:
  vLLM 0.32 answers HTTP 500 to requests its HTTP server has read but not
  yet handed to the engine when SIGTERM arrives, and to new ones while it
  drains (signals alone cannot avoid that); nothing it accepted is cut.
* ``kill -9`` of the API server leaves vLLM's EngineCore behind: ``engine
  status`` names the survivors, ``engine stop`` leaves no process of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ports import free_port
from engine_env import wait_until
from gateway_child import TOKEN as GATEWAY_TOKEN
from gateway_child import Gateway

from infertop.config import ProfileConfig, load_config
from infertop.control.engines import cli as engine_cli
from infertop.control.audit import AuditLog
from infertop.control.engines import EngineManager, cmdline_value, read_cmdline
from infertop.control.gateway.drain import find_gateway
from infertop.control.procfs import read_stat, session_members
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector

from real_vllm_env import ENGINE_ENV, SERVED_NAME

pytestmark = pytest.mark.real_vllm

CONCURRENCY = 16
MAX_TOKENS = 320
OBSERVE_TIMEOUT_S = 180.0
START_TIMEOUT_S = 300.0
STOP_GRACE_S = 150.0  # → --shutdown-timeout 140: ample for the in-flight completions to finish


@dataclass(frozen=True)
class Outcome:
    """One request's fate, with when it was sent (monotonic clock)."""

    kind: str  # ok | http_5xx | http_other | cut | refused
    sent: float
    ended: float
    detail: str = ""


class Load:
    """CONCURRENCY clients sending long streamed completions back to back until stopped.

    Each request ends as exactly one of: ``ok`` (the stream ended with
    ``[DONE]`` and a finish reason of stop/length), ``http_5xx``,
    ``http_other``, ``cut`` (a 200 whose stream broke off, ended without
    ``[DONE]`` or finished as aborted: an accepted request that failed), or
    ``refused`` (no connection, or the connection closed before any
    response: the request never reached a running engine).  A client backs
    off briefly after anything but ``ok``.
    """

    def __init__(self, url: str, ignore_eos: bool) -> None:
        self.url = url
        self.ignore_eos = ignore_eos
        self.results: list[Outcome] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="real-load")

    def start(self) -> Load:
        self._thread.start()
        return self

    def outcomes(self, sent_from: float = 0.0, sent_until: float = float("inf")) -> list[Outcome]:
        with self._lock:
            return [r for r in self.results if sent_from <= r.sent < sent_until]

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        # A fresh connection per request: a kept-alive connection to the process that was just
        # stopped would fail on reuse after the restart, which says nothing about the engine.
        limits = httpx.Limits(max_connections=CONCURRENCY + 4, max_keepalive_connections=0)
        # connect=60: the gateway listens throughout; on a loaded CI host (a CPU vLLM restarting takes every
        # core) this client's own loop was starved past a 5 s connect timeout once, which said nothing about
        # the gateway or the engine. A stopped engine without a gateway still refuses at once.
        timeout = httpx.Timeout(600.0, connect=60.0)
        async with httpx.AsyncClient(base_url=self.url, timeout=timeout, limits=limits, trust_env=False) as c:
            tasks = [asyncio.create_task(self._client(c, i)) for i in range(CONCURRENCY)]
            await self._stop.wait()
            for t in tasks:
                t.cancel()  # the test is over: what is in flight now is not counted
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, c: httpx.AsyncClient, i: int) -> None:
        body = {"model": SERVED_NAME, "prompt": f"Request {i}: the quick brown fox",
                "max_tokens": MAX_TOKENS, "temperature": 0.0, "stream": True}
        if self.ignore_eos:
            body["ignore_eos"] = True
        while True:
            sent = time.monotonic()
            kind, detail = await self._one(c, body)
            with self._lock:
                self.results.append(Outcome(kind, sent, time.monotonic(), detail[:300]))
            if kind != "ok":
                await asyncio.sleep(0.2)

    async def _one(self, c: httpx.AsyncClient, body: dict) -> tuple[str, str]:
        started = False
        try:
            async with c.stream("POST", "/v1/completions", json=body) as r:
                started = True
                if r.status_code != 200:
                    text = (await r.aread()).decode("utf-8", "replace")
                    return ("http_5xx" if r.status_code >= 500 else "http_other"), f"{r.status_code} {text}"
                done, finish = False, None
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        done = True
                        continue
                    with_reason = [ch.get("finish_reason") for ch in json.loads(data).get("choices") or []]
                    finish = next((f for f in with_reason if f), finish)
                if done and finish in ("stop", "length"):
                    return "ok", ""
                return "cut", f"done={done} finish_reason={finish}"
        except httpx.HTTPError as e:
            # Before any response: refused at connect, or a kept-alive connection the
            # stopping server closed — the request never reached the engine.
            return ("cut" if started else "refused"), f"{type(e).__name__}: {e}"

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    return dict(Counter(o.kind for o in outcomes))


def details_of(outcomes: list[Outcome], kind: str, n: int = 3) -> list[str]:
    return [o.detail for o in outcomes if o.kind == kind][:n]


def observe(url: str, max_num_seqs: int, want_running: int) -> tuple[bool, list[tuple[float, float]]]:
    """Poll /metrics through FleetCollector until running == want_running and waiting > 0."""
    loop = asyncio.new_event_loop()
    col = FleetCollector([EngineEndpoint("tiny", url, max_num_seqs, timeout_s=10.0)])
    samples: list[tuple[float, float]] = []
    pace = threading.Event()
    deadline = time.monotonic() + OBSERVE_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            snap = loop.run_until_complete(col.poll_once())
            s = snap.engines[0]
            if s.running is not None and s.waiting is not None:
                samples.append((s.running, s.waiting))
                if s.running == want_running and s.waiting > 0:
                    return True, samples
            pace.wait(0.5)
        return False, samples
    finally:
        loop.run_until_complete(col.aclose())
        loop.close()


def accepts_ignore_eos(url: str) -> bool:
    with httpx.Client(base_url=url, timeout=120.0, trust_env=False) as c:
        r = c.post("/v1/completions", json={"model": SERVED_NAME, "prompt": "hi", "max_tokens": 4,
                                            "ignore_eos": True})
        if r.status_code == 200:
            return True
        assert r.status_code == 400, r.text
        return False


def tiny_profile(vllm_python: Path, tiny_model_dir: Path) -> ProfileConfig:
    return ProfileConfig(
        model=str(tiny_model_dir),
        served_model_name=SERVED_NAME,
        port=free_port(),
        max_num_seqs=4,
        max_model_len=512,
        dtype="float32",
        enforce_eager=True,
        env=dict(ENGINE_ENV),
        python=str(vllm_python),
        start_timeout_s=START_TIMEOUT_S,
        stop_grace_s=STOP_GRACE_S,
    )


def test_set_max_num_seqs_under_load_fails_no_accepted_request(
    vllm_python: Path, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 concurrent long completions through ``infertop gateway``; ``engine set max_num_seqs=8`` drains the
    engine at the gateway first (requests wait in its queue), then signals, restarts, undrains: no request
    fails, and ``running`` goes 4 → 8."""
    monkeypatch.setenv("INFERTOP_GATEWAY_TOKEN", GATEWAY_TOKEN)
    audit = AuditLog(tmp_path / "audit.jsonl")
    profile = tiny_profile(vllm_python, tiny_model_dir)
    mgr = EngineManager(tmp_path / "state", audit, poll_interval_s=0.5, profiles={"tiny": profile})
    gw = Gateway(tmp_path, [{"name": "tiny", "url": f"http://127.0.0.1:{profile.port}", "cap": 16}], {})
    load = None
    rec = None
    try:
        rec = mgr.start("tiny", profile)
        print(f"\n[real-ctl] start → healthy in {rec.startup_s:.1f} s (pid {rec.pid})")
        assert cmdline_value(read_cmdline(rec.pid), "max_num_seqs") == "4"
        drain, warnings = find_gateway(load_config(gw.config), "tiny", rec.url)
        assert drain is not None and warnings == [], warnings
        # the gateway saw the port refuse while vLLM started; its next good /metrics read brings the engine up
        # (a CI run sent the first request before that read and got the gateway's "all down" 502)
        assert wait_until(lambda: gw.engine("tiny")["up"], timeout=120), gw.engine("tiny")

        load = Load(gw.url, accepts_ignore_eos(gw.url)).start()
        seen, samples = observe(rec.url, 4, 4)
        assert seen, f"never saw running == 4 with requests waiting; samples: {samples[-10:]}"
        assert max(r for r, _ in samples) <= 4

        t_set = time.monotonic()
        res = mgr.set_args("tiny", {"max_num_seqs": 8}, gateway=drain)
        t_done = time.monotonic()
        rec = res.record
        print(f"[real-ctl] through the gateway: max_num_seqs 4 → 8 in {res.total_s:.1f} s end to end: "
              f"stop {res.stop.seconds:.1f} s ({res.stop.reason}), healthy after {res.startup_s:.1f} s; "
              f"gateway: {res.stop.gateway}")
        assert res.changed and res.verified == {"max_num_seqs": "8"}
        assert res.stop.gateway.startswith(f"drained at {drain.label} first") and "undrained" in res.stop.gateway
        assert res.stop.in_flight_before == 0, res.stop.reason  # the gateway drained the engine before SIGTERM
        assert res.stop.failed in (0, None), res.stop.reason

        seen, samples = observe(rec.url, 8, 8)
        assert seen, f"never saw running == 8 with requests waiting; samples: {samples[-10:]}"
        assert max(r for r, _ in samples) <= 8
        # the requests sent during the change (each client's next one, once the gateway had drained its
        # last) waited in the gateway's queue; let them finish on the new engine
        deadline = time.monotonic() + OBSERVE_TIMEOUT_S
        while len(load.outcomes(t_set, t_done)) < CONCURRENCY and time.monotonic() < deadline:
            time.sleep(0.5)
        total, during = tally(load.outcomes()), tally(load.outcomes(t_set, t_done))
        print(f"[real-ctl] every request sent through the gateway, before, during and after: {total}; "
              f"sent during the change: {during}")
        # zero failed requests: no 5xx, no cut stream, nothing refused — those sent during the change waited
        assert set(total) == {"ok"}, {k: details_of(load.outcomes(), k) for k in total if k != "ok"}
        assert during.get("ok", 0) >= CONCURRENCY, during
    finally:
        if load is not None:
            load.stop()
        now = mgr.status("tiny")
        if now is not None and now.alive:
            stop = mgr.stop("tiny")
            print(f"[real-ctl] stop: {stop.reason}")
        gw.stop()
    assert rec is not None
    assert session_members(rec.pid) == [], "processes of the engine are left"
    outcomes = [(a["action"], a["result"]) for a in audit.entries() if a.get("phase") == "outcome"]
    assert outcomes == [("engine.start", "ok"), ("gateway.drain", "ok"), ("gateway.undrain", "ok"),
                        ("engine.set", "ok"), ("engine.stop", "ok")], outcomes
    assert audit.unfinished() == []


def test_bare_host_set_under_load_measures_the_requests_vllm_refuses(
    vllm_python: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The same change with no gateway in front, for the record: vLLM 0.32 answers HTTP 500 to requests its
    HTTP server has read but not handed to the engine when SIGTERM arrives, and to new ones while it drains.
    What infertop controls is held: nothing the engine accepted is cut or aborted; the 500s are counted."""
    audit = AuditLog(tmp_path / "audit.jsonl")
    profile = tiny_profile(vllm_python, tiny_model_dir)
    mgr = EngineManager(tmp_path / "state", audit, poll_interval_s=0.5, profiles={"tiny": profile})
    load = None
    try:
        rec = mgr.start("tiny", profile)
        assert cmdline_value(read_cmdline(rec.pid), "shutdown_timeout") == str(int(STOP_GRACE_S) - 10)
        load = Load(rec.url, accepts_ignore_eos(rec.url)).start()
        seen, samples = observe(rec.url, 4, 4)
        assert seen, f"never saw running == 4 with requests waiting; samples: {samples[-10:]}"
        drain_began: list[float] = []

        def on_progress(ev) -> None:
            if ev.phase == "draining" and not drain_began:
                drain_began.append(time.monotonic())  # emitted right after SIGTERM

        res = mgr.set_args("tiny", {"max_num_seqs": 8}, on_progress)
        t_done = time.monotonic()
        t_term = drain_began[0]
        accepted, during = load.outcomes(0.0, t_term), load.outcomes(t_term, t_done)
        at_term = [o for o in accepted if o.ended > t_term]
        failed = [o for o in at_term + during if o.kind in ("http_5xx", "cut")]
        print(f"\n[real-ctl] bare host (no gateway): max_num_seqs 4 → 8 in {res.total_s:.1f} s end to end; "
              f"in flight at SIGTERM (client side): {len(at_term)}, ended: {tally(at_term)}; sent during the "
              f"change: {tally(during)}; failed: {len(failed)} of {len(at_term) + len(during)}; samples: "
              f"{ {k: details_of(at_term + during, k) for k in ('cut', 'http_5xx', 'refused')} }")
        assert res.changed and res.verified == {"max_num_seqs": "8"}
        assert not [o for o in load.outcomes() if o.kind == "cut"], details_of(load.outcomes(), "cut")
        assert res.stop.failed in (0, None), res.stop.reason
        for o in at_term + during:  # every 500 is vLLM's refusal, never an accepted request that failed
            if o.kind == "http_5xx":
                assert ("cannot schedule new futures after shutdown" in o.detail
                        or "EngineCore encountered an issue" in o.detail), o.detail
    finally:
        if load is not None:
            load.stop()
        now = mgr.status("tiny")
        if now is not None and now.alive:
            mgr.stop("tiny")


def test_kill_9_of_the_api_server_then_status_and_stop(
    vllm_python: Path, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    state_dir = tmp_path / "state"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"audit_log: {tmp_path / 'audit.jsonl'}\n")
    mgr = EngineManager(state_dir, AuditLog(tmp_path / "audit.jsonl"), poll_interval_s=0.5)
    rec = mgr.start("tiny", tiny_profile(vllm_python, tiny_model_dir))
    sid = rec.pid
    try:
        workers = [m.pid for m in session_members(sid) if m.pid != rec.pid]
        assert workers, "vLLM started no EngineCore process"
        titles = {p: Path(f"/proc/{p}/comm").read_text().strip() for p in workers}
        print(f"\n[real-ctl] engine {rec.pid} with {titles}")
        os.kill(rec.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(m.pid == rec.pid for m in session_members(sid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        capsys.readouterr()
        base = ["--config", str(cfg), "--state-dir", str(state_dir)]
        assert engine_cli.main(["status", *base, "tiny"]) == 0
        out = capsys.readouterr().out
        print(out)
        left = [m.pid for m in session_members(sid)]
        assert left, "vLLM's workers died with the API server: nothing to find"
        assert "main process exited;" in out and "still alive: pids" in out
        assert "orphaned" in out
        t0 = time.monotonic()
        assert engine_cli.main(["stop", *base, "tiny"]) == 0
        out = capsys.readouterr().out
        print(f"[real-ctl] stop after kill -9 in {time.monotonic() - t0:.1f} s: {out.strip()}")
        assert session_members(sid) == [], "processes of the engine are left"
        assert all((st := read_stat(p)) is None or st.state in ("Z", "X") for p in left)  # zombies at most
    finally:
        for m in session_members(sid):  # never leave 2 GB of workers behind a failed test
            os.kill(m.pid, signal.SIGKILL)
