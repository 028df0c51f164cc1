"""``snapshot`` carries the SLO report (table and JSON) and exits 5 on a fast burn — a real engine
endpoint over loopback HTTP whose TTFT histogram grows between polls."""

from __future__ import annotations

import asyncio
import io
import json

from slo_engine import growing_engine

from infertop.config import Config, GpuConfig, SloClassConfig, SloClassesConfig
from infertop.snapshot import EXIT_FAST_BURN, EXIT_OK, collect_state, exit_code, print_table, write_json
from infertop.sources.vllm import EngineEndpoint


def _cfg() -> Config:
    cfg = Config(gpu=GpuConfig(nvml=False))
    cfg.refresh_s = 0.5
    # one class, counted by TTFT: 99.9 % of requests within 1 s
    cfg.slo_classes = SloClassesConfig(classes={"chat": SloClassConfig(
        queue_p99_s=1.0, ttft_p99_s=1.0, tpot_p95_s=0.04, e2e_p99_s=5.0, objective_stage="ttft", match=["*"])},
        gpu_hour_price=2.0, min_burn_history_s=0.0)  # a seconds-long window: the default waits 5 min of history
    return cfg


def test_a_fast_burn_is_in_the_table_and_json_and_exits_5(scripted):
    srv = growing_engine(scripted, slow_share=0.1)  # 10 % over target: 100× the 0.1 % budget's rate
    st = asyncio.run(collect_state([EngineEndpoint("chat-0", srv.url, max_num_seqs=8)], _cfg(), 2.5))
    chat = st.slo_report["classes"][0]
    assert chat["fast_burn_firing"] and chat["requests"] >= 100
    assert chat["bad"] == chat["requests"] * 0.1
    fast = chat["burn"][0]
    assert fast["scaled"] and 1.5 <= fast["long_s"] <= 4.0  # the window there was, said
    assert exit_code(st) == EXIT_FAST_BURN
    out = io.StringIO()
    print_table(st, out)
    table = out.getvalue()
    assert "slo classes:" in table and "(requests over target counted from" in table
    assert "chat: 99.9 % of requests within TTFT 1 s over 30 days" in table
    assert "FIRING" in table and "· chat-0 → chat (matches '*' (engine name))" in table
    assert "cost: $2/GPU-hour" in table and "1 assumed" in table
    buf = io.StringIO()
    write_json(st, buf)
    doc = json.loads(buf.getvalue())
    assert doc["slo_report"]["classes"][0]["fast_burn_firing"] is True
    # each burn window says where it came from: no Prometheus here, the local history's (asked 1 h / 5 min)
    fast_doc = doc["slo_report"]["classes"][0]["burn"][0]
    assert (fast_doc["long_source"], fast_doc["short_source"], fast_doc["prometheus"]) == ("local", "local", None)
    assert (fast_doc["asked_long_s"], fast_doc["asked_short_s"]) == (3600.0, 300.0)
    assert fast_doc["history_s"] == fast_doc["long_s"]
    assert any(v["kind"] == "slo-fast-burn" and v["subject"] == "slo:chat" for v in doc["verdicts"])
    assert doc["slo_report"]["cost"]["models"][0]["cost_per_million_generated"] is not None


def test_a_class_within_budget_exits_0(scripted):
    srv = growing_engine(scripted, slow_share=0.0)
    st = asyncio.run(collect_state([EngineEndpoint("chat-0", srv.url, max_num_seqs=8)], _cfg(), 2.0))
    chat = st.slo_report["classes"][0]
    assert chat["requests"] >= 100 and chat["bad"] == 0 and not chat["fast_burn_firing"]
    assert exit_code(st) == EXIT_OK
