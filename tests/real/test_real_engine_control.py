"""A real vLLM engine on CPU, driven through infertop's EngineManager.

Start with max_num_seqs=4 → under 16 concurrent long completions the
collector sees running == 4 with requests waiting → ``set_args`` to 8 (the
TUI dialog's code path: drain, restart, verify) while the load goes on →
running == 8 → stop, and nothing of the engine's process group is left.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from infertop.config import ProfileConfig
from infertop.control.audit import AuditLog
from infertop.control.engines import EngineManager, cmdline_value, group_members, read_cmdline
from infertop.sources.vllm import EngineEndpoint, FleetCollector

from .conftest import ENGINE_ENV, SERVED_NAME, free_port

pytestmark = pytest.mark.real_vllm

CONCURRENCY = 16
MAX_TOKENS = 480
OBSERVE_TIMEOUT_S = 180.0
START_TIMEOUT_S = 300.0


class Load:
    """CONCURRENCY clients, each sending long completions back to back until stopped.

    Runs in its own thread and event loop.  Errors (the engine restarting)
    back off briefly and retry, so the same load resumes on the new engine.
    """

    def __init__(self, url: str, ignore_eos: bool) -> None:
        self.url = url
        self.ignore_eos = ignore_eos
        self.ok = 0
        self.errors = 0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="real-load")

    def start(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        limits = httpx.Limits(max_connections=CONCURRENCY + 4)
        async with httpx.AsyncClient(base_url=self.url, timeout=600.0, limits=limits, trust_env=False) as c:
            tasks = [asyncio.create_task(self._client(c, i)) for i in range(CONCURRENCY)]
            await self._stop.wait()
            for t in tasks:
                t.cancel()  # closes the connections: vLLM aborts those requests
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, c: httpx.AsyncClient, i: int) -> None:
        body = {"model": SERVED_NAME, "prompt": f"Request {i}: the quick brown fox",
                "max_tokens": MAX_TOKENS, "temperature": 0.0}
        if self.ignore_eos:
            body["ignore_eos"] = True
        while True:
            try:
                r = await c.post("/v1/completions", json=body)
                if r.status_code == 200:
                    self.ok += 1
                    continue
                self.errors += 1
            except httpx.HTTPError:
                self.errors += 1
            await asyncio.sleep(0.5)

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


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


def test_engine_manager_changes_max_num_seqs_on_a_real_engine(
    vllm_python: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    t_test = time.monotonic()
    audit = AuditLog(tmp_path / "audit.jsonl")
    mgr = EngineManager(tmp_path / "state", audit, poll_interval_s=0.5)
    profile = ProfileConfig(
        model=str(tiny_model_dir),
        served_model_name=SERVED_NAME,
        port=free_port(),
        max_num_seqs=4,
        max_model_len=512,
        dtype="float32",
        enforce_eager=True,
        shutdown_timeout=3,
        env=dict(ENGINE_ENV),
        python=str(vllm_python),
        start_timeout_s=START_TIMEOUT_S,
        stop_grace_s=30.0,
    )
    events = []
    load = None
    rec = None
    try:
        rec = mgr.start("tiny", profile, events.append)
        print(f"\n[real-ctl] start → healthy in {rec.startup_s:.1f} s (pid {rec.pid})")
        assert rec.phase == "running"
        assert cmdline_value(read_cmdline(rec.pid), "max_num_seqs") == "4"
        assert any(e.phase == "waiting" and e.log_line for e in events)

        load = Load(rec.url, accepts_ignore_eos(rec.url)).start()
        seen, samples = observe(rec.url, 4, 4)
        assert seen, f"never saw running == 4 with requests waiting; samples: {samples[-10:]}"
        assert max(r for r, _ in samples) <= 4
        print(f"[real-ctl] max_num_seqs=4: running/waiting {samples[-1]} after {len(samples)} scrapes")

        set_events = []
        res = mgr.set_args("tiny", {"max_num_seqs": 8}, set_events.append)
        rec = res.record
        timeline = {}
        for e in set_events:
            timeline.setdefault(e.phase, round(e.elapsed_s, 1))
        print(f"[real-ctl] set_args timeline (first event per phase, s): {timeline}")
        drained = [e for e in set_events if e.phase == "draining"]
        counts = [e.in_flight for e in drained if e.in_flight is not None]
        print(f"[real-ctl] set_args 4 → 8 in {res.total_s:.1f} s end to end: stop {res.stop.seconds:.1f} s "
              f"({res.stop.reason}), healthy after {res.startup_s:.1f} s; in flight while draining: "
              f"{counts[:5]}; before running={res.before and res.before.running}")
        assert res.changed and res.old == {"max_num_seqs": 4} and res.new == {"max_num_seqs": 8}
        assert res.verified == {"max_num_seqs": "8"}
        assert drained
        # Under continuing load vLLM's HTTP server waits for the clients' connections after
        # the engine has drained; infertop then kills it well before the grace period ends.
        assert not res.stop.sigkill or "engine drained and stopped" in res.stop.reason, res.stop.reason
        assert cmdline_value(read_cmdline(rec.pid), "max_num_seqs") == "8"

        seen, samples = observe(rec.url, 8, 8)
        assert seen, f"never saw running == 8 with requests waiting; samples: {samples[-10:]}"
        assert max(r for r, _ in samples) <= 8
        print(f"[real-ctl] max_num_seqs=8: running/waiting {samples[-1]} after {len(samples)} scrapes; "
              f"load: {load.ok} completions ok, {load.errors} errors")
    finally:
        if load is not None:
            load.stop()
        now = mgr.status("tiny")
        if now is not None and now.alive:
            t_stop = time.monotonic()
            stop = mgr.stop("tiny")
            print(f"[real-ctl] stop in {time.monotonic() - t_stop:.1f} s ({stop.reason})")
    assert rec is not None
    assert group_members(rec.pgid) == [], "processes of the engine's group are left"
    assert mgr.status("tiny") is None
    actions = [(a["action"], a["result"]) for a in audit.entries()]
    assert actions == [("engine.start", "ok"), ("engine.set", "ok"), ("engine.stop", "ok")]
    print(f"[real-ctl] test body {time.monotonic() - t_test:.1f} s")
