"""Each simulator scenario, watched over real HTTP, raises its verdict on the right subject in time,
not its look-alikes, and clears after recovery (issue 24 items 2 and 7).

Every run: a healthy fleet of 4 engines (seed 7, bursty load; models llama, llama, qwen, llama),
the scenario on vllm-1 from ``onset`` virtual seconds after the start; every virtual second the
simulator advances, infertop's collectors scrape the engines' /metrics and the dcgm exporter over
loopback HTTP, the fleet state is built and fed to :class:`Triage` (tests/support/sim_fleet_clock.py).
Times are virtual seconds. Onset → verdict and recovery → clear are printed (``-s``) and
collected in :data:`FIGURES`; benchmarks/bench_sim_scenarios.py prints the same table.
"""

from __future__ import annotations

import asyncio

import pytest
from sim_fleet_clock import ScenarioRun, play

from infertop.sim.scenarios import SCENARIOS

FIGURES: dict[str, tuple[float | None, float | None]] = {}
_RUNS: dict[str, ScenarioRun] = {}

# kind → (onset s, watch s after recovery, raised within s of onset, cleared within s of recovery,
#         verdicts that must not be raised on the subject while it is active)
CASES = {
    "queue-bound": (60.0, 120.0, 45.0, 90.0, {"kv-bound", "hung", "engine-down", "gpu-throttled"}),
    # a full KV cache evicts the shared prefixes: the hit rate falls, and kv-bound says why
    "kv-bound": (60.0, 300.0, 150.0, 240.0, {"queue-bound", "hung", "engine-down", "prefix-cache-collapse"}),
    "hung": (60.0, 60.0, 25.0, 15.0, {"engine-down", "crash-loop", "queue-bound", "kv-bound"}),
    "engine-down": (60.0, 60.0, 10.0, 20.0, {"hung", "crash-loop", "gpu-fault"}),
    "crash-loop": (60.0, 800.0, 75.0, 740.0, {"hung", "gpu-fault", "engine-down"}),
    # the engine dies with its GPU: one verdict, the GPU's, which says so (engine-down yields to it)
    "gpu-lost": (60.0, 90.0, 5.0, 70.0, {"crash-loop", "hung", "gpu-throttled", "engine-down"}),
    "gpu-throttled": (60.0, 90.0, 70.0, 75.0, {"queue-bound", "kv-bound", "slower-than-peers"}),
}


def _run(name: str, onset_s: float, after_s: float) -> ScenarioRun:
    if name not in _RUNS:
        _RUNS[name] = asyncio.run(play(name, onset_s=onset_s, after_recovery_s=after_s))
    return _RUNS[name]


def _subject(run: ScenarioRun, kind: str) -> str:
    return run.gpu if kind.startswith("gpu-") else run.engine


@pytest.mark.parametrize("name", list(CASES))
def test_scenario_raises_its_verdict_on_its_subject_in_time_and_clears(name):
    onset, after, within, clear_within, look_alikes = CASES[name]
    run = _run(name, onset, after)
    kind = SCENARIOS[name].verdict
    who = _subject(run, kind)
    assert who, "the subject's GPU is joined to its engine"
    assert (kind, who) not in run.kinds(end_s=run.onset_s), "raised before the onset"
    up = run.raised(kind, who, after_s=run.onset_s)
    assert up is not None, f"{kind} {who} never raised; verdicts: {sorted(run.kinds())}"
    # the verdict's own hold: the fault must still be on (crash-loop: its up phases are part of it)
    active_until = next((tk.t for tk in run.ticks if tk.t > up and not any(
        v.key == (kind, who) for v in tk.verdicts)), run.ticks[-1].t)
    lookalike_on = {k for k, s in run.kinds(up, active_until) if s in (run.engine, run.gpu) and k in look_alikes}
    clear = run.cleared(kind, who)
    FIGURES[name] = (up - run.onset_s, None if clear is None else clear - run.recovery_at_s)
    print(f"\n{name}: {kind} on {who} {up - run.onset_s:.0f} s after onset, "
          f"cleared {'never' if clear is None else f'{clear - run.recovery_at_s:.0f} s'} after recovery")
    assert up - run.onset_s <= within
    assert not lookalike_on, f"look-alikes raised with {kind}: {lookalike_on}"
    assert clear is not None and clear >= run.recovery_at_s, "not cleared after recovery"
    assert clear - run.recovery_at_s <= clear_within


