"""SLO analysis (infertop/analysis/slo): hand-computed histograms, burn rates on a fake clock, the
capacity model's arithmetic, class assignment, and the watch over fleet states."""

from __future__ import annotations

import math

import pytest
from slo_states import state_at, stats

from infertop.analysis.slo.budget import count_within, stage_lines
from infertop.analysis.slo.burn import BurnTracker, WindowCount, with_prometheus
from infertop.analysis.slo.capacity import CapacityInputs, answer, erlang_c, predict
from infertop.analysis.slo.report import SloWatch, cumulative_buckets
from infertop.analysis.slo.targets import classes_from
from infertop.analysis.slo.text import slo_lines
from infertop.config import SloClassesConfig, default_slo_classes
from infertop.domain.engine import EngineStats
from infertop.sources.prometheus.slo import RangeCounts

INF = math.inf
HIST = [(0.5, 10.0), (1.0, 80.0), (2.0, 100.0), (INF, 110.0)]  # cumulative: 10 ≤ 0.5 s, 80 ≤ 1 s, 100 ≤ 2 s
CHAT = classes_from(default_slo_classes())[0]


@pytest.mark.parametrize("target, within", [
    (1.0, 80.0),      # on a bound: that bucket's count
    (1.5, 90.0),      # between 1 s and 2 s: 80 + (100 − 80) × 0.5 / 1
    (0.25, 5.0),      # in the first bucket, from 0: 10 × 0.25 / 0.5
    (5.0, 100.0),     # past the largest finite bound: the +Inf bucket's 10 count as over
])
def test_requests_within_a_target_from_buckets(target, within):
    assert count_within(HIST, target) == pytest.approx((within, 110.0))


def test_buckets_in_any_order_and_a_dip_are_read_as_prometheus_does():
    shuffled = [(2.0, 100.0), (INF, 110.0), (0.5, 10.0), (1.0, 9.0)]  # a scrape race: 9 < 10 → 10
    assert count_within(shuffled, 1.0) == (10.0, 110.0)
    assert count_within([(1.0, 5.0)], 1.0) is None  # no +Inf bucket: no total


def test_stage_budget_names_the_stage_that_broke_it():
    s = EngineStats("e1", "http://127.0.0.1:1", state="up", queue_p99_s=2.6, ttft_p99_s=3.1, itl_p95_s=0.030,
                    e2e_p99_s=4.0)
    lines = {x.stage: x for x in stage_lines(s, CHAT)}
    ttft = lines["ttft"]
    assert ttft.over and ttft.broke == "queue"
    assert [(n, round(v, 3), round(p)) for n, v, p in ttft.parts] == [("queue", 2.6, 84), ("prefill", 0.5, 16)]
    assert ttft.text == "TTFT p99 3.10s of 2.00s: queue 2.60s (84 %), prefill 500ms (16 %) — queue broke it"
    e2e = lines["e2e"]
    assert not e2e.over and [n for n, *_ in e2e.parts] == ["queue", "prefill", "decode"]
    assert round(e2e.parts[2][1], 3) == 0.9 and lines["tpot"].over is False


def test_e2e_over_with_every_earlier_stage_in_budget_is_the_decode():
    s = EngineStats("e1", "u", state="up", queue_p99_s=0.1, ttft_p99_s=0.5, itl_p95_s=0.050, e2e_p99_s=9.0)
    e2e = {x.stage: x for x in stage_lines(s, CHAT)}["e2e"]
    assert e2e.over and e2e.broke == "decode"  # TPOT 50 ms over its 40 ms


def test_a_queue_under_its_first_bucket_is_not_split_off_the_ttft():
    """At rest the queue p99 is "<300ms" (under the first bucket bound: a bound, not a time): the TTFT is
    not split into "queue 247ms (100 %), prefill 0µs" — nothing is blamed on a queue near zero."""
    s = EngineStats("e1", "u", state="up", queue_p99_s=0.3, ttft_p99_s=0.247, itl_p95_s=0.030, e2e_p99_s=3.0,
                    quantile_edges={"queue_p99_s": "<"})
    lines = {x.stage: x for x in stage_lines(s, CHAT)}
    assert lines["ttft"].parts == () and lines["ttft"].text == "TTFT p99 247ms of 2.00s"
    assert [n for n, *_ in lines["e2e"].parts] == ["TTFT", "decode"]
    assert lines["queue"].text.startswith("queue p99 <300ms")


