"""The Prometheus fleet source: its PromQL, and how recorded Prometheus answers
(tests/fixtures/prometheus_fleet, recorded from Prometheus 2.42 scraping
``infertop sim --shared-port``) become engines in the one fleet state —
through a loopback HTTP server speaking the Prometheus API."""

from __future__ import annotations

import copy
import io
import json
import re
import time

import pytest
from locations import REPO
from prom_fleet_fixture import GONE, LIVE, RECORDED_AT, fixture

from infertop.config import ConfigError, PrometheusConfig, parse_config
from infertop.domain.engine import DOWN, UP
from infertop.sources.prometheus.fleet import BACKFILL_FIELDS, BACKFILL_FLEET_FIELDS, PromFleetSource, seed_history
from infertop.sources.prometheus.fleet_query import (
    ENGINE_FIELDS,
    FAST_FIELDS,
    FIELD_LABEL,
    LATENCY_FIELDS,
    FleetQueries,
)
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import FRESH, MISSING, STALE
from infertop.state.history import HistoryStore
from prom_api_server import PromApiServer
from pilot_wait import until


def answer_for(name: str, engines: dict | None = None) -> dict:
    """The recorded answer of query ``name``; the engine queries are cut from the one recorded
    answer for every engine field (each series carries its field tag)."""
    fields = {"engines": FAST_FIELDS, **{f"latency_{h}": fs for h, fs in LATENCY_FIELDS.items()}}.get(name)
    if fields is None:
        return fixture(name)
    doc = engines or fixture("engines")
    result = [r for r in doc["data"]["result"] if r["metric"][FIELD_LABEL] in fields]
    return {**doc, "data": {**doc["data"], "result": result}}


def serve_engines(srv, engines: dict) -> None:
    """Serve ``engines`` (a whole recorded engine answer, edited) for every engine query."""
    for name, promql in srv.q.refresh().items():
        if name == "engines" or name.startswith("latency_"):
            srv.answers[promql] = answer_for(name, engines)


def recorded(engines: dict, instance: str, field: str) -> float | None:
    for item in engines["data"]["result"]:
        m = item["metric"]
        if m.get("instance") == instance and m[FIELD_LABEL] == field:
            return float(item["value"][1])
    return None


class Slo:
    ttft_p99_s, itl_p95_s, e2e_p99_s, queue_p99_s, kv_cache_pct = 2.0, 0.04, 5.0, 1.0, 90.0


@pytest.fixture
def prom():
    """The recorded answers, keyed by the exact PromQL the source sends for the default config."""
    srv = PromApiServer().start()
    cfg = PrometheusConfig(url=srv.url)
    q = FleetQueries(by=cfg.by, window_s=cfg.window_s, queue_promql=cfg.queue_promql)
    for name, promql in q.refresh().items():
        srv.answers[promql] = answer_for(name)
    srv.range_answers[q.engine_values(BACKFILL_FIELDS)] = fixture("backfill_engines")
    fleet = fixture("backfill_fleet")  # recorded for the 4 fleet quantiles; the backfill asks for 3
    srv.range_answers[q.fleet_values(BACKFILL_FLEET_FIELDS)] = {
        **fleet, "data": {**fleet["data"], "result": [r for r in fleet["data"]["result"]
                                                      if r["metric"][FIELD_LABEL] in BACKFILL_FLEET_FIELDS]}}
    srv.q = q
    yield srv
    srv.stop()


def source(srv: PromApiServer, wall: float = RECORDED_AT, **cfg) -> PromFleetSource:
    kw = {"url": srv.url, "timeout_s": 2.0, **cfg}
    return PromFleetSource(PrometheusConfig(**kw), wall=lambda: wall)


# -- the PromQL ---------------------------------------------------------------------------------

