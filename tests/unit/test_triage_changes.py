"""What changed before a verdict's onset: the pure helper, and the verdicts that carry its lines
(through the JSON codec the recorder and snapshot use)."""

from __future__ import annotations

import json

from infertop.analysis.triage import Triage, Verdict, changes_before
from infertop.domain.engine import UP, EngineStats
from infertop.domain.codec import from_doc, to_doc
from infertop.state.fleet_types import FRESH, EngineState, FleetState, Freshness, Slo

SLO = Slo(ttft_p99_s=2.0, itl_p95_s=0.04, e2e_p99_s=5.0, queue_p99_s=1.0, kv_cache_pct=90.0)
ONSET = 10_000.0


def test_the_lines_of_the_minutes_before_the_onset_oldest_first_with_how_long_before():
    records = [(ONSET - 400, "too old"), (ONSET - 40, "max_num_seqs 8 → 16 on engine-2"),
               (ONSET - 150, "rollout serving/vllm: image v0.9 → v0.10"), (ONSET + 5, "after the onset"),
               (ONSET, "Warning BackOff pod vllm-2"), (float("nan"), "no time"), ("x", "bad"), (ONSET - 1, 42)]
    assert changes_before(ONSET, records) == (
        "rollout serving/vllm: image v0.9 → v0.10, 2 min before",
        "max_num_seqs 8 → 16 on engine-2, 40 s before",
        "Warning BackOff pod vllm-2, at the onset")
    assert changes_before(ONSET, records, window_s=60) == ("max_num_seqs 8 → 16 on engine-2, 40 s before",
                                                           "Warning BackOff pod vllm-2, at the onset")


def test_over_the_limit_the_lines_naming_the_subject_stay():
    storm = [(ONSET - i, f"Normal Pulled pod other-{i}") for i in range(1, 50)]
    mine = [(ONSET - 200, "max_num_seqs 8 → 16 on engine-2\nsecond line")]
    got = changes_before(ONSET, storm + mine, limit=3, subject="engine-2")
    assert got[0] == "max_num_seqs 8 → 16 on engine-2 second line, 3 min before"  # one line, kept first
    assert got[1:] == ("Normal Pulled pod other-2, 2 s before", "Normal Pulled pod other-1, 1 s before")


def _queue_bound(t):
    s = EngineStats(name="engine-2", url="http://127.0.0.1:8200", state=UP, model="llama", max_num_seqs=16,
                    running=16.0, waiting=9.0, kv_cache_pct=40.0, requests_per_s=4.0, e2e_p95_s=3.0,
                    preemptions_per_s=0.0)
    return FleetState(tick=0, taken_at=t, refresh_s=1.0, window_s=60.0, slo=SLO,
                      engines=(EngineState(s, Freshness(FRESH, s.url, 0.0, 0.0)),))


def test_a_verdict_carries_what_changed_before_its_onset_and_survives_the_codec():
    records = [(ONSET - 40, "max_num_seqs 8 → 16 on engine-2"), (ONSET + 3, "the operator opened the detail")]
    triage = Triage()
    out = [triage.evaluate(_queue_bound(ONSET + i), ONSET + i, changes=records if i % 2 == 0 else None)
           for i in range(8)]
    (v,) = out[-1]  # the last tick passed no records: it keeps the lines it was given
    assert v.since == ONSET and v.changes == ("max_num_seqs 8 → 16 on engine-2, 40 s before",)
    doc = json.loads(json.dumps(to_doc(v)))
    assert doc["changes"] == ["max_num_seqs 8 → 16 on engine-2, 40 s before"]
    assert from_doc(Verdict, doc) == v
    assert Triage().evaluate(_queue_bound(ONSET), ONSET) == ()  # no keyword: as before
