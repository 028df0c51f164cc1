"""A crash loop as Kubernetes sees it, joined to the engine its pod serves."""

from __future__ import annotations

from dataclasses import replace

from autoscaler_states import cluster, engines, fleet, pod, run

from infertop.domain.engine import DOWN


def looping(restarts=5, reason="OOMKilled"):
    return replace(pod(1), status="CrashLoopBackOff", ready=False, restarts=restarts, waiting_reason="CrashLoopBackOff",
                   waiting_message="back-off 40s restarting failed container", last_termination_reason=reason)


def test_a_pod_in_crash_loop_back_off_is_its_engines_crash_loop_with_the_oom_kill_as_evidence():
    eng = list(engines())
    eng[1] = replace(eng[1], stats=replace(eng[1].stats, state=DOWN), freshness=replace(eng[1].freshness, status="stale"))
    st = fleet(cluster(pods=(pod(0), looping(), pod(2), pod(3))), tuple(eng))
    [v] = [v for v in run([st] * 5)[-1] if v.kind == "crash-loop"]
    assert v.subject == "vllm-1" and v.severity == "critical"
    assert v.explanation.startswith("vllm-1 (pod vllm-1) is crash-looping: 5 restarts, the last container ended OOMKilled")
    assert ("last termination", "OOMKilled") in {(e.signal, e.value) for e in v.evidence}
    assert v.remedies[0].key == "A" and "lower gpu_memory_utilization" in v.remedies[0].text
    assert not [x for x in run([st] * 5)[-1] if x.kind == "engine-down"]  # the loop says more than "down"


def test_few_restarts_are_no_loop_and_a_recovered_pod_clears():
    assert not [v for v in run([fleet(cluster(pods=(pod(0), looping(restarts=1), pod(2), pod(3))))] * 10)[-1]
                if v.kind == "crash-loop"]
    bad = fleet(cluster(pods=(pod(0), looping(reason="Error"), pod(2), pod(3))))
    healthy = fleet(cluster(pods=(pod(0), replace(pod(1), restarts=5), pod(2), pod(3))))
    out = run([bad] * 5 + [healthy] * 200)
    assert [v.kind for v in out[4] if v.subject == "vllm-1"] == ["crash-loop"]
    assert out[4][0].remedies[-1].key == "R"  # not memory: what changed in its spec
    assert not [v for v in out[-1] if v.kind == "crash-loop"]
