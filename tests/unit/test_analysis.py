"""Rates and quantiles against hand-computed values (Prometheus semantics)."""

from __future__ import annotations

import math

import pytest

from infertop.domain.quantiles import histogram_quantile
from infertop.analysis.rates import extrapolated_rate, increase_raw, window_rate
from infertop.state.history import FIRST_SLOTS, HistoryStore, Ring
from infertop.domain.window import CounterWindow

BUCKETS = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (math.inf, 50.0)]


@pytest.mark.parametrize(
    "q, expected",
    [
        (0.1, 0.05),  # first bucket: interpolated from 0
        (0.5, 0.4),  # 0.1 + 0.4 * (25-10)/20
        (0.7, 0.75),  # 0.5 + 0.5 * (35-30)/10
        (0.9, 1.0),  # rank 45 lands in +Inf: largest finite bound
        (0.99, 1.0),
    ],
)
def test_histogram_quantile_hand_computed(q, expected):
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected)


def test_histogram_quantile_order_independent_and_edge_cases():
    assert histogram_quantile(0.5, list(reversed(BUCKETS))) == pytest.approx(0.4)
    assert histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None  # no observations
    assert histogram_quantile(0.5, [(1.0, 3.0)]) is None  # no +Inf bucket
    assert histogram_quantile(-1, BUCKETS) == -math.inf
    assert histogram_quantile(2, BUCKETS) == math.inf


def test_histogram_quantile_repairs_non_monotonic_buckets():
    # A scrape race can make a higher bucket smaller; Prometheus takes the running max.
    dip = [(0.1, 10.0), (0.5, 8.0), (1.0, 40.0), (math.inf, 50.0)]
    # becomes 10, 10, 40, 50: rank 25 falls in (0.5, 1] → 0.5 + 0.5 * 15/30
    assert histogram_quantile(0.5, dip) == pytest.approx(0.75)


def test_extrapolated_rate_like_prometheus():
    pts = [(0.0, 0.0), (10.0, 10.0), (20.0, 20.0)]
    # samples cover [0, 20] of a [0, 30] range; the gap to the end (10 s) is below
    # 1.1 × the 10 s step, so Prometheus extrapolates to the full 30 s.
    assert extrapolated_rate(pts, 0.0, 30.0) == pytest.approx(1.0)
    # a gap larger than 1.1 steps extrapolates only half a step at the end (+5 s);
    # at the start a counter is never extrapolated below zero: it was 0 at t=0 (+0 s)
    assert extrapolated_rate(pts, -20.0, 40.0) == pytest.approx(20 * (25 / 20) / 60)
    # starting from 10 instead, zero would be reached 10 s before the first sample,
    # inside the 1.1-step threshold, so 10 s are added at the start: 20 + 10 + 5 = 35 s
    pts10 = [(t, v + 10.0) for t, v in pts]
    assert extrapolated_rate(pts10, -20.0, 40.0) == pytest.approx(20 * (35 / 20) / 60)


def test_counter_reset_like_prometheus():
    pts = [(0.0, 5.0), (10.0, 15.0), (20.0, 3.0)]  # restarted between 10 s and 20 s
    assert increase_raw(pts) == pytest.approx(13.0)  # (15-5) + 3
    assert window_rate(pts) == pytest.approx(0.65)
    w = CounterWindow(60)
    for t, v in pts:
        w.add(t, {"c": v})
    assert w.rate("c") == pytest.approx(0.65)
    assert w.resets == 1


def test_window_never_uses_lifetime_totals():
    w = CounterWindow(window_s=10)
    w.add(0.0, {"c": 1_000_000.0})  # a long-lived engine's lifetime total
    for t in range(1, 31):
        w.add(float(t), {"c": 1_000_000.0 + 2 * t})
    assert w.rate("c") == pytest.approx(2.0)
    assert w.span_s <= 11  # only the last window is kept


def test_rate_needs_two_points():
    w = CounterWindow(60)
    w.add(0.0, {"c": 1.0})
    assert w.rate("c") is None
    assert window_rate([(0.0, 1.0)]) is None


def test_ring_is_bounded_and_ordered():
    r = Ring(4)
    for v in range(10):
        r.append(float(v))
    assert r.last() == [6.0, 7.0, 8.0, 9.0]
    assert r.last(2) == [8.0, 9.0]
    r.append(None)
    assert math.isnan(r.last(1)[0])


def test_history_memory_grows_with_series_not_uptime():
    h = HistoryStore(capacity=60)
    for t in range(1000):
        h.record("e1", "running", float(t))
    before = h.nbytes
    for t in range(1000):
        h.record("e1", "running", float(t))
    assert h.nbytes == before == 60 * 4
    h.record("e2", "running", 1.0)
    assert h.nbytes == 60 * 4 + FIRST_SLOTS * 4  # a new series starts small


