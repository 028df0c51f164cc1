"""The vLLM collector over real loopback HTTP, with a controlled clock."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from locations import capture_text
from infertop.domain.engine import DEGRADED, DOWN, UP
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector
from vllm_text import v0_doc, v1_doc


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(urls, clock, **kw):
    eps = [EngineEndpoint(name, url, timeout_s=kw.pop("timeout_s", 30.0)) if isinstance(url, str) else url
           for name, url in urls]
    return FleetCollector(eps, window_s=kw.pop("window_s", 60.0), clock=clock, **kw)


async def test_rates_and_quantiles_from_deltas(scripted):
    state = {"0": dict(running=3, waiting=2, kv=0.42, prompt=1000, gen=5000, success=10, preempt=1, pq=100, ph=10,
                       ttft=[0.3] * 5)}
    srv = scripted().serve_engine(lambda: v1_doc(engines=state))
    clock = Clock()
    fc = make([("a", srv.url)], clock)
    await fc.poll_once()
    first = fc.snapshot().engines[0]
    assert first.state == UP and first.running == 3 and first.waiting == 2
    assert first.kv_cache_pct == pytest.approx(42.0)
    assert first.generation_tokens_per_s is None  # one point: no rate yet, never lifetime totals
    state["0"].update(prompt=1600, gen=5800, success=14, preempt=3, pq=300, ph=160, ttft=[0.3] * 5 + [0.9] * 9 + [3.0])
    clock.t += 4.0
    await fc.poll_once()
    s = fc.snapshot().engines[0]
    assert s.prompt_tokens_per_s == pytest.approx(150.0)
    assert s.generation_tokens_per_s == pytest.approx(200.0)
    assert s.requests_per_s == pytest.approx(1.0)
    assert s.preemptions_per_s == pytest.approx(0.5)
    assert s.prefix_cache_hit_pct == pytest.approx(75.0)  # 150 hits / 200 queries in the window
    # 10 new TTFTs: 9 in (0.75, 1.0], 1 in (2.5, 5.0]; p50 rank 5 → 0.75 + 0.25*5/9
    assert s.ttft_p50_s == pytest.approx(0.75 + 0.25 * 5 / 9)
    # p99 rank 9.9 → (2.5, 5] bucket: 2.5 + 2.5 * 0.9
    assert s.ttft_p99_s == pytest.approx(2.5 + 2.5 * 0.9)
    assert s.model == "tiny" and s.metrics_version == "v1"


async def test_engine_restart_is_a_counter_reset(scripted):
    state = {"0": dict(gen=10_000)}
    srv = scripted().serve_engine(lambda: v1_doc(engines=state))
    clock = Clock()
    fc = make([("a", srv.url)], clock)
    await fc.poll_once()
    clock.t += 1
    state["0"]["gen"] = 10_100
    await fc.poll_once()
    clock.t += 1
    state["0"]["gen"] = 50  # restarted: counters start again from zero
    await fc.poll_once()
    s = fc.snapshot().engines[0]
    assert s.generation_tokens_per_s == pytest.approx((100 + 50) / 2)


async def test_real_captures_idle_then_under_load(scripted):
    docs = [capture_text("metrics_idle.txt"), capture_text("metrics_under_load.txt")]
    srv = scripted().serve_engine(lambda: docs[0])
    clock = Clock()
    fc = make([("real", srv.url)], clock)
    await fc.poll_once()
    docs.pop(0)
    clock.t += 10
    await fc.poll_once()
    s = fc.snapshot().engines[0]

    def value(text, name):
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)

    idle, busy = capture_text("metrics_idle.txt"), capture_text("metrics_under_load.txt")
    expected = (value(busy, "vllm:generation_tokens_total") - value(idle, "vllm:generation_tokens_total")) / 10
    assert s.generation_tokens_per_s == pytest.approx(expected)
    assert s.running == 8 and s.waiting == 16
    assert s.model == "tiny" and s.engine_label == "0"


async def test_v0_names_fall_back(scripted):
    state = {"gen": 100.0, "tpot": [0.02] * 10}
    srv = scripted().serve_engine(lambda: v0_doc(running=2, waiting=1, kv=0.5, gen=state["gen"], tpot=state["tpot"]))
    clock = Clock()
    fc = make([("old", srv.url)], clock)
    await fc.poll_once()
    state.update(gen=300.0, tpot=[0.02] * 10 + [0.06] * 20)
    clock.t += 2
    await fc.poll_once()
    s = fc.snapshot().engines[0]
    assert s.metrics_version == "v0"
    assert s.kv_cache_pct == pytest.approx(50.0)
    assert s.generation_tokens_per_s == pytest.approx(100.0)
    # 20 new ITL observations in (0.05, 0.075]: p50 → 0.05 + 0.025 * 10/20
    assert s.itl_p50_s == pytest.approx(0.0625)


async def test_several_label_sets_on_one_endpoint(scripted):
    state = {"0": dict(running=1), "1": dict(running=4)}
    srv = scripted().serve_engine(lambda: v1_doc(engines=state))
    fc = make([("dp", srv.url)], Clock())
    await fc.poll_once()
    got = {e.name: e.running for e in fc.snapshot().engines}
    assert got == {"dp/tiny#0": 1.0, "dp/tiny#1": 4.0}


async def test_bad_endpoints_are_reported_and_others_keep_updating(scripted):
    good = scripted().serve_engine(lambda: v1_doc(engines={"0": {"running": 2}}))
    garbage = scripted().serve_engine("<html>502 Bad Gateway</html>")
    http500 = scripted().serve_engine("")
    http500.routes["/metrics"] = (500, b"Internal Server Error")
    huge = scripted().serve_engine(lambda: "x" * (50 * 1024 * 1024))
    labels = ",".join(f'l{i}="v"' for i in range(10_000))
    big_labels = scripted().serve_engine(v1_doc(engines={"0": {"running": 5}}) + f"weird{{{labels}}} 1\n")
    refused = "http://127.0.0.1:9"  # discard port: nothing listens there
    fc = make([("good", good.url), ("garbage", garbage.url), ("http500", http500.url), ("huge", huge.url),
               ("labels", big_labels.url), ("refused", refused)], Clock())
    await fc.poll_once()
    by = fc.snapshot().by_name()
    assert by["good"].state == UP and by["good"].running == 2
    assert by["labels"].state == UP and by["labels"].running == 5
    assert by["garbage"].state == DEGRADED and by["garbage"].error.startswith("garbage /metrics (line 1")
    assert by["http500"].state == DEGRADED and by["http500"].error == "HTTP 500"
    assert by["huge"].state == DEGRADED and "too large" in by["huge"].error
    assert by["refused"].state == DOWN and by["refused"].error == "connection refused"
    health = {h.name: h for h in fc.health()}
    assert health["good"].ok and not health["refused"].ok and health["refused"].consecutive_failures == 1


async def test_hung_engine_never_delays_the_others(scripted):
    good = scripted().serve_engine(lambda: v1_doc(engines={"0": {"running": 1}}))
    hung = scripted().serve_engine("")
    hung.hang.add("/metrics")
    fc = FleetCollector([EngineEndpoint("good", good.url, timeout_s=2.0), EngineEndpoint("hung", hung.url, timeout_s=2.0)],
                        interval_s=0.05)
    good_polls = 0
    hung_done = asyncio.Event()

    def on_update(snap):
        nonlocal good_polls
        by = snap.by_name()
        if by["good"].state == UP:
            good_polls += 1
        if by["hung"].error:
            hung_done.set()

    fc.on_update = on_update
    task = asyncio.create_task(fc.run())
    try:
        await asyncio.wait_for(hung_done.wait(), timeout=30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # While the hung engine's one poll waited for its timeout, the good engine kept
    # being polled on its own schedule.
    assert good_polls >= 3
    assert fc.snapshot().by_name()["hung"].error == "timeout after 2 s"


async def test_failing_engine_is_retried_within_one_interval_with_jitter():
    fc = make([("refused", "http://127.0.0.1:9")], Clock())
    c = fc.collectors[0]
    assert c.next_delay_s(1.0) == 1.0  # healthy (not polled yet): exactly the interval
    delays = []
    for _ in range(20):
        await fc.poll_once()
        delays.append(c.next_delay_s(1.0))
    assert c.health.consecutive_failures == 20
    # never later than one interval (a recovered engine is seen within it), spread by jitter
    assert all(0.8 <= d <= 1.0 for d in delays) and len(set(delays)) > 1


async def test_failing_health_marks_engine_degraded(scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 1}}))
    srv.routes["/health"] = (503, b"")
    fc = make([("sick", srv.url)], Clock())
    await fc.poll_once()
    s = fc.snapshot().engines[0]
    assert s.state == DEGRADED and s.error == "/health failing" and s.running == 1
    srv.routes["/health"] = (200, b"")
    await fc.poll_once()  # after a failure /health is checked on every poll
    assert fc.snapshot().engines[0].state == UP


async def test_health_is_asked_rarely_while_tokens_flow_and_often_once_they_stop(scripted):
    state = {"0": dict(gen=1000, prompt=500)}
    srv = scripted().serve_engine(lambda: v1_doc(engines=state))
    clock = Clock()
    fc = make([("busy", srv.url)], clock)

    async def polls(n: int, flowing: bool) -> int:
        before = srv.hits.get("/health", 0)
        for _ in range(n):
            if flowing:
                state["0"]["gen"] += 100
            clock.t += 1.0
            await fc.poll_once()
        return srv.hits.get("/health", 0) - before

    assert await polls(1, flowing=True) == 1  # the first poll asks: nothing is known yet
    assert await polls(59, flowing=True) == 2  # polls 30 and 60 (every 30th while counters move)
    # the engine core dies: its counters stand still, so /health is asked within the usual 5 polls
    srv.routes["/health"] = (503, b"")
    assert await polls(5, flowing=False) == 1
    assert fc.snapshot().engines[0].state == DEGRADED
    assert await polls(3, flowing=False) == 3  # after a failure: every poll
    srv.routes["/health"] = (200, b"")
    assert await polls(1, flowing=False) == 1 and fc.snapshot().engines[0].state == UP
    assert await polls(10, flowing=False) == 2  # idle and healthy: every 5th poll, as before


async def test_run_for_gives_every_engine_a_state_and_never_waits_in_lockstep(scripted):
    good = scripted().serve_engine(lambda: v1_doc(engines={"0": {"running": 1}}))
    hung = scripted().serve_engine("")
    hung.hang.add("/metrics")
    fc = FleetCollector([EngineEndpoint("good", good.url), EngineEndpoint("hung", hung.url, timeout_s=1.0)],
                        interval_s=0.05)
    snap = await fc.run_for(0.3)
    by = snap.by_name()
    assert by["good"].state == UP and by["hung"].state == DOWN and by["hung"].error == "timeout after 1 s"
    good_c, hung_c = fc.collectors
    assert hung_c.completed_polls == 1 and good_c.completed_polls > 5  # polled on while the other hung
    await fc.aclose()


async def test_derived_names_never_take_another_endpoints_name(scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 1}, "1": {"running": 2}}))
    other = scripted().serve_engine(v1_doc(engines={"0": {"running": 3}}))
    fc = make([("dp", srv.url), ("dp/tiny#0", other.url)], Clock())
    await fc.poll_once()
    names = [e.name for e in fc.snapshot().engines]
    assert sorted(names) == ["dp/tiny#0", "dp/tiny#0~2", "dp/tiny#1"]
    assert fc.snapshot().by_name()["dp/tiny#0"].running == 3  # the configured name keeps its engine


async def test_too_many_label_sets_are_capped_and_said(scripted):
    rows = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n' for i in range(100))
    srv = scripted().serve_engine(rows)
    fc = make([("wide", srv.url)], Clock())
    await fc.poll_once()
    snap = fc.snapshot()
    assert len(snap.engines) == 64 and len(fc.collectors[0].windows) == 64
    assert {e.error for e in snap.engines} == {"too many series (100) — showing the first 64"}
    assert all(e.state == DEGRADED for e in snap.engines)
    h = fc.health()[0]
    assert h.ok and h.last_error == "too many series (100) — showing the first 64"


def test_healthy_engines_share_each_poll_deadline_on_the_interval_grid():
    """Engines whose polls started apart (or took longer) are due at the same multiple of the interval:
    one wake-up of the event loop for all of them; never sooner than MIN_PAUSE_S after a poll ends."""
    from infertop.sources.fleet_collector import MIN_PAUSE_S, grid_due

    dues = {grid_due(started + 1.0, now, 1.0) for started, now in ((100.02, 100.03), (99.97, 100.2), (100.4, 100.45))}
    assert dues == {101.0}
    # a poll that ended too close to the grid point waits for the next one
    assert grid_due(101.0, 100.99, 1.0) == 102.0
    assert grid_due(101.0, 101.0 - MIN_PAUSE_S - 0.01, 1.0) == 101.0
    # a poll that overran its interval: the next grid point after it, not one in the past
    assert grid_due(101.0, 103.3, 1.0) == 104.0
    assert grid_due(100.0, 100.0, 0.0) == 100.0 + MIN_PAUSE_S  # no interval: no grid, never a busy loop
    for interval in (0.25, 2.0, 5.0):
        got = grid_due(1000.1, 1000.0, interval)
        assert got >= 1000.0 + MIN_PAUSE_S and abs(got / interval - round(got / interval)) < 1e-9


async def test_a_percentile_whose_rank_is_in_the_first_bucket_is_its_bound_marked_under(scripted):
    """Every TTFT ≤ 1 ms (the first bound): p99 is that bound, marked "<" — not 0.99 ms, an
    interpolation from 0 that reads like a measurement."""
    from infertop.format import percentile_human

    state = {"0": dict(ttft=[0.0005] * 3)}
    srv = scripted().serve_engine(lambda: v1_doc(engines=state))
    clock = Clock()
    fc = make([("a", srv.url)], clock)
    await fc.poll_once()
    state["0"]["ttft"] = [0.0005] * 800
    clock.t += 4.0
    await fc.poll_once()
    s = fc.snapshot().engines[0]
    assert s.ttft_p99_s == 0.001 and s.quantile_edges == {"ttft_p50_s": "<", "ttft_p99_s": "<"}
    assert percentile_human(s, "ttft_p99_s") == "<1ms"
