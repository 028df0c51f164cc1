"""Engine identity and counter/histogram windows under hostile input (issue 29, items 11, 12, 14).

Engines are scripted loopback servers (tests/support/scripted_server.py) polled by the real
collector with a clock the test advances one second a poll; the Log lines come from
the real :class:`FleetMembership` fed the collector's stats tick by tick.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from infertop.sources.queues.collector import QueueCollector, QueueEndpoint, metrics_url
from infertop.sources.vllm import BUCKETS_RESTARTED, EngineCollector, EngineEndpoint
from infertop.state.fleet_join import missing_reasons
from infertop.state.fleet_types import FRESH, EngineState, Freshness
from infertop.state.membership import NOTE_EVERY_S, FleetMembership
from infertop.domain.window import CounterWindow
from infertop.ui.widgets.queue import header_line
from vllm_text import TTFT_LE, v1_doc


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def engine_doc(model: str = "llama-a", engines: tuple[str, ...] = ("0",), gen: float = 0.0,
               bounds: tuple[float, ...] = TTFT_LE, ttft: tuple[float, ...] = ()) -> str:
    """A small vLLM V1 document: gauges, the generation token counter, TTFT buckets at ``bounds``."""
    rows = ["# TYPE vllm:num_requests_running gauge"]
    rows += [f'vllm:num_requests_running{{engine="{e}",model_name="{model}"}} 1.0' for e in engines]
    rows += ["# TYPE vllm:num_requests_waiting gauge"]
    rows += [f'vllm:num_requests_waiting{{engine="{e}",model_name="{model}"}} 0.0' for e in engines]
    rows += ["# TYPE vllm:generation_tokens_total counter"]
    rows += [f'vllm:generation_tokens_total{{engine="{e}",model_name="{model}"}} {gen!r}' for e in engines]
    rows += ["# TYPE vllm:time_to_first_token_seconds histogram"]
    for e in engines:
        for le in (*bounds, math.inf):
            n = float(sum(1 for o in ttft if o <= le))
            text = "+Inf" if le == math.inf else repr(float(le))
            rows.append(f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="{text}",model_name="{model}"}} {n}')
        rows.append(f'vllm:time_to_first_token_seconds_count{{engine="{e}",model_name="{model}"}} {float(len(ttft))}')
    return "\n".join(rows) + "\n"


class Scripted:
    """A scripted engine whose /metrics is ``doc(poll)``; the poll number is the test's."""

    def __init__(self, scripted, doc) -> None:
        self.poll = 0
        self.srv = scripted().serve_engine(lambda: doc(self.poll))


async def run_polls(engine: Scripted, n: int, name: str = "llama", *, clock: Clock | None = None,
                    collector: EngineCollector | None = None):
    """Poll ``n`` times, one second apart; yields (poll, stats) after each."""
    clock = clock or Clock()
    c = collector or EngineCollector(EngineEndpoint(name, engine.srv.url), 60.0, clock)
    out = []
    try:
        for _ in range(n):
            await c.poll()
            out.append((engine.poll, c.stats))
            engine.poll += 1
            clock.t += 1.0
    finally:
        await c.aclose()
    return c, out


def log_lines(ticks: list[tuple[float, list]]) -> list[str]:
    """What the Log pane says about membership over ``ticks`` of (state time, stats)."""
    m = FleetMembership()
    lines = []
    for t, stats in ticks:
        lines += m.changes(SimpleNamespace(engines=[EngineState(s) for s in stats], taken_at=t, cluster=None))
    return lines


# ---- item 11: an engine is its endpoint, not its served model


async def test_a_model_that_changes_every_poll_keeps_the_engine_and_its_name(scripted):
    eng = Scripted(scripted, lambda p: engine_doc(model=f"m{p}", gen=100.0 * p))
    c, polls = await run_polls(eng, 12)
    assert {s.name for _, stats in polls for s in stats} == {"llama"}  # never llama~2, ~10, ~19…
    assert len(c.windows) == 1  # one window, not one per model
    last = polls[-1][1][0]
    assert last.model == "m11" and last.generation_tokens_per_s == pytest.approx(100.0)  # the window went on
    lines = log_lines([(1000.0 + p, stats) for p, stats in polls])
    assert not [x for x in lines if "left the fleet" in x or "joined" in x], lines
    assert lines == ["llama model changed m0 → m1"]  # once: the rest of the minute is quiet