@pytest.mark.parametrize(("value", "target", "shown"), [
    (20.0001, 20.0, "20.0001s"),  # a p99 interpolated just past a bucket edge that is also the target
    (20.04, 20.0, "20.04s"),
    (0.0401, 0.04, "40.1ms"),
    (0.056, 0.04, "56ms"),
    (2.3, 2.0, "2.30s"),
])
def test_alert_value_never_prints_as_its_target(value, target, shown):
    """'E2E p99 20.0s > 20.0s' reads as false: the value gets the digits that show it exceeds the target."""
    from infertop.analysis.alerts import engine_alerts
    from infertop.config import SloConfig
    from infertop.domain.engine import EngineStats

    slo = SloConfig(ttft_p99_s=1e9, itl_p95_s=1e9, e2e_p99_s=target, queue_p99_s=1e9, kv_cache_pct=101.0)
    stats = EngineStats(name="e", url="http://127.0.0.1:1", state="up", e2e_p99_s=value)
    (alert,) = engine_alerts([stats], slo)
    assert alert.text.startswith(f"E2E p99 {shown} > ")
    shown_value = float(shown[:-2]) / 1e3 if shown.endswith("ms") else float(shown[:-1])
    assert shown_value > target


def test_fleet_quantiles_sum_the_engines_buckets_as_prometheus_does():
    # sum by (le) (increase(...)) over two engines, then histogram_quantile, for several q at once
    from infertop.analysis.fleet import fleet_quantile, fleet_quantiles

    def engine(before: dict, after: dict) -> CounterWindow:
        w = CounterWindow(60)
        w.add(0.0, {f"ttft@{le!r}": v for le, v in before.items()})
        w.add(10.0, {f"ttft@{le!r}": v for le, v in after.items()})
        return w

    a = engine({0.1: 0, 0.5: 0, 1.0: 0, math.inf: 0}, {0.1: 10, 0.5: 30, 1.0: 40, math.inf: 40})
    b = engine({0.1: 5, 0.5: 5, 1.0: 5, math.inf: 5}, {0.1: 5, 0.5: 15, 1.0: 55, math.inf: 65})
    summed = [(0.1, 10.0), (0.5, 40.0), (1.0, 90.0), (math.inf, 100.0)]
    qs = (0.0, 0.25, 0.5, 0.99, 1.0, 1.5)
    want = [histogram_quantile(q, summed) for q in qs]
    assert fleet_quantiles([a, b], "ttft", qs) == want == [fleet_quantile([a, b], "ttft", q) for q in qs]
    assert want[2] == pytest.approx(0.6)  # rank 50 of 100: 10 of the 50 in (0.5, 1.0]
    assert fleet_quantiles([], "ttft", qs) == [None] * len(qs)


def test_a_percentile_in_the_first_bucket_reads_under_its_bound_and_past_the_last_over_it():
    """Every queue time ≤ 0.3 s: p99 is not "297 ms" (an interpolation from 0) but "<300ms";
    one past the largest bound is ">" that bound; a rank inside the histogram is unmarked."""
    from infertop.domain.engine_stats import derived_fields
    from infertop.domain.engine import EngineStats
    from infertop.format import percentile_human

    w = CounterWindow(60)
    w.add(0.0, {"queue@0.3": 0.0, "queue@1.0": 0.0, "queue@inf": 0.0,
                "ttft@0.1": 0.0, "ttft@1.0": 0.0, "ttft@inf": 0.0, "e2e@1.0": 0.0, "e2e@inf": 0.0})
    w.add(10.0, {"queue@0.3": 790.0, "queue@1.0": 790.0, "queue@inf": 790.0,
                 "ttft@0.1": 10.0, "ttft@1.0": 90.0, "ttft@inf": 100.0, "e2e@1.0": 0.0, "e2e@inf": 50.0})
    fields = derived_fields(w, {})
    s = EngineStats(name="e", url="http://127.0.0.1:1", **{k: v for k, v in fields.items() if k != "window_s"})
    assert s.queue_p99_s == 0.3 and percentile_human(s, "queue_p99_s") == "<300ms"
    assert s.ttft_p50_s == pytest.approx(0.55) and percentile_human(s, "ttft_p50_s") == "550ms"  # inside: unmarked
    assert percentile_human(s, "ttft_p99_s") == ">1.00s"  # rank 99 of 100 is past le=1.0
    assert percentile_human(s, "e2e_p99_s") == ">1.00s" and s.quantile_edges["e2e_p99_s"] == ">"
    assert percentile_human(s, "itl_p95_s") == "—"  # no histogram: no value, no mark
