"""Issue 12 end to end through a real Prometheus (Debian package, started here).

1. The advisor over engines read from Prometheus: simulated engines (a port
   each, scraped every second) are the pods of a Deployment with an HPA in the
   simulated cluster (``SimKube``, what ``infertop sim --kube-port`` serves: a
   pod's ip:port is its engine). A burst → a scale-up recommendation (queue
   depth over target); in auto mode the Deployment's replicas change through
   the emulator, audited; after the burst, the scale-down waits out the
   stabilisation window; Prometheus stopped → stale data, the advisor refuses;
   restarted on the same port → it recovers, nothing restarted on our side.
2. 500 engines on one port (``--shared-port --file-sd --lean``) behind
   Prometheus: the TUI reads them and scrolls, filters, groups and sorts.

Needs /usr/bin/prometheus (skipped without it unless INFERTOP_REQUIRE_REAL=1).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from pilot_wait import until as pilot_until

from infertop.analysis.scaling import APPLIED, APPLYING, AUTO, RECOMMEND, RECOMMENDED, REFUSED, STABILISATION
from infertop.config import AdvisorConfig, Config, KubeConfig, PrometheusConfig, SloConfig
from infertop.control.audit import AuditLog
from infertop.control.kube import KubeControl
from infertop.sim import SimCluster
from infertop.sim.kube.cluster import SimKube
from infertop.sim.model import SimRequest
from infertop.sources.kube import KubeSession, read_cluster
from infertop.sources.prometheus.fleet import PromFleetSource
from infertop.state.advisor.core import Advisor
from infertop.control.advisor.scale import apply_scale
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import FRESH, STALE

from prom_run import require_prometheus
from prom_sim_fleet import Prometheus, wait_for

pytestmark = pytest.mark.real_prometheus

NS, DEPLOY = "inference", "vllm"
WORKLOAD = f"Deployment/{NS}/{DEPLOY}"


# ---------------------------------------------------------------- 1. the advisor


class Console:
    """What the app does each tick, without the screen: Prometheus → joiner (+ cluster) → advisor → auto applies."""

    def __init__(self, prom_url: str, kube: SimKube, tmp: Path) -> None:
        self.src = PromFleetSource(PrometheusConfig(url=prom_url, timeout_s=3, interval_s=1.0, window_s=10.0,
                                                    latency_interval_s=1.0, backfill_points=0))
        self.session = KubeSession.connect(str(kube.write_kubeconfig(tmp / "kubeconfig")))
        self.kcfg = KubeConfig(stuck_after_s=0.0, rollout_timeout_s=30.0)
        self.audit = AuditLog(tmp / "audit.jsonl", user="alice")
        self.control = KubeControl(self.session, self.audit, self.kcfg, poll_s=0.05)
        self.cfg = AdvisorConfig(mode=RECOMMEND, target_queue_depth=5.0, target_p99_s=600.0, cooldown_s=2.0,
                                 scale_up_window_s=2.0, scale_down_window_s=6.0, max_input_age_s=4.0)
        self.advisor = Advisor(self.cfg, SloConfig())
        self.joiner = FleetJoiner(self.src, slo=SloConfig(), refresh_s=1.0, window_s=10.0)
        self.joiner.autoscalers = self.advisor
        self.decisions: list[dict] = []  # every record seen, oldest first (with the tick's time)
        self.applied: list = []

    def tick(self) -> dict | None:
        self.src.refresh()
        self.joiner.observe()
        self.joiner.set_cluster(read_cluster(self.session, self.kcfg), source="sim-kube")
        state = self.joiner.build()
        view = next((v for v in state.autoscalers if v["workload"] == WORKLOAD), None)
        if view is not None and view.get("latest"):
            self.decisions.append(view["latest"])
        for change in self.advisor.take_applies():  # auto mode: applied through the scale action
            outcome = apply_scale(self.control, change)
            self.advisor.note_applied(change.workload, time.time(), outcome.result)
            self.applied.append((change, outcome))
        self.state = state
        return view

    def until(self, what: str, cond, timeout_s: float, log: Path):
        """Tick (a bounded loop, a few times per scrape) until ``cond(view)`` holds; that view."""
        def step():
            view = self.tick()
            return view is not None and cond(view) and view
        return wait_for(what, step, timeout_s=timeout_s, log=log)

    def close(self) -> None:
        self.src.close()
        self.session.close()


def replicas(kube: SimKube) -> int:
    return kube.emu.get("deployments", DEPLOY, NS)["spec"]["replicas"]


def running_pods(kube: SimKube) -> int:
    return len([p for p in kube.emu.list("pods", NS, f"app={DEPLOY}")
                if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"])


def burst(sim: SimCluster, engine: int, n: int, max_tokens: int) -> None:
    e = sim.engines[engine]
    with e.lock:
        for _ in range(n):
            e.core.submit(SimRequest(prompt_tokens=50, max_tokens=max_tokens))


@pytest.mark.timeout(240)
def test_burst_scale_up_auto_scale_down_after_the_window_then_prometheus_down_and_back(tmp_path):
    require_prometheus()
    # 4 engines (a port each, 4 GPUs); the Deployment starts with 1 pod; a light steady load
    sim = SimCluster(4, seed=11, load="steady", base_rate=0.3, realtime=True, max_num_seqs=4, dcgm=False,
                     hot_engine=None, throttle_gpu=None, http_metrics=False, process_metrics=False).start()
    kube = SimKube(sim, replicas=1, hpa_max=4, start_delay_s=0.2, termination_delay_s=0.5).start()
    # (the emulator's HPA controller is not started: only infertop's advisor changes the replicas)
    prom = Prometheus(tmp_path, 1.0, static=[f"127.0.0.1:{e.port}" for e in sim.engines])
    console = None
    try:
        kube.emu.wait_until(lambda: running_pods(kube) == 1 and kube.pod_of(0) is not None, timeout=20)
        prom.start()
        wait_for("engine 0 scraped", lambda: len([r for r in prom.query("up") if r["value"][1] == "1"]) >= 1
              and prom.query("vllm:num_requests_waiting"), log=prom.log)
        console = Console(prom.url, kube, tmp_path)
        # before the burst: a decision on full inputs (a P99 once the light load has finished a request)
        first = console.until("a decision on full inputs", lambda v: v["engines"] and v["latest"]["action"] == "none",
                              60, prom.log)
        assert first["latest"]["desired"] == 1 and "queue depth 0.0 < 5" in first["latest"]["reason"]
        assert first["current"] == 1 and first["bounds_from"] == f"HPA {NS}/{DEPLOY}"
        assert {"infertop", "HPA"} <= {a["source"] for a in first["autoscalers"]}, first["autoscalers"]
        assert first["engines"] == [next(e.name for e in console.state.engines
                                         if e.stats.url == f"http://127.0.0.1:{sim.engines[0].port}")]

        # the burst: 40 requests of 200 tokens on the one engine (4 run, 36 wait; ~20 s to drain)
        burst(sim, 0, 40, 200)
        v = console.until("a scale-up recommendation", lambda v: v["latest"]["action"] == RECOMMENDED, 40, prom.log)
        rec = v["latest"]
        assert rec["current"] == 1 and rec["desired"] == 4, rec["reason"]  # clamped to the HPA's max
        # the formula (ceil(1 × depth / 5)) wants more than the HPA allows: the max binds; the queue is why
        assert re.match(r"1 → 4 \(max 4; formula \d+\): queue depth \d+\.\d > 5, ", rec["reason"]), rec["reason"]
        assert rec["rule"] == "max"
        held = [d for d in console.decisions if d["rule"] == STABILISATION and "scale-up window" in d["reason"]]
        assert held, [d["reason"] for d in console.decisions]  # the scale-up window held it first …
        calm = [d["at"] for d in console.decisions if d["action"] == "none" and "wants" not in d["reason"]]
        assert rec["at"] - max(calm) >= 2.0  # … until no calmer wish was left in its 2 s
        assert replicas(kube) == 1 and console.applied == []  # recommend changes nothing

        # auto: applied through the scale action, audited (intent, then outcome)
        assert console.advisor.set_mode(AUTO) is None
        console.until("an auto apply", lambda v: bool(console.applied), 30, prom.log)
        change, outcome = console.applied[0]
        assert outcome.ok and (change.current, change.desired) == (1, 4), outcome.message
        assert replicas(kube) == 4
        entries = [e for e in console.audit.entries() if e["action"] == "kube.scale"]
        assert [e.get("phase") for e in entries] == ["intent", "outcome"] and entries[-1]["result"] == "ok"
        assert entries[-1]["target"] == f"deployment {NS}/{DEPLOY}" and (entries[-1]["old"], entries[-1]["new"]) == (1, 4)
        assert re.match(r"replicas 1 → 4 \(advisor auto: 1 → 4 \(max 4; formula \d+\): queue depth ", entries[-1]["summary"])
        kube.emu.wait_until(lambda: running_pods(kube) == 4, timeout=30)

        # after the burst: scale-down only once the 6 s scale-down window has passed
        v = console.until("the scale-down", lambda v: len(console.applied) == 2, 90, prom.log)
        change, outcome = console.applied[1]
        assert outcome.ok and change.current == 4 and change.desired < 4, (change, outcome.message)
        assert replicas(kube) == change.desired
        # it wanted fewer for the whole window first (held, replicas unchanged), then applied the most
        # it wanted within that window (as an HPA's scale-down stabilisation does)
        held = [d for d in console.decisions if d["current"] == 4 and d["desired"] == 4 and d["action"] == "none"
                and d["rule"] == STABILISATION and "held by the scale-down window 6 s" in d["reason"]]
        down = next(d for d in reversed(console.decisions) if d["action"] in (APPLYING, APPLIED) and d["current"] == 4)
        assert held and down["desired"] == change.desired and down["at"] > held[-1]["at"], down
        # the window counts from the last wish for 4: the decision (a tick) before the first held one
        before = console.decisions[next(i for i, d in enumerate(console.decisions) if d is held[0]) - 1]
        assert before["at"] < held[0]["at"] and down["at"] - before["at"] >= 6.0, (before, down["reason"])
        scale = [e for e in console.audit.entries() if e["action"] == "kube.scale"]
        assert [e.get("phase") for e in scale] == ["intent", "outcome"] * 2 and (scale[-1]["old"], scale[-1]["new"]) == (
            4, change.desired)

        # Prometheus stops: the engines go stale, the advisor refuses to act
        prom.stop()
        v = console.until("a refusal on stale data", lambda v: v["latest"]["action"] == REFUSED, 30, prom.log)
        assert v["latest"]["rule"] == "stale data", v["latest"]
        assert "connection refused" in v["latest"]["reason"]
        assert all(e.freshness.status != FRESH for e in console.state.engines)
        assert STALE in {e.freshness.status for e in console.state.engines}
        n_applied = len(console.applied)
        burst(sim, 0, 40, 200)  # a burst Prometheus cannot see changes nothing
        for _ in range(3):
            assert console.tick()["latest"]["action"] == REFUSED
        assert len(console.applied) == n_applied

        # restarted on the same port: the same console recovers
        prom.start()
        v = console.until("fresh inputs again", lambda v: v["latest"]["action"] != REFUSED, 60, prom.log)
        assert all(e.freshness.status == FRESH for e in console.state.engines
                   if e.name in v["engines"])
        assert [s.ok for s in console.state.sources if s.kind == "prometheus"] == [True]
    finally:
        if console is not None:
            console.close()
        prom.stop()
        kube.stop()
        sim.stop()


# ---------------------------------------------------------------- 2. 500 engines on screen

N = 500
MODELS = [f"model-{c}" for c in "abcde"]  # engine i serves MODELS[i % 5]


@pytest.fixture
def fleet500(tmp_path):
    require_prometheus()
    # what `infertop sim --engines 500 --shared-port 0 --file-sd F --kubernetes-labels --lean` serves;
    # the clock is stepped here (warm-up) and then held, so Prometheus scrapes values that stay put
    with SimCluster(n_engines=N, seed=9, realtime=False, load="steady", base_rate=0.5, shared_port=0,
                    metrics_cache_s=1.0, kubernetes_labels=True, http_metrics=False, process_metrics=False,
                    dcgm=False, models=MODELS, max_num_seqs=8, hot_engine=None, throttle_gpu=None) as sim:
        sim.advance(20, tick=0.5)
        prom = Prometheus(tmp_path, 2.0, file_sd=sim.fleet.file_sd())
        prom.start()
        try:
            wait_for(f"{N} targets up", lambda: len([r for r in prom.query("up") if r["value"][1] == "1"]) == N
                  and len(prom.query("vllm:num_requests_running")) == N, timeout_s=120, log=prom.log)
            yield sim, prom
        finally:
            prom.stop()


@pytest.mark.timeout(240)
async def test_500_engines_from_prometheus_scroll_filter_group_and_sort(fleet500):
    from textual.widgets import Input, OptionList

    from infertop.ui.app import InfertopApp, Settings
    from infertop.ui.screens.sort_picker import SortPicker
    from infertop.state.engine_groups import NO_DEPLOYMENT
    from infertop.ui.widgets.engines_table import GROUP_PREFIX, EnginesTable

    sim, prom = fleet500
    cfg = Config()
    cfg.prometheus = PrometheusConfig(url=prom.url, engines=True, timeout_s=20.0, window_s=30.0, backfill_points=0)
    cfg.gpu.nvml = False
    app = InfertopApp(Settings(config=cfg, prometheus=True), poll=False)
    src = app.collector
    assert isinstance(src, PromFleetSource)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_now()
        await pilot.press("2")
        table = app.query_one("#engines-table", EnginesTable)

        async def until(cond, what: str, timeout_s: float = 60.0) -> None:
            await pilot_until(pilot, cond, what, timeout_s)

        # one key at a time where the next one depends on it: Pilot sends the next key once the process
        # looks idle, which a starved process does before the first key's focus change has run
        await until(lambda: table.row_count == N and app.focused is table, f"{N} rows, the table focused")
        state = app.state
        assert state is not None and len(state.engines) == N and all(e.fresh for e in state.engines)
        stats = {e.name: e.stats for e in state.engines}
        # the names are the pods Prometheus' service discovery gives; every engine's model as served
        assert set(stats) == {e.gpu.pod for e in sim.engines}
        model_of = {e.gpu.pod: e.model for e in sim.engines}
        assert all(s.model == model_of[n] for n, s in stats.items())
        running = {e.gpu.pod: float(e.core.num_running) for e in sim.engines}
        assert {n: s.running for n, s in stats.items()} == running  # the held values, through Prometheus
        assert len(set(running.values())) >= 3  # a sort by Run has something to order
        keys = [row.key.value for row in table.ordered_rows]

        # scroll to the last engine and back
        await pilot.press("ctrl+end")
        await until(lambda: table.scroll_y > 0, "a scroll")
        assert table.cursor_row == N - 1 and table.selected_engine == keys[-1]
        await pilot.press("ctrl+home")
        await until(lambda: table.cursor_row == 0, "the cursor on the first row")
        await pilot.press("pagedown")
        await until(lambda: 0 < table.cursor_row < N - 1, "a page down")

        # sort by Run, largest first; the cursor keeps its engine
        selected = table.selected_engine
        await pilot.press("s")
        await until(lambda: isinstance(app.screen, SortPicker), "the sort picker")
        options = app.screen.query_one(OptionList)
        options.highlighted = options.get_option_index("run")
        await pilot.press("enter")
        await until(lambda: not isinstance(app.screen, SortPicker) and table.sort_key == "run", "sorted by Run")
        order = [row.key.value for row in table.ordered_rows]
        assert [running[k] for k in order] == sorted(running.values(), reverse=True)
        assert table.selected_engine == selected
        order_by_run = order

        # filter by model: a fifth of the fleet
        await pilot.press("slash")
        await until(lambda: isinstance(app.focused, Input), "the filter box focused")
        await pilot.press(*"model-c")
        await until(lambda: table.row_count == N // len(MODELS), "the filter")
        assert all(model_of[row.key.value] == "model-c" for row in table.ordered_rows)
        app.action_clear_filter()
        await until(lambda: table.row_count == N, "all rows again")
        assert app.query_one("#filter", Input).value == ""

        # group: by deployment (none here: no cluster), then by model, with group totals
        await pilot.press("G")
        await until(lambda: table.row_count == N + 1, "one deployment group")
        assert str(table.get_cell(GROUP_PREFIX + NO_DEPLOYMENT, "name")) == f"▾ {NO_DEPLOYMENT} ({N})"
        await pilot.press("G")
        await until(lambda: table.row_count == N + len(MODELS), "model groups")
        order = [row.key.value for row in table.ordered_rows]
        g = order.index(GROUP_PREFIX + "model-b")
        members = order[g + 1:g + 1 + N // len(MODELS)]
        assert all(model_of[k] == "model-b" for k in members)
        assert str(table.get_cell(GROUP_PREFIX + "model-b", "name")) == f"▾ model-b ({N // len(MODELS)})"
        want_run = sum(running[k] for k in members)
        assert str(table.get_cell(GROUP_PREFIX + "model-b", "run")) == f"{want_run:.0f}"
        totals = [float(str(table.get_cell(k, "run"))) for k in order if k.startswith(GROUP_PREFIX)]
        assert totals == sorted(totals, reverse=True)  # still sorted by Run: groups by their totals
        # a second refresh from Prometheus keeps the groups and their rows
        await app.poll_now()
        await pilot.pause()
        assert table.row_count == N + len(MODELS)
        # by node: every engine here answers on 127.0.0.1 (no GPU or pod says otherwise)
        await pilot.press("G")
        await until(lambda: table.row_count == N + 1, "one node group")
        assert str(table.get_cell(GROUP_PREFIX + "127.0.0.1", "name")) == f"▾ 127.0.0.1 ({N})"
        await pilot.press("G")
        await until(lambda: table.row_count == N, "no groups")
        assert [row.key.value for row in table.ordered_rows] == order_by_run
    src.close()
