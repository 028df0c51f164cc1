"""The error budget over an objective's window through a real Prometheus (Debian package) equals the one
counted locally over the same window, from the same engines' histogram counters (issue 25 item 3).

Two engines over loopback HTTP (vLLM V1 documents), one per class, each class's target between two
bucket bounds (interpolated the same way on both sides). The engines' counters move once, between two
reads of both sides: locally, the Fleet's SLO report over its history; through Prometheus, the range
read over the window from before the move to after it.

Needs /usr/bin/prometheus (skipped without it unless INFERTOP_REQUIRE_REAL=1)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from ports import free_port

from infertop.analysis.slo.budget import class_counts
from infertop.analysis.slo.report import SloWatch
from infertop.analysis.slo.text import slo_lines
from infertop.config import Config, GpuConfig, PrometheusConfig, SloClassConfig, SloClassesConfig
from infertop.sources.prometheus.slo import PromSloReader, bracketing, rises
from infertop.sources.vllm import EngineEndpoint
from infertop.state.service import Fleet
from prom_run import hostport, running_prometheus, wait_until_up
from vllm_text import v1_doc

CHAT_TTFT_S = 1.5  # between the 1.0 and 2.5 bounds
BATCH_TTFT_S = 4.0  # between 2.5 and 5.0


def _classes() -> SloClassesConfig:
    return SloClassesConfig(classes={
        "chat": SloClassConfig(queue_p99_s=1.0, ttft_p99_s=CHAT_TTFT_S, tpot_p95_s=0.04, e2e_p99_s=5.0,
                               objective_stage="ttft", match=["chat-model"]),
        "batch": SloClassConfig(queue_p99_s=30.0, ttft_p99_s=BATCH_TTFT_S, tpot_p95_s=0.1, e2e_p99_s=60.0,
                                objective_pct=99.0, objective_stage="ttft", match=["batch-model"]),
    }, min_burn_history_s=0.0)


class Engine:
    """A scripted engine whose TTFT observations the test sets."""

    def __init__(self, scripted, model: str) -> None:
        self.model = model
        self.obs: list[float] = []
        self.srv = scripted()
        self.srv.routes["/metrics"] = (200, self.text)
        self.srv.routes["/health"] = (200, "")

    def text(self) -> str:
        return v1_doc(engines={"0": {"running": 1, "success": len(self.obs), "ttft": self.obs}}, model=self.model)


def _counts(url: str, promql: str = "vllm:time_to_first_token_seconds_count") -> dict[str, float]:
    r = httpx.get(f"{url}/api/v1/query", params={"query": promql},
                  timeout=2, trust_env=False).json()
    return {x["metric"]["model_name"]: float(x["value"][1]) for x in r["data"]["result"]}


@pytest.fixture
def engines(scripted):
    chat, batch = Engine(scripted, "chat-model"), Engine(scripted, "batch-model")
    # before the window: requests the window must not count
    chat.obs += [0.2] * 40 + [1.2] * 10
    batch.obs += [3.0] * 30
    return chat, batch


@pytest.fixture
def prometheus(tmp_path, engines):
    targets = ", ".join(f'"{hostport(e.srv.url)}"' for e in engines)
    with running_prometheus(tmp_path, f"  - job_name: vllm\n    static_configs:\n      - targets: [{targets}]\n",
                            targets_up=2) as running:
        yield running


@pytest.mark.real_prometheus
async def test_budget_from_a_range_query_equals_the_local_one_over_the_same_window(prometheus, engines):
    url, proc, log = prometheus
    chat, batch = engines
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.slo_classes = _classes()
    local = Fleet(cfg, endpoints=[EngineEndpoint("chat-0", chat.srv.url), EngineEndpoint("batch-0", batch.srv.url)],
                  advisor=None, queues=False)
    try:
        for _ in range(2):  # an engine's counts start at its second read (a counter window of two points)
            await local.poll_once()
            local.build()  # the local history starts here: counts before it are not in the window
        wait_until_up("Prometheus has the counters before the window",
              lambda: _counts(url) == {"chat-model": 50.0, "batch-model": 30.0}, proc, log)
        start = time.time()
        # a scrape that began before ``start`` may be answered after the move below and so carry the moved
        # counts at a time before the window: wait for both engines' first scrape that began after it
        wait_until_up("a scrape of each engine inside the window",
              lambda: min(_counts(url, "timestamp(vllm:time_to_first_token_seconds_count)").values(),
                          default=0.0) > start, proc, log)
        # the move inside the window: chat — 1.2 s (within 1.5), 2.0 s (interpolated inside 1.0…2.5: 1/3
        # of its bucket within), 6 s (over); batch — 3 s (2.5…5.0: 3/5 within at 4 s) and 8 s (over)
        chat.obs += [0.2] * 300 + [1.2] * 20 + [2.0] * 30 + [6.0] * 5
        batch.obs += [3.0] * 50 + [8.0] * 4
        wait_until_up("Prometheus has the counters after the move",
              lambda: _counts(url) == {"chat-model": 405.0, "batch-model": 84.0}, proc, log)
        await local.poll_once()
        state = local.build()
        end = time.time()
        by_class = {c["name"]: c for c in state.slo_report["classes"]}
        assert by_class["chat"]["requests"] == 355 and by_class["batch"]["requests"] == 54

        reader = PromSloReader(PrometheusConfig(url=url, timeout_s=5))
        counts = await asyncio.to_thread(reader.read, end - start, {"ttft": [CHAT_TTFT_S, BATCH_TTFT_S]}, end=end)
        assert counts.errors == () and counts.used_s == pytest.approx(end - start, abs=0.01)
        # only the bounds around each target and +Inf were read: 1.0, 2.5, 5.0, +Inf
        les = {le for e in counts.buckets.values() for le, _ in e["ttft"]}
        assert les == {1.0, 2.5, 5.0, float("inf")}
        # Prometheus names the engines by instance: join them to the classes by their models
        model_of = {"local:" + hostport(e.srv.url).split(":")[1]: e.model for e in engines}
        cls = {c.name: c for c in local.slo.classes}
        prom = class_counts(counts.buckets, {n: cls["chat" if model_of[n] == "chat-model" else "batch"]
                                             for n in counts.buckets})
        for name, (req, bad, n) in prom.items():
            assert n == 1
            assert req == by_class[name]["requests"]
            assert bad == pytest.approx(by_class[name]["bad"], rel=1e-12)
        # hand-computed: the 50 requests of the 1.0…2.5 bucket taken as spread evenly, 1/3 of them within
        # 1.5 s; the 5 at 6 s over
        assert prom["chat"][1] == pytest.approx(50 * (2.5 - 1.5) / 1.5 + 5)
        assert prom["batch"][1] == pytest.approx(50 * (5.0 - 4.0) / 2.5 + 4)
    finally:
        await local.close()


@pytest.mark.real_prometheus
async def test_a_prometheus_fleet_reports_the_budget_over_the_window_prometheus_holds(prometheus, engines):
    """Engines from Prometheus: the Fleet reads the 30-day objective window off the tick, says it used the
    seconds Prometheus holds (asked 30 d), and the SLO lines say "budget over … (Prometheus of …)"."""
    url, proc, log = prometheus
    chat, batch = engines
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.slo_classes = _classes()
    cfg.prometheus = PrometheusConfig(url=url, timeout_s=5, engines=True, interval_s=1.0, window_s=10.0)
    fleet = Fleet(cfg, prometheus=True, advisor=None, queues=False)
    try:
        wait_until_up("both engines' counters", lambda: _counts(url) == {"chat-model": 50.0, "batch-model": 30.0}, proc, log)
        wait_until_up("5 scrapes before the move", lambda: min(_counts(url, "count_over_time(vllm:time_to_first_token_"
                                                                "seconds_count[1m])").values()) >= 5, proc, log)
        chat.obs += [0.2] * 100 + [6.0] * 10
        wait_until_up("the move scraped", lambda: _counts(url)["chat-model"] == 160.0, proc, log)
        await asyncio.to_thread(fleet.collector.refresh)
        fleet.joiner.observe()
        fleet.build()
        await fleet.read_slo_range()
        state = fleet.build()
        chat_doc = next(c for c in state.slo_report["classes"] if c["name"] == "chat")
        b = chat_doc["budget"]
        assert b["source"] == "Prometheus" and b["asked_s"] == 30 * 86400.0
        assert 3.0 < b["window_s"] < 600.0  # what it holds, not 30 days
        assert b["requests"] == 110 and b["bad"] == 10  # the move's 10 at 6 s are over 1.5 s
        assert b["used_pct"] == pytest.approx(100 * 10 / (0.001 * 110))
        text = "\n".join(slo_lines(state.slo_report))
        assert "(Prometheus of the objective's 30 d)" in text and "10 of 110 requests over target" in text
        # the burn windows: a Prometheus of seconds holds none of 1 h and 5 min — the local ones, said so
        fast = chat_doc["burn"][0]
        assert (fast["long_source"], fast["short_source"]) == ("local", "local")
        assert fast["long_s"] < 3600.0 and fast["scaled"]
        assert fast["prometheus"].startswith("it holds ") and " of 1 h" in fast["prometheus"]
        assert "(local, " in text and " of 1 h held)" in text
    finally:
        await fleet.close()


@pytest.mark.real_prometheus
async def test_burn_over_a_window_prometheus_holds_is_the_hand_computed_ratio(prometheus, engines):
    """Burn windows of seconds (so this Prometheus holds the fast pair whole): the fast pair comes from
    Prometheus — over-target ÷ requests ÷ (1 − objective) of the move — and pages; the slow pair's long
    window is longer than Prometheus holds, and stays local, saying so."""
    url, proc, log = prometheus
    chat, batch = engines
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.slo_classes = _classes()
    cfg.prometheus = PrometheusConfig(url=url, timeout_s=5, engines=True, interval_s=1.0, window_s=10.0)
    fleet = Fleet(cfg, prometheus=True, advisor=None, queues=False)
    # the same watch the Fleet builds, over windows a Prometheus up for seconds holds whole
    fleet.slo = SloWatch(cfg.slo_classes, pairs=(("fast", 20.0, 8.0), ("slow", 3600.0, 300.0)))
    fleet.slo.prometheus_burn = True
    try:
        wait_until_up("both engines' counters", lambda: _counts(url) == {"chat-model": 50.0, "batch-model": 30.0}, proc, log)
        wait_until_up("22 s of scrapes before the move", lambda: min(_counts(url, "count_over_time(vllm:time_to_first_"
                                                                      "token_seconds_count[1m])").values()) >= 22,
              proc, log)
        chat.obs += [0.2] * 100 + [6.0] * 10  # 110 requests, the 10 at 6 s over chat's 1.5 s
        wait_until_up("the move scraped", lambda: _counts(url)["chat-model"] == 160.0, proc, log)
        await asyncio.to_thread(fleet.collector.refresh)
        fleet.joiner.observe()
        fleet.build()  # the engines' classes, which the Prometheus counts join
        await fleet.read_slo_range()
        state = fleet.build()
        by_class = {c["name"]: c for c in state.slo_report["classes"]}
        fast, slow = by_class["chat"]["burn"]
        assert (fast["long_source"], fast["short_source"], fast["long_s"], fast["short_s"]) == \
            ("Prometheus", "Prometheus", 20.0, 8.0)
        assert fast["long_requests"] == 110 and fast["short_requests"] == 110
        assert fast["long_burn"] == pytest.approx(10 / 110 / 0.001) and fast["short_burn"] == fast["long_burn"]
        assert fast["prometheus"] == "" and not fast["scaled"]
        assert by_class["chat"]["fast_burn_firing"]  # from Prometheus' windows: the local history is seconds
        assert any(v.kind == "slo-fast-burn" and v.subject == "slo:chat" for v in state.verdicts)
        assert slow["long_source"] == "local" and slow["prometheus"].startswith("it holds ")
        # batch had no request in the windows: Prometheus' zero is not taken, the local windows are
        bfast = by_class["batch"]["burn"][0]
        assert bfast["long_source"] == "local" and bfast["prometheus"].startswith("no request of this class")
        text = "\n".join(slo_lines(state.slo_report))
        assert "fast 90.9× over 20.0s / 90.9× over 8.00s (Prometheus), ≥14.4× FIRING" in text
    finally:
        await fleet.close()


async def test_a_dead_prometheus_is_an_error_in_place_and_the_local_budget_stays():
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.slo_classes = _classes()
    cfg.prometheus = PrometheusConfig(url=f"http://127.0.0.1:{free_port()}", timeout_s=1, engines=True)
    fleet = Fleet(cfg, prometheus=True, advisor=None, queues=False)
    try:
        await fleet.read_slo_range()
        state = fleet.build()
        b = state.slo_report["classes"][0]["budget"]
        assert b["source"] == "local" and b["error"] == "ttft: connection refused"
        assert "· Prometheus: ttft: connection refused" in "\n".join(slo_lines(state.slo_report))
    finally:
        await fleet.close()


def test_bounds_read_and_rises_across_a_restart():
    les = [0.5, 1.0, 2.5, 5.0, float("inf")]
    assert bracketing(les, 1.5) == {1.0, 2.5, float("inf")}
    assert bracketing(les, 1.0) == {0.5, 1.0, float("inf")}
    assert bracketing(les, 0.1) == {0.5, float("inf")}
    assert bracketing(les, 9.0) == {5.0, float("inf")}
    # 10 → 30, a restart (counts from 0 again: 5), then 12: 20 + 5 + 7
    assert rises([[0, "10"], [1, "30"], [2, "5"], [3, "12"], [4, "NaN"]]) == (32.0, 0.0, 3.0)
