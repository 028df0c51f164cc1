"""Triage verdicts over hand-made fleet states and a fake clock: onset after the minimum
duration, no flapping at a threshold, look-alikes told apart, clear after recovery."""

from __future__ import annotations

import pytest
from triage_states import SLO, engine, fleet, run

from infertop.analysis.triage import Debouncer, Triage
from infertop.domain.engine import DOWN, EngineStats
from infertop.domain.gpu import GpuStats
from infertop.state.fleet_types import MISSING, STALE, EngineState, FleetState, Freshness, SourceState


def kinds(verdicts) -> set[tuple[str, str]]:
    return {(v.kind, v.subject) for v in verdicts}


def test_a_healthy_fleet_has_no_verdict():
    healthy = fleet(engine("e0"), engine("e1", running=15.0, waiting=0.0), engine("e2", kv_cache_pct=80.0))
    assert all(v == () for v in run(Triage(), [healthy] * 120))


def test_debouncer_raises_after_the_minimum_and_never_flaps_at_the_edge():
    d = Debouncer(for_s=5.0, clear_for_s=10.0)
    raised_at, cleared_at = [], []
    for t in range(0, 60):
        holding = ["k"] if (t < 30 and t % 2 == 0) else []  # on, off, on, off … then off for good
        up, down = d.update(holding, float(t))
        raised_at += [t] * len(up)
        cleared_at += [t] * len(down)
    assert raised_at == [6]  # held (with gaps shorter than the clear time) for 5 s: raised once
    assert cleared_at == [38]  # 10 s after the last time it held (t=28): cleared once
    assert d.active() == {}


def test_kv_bound_raises_after_5_s_holds_above_the_clear_level_and_clears():
    busy = dict(kv_cache_pct=97.0, preemptions_per_s=3.0, running=16.0, waiting=8.0)
    states = [fleet(engine(**busy))] * 6 + [fleet(engine(**{**busy, "kv_cache_pct": 88.0}))] * 20
    states += [fleet(engine(kv_cache_pct=40.0))] * 20
    out = run(Triage(), states)
    assert out[4] == () and kinds(out[5]) == {("kv-bound", "e0")}  # 5 s after onset
    assert all(("kv-bound", "e0") in kinds(v) for v in out[5:26])  # 88 % is above the 85 % clear level
    assert ("queue-bound", "e0") not in set().union(*map(kinds, out))  # the look-alike is not raised
    assert kinds(out[-1]) == set()
    v = out[5][0]
    assert v.since == 1000.0 and "m: lower max_num_seqs 16 → 12" in str(v.remedies[0])
    assert (v.remedies[0].key, v.remedies[0].target, v.remedies[0].value) == ("m", "e0", 12)


def test_queue_bound_names_little_law_replicas_and_raising_max_num_seqs():
    full = [engine(f"e{i}", running=16.0, waiting=12.0, kv_cache_pct=40.0, requests_per_s=10.0, e2e_p95_s=4.0,
                   queue_p99_s=1.6, ttft_p99_s=2.0) for i in range(2)]
    out = run(Triage(), [fleet(*full)] * 6)
    assert kinds(out[-1]) == {("queue-bound", "e0"), ("queue-bound", "e1")}
    v = out[-1][0]
    # 20 req/s × 4 s = 80 in flight, × 1.3 = 104 → 7 engines of 16
    assert str(v.remedies[0]).startswith("S: scale llama 2 → 7 engines") and v.remedies[0].value == 7
    assert str(v.remedies[1]).startswith("m: raise max_num_seqs 16 → 32 (KV cache 40")
    assert any(ev.signal == "queue share of TTFT p99" and ev.value == "80 %" for ev in v.evidence)


def test_an_engine_down_is_a_verdict_after_3_s_and_a_crash_loop_replaces_it():
    up, down = fleet(engine()), fleet(engine(state=DOWN, fresh=False))
    out = run(Triage(), [up, down, down, down, down])  # down from t=1 s
    assert out[3] == () and kinds(out[4]) == {("engine-down", "e0")}
    cycle = [up, up, down, down] * 3  # up → down three times in 12 s
    out = run(Triage(), cycle)
    assert kinds(out[-1]) == {("crash-loop", "e0")}  # not "engine-down" beside it
    assert "down 3 times" in out[-1][0].explanation


def test_a_prometheus_outage_is_metrics_stale_never_engines_down():
    prom = SourceState(name="http://127.0.0.1:9090", kind="prometheus", ok=False, error="connection refused")
    e = engine(state=DOWN, fresh=False)
    stale = EngineState(e.stats, Freshness(STALE, "http://127.0.0.1:9090", 0.0, 30.0, 0.0, "connection refused"))
    out = run(Triage(), [fleet(stale, sources=[prom])] * 8)
    assert kinds(out[-1]) == {("metrics-stale", "http://127.0.0.1:9090")}