def test_gpu_lost_is_xid_79_on_the_engines_gpu_and_the_engine_down():
    run = _run("gpu-lost", *CASES["gpu-lost"][:2])
    during = [tk for tk in run.ticks if run.onset_s + 5 <= tk.t < run.recovery_at_s]
    gpu = [next(g for g in tk.state.gpus if g.label in run.gpu) for tk in during]
    assert {g.last_xid for g in gpu} == {79}
    assert {next(e for e in tk.state.engines if e.name == run.engine).stats.state for tk in during} == {"down"}
    after = run.ticks[-1]
    assert next(g for g in after.state.gpus if g.label in run.gpu).last_xid in (0, None)
    (v,) = [v for v in during[-1].verdicts if v.subject in (run.engine, run.gpu)]
    assert v.kind == "gpu-fault" and f"engine {run.engine} on it is down with it" in v.explanation
    assert any(e.signal == f"engine {run.engine}" and e.value == "down" for e in v.evidence)


def test_hung_engine_answers_with_frozen_counters_and_an_idle_gpu():
    run = _run("hung", *CASES["hung"][:2])
    during = [tk for tk in run.ticks if run.onset_s + 3 <= tk.t < run.recovery_at_s]
    stats = [next(e for e in tk.state.engines if e.name == run.engine).stats for tk in during]
    assert {s.state for s in stats} == {"up"}
    assert len({s.tokens_total for s in stats}) == 1
    assert len({(s.running, s.waiting) for s in stats}) == 1 and stats[0].running + stats[0].waiting > 0
    assert max(g.util_pct for tk in during[-10:] for g in tk.state.gpus if g.engine == run.engine) < 5


def test_gpu_throttled_slows_its_engines_steps_by_about_8_percent():
    """The throttled GPU's clock is 1830 of 1980 MHz: the engine's decode steps take ~8 % longer."""
    from infertop.sim import SimCluster

    with SimCluster(2, seed=3, load="steady", realtime=False, dcgm=False, hot_engine=None, throttle_gpu=None) as c:
        c.advance(60.0)
        before = [e.gpu.speed for e in c.engines]
        c.play("gpu-throttled", engine=1, onset_s=c.now)
        c.advance(120.0)
        assert before == [1.0, 1.0]
        assert c.engines[1].gpu.throttle == 1 and c.engines[0].gpu.throttle == 0
        assert 1.07 < 1.0 / c.engines[1].gpu.speed < 1.09
        c.play(None)
        c.advance(120.0)
        assert c.engines[1].gpu.throttle == 0


# --------------------------------------------------------------------------------------------
# prefix-collapse and long-prompts: the metrics show the fault; the verdicts

PROMPT_RUN = (300.0, 240.0)  # onset after 5 minutes of healthy load (the baselines' history); watched 4 min after


def _spans(run: ScenarioRun) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """(healthy before, full strength, healthy after) spans of virtual time."""
    sc = SCENARIOS[run.name]
    full = (run.onset_s + sc.ramp_s + 20.0, run.recovery_at_s)
    return (run.onset_s - 120.0, run.onset_s), full, (run.recovery_at_s + sc.recovery_s + 30.0, run.ticks[-1].t)


def _over(run: ScenarioRun, span: tuple[float, float]) -> tuple[float, float]:
    """(prefix hit rate %, prompt tokens per finished request) of the subject from its counters over ``span``."""
    ticks = [tk for tk in run.ticks if span[0] <= tk.t <= span[1]]
    a, b = (next(e for e in tk.state.engines if e.name == run.engine).stats for tk in (ticks[0], ticks[-1]))
    hit = 100.0 * (b.prefix_hits_total - a.prefix_hits_total) / (b.prefix_queries_total - a.prefix_queries_total)
    return hit, (b.prompt_tokens_total - a.prompt_tokens_total) / (b.requests_total - a.requests_total)


