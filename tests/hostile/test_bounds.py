"""The cleaning boundary and the memory bounds, unit by unit."""

from __future__ import annotations

import math

import pytest

from infertop.domain.engine import EngineStats
from infertop.domain.gpu import GpuProcess, GpuStats
from infertop.sources.sanitize import clean_engine, clean_gpu, percent, plain_text
from infertop.state.history import FIRST_SLOTS, RING_OVERHEAD_BYTES, HistoryStore
from infertop.domain.window import CounterWindow


def test_plain_text_makes_control_characters_visible_and_keeps_markup_as_text():
    assert plain_text("\x1b]0;t\x07\x1b[2J") == "\\x1b]0;t\\x07\\x1b[2J"
    assert plain_text("a\nb\tc\x7f\x9b") == "a\\x0ab\\x09c\\x7f\\x9b"
    assert plain_text("\u202eevil") == "\\u202eevil"  # a bidi override cannot reorder the row
    assert plain_text("[/evil] [b]x[/b]") == "[/evil] [b]x[/b]"  # escaping markup is the renderer's job
    assert plain_text("x" * 500) == "x" * 159 + "…"


def test_clean_engine_turns_out_of_domain_numbers_into_no_data():
    s = EngineStats(name="e", url="u", running=-5, waiting=math.inf, kv_cache_pct=150.0, ttft_p99_s=math.nan,
                    generation_tokens_per_s=12.5, prefix_cache_hit_pct=99.0, model="m\x1b", error="boom\x1b[2J")
    c = clean_engine(s)
    assert (c.running, c.waiting, c.kv_cache_pct, c.ttft_p99_s) == (None, None, None, None)
    assert (c.generation_tokens_per_s, c.prefix_cache_hit_pct) == (12.5, 99.0)
    assert c.model == "m\\x1b" and c.error == "boom\\x1b[2J"
    assert clean_engine(EngineStats(name="e", url="u", running=1e308, ttft_p99_s=1e20)).running is None
    ok = EngineStats(name="e", url="u", running=3.0, kv_cache_pct=50.0)
    assert clean_engine(ok) is ok  # nothing to clean: no copy


def test_clean_gpu_bounds_every_field_and_its_children():
    g = GpuStats(source="dcgm", util_pct=101.0, temp_c=-5.0, power_w=-1.0, mem_used_bytes=2**70, pstate=20,
                 fan_pct=math.nan, name="H100\x1b", processes=(GpuProcess(pid=1, used_bytes=-3, name="py\x07"),),
                 mig_devices=(GpuStats(source="dcgm", util_pct=-1.0, mig_profile="1g\x1b"),))
    c = clean_gpu(g)
    assert (c.util_pct, c.power_w, c.mem_used_bytes, c.pstate, c.fan_pct) == (None, None, None, None, None)
    assert c.temp_c == -5.0  # a sensor may read below zero
    assert c.name == "H100\\x1b" and c.processes[0].used_bytes is None and c.processes[0].name == "py\\x07"
    assert c.mig_devices[0].util_pct is None and c.mig_devices[0].mig_profile == "1g\\x1b"
    assert percent(100.0) == 100.0 and percent(100.5) is None


def test_one_poisoned_counter_sample_does_not_poison_the_window():
    w = CounterWindow(60)
    for t, v in enumerate([100.0, 200.0, math.inf, 300.0, 1e308, 400.0, math.nan, 500.0, -7.0, 600.0]):
        w.add(float(t), {"c": v})
    assert w.rate("c") == pytest.approx(500.0 / 9)  # 100 → 600 over 9 s: the bad samples count as no change
    assert w.resets == 0 and w.dropped == 4


def test_an_absurd_jump_counts_as_a_reset_not_as_traffic():
    w = CounterWindow(60)
    for t, v in enumerate([10.0, 20.0, 9e14, 9e14 + 10]):
        w.add(float(t), {"c": v})
    assert w.rate("c") == pytest.approx(20.0 / 3)  # +10, (jump ignored), +10
    assert w.resets == 1


def test_history_grows_once_a_series_outlives_its_first_slots_then_never():
    """A series seen once costs FIRST_SLOTS values; one that lives on takes its capacity in one step, so
    memory is flat after the first minute (not doubling for an hour)."""
    h = HistoryStore(capacity=3600)
    h.record("e", "m", 1.0)
    assert h.nbytes == FIRST_SLOTS * 4  # not 3600 slots for a series seen once
    for i in range(FIRST_SLOTS - 1):
        h.record("e", "m", float(i))
    assert h.nbytes == FIRST_SLOTS * 4 and len(h.series("e", "m")) == FIRST_SLOTS
    h.record("e", "m", -1.0)
    assert h.nbytes == 3600 * 4 and h.series("e", "m")[-2:] == [FIRST_SLOTS - 2.0, -1.0]
    assert len(h.series("e", "m")) == FIRST_SLOTS + 1
    for i in range(5000):
        h.record("e", "m", float(i))
    assert h.nbytes == 3600 * 4 and h.series("e", "m")[-3:] == [4997.0, 4998.0, 4999.0]
    assert len(h.series("e", "m")) == 3600


def test_history_is_bounded_in_total_and_evicts_the_least_recently_written():
    h = HistoryStore(capacity=1000, max_bytes=20 * (FIRST_SLOTS * 4 + RING_OVERHEAD_BYTES))
    for i in range(30):
        h.record(f"e{i}", "m", 1.0)
        h.record("live", "m", 1.0)  # written all along: never evicted
    assert h.footprint_bytes <= h.max_bytes and h.evicted >= 10
    assert h.series("live", "m") and not h.series("e0", "m") and h.series("e29", "m")
    h2 = HistoryStore(capacity=10, max_series=5)
    for i in range(8):
        h2.record(f"e{i}", "m", 1.0)
    assert len(h2) == 5 and h2.series("e7", "m") and not h2.series("e0", "m")


def test_values_float32_cannot_hold_become_gaps():
    h = HistoryStore(capacity=10)
    for v in (1e308, math.inf, -math.inf, -1e39, 3e38, None):
        h.record("e", "m", v)
    got = h.series("e", "m")
    assert [math.isnan(x) for x in got] == [True, True, True, True, False, True]


async def test_a_dcgm_exporter_with_too_many_gpus_is_capped_and_said(scripted):
    import httpx

    from infertop.sources.dcgm import MAX_GPU_ROWS, DcgmEndpoint

    n = MAX_GPU_ROWS + 50
    srv = scripted()
    srv.routes["/metrics"] = (200, "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}",Hostname="h"}} 5\n'
                                           for i in range(n)))
    ep = DcgmEndpoint(srv.url + "/metrics")
    async with httpx.AsyncClient(trust_env=False) as client:
        rows = await ep.poll(client)
    assert len(rows) == MAX_GPU_ROWS
    assert ep.health.ok and ep.health.last_error == f"too many GPUs ({n}) — showing the first {MAX_GPU_ROWS}"
