"""Priority inversion at a gateway over hand-made queue states and a fake clock — told apart from
a gateway that is simply out of capacity (every class over its budget)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infertop.analysis.triage import Triage
from infertop.analysis.triage.engine import TIMING
from infertop.state.fleet_types import FRESH, FleetState, Freshness, Slo
from infertop.domain.queues import QueueClass, QueueSource

SLO = Slo(ttft_p99_s=2.0, itl_p95_s=0.04, e2e_p99_s=5.0, queue_p99_s=1.0, kv_cache_pct=90.0)


def gateway(chat_wait_s, batch_share, batch_wait_s=5.0, chat_depth=6.0, kind="gateway"):
    classes = (QueueClass("chat", priority=10, depth=chat_depth, wait_p99_s=chat_wait_s, budget_s=1.0, weight=1.0,
                          share_pct=100 - batch_share),
               QueueClass("batch", priority=1, depth=40.0, wait_p99_s=batch_wait_s, budget_s=30.0, weight=4.0,
                          share_pct=batch_share))
    return QueueSource("gw", kind, "http://127.0.0.1:9400", freshness=Freshness(FRESH, "http://127.0.0.1:9400", 0.0, 0.0),
                       classes=classes)


def fleet(*queues):
    return FleetState(tick=0, taken_at=0.0, refresh_s=1.0, window_s=60.0, slo=SLO, queues=tuple(queues))


INVERTED = fleet(gateway(chat_wait_s=3.2, batch_share=80.0))
HALF_RECOVERED = fleet(gateway(chat_wait_s=0.9, batch_share=45.0))  # within the hysteresis band: still held
HEALTHY = fleet(gateway(chat_wait_s=0.3, batch_share=60.0))
OVERLOADED = fleet(gateway(chat_wait_s=3.2, batch_share=80.0, batch_wait_s=45.0))  # batch over its 30 s too
NOTHING_WAITS = fleet(gateway(chat_wait_s=3.2, batch_share=80.0, chat_depth=0.0))


def run(states):
    t = Triage()
    return [t.evaluate(st, 1000.0 + i) for i, st in enumerate(states)]


def test_priority_inversion_onsets_holds_in_its_band_and_clears():
    for_s, clear_s = TIMING["priority-inversion"]
    out = run([HEALTHY] * 3 + [INVERTED] * 15 + [HALF_RECOVERED] * 20 + [HEALTHY] * int(clear_s + 2))
    key = ("priority-inversion", "gw/chat")
    first = next(i for i, v in enumerate(out) if key in {(x.kind, x.subject) for x in v})
    assert first - 3 == for_s
    assert all(key in {(x.kind, x.subject) for x in v} for v in out[first:38])
    assert out[-1] == ()
    (v,) = out[15]
    assert "chat waits 3.20s (p99, budget 1.00s) while batch, of lower priority, holds 80 %" in v.explanation
    (r,) = v.remedies
    assert (r.key, r.target, r.value) == ("w", "gw/chat", 8) and "1 → 8 on gw (twice that of batch)" in r.text


@pytest.mark.parametrize("state", [OVERLOADED, NOTHING_WAITS, HEALTHY,
                                   replace(INVERTED, queues=(replace(INVERTED.queues[0],
                                                                     freshness=Freshness("stale")),))])
def test_no_inversion_when_every_class_is_over_budget_nothing_waits_or_the_gateway_is_stale(state):
    assert run([state] * 40)[-1] == ()


def test_an_endpoint_picker_has_no_weight_to_change():
    (v,) = run([fleet(gateway(chat_wait_s=3.2, batch_share=80.0, kind="epp"))] * 12)[-1]
    assert v.kind == "priority-inversion" and v.remedies[0].key == "" and "InferenceObjective" in v.remedies[0].text