def test_a_queue_under_its_first_bucket_leaves_the_whole_ttft_to_prefill_in_the_capacity_inputs():
    """The demo at rest: queue p99 "<300ms" against TTFT p99 219 ms. Taken as 300 ms it left prefill 0 and
    every what-if predicted "TTFT p99 0µs"; as a bound it counts as no queue, prefill is the TTFT."""
    from infertop.analysis.slo.capacity import inputs_of

    at_rest = EngineStats("e1", "u", state="up", requests_per_s=15.0, generation_tokens_per_s=750.0,
                          ttft_p50_s=0.016, itl_p50_s=0.009, ttft_p99_s=0.219, queue_p99_s=0.3, running=6,
                          max_num_seqs=64, quantile_edges={"queue_p99_s": "<"})
    assert inputs_of([at_rest]).prefill_p99_s == pytest.approx(0.219)
    queued = EngineStats("e2", "u", state="up", requests_per_s=15.0, generation_tokens_per_s=750.0,
                         ttft_p50_s=0.5, itl_p50_s=0.009, ttft_p99_s=3.1, queue_p99_s=2.6, running=64,
                         max_num_seqs=64)
    assert inputs_of([queued]).prefill_p99_s == pytest.approx(0.5)


def feed(tracker: BurnTracker, start: float, seconds: float, per_10s: float, bad_per_10s: float) -> float:
    t = start
    while t < start + seconds:
        t += 10.0
        tracker.add(t, per_10s, bad_per_10s)
    return t


def test_fast_burn_needs_both_windows_over_on_a_fake_clock():
    tr = BurnTracker(0.001)  # 99.9 %
    tr.add(0.0, 0, 0)
    t = feed(tr, 0.0, 3600, 100, 0)  # an hour good
    t = feed(tr, t, 300, 100, 2)  # 5 min at 2 % bad: 20× the budget's rate
    fast = tr.windows(t)[0]
    assert fast.pair == "fast" and (fast.long_s, fast.short_s) == (3600.0, 300.0) and not fast.scaled
    assert fast.short_burn == pytest.approx(20.0, rel=0.05)
    assert fast.long_burn == pytest.approx(60 / 36000 / 0.001, rel=0.1)  # 1.7×: one bad 5 min is no page
    assert not fast.firing
    t = feed(tr, t, 3600, 100, 2)  # an hour of it
    fast = tr.windows(t)[0]
    assert fast.long_burn == pytest.approx(20.0, rel=0.05) and fast.firing
    t = feed(tr, t, 300, 100, 0)  # it stopped 5 min ago: the short window clears the page
    assert not tr.windows(t)[0].firing


def test_burn_windows_scale_to_the_history_there_is():
    tr = BurnTracker(0.001)
    tr.add(0.0, 0, 0)
    t = feed(tr, 0.0, 1200, 100, 3)
    fast, slow = tr.windows(t)
    assert fast.scaled and (fast.long_s, fast.short_s) == (1200.0, 100.0)  # 20 min and 20 min ÷ 12
    assert fast.long_burn == pytest.approx(30.0) and fast.firing
    assert slow.long_s == 1200.0 and slow.short_s == pytest.approx(100.0)


def test_a_week_budget_used_is_projected_from_the_history_there_is():
    tr = BurnTracker(0.001)
    tr.add(0.0, 0, 0)
    t = feed(tr, 0.0, 3600, 1000, 14.4)  # 14.4× for an hour
    used, span = tr.week_budget_used_pct(t)
    assert span == 3600.0 and used == pytest.approx(100 * 14.4 / 168)  # 8.6 % of the week's budget


def test_erlang_c_and_the_queue_prediction():
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(4, 4.0) == 1.0  # ρ = 1: unstable
    inp = CapacityInputs(arrival_per_s=1.0, service_s=1.0, replicas=1, max_num_seqs=2, prefill_p99_s=0.2,
                         residence_s=1.0)
    p = predict(inp)
    # C = 1/3; cμ − λ = 1/s; p99 wait = ln((1/3) / 0.01) / 1
    assert p.queue_mean_s == pytest.approx(1 / 3) and p.queue_p99_s == pytest.approx(math.log(100 / 3))
    assert p.ttft_p99_s == pytest.approx(math.log(100 / 3) + 0.2)
    assert predict(inp, arrival_x=2.0).queue_p99_s is None  # ρ = 1
    assert predict(inp, max_num_seqs=8).queue_p99_s < p.queue_p99_s