def test_a_refresh_is_a_fixed_set_of_queries_whatever_the_fleet_size_with_every_field_tagged_once():
    q = FleetQueries(selector='job="vllm"', window_s=30)
    qs = q.refresh()
    assert list(qs) == ["up", "engines", "queue", "latency_ttft", "latency_itl", "latency_e2e", "latency_queue",
                        "fleet"]
    assert list(q.fast()) == ["up", "engines", "queue"]
    engines = " or ".join(v for k, v in qs.items() if k == "engines" or k.startswith("latency_"))
    tags = re.findall(rf'"{FIELD_LABEL}", "([a-z0-9_]+)"', engines)
    assert sorted(tags) == sorted(ENGINE_FIELDS) and len(tags) == len(set(tags))
    # grouped by the engine labels, never per engine
    assert "by (namespace, pod, instance, engine, model_name)" in engines
    assert "by (le, namespace, pod, instance, engine, model_name)" in engines
    assert "[30s]" in engines and "[60s]" not in engines
    # every vLLM series carries the selector; up too
    names = re.findall(r"(vllm:[a-z0-9_:]+)(\{[^}]*\})?", engines)
    assert names and all(sel == '{job="vllm"}' for _, sel in names)
    assert qs["up"] == 'up{job="vllm"}'
    # the queue depth: one series per queue, tagged with its kind, keeping the labels that say whose it is
    assert 'sum by (namespace, deployment, workload, pod, instance) (vllm:num_requests_waiting{job="vllm"})' in qs[
        "queue"]
    assert re.findall(r'"infertop_queue", "([a-z]+)"', qs["queue"]) == ["gateway", "epp", "epp", "vllm"]
    assert "by (namespace, deployment, workload, inference_pool, model_name, target_model_name) " \
           "(llm_d_epp_flow_control_queue_size)" in qs["queue"]
    assert qs["queue"].count(" pod") == 1  # never by the gateway's or the endpoint picker's own pod


def test_v0_and_v1_names_are_or_fallbacks_v1_first():
    q = FleetQueries()
    kv = q.field_expr("kv_cache_pct")
    assert kv.index("vllm:kv_cache_usage_perc") < kv.index(" or ") < kv.index("vllm:gpu_cache_usage_perc")
    itl = q.field_expr("itl_p95_s")
    assert itl.startswith("histogram_quantile(0.95, (sum by (le,")
    assert itl.index("inter_token_latency_seconds_bucket") < itl.index("time_per_output_token_seconds_bucket")
    prefix = q.field_expr("prefix_cache_hit_pct")
    assert [n for n in ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total",
                        "vllm:gpu_prefix_cache_hit_rate") if n in prefix] == [
        "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hit_rate"]
    assert "rate(vllm:request_success_total[60s])" in q.field_expr("requests_per_s")


def test_queue_promql_and_engine_labels_are_configurable():
    cfg = parse_config('prometheus:\n  url: http://p:9090\n  target_labels: [cluster, pod]\n  engine_label: ""\n'
                       '  model_label: model\n  queue_promql: sum(my_queue{SEL})\n  selector: job="x"\n')
    q = FleetQueries(selector=cfg.prometheus.selector, by=cfg.prometheus.by, queue_promql=cfg.prometheus.queue_promql)
    assert cfg.prometheus.by == ("cluster", "pod", "model")
    assert "by (cluster, pod, model)" in q.engine_values()
    assert q.queue() == 'sum(my_queue{job="x"})'


@pytest.mark.parametrize("text, error", [
    ("prometheus: {target_labels: [a-b]}", "prometheus.target_labels[0]: not a label name: 'a-b'"),
    ("prometheus: {engine_label: __name__}", "prometheus.engine_label: not a label name: '__name__'"),
    ("prometheus: {target_labels: []}", "prometheus.target_labels: must name at least one label"),
    ("prometheus: {url: p:9090}", "prometheus.url: must start with http:// or https://"),
    ("prometheus: {interval_s: 0}", "prometheus.interval_s: must be >= 0.1"),
    ("prometheus: {engines: maybe}", "prometheus.engines: expected true or false"),
])
def test_bad_prometheus_keys_are_one_line_errors(text, error):
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    assert error in str(e.value) and "\n" not in str(e.value)


# -- mapping the recorded answers -------------------------------------------------------------