async def test_a_flapping_model_is_told_once_a_minute_with_the_count(scripted):
    eng = Scripted(scripted, lambda p: engine_doc(model="llama-a" if p % 2 == 0 else "llama-b"))
    _, polls = await run_polls(eng, 4)
    stats_a, stats_b = polls[0][1], polls[1][1]
    # told at 1 s (→ b); the next minute ends at 61 s, on b: told at 62 s, back on a
    ticks = [(1000.0 + t, stats_a if t % 2 == 0 else stats_b) for t in range(int(NOTE_EVERY_S) + 3)]
    lines = log_lines(ticks)
    assert lines[0] == "llama model changed llama-a → llama-b"
    assert len(lines) == 2 and lines[1].startswith("llama model changed llama-b → llama-a (changed ")
    assert all("left the fleet" not in x for x in lines)


async def test_data_parallel_engines_keep_their_names_when_the_model_changes(scripted):
    eng = Scripted(scripted, lambda p: engine_doc(model="llama-a" if p % 2 == 0 else "llama-b", engines=("0", "1"),
                                                  gen=50.0 * p))
    c, polls = await run_polls(eng, 6)
    for _, stats in polls:
        assert [s.name for s in stats] == ["llama/llama-a#0", "llama/llama-a#1"]
    assert len(c.windows) == 2 and polls[-1][1][1].generation_tokens_per_s == pytest.approx(50.0)


# ---- item 12: a dip is no reset; an implausible rate is not shown


def test_a_tiny_dip_in_a_large_counter_is_a_glitch_not_a_reset():
    w = CounterWindow(60)
    rates = []
    for t in range(20):
        v = 1e9 + 1000.0 * t - (1150.0 if t == 8 else 0.0)  # at 8 s: 150 below the value at 7 s
        w.add(float(t), {"c": v})
        rates.append(w.rate("c"))
    assert w.resets == 0 and w.dropped == 1
    assert max(r for r in rates if r is not None) == pytest.approx(1000.0)  # no 1.5e8 tokens/s spike
    assert rates[-1] == pytest.approx(1000.0)


def test_a_counter_that_falls_to_a_small_value_is_still_a_reset():
    w = CounterWindow(60)
    for t, v in enumerate([1e9, 1e9 + 1000, 500.0, 1500.0]):  # the engine restarted
        w.add(float(t), {"c": v})
    assert w.resets == 1 and w.rate("c") == pytest.approx((1000 + 500 + 1000) / 3)


async def test_a_dipping_token_counter_shows_its_true_rate_and_no_alarm(scripted):
    eng = Scripted(scripted, lambda p: engine_doc(gen=1e9 + 1000.0 * p - (1150.0 if p == 5 else 0.0)))
    _, polls = await run_polls(eng, 10)
    for _, (s,) in polls[1:]:
        assert s.state == "up" and s.error is None
        # the dropped sample counts as no change (800/s at poll 5), never as 1e9 tokens
        assert 750.0 <= s.generation_tokens_per_s <= 1000.0 + 1e-6, s.generation_tokens_per_s
    assert polls[-1][1][0].generation_tokens_per_s == pytest.approx(1000.0)


async def test_an_implausible_rate_is_not_shown(scripted):
    eng = Scripted(scripted, lambda p: engine_doc(gen=5e11 * p))  # 5e11 tokens in a second, under the jump bound
    _, polls = await run_polls(eng, 3)
    s = polls[-1][1][0]
    assert s.generation_tokens_per_s is None
    assert s.state == "up" and "implausible rate (> 1e+07/s) not shown" in (s.error or "")


# ---- item 12: histogram buckets that change restart that histogram's window

FAST_S, SLOW_S = 0.03, 0.4
OTHER_LE = (0.001, 0.01, 0.1, 1.0, 10.0)  # shares five bounds with TTFT_LE: mixed, they gave a quantile