def test_capacity_answer_holds_the_targets_with_the_fewest_replicas():
    inp = CapacityInputs(arrival_per_s=10.0, service_s=4.0, replicas=2, max_num_seqs=16, prefill_p99_s=0.3,
                         residence_s=4.0)
    a = answer(inp, queue_target_s=1.0, ttft_target_s=2.0, headroom_pct=30.0)
    assert a.concurrency == 40.0 and a.concurrency_needed == pytest.approx(52.0)
    assert a.replicas_for_concurrency == 4  # ceil(52 / 16)
    r = a.replicas_to_hold
    assert predict(inp, replicas=r).queue_p99_s <= 1.0 and predict(inp, replicas=r - 1).queue_p99_s is None or \
        predict(inp, replicas=r - 1).queue_p99_s > 1.0
    n = a.max_num_seqs_to_hold
    assert predict(inp, max_num_seqs=n).queue_p99_s <= 1.0
    assert not (predict(inp, max_num_seqs=n - 1).queue_p99_s or math.inf) <= 1.0
    assert [p.what for p in a.what_ifs] == ["arrival ×1.5", "arrival ×2", "max_num_seqs → 32", "replicas → 3"]


# -- the watch over fleet states -----------------------------------------------------------------------


def test_engines_by_pattern_and_by_their_healthy_history():
    watch = SloWatch(SloClassesConfig())
    doc = None
    for t in range(12):
        doc = watch.update(state_at(float(t), [stats("chat-0"), stats("x", e2e_p99_s=0.8, ttft_p99_s=0.3,
                                                                       queue_p99_s=0.05, itl_p95_s=0.015)]), {})
    by = {e["name"]: e for e in doc["engines"]}
    assert by["chat-0"]["class"] == "chat" and "'*chat*' (engine name)" in by["chat-0"]["how"]
    assert by["x"]["class"] == "code" and "healthy history fits code" in by["x"]["how"]
    # before its history is long enough it is said to be the loosest, for now
    fresh = SloWatch(SloClassesConfig()).update(state_at(0.0, [stats("y")]), {})
    assert fresh["engines"][0]["class"] == "batch" and "1 of 10 healthy ticks" in fresh["engines"][0]["how"]


def test_the_watch_counts_bad_requests_from_cumulative_buckets_between_ticks():
    watch = SloWatch(SloClassesConfig(min_burn_history_s=0.0))
    doc = None
    within = total = 0.0
    for t in range(0, 121, 10):
        # each 10 s: 100 requests, 2 of them over chat's E2E 5 s (in the (5, 10] bucket)
        buckets = {"chat-0": {"e2e": [(1.0, within), (5.0, within), (10.0, total), (INF, total)]}}
        doc = watch.update(state_at(float(t), [stats("chat-0")]), buckets)
        within += 98
        total += 100
    chat = doc["classes"][0]
    assert chat["name"] == "chat" and chat["requests"] == 1200 and chat["bad"] == pytest.approx(24)
    fast = chat["burn"][0]
    assert fast["long_s"] == 120.0 and fast["long_burn"] == pytest.approx(20.0) and chat["fast_burn_firing"]
    assert doc["engines"][0]["burn"]["long_burn"] == pytest.approx(20.0)
    assert chat["capacity"]["replicas_for_concurrency"] is not None and "slots" in chat["capacity"]["text"]


def test_cumulative_buckets_read_a_window_point():
    class W:
        def edges(self):
            return ((0.0, {"e2e@1.0": 1.0, "e2e@+Inf": 2.0, "requests": 3.0}),
                    (5.0, {"e2e@1.0": 4.0, "e2e@+Inf": 9.0, "requests": 9.0}))

    assert cumulative_buckets(W()) == {"e2e": [(1.0, 4.0), (INF, 9.0)]}
    assert cumulative_buckets(W(), 0) == {"e2e": [(1.0, 1.0), (INF, 2.0)]}