def test_recorded_answers_become_engines_with_their_values_and_states(prom):
    src = source(prom)
    result = src.refresh()
    # the first refresh waits for the latency queries too: 3 fast + 5 latency
    assert result.error is None and result.queries == 8 and len(prom.queries) == 8
    assert [p for p, _ in prom.queries] == ["/api/v1/query"] * 8
    assert result.targets == 6 and result.targets_down == 0
    assert src.health.ok and src.health.last_error is None
    engines = fixture("engines")
    by_url = {c.endpoint.url: c for c in src.collectors}
    assert set(by_url) == {f"http://{i}" for i in LIVE + GONE}
    for inst in LIVE:
        c = by_url[f"http://{inst}"]
        s = c.stats[0]
        assert c.health.ok and s.state == UP and s.error is None
        assert s.name.startswith("vllm-") and s.extra["instance"] == inst and s.extra["namespace"] == "inference"
        for f in ("running", "waiting", "kv_cache_pct", "generation_tokens_per_s", "requests_per_s", "ttft_p99_s",
                  "itl_p95_s", "e2e_p99_s"):
            assert getattr(s, f) == pytest.approx(recorded(engines, inst, f)), f
        assert s.model in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct")
        assert s.engine_label == "0" and s.metrics_version == "v1" and s.window_s == 60.0
        assert s.scraped_at == pytest.approx(recorded(engines, inst, "sample_ts"))
    # the stopped sim: rates still span its old samples, but no current gauge — stale, not up
    for inst in GONE:
        c = by_url[f"http://{inst}"]
        assert not c.health.ok and c.stats[0].state == DOWN
        assert c.health.last_error == "stale in Prometheus: no current sample (target gone or not scraped)"
        assert c.stats[0].running is None and c.stats[0].generation_tokens_per_s is None
    # the live engine of each pod gets the name and the pod's GPU
    assert {src.engine_pods[p] for p in src.engine_pods} == {by_url[f"http://{i}"].endpoint.name for i in LIVE}
    assert set(src.fleet_values) == {"ttft_p50_s", "ttft_p99_s", "itl_p95_s", "e2e_p99_s"}
    assert src.queues[0]["depth"] == float(fixture("queue")["data"]["result"][0]["value"][1])


def test_latency_quantiles_are_read_at_most_every_latency_interval_and_kept_between(prom):
    now = [1000.0]
    src = PromFleetSource(PrometheusConfig(url=prom.url, latency_interval_s=5.0), wall=lambda: RECORDED_AT,
                          clock=lambda: now[0])
    assert src.refresh().queries == 8
    live = next(c for c in src.collectors if c.health.ok)
    ttft = live.stats[0].ttft_p99_s
    assert ttft is not None
    now[0] += 2.0
    assert src.refresh().queries == 3  # gauges and rates only
    assert live.stats[0].ttft_p99_s == ttft and live.stats[0].running is not None
    now[0] += 3.5  # due: sent now, taken by the refresh after they arrive
    assert src.refresh().queries == 8
    deadline = time.monotonic() + 10
    while src._latency_futures is not None and time.monotonic() < deadline:
        src.refresh()
    assert src._latency_at == now[0] and src.health.last_error is None


def test_failing_latency_queries_leave_the_gauges_and_say_so(prom):
    now = [1000.0]
    src = PromFleetSource(PrometheusConfig(url=prom.url, latency_interval_s=5.0), wall=lambda: RECORDED_AT,
                          clock=lambda: now[0])
    src.refresh()
    for name, promql in prom.q.latency().items():
        del prom.answers[promql]  # Prometheus answers 400 to them from now on
    now[0] += 5.0
    src.refresh()
    deadline = time.monotonic() + 10
    while src._latency_futures is not None and time.monotonic() < deadline:
        src.refresh()
    live = next(c for c in src.collectors if c.health.ok)
    assert src.health.ok and src.health.last_error == "latency quantiles: HTTP 400"
    assert live.stats[0].ttft_p99_s is not None  # the last good ones, for a while
    now[0] += 30.0
    src.refresh()
    while src._latency_futures is not None and time.monotonic() < deadline:
        src.refresh()
    live = next(c for c in src.collectors if c.health.ok)
    assert live.stats[0].ttft_p99_s is None and live.stats[0].running is not None and src.fleet_values == {}