@pytest.mark.parametrize("gpu,kind", [
    (GpuStats(source="dcgm", index=3, host="n1", engine="e0", last_xid=79), "gpu-fault"),
    (GpuStats(source="dcgm", index=3, host="n1", engine="e0", util_pct=95.0, temp_c=91.0,
              throttle_reasons=("HwThermalSlowdown",)), "gpu-throttled"),
])
def test_gpu_faults_are_joined_to_their_engine(gpu, kind):
    out = run(Triage(), [fleet(engine(), gpus=[gpu])] * 12)
    (v,) = out[-1]
    assert (v.kind, v.subject) == (kind, "n1:gpu3") and "engine e0 on it" in v.explanation
    assert str(v.remedies[0]).startswith("N: cordon and drain the node n1")


def test_an_engine_that_died_with_its_gpu_is_the_gpu_fault_verdict_alone():
    """XID 79 and the engine on that GPU refused: one verdict, the GPU's, which says the engine is down;
    once the GPU reports no fault and the engine is still down, engine-down speaks."""
    lost = GpuStats(source="dcgm", index=3, host="n1", engine="e0", last_xid=79)
    reset = GpuStats(source="dcgm", index=3, host="n1", engine="e0", last_xid=0)
    down = engine(state=DOWN, fresh=False)
    out = run(Triage(), [fleet(down, gpus=[lost])] * 20 + [fleet(down, gpus=[reset])] * 5)
    assert all(kinds(v) == {("gpu-fault", "n1:gpu3")} for v in out[:20])
    v = out[19][0]
    assert "engine e0 on it is down with it (connection refused)" in v.explanation
    assert any(e.signal == "engine e0" and e.value == "down" for e in v.evidence)
    assert ("engine-down", "e0") in kinds(out[-1])


def test_an_idle_gpu_with_its_clocks_held_down_is_not_throttled_and_app_xids_are_not_faults():
    idle = GpuStats(source="dcgm", index=0, host="n1", util_pct=0.0, throttle_reasons=("SwPowerCap",))
    app_fault = GpuStats(source="dcgm", index=1, host="n1", util_pct=50.0, last_xid=13)
    assert run(Triage(), [fleet(engine(), gpus=[idle, app_fault])] * 40)[-1] == ()


def test_missing_engines_before_their_first_answer_are_not_down():
    never = EngineState(EngineStats(name="e0", url="http://127.0.0.1:8000"), Freshness(MISSING, "", None, None))
    assert run(Triage(), [fleet(never)] * 10)[-1] == ()


async def test_the_console_logs_a_verdict_once_with_its_remedy_and_its_clear(scripted):
    from infertop.config import Config
    from infertop.sources.vllm import EngineEndpoint
    from infertop.ui.app import InfertopApp, Settings
    from vllm_text import v1_doc

    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 8, "waiting": 5, "kv": 0.4}}), model="llama")
    clock = {"t": 5000.0}
    app = InfertopApp(Settings(config=Config(), endpoints=[EngineEndpoint("alpha", srv.url, max_num_seqs=8,
                                                                          timeout_s=30),
                                                           EngineEndpoint("gone", "http://127.0.0.1:9")],
                               wall_clock=lambda: clock["t"]), poll=False)
    async with app.run_test(size=(120, 40)):
        for _ in range(8):
            await app.poll_now()
            clock["t"] += 1.0
        raised = [line for line in app.log_lines if " verdict " in line]
        assert any("verdict queue-bound alpha: alpha is out of capacity" in line
                   and "m: raise max_num_seqs 8 → 16" in line for line in raised), raised
        assert any("verdict engine-down gone" in line for line in raised), raised
        assert len(raised) == 2 and {v.kind for v in app.verdicts} == {"queue-bound", "engine-down"}
        for i in range(20):  # lighter load, tokens counted every poll (a static count would read as hung)
            srv.serve_engine(v1_doc(engines={"0": {"running": 2, "waiting": 0, "kv": 0.1, "gen": 100 * i}}),
                             model="llama")
            await app.poll_now()
            clock["t"] += 1.0
        assert any("cleared verdict queue-bound alpha" in line for line in app.log_lines)
        assert [v.kind for v in app.verdicts] == ["engine-down"]


def test_alert_list_and_log_lines_wait_for_an_alert_to_hold_and_to_be_gone():
    """ITL hovering at the threshold: the Overview's list (AlertHold, as the console's joiner applies
    it) shows the warning once it has held 5 s and keeps it, unblinking, until gone 10 s; a down
    engine shows at once; the Log follows the list: one alert line, one cleared line."""
    from infertop.analysis.alerts import CRITICAL, WARNING, Alert, AlertHold
    from infertop.ui.status import AlertLog

    hold, log = AlertHold(), AlertLog()
    lines, shown = [], []
    for t in range(60):
        flapping = t < 30 and t % 2 == 0  # ITL 41 ms / 40 ms / 41 ms …, then well under for good
        raw = [Alert(WARNING, "e0", "ITL p95 41ms > 40ms")] if flapping else []
        raw += [Alert(CRITICAL, "e1", "down: connection refused")] if t == 50 else []
        alerts = tuple(hold.apply(raw, 2000.0 + t))
        shown.append({a.target for a in alerts})
        st = FleetState(tick=t, taken_at=2000.0 + t, refresh_s=1.0, window_s=60.0, slo=SLO, alerts=alerts)
        lines += [(t, line.plain) for line in log.changes(st)]
    assert lines == [(6, "alert e0: ITL p95 41ms > 40ms"), (38, "cleared e0: ITL p95 (was ITL p95 41ms > 40ms)")]
    assert all(s == set() for s in shown[:6]) and all(s == {"e0"} for s in shown[6:38])  # no blinking
    assert shown[50] == {"e1"} and shown[51] == set()  # critical: at once, and gone at once


