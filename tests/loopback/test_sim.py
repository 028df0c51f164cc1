"""Tests of the simulator (infertop.sim): model, exposition, GPUs, HTTP, faults, CLI.

Everything runs on 127.0.0.1. Model behaviour is checked on the virtual clock
(``realtime=False`` / ``EngineModel.step``); HTTP tests use a realtime cluster
and block on real requests, never on sleeps.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from locations import FIXTURES, REPO

from infertop.sim import SimCluster, SimGpu, render_dcgm, render_metrics
from infertop.sim.load import LoadGenerator
from infertop.sim.metrics import format_value
from infertop.sim.model import EngineModel, SimRequest, build_1_2_5_buckets
from infertop.sources import expfmt



def _capture(name: str = "metrics_under_load.txt") -> str:
    return (FIXTURES / name).read_text()


def _samples_prom(text: str) -> list[tuple]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, tuple(sorted(s.labels.items())), "NaN" if math.isnan(s.value) else s.value))
    return sorted(out, key=repr)


def _samples_expfmt(text: str) -> list[tuple]:
    doc = expfmt.parse(text)
    return sorted(((s.name, tuple(sorted(s.labels.items())), "NaN" if math.isnan(s.value) else s.value)
                   for s in doc.all_samples), key=repr)


def _families(text: str) -> dict[str, tuple[str, dict[str, set[tuple[str, ...]]]]]:
    """family name -> (type, {sample name: {sorted label-name tuples}})."""
    out = {}
    for fam in text_string_to_metric_families(text):
        names: dict[str, set[tuple[str, ...]]] = {}
        for s in fam.samples:
            names.setdefault(s.name, set()).add(tuple(sorted(s.labels)))
        out[fam.name] = (fam.type, names)
    return out


def _le_sets(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type == "histogram":
            out[fam.name] = [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]
    return out


def _loaded_engine(seed: int = 7, **cfg) -> EngineModel:
    """An engine after a stretch of mixed load (prefixes, preemption, long and short requests)."""
    cfg.setdefault("model_name", "tiny")
    cfg.setdefault("max_model_len", 512)
    cfg.setdefault("num_gpu_blocks", 160)
    cfg.setdefault("max_num_seqs", 8)
    core = EngineModel(seed=seed, **cfg)
    gen = LoadGenerator(1, seed=seed, mode="steady", base_rate=6.0, hot_engine=None)
    for _ in range(200):
        gen.generate(0, core, core.now + 0.05)
        core.step(0.05)
    return core


@pytest.fixture(scope="module")
def cluster():
    """A realtime 2-engine fleet without background load (HTTP tests)."""
    c = SimCluster(2, seed=11, load="none", models=["tiny", "tiny-b"], max_model_len=512, num_gpu_blocks=1024,
                   speed=4.0, max_num_seqs=8)
    c.start()
    yield c
    c.stop()


@pytest.fixture
def http():
    with httpx.Client(timeout=5.0) as client:
        yield client


# ---------------------------------------------------------------------------
# Exposition format


def test_format_value_matches_prometheus_client():
    from prometheus_client.utils import floatToGoString

    for v in (0.0, 1.0, 8.0, 0.001, 1e-05, 21.009999999999998, 999999.5, 1e6, 1234567.0, 2200199168.0,
              1795937479.9979892, 1e16, 1.5e22, -1.0, -1234567.0, math.inf, -math.inf, math.nan):
        assert format_value(v) == floatToGoString(v), v


def test_metrics_over_http_parse_identically_with_prometheus_client_and_expfmt():
    with SimCluster(1, seed=5, load="steady", realtime=False, max_model_len=2048, num_gpu_blocks=512,
                    max_num_seqs=16) as c:
        c.advance(30.0, tick=0.1)
        with httpx.Client(timeout=5.0) as client:
            r = client.get(c.engines[0].url + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    prom = _samples_prom(text)
    mine = _samples_expfmt(text)
    assert prom == mine
    assert len(prom) > 400
    doc = expfmt.parse(text)
    (labels, running), = doc.series("vllm:num_requests_running")
    assert labels == {"engine": "0", "model_name": c.engines[0].model}
    assert running >= 0
    assert doc.series("vllm:generation_tokens_total")[0][1] > 0
    assert any(name.startswith("http_") for name in doc.names)


def test_v1_shape_matches_the_real_capture():
    core = _loaded_engine()
    text = render_metrics(core)
    cap = _capture()
    mine, real = _families(text), _families(cap)
    mine_v = {k: v for k, v in mine.items() if k.startswith("vllm:")}
    real_v = {k: v for k, v in real.items() if k.startswith("vllm:")}
    # Every family of the capture, with the same type and label names per sample name; nothing extra.
    assert set(mine_v) == set(real_v)
    for name, (typ, samples) in real_v.items():
        assert mine_v[name][0] == typ, name
        assert mine_v[name][1] == samples, name
    # Histogram buckets, in order.
    real_le = {k: v for k, v in _le_sets(cap).items() if k.startswith("vllm:")}
    assert {k: v for k, v in _le_sets(text).items() if k.startswith("vllm:")} == real_le
    # HELP/TYPE lines and family order are the capture's, line for line.
    def heads(t: str) -> list[str]:
        return [ln for ln in t.splitlines() if ln.startswith("# ") and " vllm:" in ln]
    assert heads(text) == heads(cap)
    # Series keys (name + label names, le values) in the same order.
    def keys(t: str) -> list[tuple]:
        out = []
        for s in expfmt.parse(t).all_samples:
            if s.name.startswith("vllm:"):
                out.append((s.name, tuple(sorted(s.labels)), s.labels.get("le")))
        return out
    assert keys(text) == keys(cap)


def test_v1_process_and_http_families_have_the_capture_shape():
    with SimCluster(1, seed=2, load="none", realtime=False, models="tiny", max_model_len=512,
                    num_gpu_blocks=256) as c:
        with httpx.Client(timeout=5.0) as client:
            e = c.engines[0]
            client.get(e.url + "/v1/models")  # recorded in the http_* families
            text = client.get(e.url + "/metrics").text
    mine, real = _families(text), _families(_capture())
    for name in ("python_gc_objects_collected", "python_info", "process_start_time_seconds", "process_cpu_seconds",
                 "http_requests", "http_requests_created", "http_request_size_bytes",
                 "http_request_duration_highr_seconds", "http_request_duration_seconds"):
        assert name in mine, name
        assert mine[name][0] == real[name][0], name


def test_cache_config_info_reflects_the_engine():
    core = EngineModel(model_name="m", num_gpu_blocks=4096, block_size=16, max_model_len=4096,
                       gpu_memory_utilization=0.9)
    doc = expfmt.parse(render_metrics(core))
    (labels, value), = doc.series("vllm:cache_config_info")
    assert value == 1.0
    real = expfmt.parse(_capture()).series("vllm:cache_config_info")[0][0]
    assert set(labels) == set(real)
    assert labels["num_gpu_blocks"] == "4096"
    assert labels["block_size"] == "16"
    assert labels["kv_cache_size_tokens"] == str(4096 * 16)
    assert labels["engine"] == "0"


def test_token_histogram_buckets_follow_max_model_len():
    assert build_1_2_5_buckets(512)[-1] == 500.0
    assert build_1_2_5_buckets(8192) == (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
                                         5000.0)
    core = EngineModel(max_model_len=8192)
    les = _le_sets(render_metrics(core))
    assert les["vllm:request_prompt_tokens"][-2:] == ["5000.0", "+Inf"]


def test_v0_mode_uses_legacy_names():
    core = _loaded_engine(metrics_version="v0")
    text = render_metrics(core)
    fams = _families(text)
    for name in ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds", "vllm:gpu_prefix_cache_queries",
                 "vllm:gpu_prefix_cache_hits", "vllm:num_requests_swapped", "vllm:num_requests_running"):
        assert name in fams, name
    for name in ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:prefix_cache_queries"):
        assert name not in fams, name
    assert not [n for n in fams if n.endswith("_created")]
    for name, (_, samples) in fams.items():
        if name.startswith("vllm:") and name != "vllm:cache_config_info":
            for label_sets in samples.values():
                for ls in label_sets:
                    assert "engine" not in ls and "model_name" in ls, name
    les = _le_sets(text)
    assert les["vllm:time_to_first_token_seconds"][-2:] == ["10.0", "+Inf"]
    assert les["vllm:time_per_output_token_seconds"][-2:] == ["2.5", "+Inf"]
    assert les["vllm:iteration_tokens_total"][-2:] == ["8096.0", "+Inf"]
    assert _samples_prom(text) == _samples_expfmt(text)


# ---------------------------------------------------------------------------
# Engine model on the virtual clock


def test_continuous_batching_fills_max_num_seqs_and_queues_the_rest():
    core = EngineModel(model_name="tiny", max_num_seqs=4, max_model_len=2048, num_gpu_blocks=2048)
    reqs = [SimRequest(400, 300) for _ in range(16)]
    for r in reqs:
        core.submit(r)
    core.step(0.5)
    assert core.num_running == 4
    assert core.num_waiting == 12
    doc = expfmt.parse(render_metrics(core))
    assert doc.series("vllm:num_requests_running")[0][1] == 4.0
    assert doc.series("vllm:num_requests_waiting")[0][1] == 12.0
    assert {lb["reason"]: v for lb, v in doc.series("vllm:num_requests_waiting_by_reason")} == {
        "capacity": 12.0, "deferred": 0.0}
    assert 0.0 < doc.series("vllm:kv_cache_usage_perc")[0][1] <= 1.0
    core.check_invariants()
    core.step(120.0)
    assert core.num_running == 0 and core.num_waiting == 0
    assert all(r.state == "finished" and r.finished_reason == "length" and r.out == 300 for r in reqs)
    assert core.request_success["length"] == 16
    assert core.generation_tokens_total == 16 * 300
    # vLLM's invariant: one ITL observation per output token after the first.
    assert core.h_itl.count == core.generation_tokens_total - core.h_ttft.count
    # Later requests waited in the queue: queue time grows with position.
    assert reqs[-1].first_scheduled_t > reqs[0].first_scheduled_t
    assert core.h_queue.sum > 0
    assert core.used_blocks == 0


def test_decode_step_time_grows_with_batch_size():
    def itl(batch: int) -> float:
        core = EngineModel(max_num_seqs=batch, num_gpu_blocks=4096, step_jitter=0.0)
        for _ in range(batch):
            core.submit(SimRequest(64, 200))
        core.step(30.0)
        return core.h_itl.sum / core.h_itl.count
    assert itl(1) < itl(16) < itl(64)


def test_prefill_time_grows_with_prompt_length():
    def ttft(prompt: int) -> float:
        core = EngineModel(num_gpu_blocks=4096, step_jitter=0.0)
        r = SimRequest(prompt, 4)
        core.submit(r)
        core.step(10.0)
        return r.first_token_t - r.arrival_t
    assert ttft(100) < ttft(1000) < ttft(6000)


def test_preemption_when_kv_blocks_run_out():
    core = EngineModel(model_name="tiny", max_num_seqs=8, max_model_len=1024, num_gpu_blocks=64,
                       enable_prefix_caching=False)
    done = []
    reqs = [SimRequest(100, 600, on_finish=done.append) for _ in range(8)]
    for r in reqs:
        core.submit(r)
    peak = 0.0
    for _ in range(600):
        core.step(0.05)
        peak = max(peak, core.kv_cache_usage)
        core.check_invariants()
        if len(done) == 8:
            break
    assert len(done) == 8, "every request finishes despite preemption"
    assert core.num_preemptions_total > 0
    assert peak > 0.9
    assert core.h_num_preemptions.sum == core.num_preemptions_total
    assert sum(r.num_preemptions for r in reqs) == core.num_preemptions_total
    assert all(r.out == 600 for r in reqs)
    doc = expfmt.parse(render_metrics(core))
    assert doc.series("vllm:num_preemptions_total")[0][1] == core.num_preemptions_total
    # a preempted request's wait-and-recompute gap shows up as a long inter-token latency
    assert sum(core.h_itl.counts[core.h_itl.bounds.index(0.1) + 1:]) > 0


def test_prefix_cache_hits_are_counted_in_tokens():
    core = EngineModel(model_name="tiny", max_num_seqs=8, num_gpu_blocks=1024)
    first = SimRequest(300, 8, prefix_id="system-a", prefix_tokens=256)
    core.submit(first)
    core.step(5.0)
    assert first.state == "finished"
    assert core.prefix_cache_hits_total == 0
    assert core.prefix_cache_queries_total == 300
    later = [SimRequest(300, 8, prefix_id="system-a", prefix_tokens=256) for _ in range(3)]
    other = SimRequest(300, 8, prefix_id="system-b", prefix_tokens=256)
    for r in later + [other]:
        core.submit(r)
    core.step(5.0)
    assert core.prefix_cache_queries_total == 5 * 300
    assert core.prefix_cache_hits_total == 3 * 256
    assert core.prompt_tokens_cached_total == 3 * 256
    assert core.prompt_tokens_by_source["local_cache_hit"] == 3 * 256
    assert core.prompt_tokens_by_source["local_compute"] == 5 * 300 - 3 * 256
    assert core.prompt_tokens_cached_by_source["device"] == 3 * 256
    assert core.h_prefill_kv_computed.sum == 5 * 300 - 3 * 256
    doc = expfmt.parse(render_metrics(core))
    assert doc.series("vllm:prefix_cache_hits_total")[0][1] == 768.0

    def ttft_alone(prefix_id: str) -> float:
        r = SimRequest(1200, 2, prefix_id=prefix_id, prefix_tokens=1024)
        core.submit(r)
        core.step(5.0)
        return r.first_token_t - r.arrival_t

    ttft_alone("long-a")
    assert ttft_alone("long-a") < ttft_alone("long-b")  # a hit skips most of the prefill


def test_priority_scheduling_runs_lower_priority_value_first():
    core = EngineModel(max_num_seqs=1, scheduling_policy="priority", num_gpu_blocks=1024)
    first = SimRequest(50, 20, priority=0)
    core.submit(first)
    core.step(0.01)
    batch = [SimRequest(50, 20, priority=5) for _ in range(3)]
    urgent = SimRequest(50, 20, priority=0)
    for r in batch:
        core.submit(r)
    core.submit(urgent)
    core.step(30.0)
    order = sorted([first, urgent, *batch], key=lambda r: r.first_scheduled_t)
    assert order[:2] == [first, urgent]


def test_fcfs_is_first_in_first_out():
    core = EngineModel(max_num_seqs=1, num_gpu_blocks=1024)
    reqs = [SimRequest(50, 5, priority=p) for p in (3, 0, 1)]
    for r in reqs:
        core.submit(r)
    core.step(10.0)
    assert sorted(reqs, key=lambda r: r.first_scheduled_t) == reqs


def test_callbacks_stream_tokens_and_finish_once():
    core = EngineModel(num_gpu_blocks=1024)
    seen: list[int] = []
    finished: list[SimRequest] = []
    r = SimRequest(40, 12, on_token=lambda req, n, t: seen.append(n), on_finish=finished.append)
    core.submit(r)
    core.step(10.0)
    assert seen == list(range(1, 13))
    assert finished == [r] and r.finished_reason == "length"


def test_stop_at_finishes_with_reason_stop_and_abort_is_counted():
    core = EngineModel(num_gpu_blocks=1024)
    stop = SimRequest(40, 100, stop_at=7)
    victim = SimRequest(40, 1000)
    core.submit(stop)
    core.submit(victim)
    core.step(1.0)
    assert stop.finished_reason == "stop" and stop.out == 7
    assert core.abort(victim)
    assert victim.finished_reason == "abort"
    assert core.request_success == {"stop": 1, "length": 0, "abort": 1, "error": 0, "repetition": 0}
    assert core.num_running == 0 and core.used_blocks == 0


def test_restart_resets_counters_and_queues():
    core = _loaded_engine()
    assert core.generation_tokens_total > 0 and core.h_ttft.count > 0
    aborted = []
    tail = SimRequest(50, 400, on_finish=aborted.append)
    core.submit(tail)
    before = core.created_unix
    core.step(0.05)
    core.restart(max_num_seqs=4)
    assert core.created_unix > before
    assert core.config.max_num_seqs == 4
    assert core.num_running == 0 and core.num_waiting == 0 and core.used_blocks == 0
    assert aborted == [tail] and tail.finished_reason == "abort"
    doc = expfmt.parse(render_metrics(core))
    for s in doc.all_samples:
        if s.name.startswith("vllm:") and (s.name.endswith(("_total", "_count", "_sum", "_bucket"))):
            assert s.value == 0.0, s
    created = [v for _, v in doc.series("vllm:prompt_tokens_created")]
    assert created and created[0] > before


def test_same_seed_same_metrics_different_seed_different_metrics():
    def run(seed: int) -> str:
        c = SimCluster(3, seed=seed, load="bursty", realtime=False, dcgm=False)
        c.advance(40.0, tick=0.1)
        texts = [render_metrics(e.core) for e in c.engines] + [render_dcgm(c.gpus)]
        return "\n".join(texts)
    a, b, other = run(4), run(4), run(5)
    assert a == b
    assert a != other


def test_load_arrivals_do_not_depend_on_tick_size():
    class Sink:
        def __init__(self):
            self.now = 0.0
            self.config = type("C", (), {"max_model_len": 8192})()
            self.got: list[tuple[float, int, int]] = []

        def submit(self, req):
            self.got.append((req.arrival_t, req.prompt_tokens, req.max_tokens))

    def arrivals(tick: float) -> list:
        gen = LoadGenerator(2, seed=9, mode="bursty")
        sink = Sink()
        while sink.now < 200.0:
            gen.generate(1, sink, sink.now + tick)
            sink.now += tick
        return [a for a in sink.got if a[0] <= 199.0]

    a, b = arrivals(0.05), arrivals(1.7)
    assert a == b and len(a) > 300


def test_bursty_load_queues_and_preempts_on_the_hot_engine_only_sometimes():
    c = SimCluster(3, seed=1, load="bursty", realtime=False, dcgm=False, hot_engine=0)
    waits = {i: 0 for i in range(3)}
    idle_seen = False
    for _ in range(240):
        c.advance(0.5, tick=0.1)
        for i, e in enumerate(c.engines):
            waits[i] = max(waits[i], e.core.num_waiting)
            idle_seen |= e.core.num_waiting == 0
    hot = c.engines[0].core
    assert waits[0] > 20, waits
    assert hot.num_preemptions_total > 0
    assert idle_seen
    assert hot.h_queue.sum / hot.h_queue.count > max(
        e.core.h_queue.sum / e.core.h_queue.count for e in c.engines[1:])
    for e in c.engines:
        e.core.check_invariants()


# ---------------------------------------------------------------------------
# GPUs (dcgm-exporter format)

DCGM_NAMES = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
              "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
              "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
              "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
              "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


def _dcgm_by_gpu(text: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.labels["gpu"], {})[s.name.removesuffix("_total")] = s.value
    return out


def test_dcgm_follows_load_over_http():
    with SimCluster(2, seed=3, load="none", realtime=False, throttle_gpu=None) as c:
        busy = c.engines[0]
        for _ in range(40):
            busy.submit(SimRequest(1500, 2000))
        c.advance(20.0, tick=0.1)
        assert busy.core.num_running == 40
        with httpx.Client(timeout=5.0) as client:
            text = client.get(c.dcgm_url).text
            single = client.get(busy.dcgm_url).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert DCGM_NAMES <= set(fams)
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert fams["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    for fam in fams.values():
        for s in fam.samples:
            assert list(s.labels) == DCGM_LABELS, s
    # line format: labels in dcgm-exporter's order, integers and %f floats
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert line.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-')
    assert '",pci_bus_id="00000000:' in line and ',device="nvidia0",modelName="NVIDIA H100 80GB HBM3",' in line
    assert line.rsplit(" ", 1)[1].isdigit()
    power_line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    assert len(power_line.rsplit(".", 1)[1]) == 6
    g = _dcgm_by_gpu(text)
    hot, idle = g["0"], g["1"]
    assert hot["DCGM_FI_DEV_GPU_UTIL"] > 50 > idle["DCGM_FI_DEV_GPU_UTIL"]
    assert hot["DCGM_FI_DEV_POWER_USAGE"] > idle["DCGM_FI_DEV_POWER_USAGE"] + 100
    assert hot["DCGM_FI_DEV_GPU_TEMP"] > idle["DCGM_FI_DEV_GPU_TEMP"]
    assert hot["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] > idle["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert idle["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] == 0x1  # GPU idle
    assert 60 < idle["DCGM_FI_DEV_POWER_USAGE"] < 90
    total = 81559
    assert hot["DCGM_FI_DEV_FB_USED"] > 0.85 * total  # vLLM preallocates its KV cache
    assert hot["DCGM_FI_DEV_FB_USED"] + hot["DCGM_FI_DEV_FB_FREE"] + hot["DCGM_FI_DEV_FB_RESERVED"] == total
    assert hot["DCGM_FI_DEV_XID_ERRORS"] == 0
    assert set(_dcgm_by_gpu(single)) == {"0"}
    # dcgm-exporter types counters without a _total suffix; prometheus_client's parser appends one.
    def strip_total(samples):
        return sorted(((n.removesuffix("_total"), lb, v) for n, lb, v in samples), key=repr)
    assert strip_total(_samples_prom(text)) == strip_total(_samples_expfmt(text))


def test_forced_gpu_throttles_when_hot_and_slows_its_engine():
    with SimCluster(2, seed=8, load="steady", realtime=False, dcgm=False, hot_engine=None, throttle_gpu=1,
                    base_rate=8.0) as c:
        c.advance(150.0, tick=0.25)
        g_ok, g_hot = c.gpus
        vals = _dcgm_by_gpu(render_dcgm(c.gpus))
    assert vals["1"]["DCGM_FI_DEV_SM_CLOCK"] == 1830
    assert int(vals["1"]["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]) & 0x20
    assert vals["1"]["DCGM_FI_DEV_GPU_TEMP"] >= 82
    assert vals["0"]["DCGM_FI_DEV_SM_CLOCK"] == 1980
    assert not int(vals["0"]["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]) & 0x60
    assert c.engines[1].core.speed < 1.0 == c.engines[0].core.speed


def test_dcgm_label_options():
    gpu = SimGpu(3, seed=1, xid=79, pod="vllm-0", namespace="inference", container="vllm")
    text = render_dcgm([gpu], hostname_label="hostname")
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "DCGM_FI_DEV_XID_ERRORS")
    s = fam.samples[0]
    assert s.value == 79
    assert list(s.labels) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname",
                              "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"]
    assert s.labels["device"] == "nvidia3" and s.labels["pod"] == "vllm-0"
    assert SimGpu(3, seed=1).uuid == gpu.uuid != SimGpu(3, seed=2).uuid
    assert "Hostname" not in render_dcgm([gpu], hostname_label="")


# ---------------------------------------------------------------------------
# HTTP API


def test_info_endpoints(cluster, http):
    e = cluster.engines[1]
    assert http.get(e.url + "/health").status_code == 200
    assert http.get(e.url + "/health").content == b""
    assert http.get(e.url + "/version").json() == {"version": "0.32.0"}
    models = http.get(e.url + "/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "tiny-b" == e.model
    assert models["data"][0]["max_model_len"] == 512
    assert http.get(e.url + "/nope").status_code == 404


def test_completion_non_streaming(cluster, http):
    e = cluster.engines[0]
    r = http.post(e.url + "/v1/completions", json={"model": "tiny", "prompt": "hello " * 40, "max_tokens": 12})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "tiny"
    assert body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["text"].split()) == 12
    assert body["usage"]["completion_tokens"] == 12
    assert body["usage"]["prompt_tokens"] == 60
    assert body["usage"]["total_tokens"] == 72


def test_chat_completion_non_streaming(cluster, http):
    e = cluster.engines[0]
    r = http.post(e.url + "/v1/chat/completions", json={
        "model": "tiny", "max_tokens": 5,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 5


def _sse_events(resp) -> list[str]:
    return [line[len("data: "):] for line in resp.iter_lines() if line.startswith("data: ")]


def test_completion_streaming(cluster, http):
    import json

    e = cluster.engines[0]
    with http.stream("POST", e.url + "/v1/completions", json={
            "model": "tiny", "prompt": "stream me", "max_tokens": 10, "stream": True,
            "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(x) for x in events[:-1]]
    text_chunks = [c for c in chunks if c["choices"]]
    assert len(text_chunks) == 10
    assert all(c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in text_chunks] == [None] * 9 + ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 10


def test_chat_streaming(cluster, http):
    import json

    e = cluster.engines[1]
    with http.stream("POST", e.url + "/v1/chat/completions", json={
            "model": "tiny-b", "max_tokens": 6, "stream": True, "messages": [{"role": "user", "content": "hey"}]}) as r:
        events = _sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(x) for x in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c["choices"][0]["delta"]["content"] for c in chunks[1:]]
    assert len(content) == 6
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_concurrent_requests_show_up_in_metrics(cluster, http):
    e = cluster.engines[1]
    before = expfmt.parse(http.get(e.url + "/metrics").text).series("vllm:request_success_total")
    ok_before = {lb["finished_reason"]: v for lb, v in before}["length"]
    results: list[int] = []

    def one() -> None:
        with httpx.Client(timeout=10.0) as c:
            results.append(c.post(e.url + "/v1/completions",
                                  json={"prompt": "p" * 200, "max_tokens": 8}).status_code)

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == [200] * 12
    doc = expfmt.parse(http.get(e.url + "/metrics").text)
    after = {lb["finished_reason"]: v for lb, v in doc.series("vllm:request_success_total")}
    assert after["length"] - ok_before == 12
    reqs = {(lb["handler"], lb["status"]): v for lb, v in doc.series("http_requests_total")}
    assert reqs[("/v1/completions", "2xx")] >= 12


def test_request_errors(cluster, http):
    e = cluster.engines[0]
    r = http.post(e.url + "/v1/completions", json={"model": "other", "prompt": "x"})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]
    r = http.post(e.url + "/v1/completions", json={"prompt": "x" * 4000, "max_tokens": 10})
    assert r.status_code == 400 and "maximum context length is 512" in r.json()["error"]["message"]
    r = http.post(e.url + "/v1/completions", content=b"{not json")
    assert r.status_code == 400


def test_priority_field_is_accepted_by_priority_engines(cluster, http):
    e = cluster.engines[0]
    r = http.post(e.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "priority": 3})
    assert r.status_code == 200


# ---------------------------------------------------------------------------
# Faults


@pytest.fixture
def faulty():
    c = SimCluster(1, seed=21, load="none", models="tiny", max_model_len=512, num_gpu_blocks=256, dcgm=False)
    c.start()
    yield c.engines[0]
    c.stop()


def test_fault_garbage(faulty, http):
    faulty.set_fault("garbage")
    r = http.get(faulty.metrics_url)
    assert r.status_code == 200
    with pytest.raises(expfmt.ParseError):
        expfmt.parse(r.text)
    faulty.set_fault(None)
    assert expfmt.parse(http.get(faulty.metrics_url).text).series("vllm:num_requests_running")


def test_fault_http500(faulty, http):
    faulty.set_fault("http500")
    assert http.get(faulty.metrics_url).status_code == 500
    assert http.get(faulty.url + "/health").status_code == 500
    faulty.set_fault(None)
    assert http.get(faulty.url + "/health").status_code == 200


def test_fault_hang_times_out_and_is_released_on_stop(faulty):
    faulty.set_fault("hang")
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(faulty.metrics_url, timeout=0.3)
    # a client with a long timeout is released (connection closed) when the server stops
    outcome: list[object] = []

    def waiter() -> None:
        try:
            outcome.append(httpx.get(faulty.url + "/health", timeout=20.0))
        except httpx.HTTPError as e:
            outcome.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    for _ in range(200):  # until the server holds the hanging request
        if faulty._listener.threads:
            break
        time.sleep(0.01)
    faulty.stop()
    t.join(10)
    assert not t.is_alive()
    assert outcome and isinstance(outcome[0], httpx.HTTPError)
    assert faulty._listener.threads == []


def test_fault_hang_cleared(faulty, http):
    faulty.set_fault("hang")
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(faulty.url + "/version", timeout=0.3)
    faulty.set_fault(None)
    assert http.get(faulty.url + "/version").json() == {"version": "0.32.0"}


def test_fault_huge(faulty):
    faulty.set_fault("huge")
    with httpx.Client(timeout=10.0) as c, c.stream("GET", faulty.metrics_url) as r:
        assert r.status_code == 200
        assert int(r.headers["content-length"]) == 50 * 1024 * 1024
        got = sum(len(chunk) for chunk in r.iter_raw())
    assert got == 50 * 1024 * 1024


def test_fault_huge_labels(faulty, http):
    faulty.set_fault("huge_labels")
    doc = expfmt.parse(http.get(faulty.metrics_url).text)
    (labels, value), = doc.series("sim_huge_labels")
    assert len(labels) == 10_000
    assert doc.series("vllm:num_requests_running")


def test_fault_down_refuses_then_recovers_on_the_same_port(faulty, http):
    port = faulty.port
    faulty.set_fault("down")
    with pytest.raises(httpx.ConnectError):
        httpx.get(faulty.url + "/health", timeout=1.0)
    faulty.set_fault(None)
    assert faulty.port == port
    assert http.get(faulty.url + "/health").status_code == 200


def test_kill_and_revive_engine():
    with SimCluster(2, seed=6, load="steady", realtime=False, models="tiny", max_model_len=2048,
                    num_gpu_blocks=512) as c:
        c.advance(10.0, tick=0.1)
        dead = c.engines[0]
        assert dead.core.generation_tokens_total > 0
        c.kill_engine(0)
        with pytest.raises(httpx.ConnectError):
            httpx.get(dead.url + "/health", timeout=1.0)
        c.advance(10.0, tick=0.1)
        assert dead.core.num_running == 0 and dead.core.generation_tokens_total == 0
        g = _dcgm_by_gpu(render_dcgm(c.gpus))
        assert g["0"]["DCGM_FI_DEV_FB_USED"] == 0 and g["0"]["DCGM_FI_DEV_GPU_UTIL"] == 0
        assert g["1"]["DCGM_FI_DEV_FB_USED"] > 0
        c.revive_engine(0, max_num_seqs=16)
        assert httpx.get(dead.url + "/health", timeout=2.0).status_code == 200
        assert dead.max_num_seqs == 16
        c.advance(5.0, tick=0.1)
        assert dead.core.generation_tokens_total > 0


def test_unknown_fault_is_rejected(faulty):
    with pytest.raises(ValueError):
        faulty.set_fault("explode")


def test_stop_leaves_no_threads_and_drops_streams():
    c = SimCluster(1, seed=4, load="none", models="tiny", max_model_len=512, num_gpu_blocks=256)
    c.start()
    e = c.engines[0]
    got: list[object] = []

    def long_stream() -> None:
        try:
            with httpx.Client(timeout=20.0) as client, client.stream(
                    "POST", e.url + "/v1/completions",
                    json={"prompt": "x", "max_tokens": 400, "stream": True}) as r:
                for _ in r.iter_lines():
                    got.append("line")
        except httpx.HTTPError as exc:
            got.append(exc)

    t = threading.Thread(target=long_stream)
    t.start()
    for _ in range(500):
        if got:
            break
        time.sleep(0.01)
    ours = (f"-{e.port}", f"-{c.dcgm.port}", f"-{id(c):x}")
    assert any(th.name.endswith(ours) for th in threading.enumerate())
    c.stop()
    t.join(10)
    assert not t.is_alive()
    assert isinstance(got[-1], httpx.HTTPError) or len(got) < 400  # the stream was cut, not completed
    leftovers = [th for th in threading.enumerate() if th.name.endswith(ours)]
    assert leftovers == []


# ---------------------------------------------------------------------------
# CLI and layering


def test_cli_prints_urls_and_stops_on_sigterm():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from infertop.sim.cli import main; "
                             "sys.exit(main(sys.argv[1:]))", "--engines", "2", "--load", "steady",
                             "--print-urls", "--seed", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        for _ in range(10):
            line = proc.stdout.readline().strip()
            if not line or line == "ready":
                break
            lines.append(line)
        assert line == "ready", (lines, proc.stderr.read() if proc.poll() is not None else "")
        assert len(lines) == 3
        engines, dcgm_url = lines[:2], lines[2]
        assert dcgm_url.endswith("/metrics")
        with httpx.Client(timeout=5.0) as c:
            for url in engines:
                assert c.get(url + "/health").status_code == 200
            assert "DCGM_FI_DEV_GPU_UTIL" in c.get(dcgm_url).text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_default_output_lists_engines():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from infertop.sim.cli import main; "
                             "sys.exit(main(sys.argv[1:]))", "--engines", "1", "--load", "none", "--v0",
                             "--max-num-seqs", "12"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stdout.readline().split()
        assert first[:2] == ["engine", "0"] and first[2].startswith("http://127.0.0.1:")
        assert "max_num_seqs=12" in first
        assert proc.stdout.readline().startswith("dcgm http://")
        assert proc.stdout.readline().strip() == "ready"
        text = httpx.get(first[2] + "/metrics", timeout=5.0).text
        assert "vllm:gpu_cache_usage_perc" in text
        assert "_created" not in text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sim_does_not_import_textual_or_rich():
    code = ("import sys, infertop.sim, infertop.sim.cli, infertop.sim.server, infertop.sim.load; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                   timeout=30)


def test_sim_cli_exits_when_its_parent_dies():
    """--exit-with-parent: a demo whose infertop was killed (SSH dropped) leaves no simulator."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'infertop', 'sim', '--engines', '1', '--load', 'none',"
        " '--exit-with-parent'], stdout=subprocess.PIPE, text=True)\n"
        "for line in p.stdout:\n"
        "    if line.startswith('ready'):\n"
        "        print(p.pid, flush=True)\n"
        "        break\n"
        "import time; time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    # The simulator checks its parent every 0.5 s, then stops its servers: generous for a starved machine.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # a zombie is gone for our purposes; it has no parent to reap it until init does
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the simulator outlived its parent")