def test_the_fleet_state_is_the_one_direct_scraping_builds(prom):
    src = source(prom)
    src.refresh()
    joiner = FleetJoiner(src, slo=Slo(), refresh_s=1.0, window_s=60.0)
    joiner.observe()
    state = joiner.build()
    fresh = [e for e in state.engines if e.freshness.status == FRESH]
    missing = [e for e in state.engines if e.freshness.status == MISSING]
    assert len(fresh) == 5 and len(missing) == 5
    assert all(e.freshness.reason.startswith("stale in Prometheus") for e in missing)
    assert all(e.missing["running"].startswith("stale in Prometheus") for e in missing)
    assert state.fleet.engines == 10 and state.fleet.engines_up == 5
    assert state.fleet.running == sum(e.stats.running for e in fresh)
    assert state.fleet.ttft_p99_s == pytest.approx(src.fleet_values["ttft_p99_s"])
    assert state.queues and state.queues[0]["source"] == "prometheus"
    prom_src = [s for s in state.sources if s.kind == "prometheus"]
    assert len(prom_src) == 1 and prom_src[0].ok
    doc = state.to_doc()
    json.dumps(doc, allow_nan=False)
    from infertop.snapshot import print_table

    out = io.StringIO()
    print_table(state, out)
    assert "stale in Prometheus" in out.getvalue()


def test_a_target_with_up_0_makes_its_engine_down_and_the_source_partial(prom):
    up = copy.deepcopy(fixture("up"))
    target = next(r for r in up["data"]["result"] if r["metric"].get("instance") == LIVE[2])
    target["value"][1] = "0"
    prom.answers[prom.q.up()] = up
    src = source(prom)
    src.refresh()
    c = next(c for c in src.collectors if c.endpoint.url == f"http://{LIVE[2]}")
    assert c.stats[0].state == DOWN and not c.health.ok
    assert c.health.last_error == "target down in Prometheus (up == 0: its last scrape failed)"
    assert src.health.ok and src.health.last_error == "partial: 1 of 6 targets down (up == 0)"
    others = [c for c in src.collectors if c.endpoint.url in {f"http://{i}" for i in LIVE} - {f"http://{LIVE[2]}"}]
    assert len(others) == 4 and all(c.health.ok for c in others)


def test_an_old_newest_sample_is_stale_with_its_age(prom):
    src = source(prom, wall=RECORDED_AT + 100, stale_after_s=30)
    src.refresh()
    live = [c for c in src.collectors if c.endpoint.url in {f"http://{i}" for i in LIVE}]
    assert all(not c.health.ok and re.fullmatch(r"stale in Prometheus: newest sample 10\d s old", c.health.last_error)
               for c in live)


def test_prometheus_down_keeps_every_engine_stale_with_the_reason_then_recovers(prom):
    src = source(prom)
    src.refresh()
    joiner = FleetJoiner(src, slo=Slo(), refresh_s=1.0, window_s=60.0)
    joiner.observe()
    assert sum(e.fresh for e in joiner.build().engines) == 5
    port = prom.port
    prom.stop()
    res = src.refresh()
    assert res.error == "connection refused" and not src.health.ok
    assert src.health.last_error == "connection refused" and src.health.consecutive_failures == 1
    joiner.observe()
    state = joiner.build()
    shown = [e for e in state.engines if e.freshness.status == STALE]
    assert len(shown) == 5  # the last good values, marked stale — never zeros
    assert all(e.freshness.reason == "metrics stale (Prometheus unreachable: connection refused)" for e in shown)
    assert all(e.stats.running is not None for e in shown)
    assert state.fleet.engines_up == 0 and state.fleet.ttft_p99_s is None
    assert [s.error for s in state.sources if s.kind == "prometheus"] == ["connection refused"]
    # the same Prometheus back on its port: fresh again, nothing restarted
    prom.port = port
    prom.start()
    assert src.refresh().error is None
    joiner.observe()
    assert sum(e.fresh for e in joiner.build().engines) == 5