def test_snapshot_table_and_json_carry_the_verdicts():
    import io
    import json as _json

    from infertop.snapshot import print_table, write_json

    st = fleet(engine("e0", running=16.0, waiting=4.0, kv_cache_pct=50.0), engine("e1"))
    buf = io.StringIO()
    write_json(st, buf)
    doc = _json.loads(buf.getvalue())
    assert [(v["kind"], v["subject"]) for v in doc["verdicts"]] == [("queue-bound", "e0")]
    assert doc["verdicts"][0]["evidence"][0]["signal"] == "running / max_num_seqs"
    buf = io.StringIO()
    print_table(st, buf)
    table = buf.getvalue()
    assert "verdicts (1):" in table and "queue-bound e0: e0 is out of capacity" in table
    buf = io.StringIO()
    print_table(fleet(engine("e0")), buf)
    assert "verdicts" not in buf.getvalue()


def test_a_hung_engine_answers_but_counts_no_token_while_requests_wait():
    def tick(total, running=8.0, waiting=12.0, name="e0"):
        return engine(name, tokens_total=total, running=running, waiting=waiting)
    # e0 counts tokens, then freezes with work queued; e1 is idle and frozen (nothing to count)
    states = [fleet(tick(1000.0 + 50 * i), tick(5.0, 0.0, 0.0, "e1")) for i in range(10)]
    states += [fleet(tick(1450.0), tick(5.0, 0.0, 0.0, "e1"))] * 20
    out = run(Triage(), states)
    first = next(i for i, v in enumerate(out) if ("hung", "e0") in kinds(v))
    assert first == 9 + 15  # 15 s after the last token (t=9 s)
    assert kinds(out[-1]) == {("hung", "e0")}
    assert "no token for 15 s while 8 requests run and 12 wait" in out[first][0].explanation
    states = [fleet(tick(1450.0 + 10 * i)) for i in range(1, 8)]  # it moves again
    t = Triage()
    assert run(t, [fleet(tick(1450.0))] * 20 + states)[-1] == ()


def test_snapshot_exits_4_for_a_critical_verdict_on_what_answers_and_1_for_a_source_down():
    from infertop.snapshot import exit_code

    lost = GpuStats(source="dcgm", index=0, host="n1", engine="e0", last_xid=79)
    assert exit_code(fleet(engine("e0"), gpus=(lost,))) == 4  # a fatal XID: the engine answers, the GPU is gone
    assert exit_code(fleet(engine("e0"), engine("e1", state=DOWN, fresh=False))) == 1  # down: exit 1 says it
    assert exit_code(fleet(engine("e0"), engine("e1"))) == 0


def test_a_verdict_says_what_changed_before_its_onset():
    """max_num_seqs 8 → 16 on e0 (by whoever: the fleet state shows it), a Warning event on its pod,
    then e0 runs out of capacity: the queue-bound verdict lists both, with how long before its onset."""
    from infertop.domain.kube import ClusterSnapshot, EventView
    from infertop.state.changes import ChangeRecords
    from infertop.state.fleet_types import ClusterState

    from dataclasses import replace

    def at(t, st):
        return replace(st, taken_at=t)

    rec, triage = ChangeRecords(), Triage()
    ev = EventView(namespace="llm", type="Warning", reason="BackOff", message="Back-off pulling image",
                   kind="Pod", name="e0-pod", last_seen_ts=1005.0)
    cluster = ClusterState(ClusterSnapshot("emu", ("llm",), 1010.0, events=(ev,)))
    states = [at(1000.0, fleet(engine(max_num_seqs=8))), at(1010.0, replace(fleet(engine(max_num_seqs=16)),
                                                                           cluster=cluster))]
    busy = dict(max_num_seqs=16, running=16.0, waiting=6.0, kv_cache_pct=40.0)
    states += [at(1040.0 + i, fleet(engine(**busy))) for i in range(8)]
    verdicts = ()
    for st in states:
        rec.note_state(st)
        verdicts = triage.evaluate(st, st.taken_at, changes=rec.records(st.taken_at))
    [v] = [v for v in verdicts if v.kind == "queue-bound"]
    assert v.changes == ("Warning BackOff Pod/e0-pod: Back-off pulling image, 35 s before",
                         "max_num_seqs 8 → 16 on e0, 30 s before")
    assert rec.records(1010.0 + 900.0 + 1) == []  # older than the 15 minutes kept