def test_a_burn_window_prometheus_holds_whole_is_taken_from_it_the_others_stay_local_and_say_why():
    tracker = BurnTracker(0.001)
    now = feed(tracker, 0.0, 1200.0, 100.0, 1.0)  # 20 min of local history (from the first add), 1 % bad: 10×
    local = tracker.windows(now)[0]
    assert local.scaled and local.long_s == 1190.0 and local.long_burn == pytest.approx(10.0)
    # Prometheus holds all of 5 min (the first point on the window's start) but only 20 min of 1 h
    got = with_prometheus(local, {300.0: WindowCount(300.0, 3000.0, 60.0, 300.0, 1.25),
                                  3600.0: WindowCount(3600.0, 9000.0, 90.0, 1200.0, 15.0)}, 0.001)
    assert (got.short_source, got.short_s, got.short_requests) == ("Prometheus", 300.0, 3000.0)
    assert got.short_burn == pytest.approx(60 / 3000 / 0.001)  # 20×: over-target ÷ requests ÷ (1 − objective)
    assert (got.long_source, got.long_s, got.long_burn) == ("local", 1190.0, local.long_burn)
    assert got.scaled and got.prometheus == "it holds 20 min of 1 h"
    # both held: the practice's windows, not scaled, and a verdict over them
    both = with_prometheus(local, {300.0: WindowCount(300.0, 3000.0, 60.0, 300.0, 1.25),
                                   3600.0: WindowCount(3600.0, 36000.0, 720.0, 3600.0, 15.0)}, 0.001)
    assert (both.long_s, both.short_s, both.scaled, both.prometheus) == (3600.0, 300.0, False, "")
    assert both.long_burn == pytest.approx(20.0) and both.firing
    # a failed read, a class with no request in Prometheus' window, a window not read yet: local, each said
    failed = with_prometheus(local, {300.0: WindowCount(300.0, 0.0, 0.0, 0.0, 0.0, "ttft: timeout after 5 s"),
                                     3600.0: WindowCount(3600.0, 0.0, 0.0, 3600.0, 15.0)}, 0.001)
    assert (failed.long_source, failed.short_source) == ("local", "local")
    assert failed.long_burn == local.long_burn and failed.short_burn == local.short_burn
    assert failed.prometheus == "no request of this class over 1 h; ttft: timeout after 5 s"
    assert with_prometheus(local, None, 0.001).prometheus == "1 h not read yet; 5 min not read yet"


def _prom_read(window_s: float, end: float, total: float, bad: float, *, held_s: float | None = None,
               errors=()) -> RangeCounts:
    """A Prometheus read of chat-0's E2E buckets over ``window_s``: ``total`` requests, ``bad`` over 5 s."""
    held = window_s if held_s is None else held_s
    buckets = {"chat-0": {"e2e": [(1.0, total - bad), (5.0, total - bad), (10.0, total), (INF, total)]}}
    return RangeCounts(window_s, end - held, end, window_s / 240, buckets, tuple(errors), 2)


def test_the_watch_burns_over_prometheus_windows_and_fires_without_local_history():
    watch = SloWatch(SloClassesConfig())  # min_burn_history_s 300: 10 s of local history pages on nothing
    watch.prometheus_burn = True
    assert set(watch.burn_plan()) == {3600.0, 300.0, 21600.0, 1800.0}
    # each class's objective stage and target (the defaults: chat and code by E2E, batch by TTFT)
    assert watch.burn_plan()[3600.0] == {"e2e": [5.0, 1.0], "ttft": [10.0]}
    e2e = [(1.0, 0.0), (5.0, 0.0), (10.0, 0.0), (INF, 0.0)]
    watch.update(state_at(1000.0, [stats("chat-0")]), {"chat-0": {"e2e": e2e}})
    watch.set_burn(_prom_read(3600.0, 1005.0, 36000.0, 720.0))  # 2 % bad: 20×
    watch.set_burn(_prom_read(300.0, 1005.0, 3000.0, 90.0))  # 3 %: 30×
    watch.set_burn(_prom_read(21600.0, 1005.0, 50000.0, 100.0, held_s=3700.0))  # Prometheus up 1 h
    watch.set_burn(_prom_read(1800.0, 1005.0, 0.0, 0.0, errors=("e2e: timeout after 5 s",)))
    doc = watch.update(state_at(1010.0, [stats("chat-0")]), {"chat-0": {"e2e": e2e}})
    chat = doc["classes"][0]
    fast, slow = chat["burn"]
    assert (fast["long_source"], fast["short_source"], fast["long_s"], fast["short_s"]) == \
        ("Prometheus", "Prometheus", 3600.0, 300.0)
    assert fast["long_burn"] == pytest.approx(720 / 36000 / 0.001) and fast["short_burn"] == pytest.approx(30.0)
    assert fast["firing"] and chat["fast_burn_firing"] and chat["history_s"] == 10.0
    assert (slow["long_source"], slow["short_source"]) == ("local", "local")
    assert slow["prometheus"] == "it holds 1 h of 6 h; e2e: timeout after 5 s"
    text = "\n".join(slo_lines(doc))
    assert "fast 20.0× over 60m00s / 30.0× over 5m00s (Prometheus), ≥14.4× FIRING" in text
    assert "slow — over 10.0s / — over 10.0s (local, 10 s of 6 h held), ≥6× · Prometheus: it holds 1 h of 6 h" in text
    # the reads stop coming (a Prometheus that hangs): after 3 min the local windows again, said
    late = watch.update(state_at(1200.0, [stats("chat-0")]), {"chat-0": {"e2e": e2e}})["classes"][0]
    assert late["burn"][0]["long_source"] == "local" and not late["fast_burn_firing"]
    assert late["burn"][0]["prometheus"] == "its last read is 195 s old"