def observations(p: int) -> tuple[float, ...]:
    """Cumulative TTFTs at poll ``p``: ten fast ones a poll before poll 4, ten slow ones a poll after."""
    return (FAST_S,) * (10 * min(p + 1, 4)) + (SLOW_S,) * (10 * max(0, p - 3))


async def test_changed_bucket_bounds_restart_the_window_and_say_so(scripted):
    eng = Scripted(scripted, lambda p: engine_doc(bounds=TTFT_LE if p < 4 else OTHER_LE, ttft=observations(p),
                                                  gen=10.0 * p))
    sibling = Scripted(scripted, lambda p: engine_doc(bounds=OTHER_LE, ttft=observations(p + 4), gen=10.0 * p))
    c, polls = await run_polls(eng, 7)
    _, fresh = await run_polls(sibling, 3, "sibling")  # the same documents from poll 4 on, in a new window
    (before,), (changed,), (after,) = polls[3][1], polls[4][1], polls[6][1]
    assert before.ttft_p99_s == pytest.approx(0.02 + 0.02 * 0.99) and before.error is None  # 30 in (0.02, 0.04]
    assert changed.ttft_p99_s is None and changed.ttft_p50_s is None  # not a confident mix of two layouts
    assert changed.state == "up" and BUCKETS_RESTARTED in (changed.error or "")
    assert missing_reasons(changed, Freshness(FRESH))["ttft_p99_s"] == BUCKETS_RESTARTED  # the detail's "why —"
    assert changed.generation_tokens_per_s == pytest.approx(10.0)  # the other counters' window goes on
    assert after.ttft_p99_s == pytest.approx(fresh[-1][1][0].ttft_p99_s) and after.ttft_p99_s > 0.9
    assert after.error is None
    lines = log_lines([(1000.0 + p, stats) for p, stats in polls])
    assert lines == ["llama: histogram buckets changed: window restarted"]


async def test_bounds_that_flap_every_poll_never_give_a_quantile(scripted):
    eng = Scripted(scripted, lambda p: engine_doc(bounds=TTFT_LE if p % 2 else OTHER_LE, ttft=observations(p)))
    _, polls = await run_polls(eng, 10)
    for _, (s,) in polls[1:]:
        assert s.ttft_p99_s is None and BUCKETS_RESTARTED in (s.error or "") and s.state == "up"
    ticks = [(1000.0 + t, polls[1 + t % 9][1]) for t in range(int(NOTE_EVERY_S) + 2)]
    lines = log_lines(ticks)
    assert len(lines) == 2 and all(x == "llama: histogram buckets changed: window restarted" for x in lines)


# ---- item 14 (part): every class counts in the total


async def test_twenty_thousand_classes_count_in_the_total_and_the_pane_says_how_many_are_shown(scripted):
    n = 20_000
    rows = ["# TYPE infertop_gateway_queue_size gauge"]
    rows += [f'infertop_gateway_queue_size{{class="c{i}"}} {float(i % 3) if i < n - 1 else "+Inf"}' for i in range(n)]
    rows += ["# TYPE infertop_gateway_queue_oldest_wait_seconds gauge"]
    rows += [f'infertop_gateway_queue_oldest_wait_seconds{{class="c{i}"}} {i / n!r}' for i in range(n)]
    srv = scripted()
    srv.routes["/metrics"] = (200, "\n".join(rows) + "\n")
    c = QueueCollector(QueueEndpoint("gw", "gateway", metrics_url(srv.url), timeout_s=10.0), window_s=60)
    try:
        view = await c.poll()
    finally:
        await c.aclose()
    assert c.health.ok, c.health.last_error
    assert len(view.classes) == 64
    assert view.queued == sum(i % 3 for i in range(n - 1))  # 19 998, not the first 64's 63 (the +Inf one: none)
    assert view.oldest_wait_s == pytest.approx((n - 1) / n)
    assert view.note == "20000 classes, first 64 shown"
    assert "20000 classes, first 64 shown" in header_line(view).plain