def test_slow_timeout_and_http_errors_each_have_their_own_words(prom):
    src = source(prom, slow_after_s=0.05)
    prom.delay_s = 0.1
    src.refresh()
    assert src.health.ok and src.health.last_error.startswith("slow: refresh took ")
    src = source(prom, timeout_s=0.2)
    prom.delay_s = 0.5
    assert src.refresh().error == "timeout after 0.2 s"
    prom.delay_s = 0.0
    prom.status = 503
    assert src.refresh().error == "HTTP 503"
    prom.status = None
    prom.answers.clear()  # a Prometheus that answers 400 to our PromQL
    assert src.refresh().error == "HTTP 400"


def test_an_empty_prometheus_says_what_is_missing(prom):
    for promql in list(prom.answers):
        prom.answers[promql] = {"status": "success", "data": {"resultType": "vector", "result": []}}
    src = source(prom)
    src.refresh()
    assert src.collectors == [] and src.health.ok
    assert "no vllm: series" in src.health.last_error
    assert src.queues[0]["depth"] is None  # no data, not 0


def test_label_values_are_plain_text(prom):
    engines = copy.deepcopy(fixture("engines"))
    for item in engines["data"]["result"]:
        if item["metric"].get("instance") == LIVE[0]:
            item["metric"]["pod"] = "[bold red]evil\x1b[2J\npod"
    serve_engines(prom, engines)
    src = source(prom)
    src.refresh()
    names = [c.endpoint.name for c in src.collectors]
    evil = [n for n in names if "evil" in n]
    assert len(evil) == 1 and "\x1b" not in evil[0] and "\n" not in evil[0]


def test_backfill_reads_two_range_queries_into_the_sparkline_history(prom):
    src = source(prom)
    src.refresh()
    before = len(prom.queries)
    series = src.backfill(points=10, step_s=1.0)
    assert [p for p, _ in prom.queries[before:]] == ["/api/v1/query_range"] * 2
    names = {c.endpoint.name for c in src.collectors}
    assert {e for e, _ in series} <= names | {"__fleet__"}
    assert {f for e, f in series if e != "__fleet__"} <= set(BACKFILL_FIELDS)
    assert {f for e, f in series if e == "__fleet__"} == set(BACKFILL_FLEET_FIELDS)
    assert all(len(v) == 10 for v in series.values())
    live = next(c for c in src.collectors if c.health.ok)
    rec = next(r for r in fixture("backfill_engines")["data"]["result"]
               if r["metric"].get("instance") == live.stats[0].extra["instance"]
               and r["metric"][FIELD_LABEL] == "running")
    assert series[(live.endpoint.name, "running")] == [float(v) for _, v in rec["values"]]
    # three seconds later: the first three recorded points fall out, the last three are gaps, not zeros
    later = source(prom, wall=RECORDED_AT + 3)
    later.refresh()
    shifted = later.backfill(points=10, step_s=1.0)[(live.endpoint.name, "running")]
    assert shifted == [float(v) for _, v in rec["values"]][3:] + [None] * 3
    hist = HistoryStore(100)
    seed_history(hist, {(live.endpoint.name, "running"): shifted})
    got = hist.series(live.endpoint.name, "running", 10)
    assert [None if v != v else v for v in got] == shifted


def test_one_refresh_of_500_engines_is_still_eight_queries(prom):
    """The engine count never changes the number of queries: 500 label sets, 8 requests."""
    base = fixture("engines")["data"]["result"]
    big = []
    for i in range(100):
        for item in base:
            m = dict(item["metric"])
            m["pod"] = f"{m['pod']}-{i}"
            m["instance"] = f"{m['instance']}-{i}"
            big.append({"metric": m, "value": item["value"]})
    serve_engines(prom, {"status": "success", "data": {"resultType": "vector", "result": big}})
    src = source(prom)
    res = src.refresh()
    assert res.queries == 8 and len(prom.queries) == 8 and len(src.collectors) == 1000
    assert sum(c.health.ok for c in src.collectors) == 500


async def test_poll_once_runs_in_a_thread_and_notifies_like_a_fleet_collector(prom):
    src = source(prom)
    polled = []
    src.on_polled = polled.append
    snap = await src.poll_once()
    assert len(snap.engines) == 10 and len(polled) == 10