def test_prefix_collapse_scenario_drops_the_hit_rate_with_prompts_the_same_size():
    run = _run("prefix-collapse", *PROMPT_RUN)
    (hit0, prompt0), (hit1, prompt1), (hit2, prompt2) = (_over(run, s) for s in _spans(run))
    print(f"\nprefix-collapse: hit rate {hit0:.1f} % → {hit1:.1f} % → {hit2:.1f} %, "
          f"prompt tokens/request {prompt0:.0f} → {prompt1:.0f} → {prompt2:.0f}")
    assert hit0 >= 15.0 and hit1 <= 0.1 * hit0 and hit2 >= 0.6 * hit0
    assert 0.75 <= prompt1 / prompt0 <= 1.33


def test_long_prompts_scenario_grows_the_prompts_per_request():
    run = _run("long-prompts", *PROMPT_RUN)
    (hit0, prompt0), (hit1, prompt1), (hit2, prompt2) = (_over(run, s) for s in _spans(run))
    print(f"\nlong-prompts: prompt tokens/request {prompt0:.0f} → {prompt1:.0f} → {prompt2:.0f}, "
          f"hit rate {hit0:.1f} % → {hit1:.1f} %")
    assert prompt1 >= 4.0 * prompt0  # x20, capped to fit max_model_len 8192
    assert prompt2 <= 0.5 * prompt1  # the backlog of long prompts is still draining, and shrinks


# name → (raised within s of onset, cleared within s of recovery). A long-prompt flood leaves a backlog: the
# engine's KV cache full of 8k-token prompts, requests queued for a minute and more, TTFT p50 over 10 s for
# ~140 s after the last long prompt arrived; it stays prefill-bound by long prompts until that backlog is
# prefilled, and its verdict clears 30 s after (measured: 185 s after recovery began; 111-202 s on seeds 3 and 11).
PROMPT_SIDE = {"prefix-collapse": (60.0, 60.0), "long-prompts": (60.0, 240.0)}


@pytest.mark.parametrize("name", list(PROMPT_SIDE))
def test_prompt_side_scenarios_raise_their_verdict_in_time_and_clear(name):
    within, clear_within = PROMPT_SIDE[name]
    run = _run(name, *PROMPT_RUN)
    kind = SCENARIOS[name].verdict
    assert (kind, run.engine) not in run.kinds(end_s=run.onset_s)
    up = run.raised(kind, run.engine, after_s=run.onset_s)
    assert up is not None, f"{kind} {run.engine} never raised; verdicts: {sorted(run.kinds())}"
    clear = run.cleared(kind, run.engine)
    FIGURES[name] = (up - run.onset_s, None if clear is None else clear - run.recovery_at_s)
    print(f"\n{name}: {kind} on {run.engine} {up - run.onset_s:.0f} s after onset, "
          f"cleared {'never' if clear is None else f'{clear - run.recovery_at_s:.0f} s'} after recovery")
    assert up - run.onset_s <= within
    other = "long-prompts" if name == "prefix-collapse" else "prefix-cache-collapse"
    lookalikes = {(other, run.engine), ("slower-than-peers", run.engine)}
    assert not lookalikes & run.kinds(up, run.ticks[-1].t + 1), "the look-alike, or slower-than-peers"
    assert clear is not None and run.recovery_at_s <= clear <= run.recovery_at_s + clear_within


def teardown_module(module) -> None:
    if FIGURES:
        print("\nscenario          onset→verdict  recovery→clear (virtual s)")
        for name, (up, clear) in FIGURES.items():
            print(f"{name:<17} {up:>13.0f}  {'never' if clear is None else f'{clear:.0f}':>14}")