async def test_run_refreshes_until_stopped_and_backfills_once(prom):
    import asyncio

    src = source(prom, interval_s=0.1, backfill_points=5)
    got = []
    src.on_backfill = got.append
    task = asyncio.create_task(src.run())
    deadline = time.monotonic() + 10
    while (len([q for q in prom.queries if q[0] == "/api/v1/query"]) < 12 or not got) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    src.stop()
    await asyncio.wait_for(task, 5)
    assert len(got) == 1 and got[0]
    assert len([q for q in prom.queries if q[0] == "/api/v1/query_range"]) == 2


async def test_the_tui_shows_the_engines_prometheus_knows_and_its_failure(prom):
    from infertop.config import Config
    from infertop.ui.app import InfertopApp, Settings
    from infertop.ui.widgets.engines_table import EnginesTable

    cfg = Config()
    cfg.prometheus = PrometheusConfig(url=prom.url, timeout_s=2.0, backfill_points=0)
    cfg.gpu.nvml = False
    app = InfertopApp(Settings(config=cfg, prometheus=True), poll=False)
    src = app.collector
    assert isinstance(src, PromFleetSource)
    src.wall = lambda: RECORDED_AT  # the recorded samples are current
    async with app.run_test(size=(160, 50)) as pilot:
        await app.poll_now()
        await until(pilot, lambda: len(app.state.engines) == 10, "the fleet's 10 engines in the state on screen")
        await pilot.press("2")
        table = app.query_one("#engines-table", EnginesTable)
        rows = {k.value: [str(getattr(c, "plain", c)) for c in table.get_row(k)] for k in table.rows}
        live = {c.endpoint.name: c.stats[0] for c in src.collectors if c.health.ok}
        assert len(rows) == 10 and set(live) <= set(rows)
        for name, s in live.items():
            assert rows[name][1] == "up" and rows[name][2] == f"{s.running:.0f}"
        prom.stop()
        await app.poll_now()
        await until(pilot, lambda: "connection refused" in str(getattr(app.query_one("#statusbar").render(), "plain", "")),
                    "the refused connection on the status bar")
        status = str(getattr(app.query_one("#statusbar").render(), "plain", ""))
        assert "connection refused" in status


def test_prometheus_flag_errors_are_one_line_exit_2(capsys, tmp_path):
    from infertop.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("{}\n")
    assert main(["snapshot", "--config", str(cfg), "--prometheus", "ftp://p:9090"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--prometheus: must be an http:// or https:// URL" in err


def test_snapshot_json_through_the_cli_reads_the_engines_from_prometheus(prom, capsys, tmp_path, monkeypatch):
    """The recorded samples are old by the wall clock: every engine is reported stale, exit 1."""
    from infertop.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("gpu: {nvml: false}\nprometheus: {backfill_points: 0}\n")
    code = main(["snapshot", "--json", "--config", str(cfg), "--prometheus", prom.url])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and len(doc["engines"]) == 10
    assert {e["url"] for e in doc["engines"]} == {f"http://{i}" for i in LIVE + GONE}
    assert all(e["freshness"]["status"] == "missing" and e["freshness"]["reason"].startswith("stale in Prometheus")
               for e in doc["engines"])
    assert [s["ok"] for s in doc["sources"] if s["name"] == f"{prom.url} (engines)"] == [True]


def test_headless_record_reads_the_engines_from_prometheus(prom, tmp_path):
    import os
    import subprocess
    import sys

    from infertop.state.fleet_types import FleetState
    from infertop.state.recording.replay import Replay

    config = tmp_path / "c.yaml"
    config.write_text("gpu:\n  nvml: false\nrefresh_s: 0.2\nwindow_s: 10\nprometheus: {interval_s: 0.2}\n")
    path = tmp_path / "rec.infertop"
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "infertop", "--config", str(config), "record", str(path),
                        "--prometheus", prom.url, "--duration", "2s"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    with Replay(str(path)) as rp:
        st = FleetState.from_doc(rp.at(rp.span()[1])[1])
    # by the wall clock the recorded samples are old: every engine is there, stale in Prometheus
    assert {e.stats.url for e in st.engines} == {f"http://{i}" for i in LIVE + GONE}
    assert all(e.freshness.reason.startswith("stale in Prometheus") for e in st.engines)
    assert len([q for q in prom.queries if q[0] == "/api/v1/query"]) >= 8 + 3
