"""The Autoscaler pane and its keys (Pilot), against the Kubernetes API emulator and a simulated engine.

The app's ticks are driven by the test (``poll=False``) on a fake wall clock
(``Settings.wall_clock``), so the advisor's windows pass without sleeping;
waits are bounded polls of app state.
"""

from __future__ import annotations

import pytest
from advisor_ui import NS, TOKEN, W, Clock, audit, burst, make_app, ready, row, setup, text, tick, until

from infertop.sim import SimCluster
from infertop.ui.app import Settings
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.kube_dialogs import ChoiceDialog, FormDialog, ReviewDialog


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.2)


@pytest.fixture
def sim():
    s = SimCluster(1, seed=5, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    yield s
    s.stop()


async def test_recommendation_shown_and_applied_with_confirmation(emu, sim, tmp_path):
    emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=4, current_replicas=1, desired_replicas=1)
    emu.wait_until(lambda: ready(emu, 1))
    clock = Clock()
    app = make_app(tmp_path, emu, sim, clock)
    async with app.run_test(size=(140, 45)) as pilot:
        pane = await setup(emu, sim, pilot, app)
        await tick(pilot, app, clock, 0.0)
        burst(sim)
        await tick(pilot, app, clock, 1.0)
        assert row(pane, W)[1:6] == ["1→1", "1→1", "1-4 hpa", "stabilisation", "1 s"]
        await tick(pilot, app, clock, 2.0)
        cells = row(pane, W)
        assert cells[:5] == ["default/vllm", "1→4", "1→1", "1-4 hpa", "recommended"]
        assert cells[6].startswith("1 → 4: queue depth 16.0 > 5, ")
        detail = text(pane.query_one("#as-detail"))
        assert "infertop  advisor" in detail and "HPA       default/vllm" in detail
        assert "queue depth from: vLLM waiting of its engines (1)" in detail  # no gateway, no Prometheus
        assert "decisions, newest first:" in detail and "recommended 1 → 4: queue depth 16.0 > 5" in detail
        header = text(pane.query_one("#as-header"))
        assert header.startswith("Advisor · mode recommend · targets: queue depth 5, ttft p99 600000 ms")
        assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 1  # recommend changes nothing

        await pilot.press("p")
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                             is not None and app.screen, message="dry run")
        assert screen.dry_run_ok and screen.change == "replicas 1 → 4"
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done", message="scaled")
        assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 4
        (outcome,) = [e for e in audit(tmp_path) if e.get("phase") == "outcome"]
        assert outcome["result"] == "ok" and outcome["summary"].startswith(
            "replicas 1 → 4 (advisor, confirmed: 1 → 4: queue depth 16.0 > 5")
        assert app.advisor.outcomes[W].startswith("ok: ")


async def confirm(pilot, app) -> None:
    """The one confirmation screen: its check, y, the end; then back to the pane."""
    screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                         is not None and app.screen, message="the review")
    assert screen.dry_run_ok, screen.dry_run_text
    await pilot.press("y")
    await until(pilot, lambda: screen.state == "done", message="applied")
    await pilot.press("escape")


async def test_mode_auto_applies_kill_switch_stops_it_and_targets_change(emu, sim, tmp_path):
    emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
    emu.add_deployment(NS, "vllm", replicas=1)
    emu.wait_until(lambda: ready(emu, 1))
    clock = Clock()
    app = make_app(tmp_path, emu, sim, clock)
    async with app.run_test(size=(140, 45)) as pilot:
        pane = await setup(emu, sim, pilot, app)
        await tick(pilot, app, clock, 0.0)
        # the kill switch first: in auto, decisions are then only recommended
        await pilot.press("X")
        assert app.advisor.paused
        await pilot.press("o")
        dialog = await until(pilot, lambda: isinstance(app.screen, ChoiceDialog) and app.screen)
        assert [oid for oid, _ in dialog.options] == ["off", "recommend", "auto"]
        dialog.query_one("#choices").highlighted = 2
        await pilot.press("enter")
        await confirm(pilot, app)  # auto is a standing grant: reviewed and confirmed like any action
        await until(pilot, lambda: app.advisor.mode == "auto", message="mode auto")
        burst(sim)
        await tick(pilot, app, clock, 1.0)
        await tick(pilot, app, clock, 2.0)
        assert "KILL SWITCH ON" in text(pane.query_one("#as-header"))
        assert row(pane, W)[1] == "1→4" and row(pane, W)[6].endswith("(auto paused: kill switch)")
        assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 1
        await pilot.press("X")
        await confirm(pilot, app)  # off lets auto apply again: reviewed; on (above) acts at once
        await until(pilot, lambda: not app.advisor.paused, message="kill switch off")
        await tick(pilot, app, clock, 1.0)
        await until(pilot, lambda: emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 4, message="auto")
        await until(pilot, lambda: W in app.advisor.outcomes, message="apply outcome")
        outcomes = [e for e in audit(tmp_path) if e.get("phase") == "outcome"]
        assert [(e["action"], e["result"]) for e in outcomes] == [
            ("advisor.kill_switch", "ok"), ("advisor.mode", "ok"), ("advisor.kill_switch", "ok"), ("kube.scale", "ok")]
        assert [e["summary"] for e in outcomes[:3]] == ["kill switch on", "mode recommend → auto", "kill switch off"]
        assert outcomes[3]["summary"].startswith("replicas 1 → 4 (advisor auto: 1 → 4: queue depth 16.0 > 5")
        assert any("advisor auto: deployment default/vllm 1 → 4: ok" in line for line in app.log_lines)

        await pilot.press("T")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        form.query_one("#field-queue").value = "abc"
        form.submit()
        await until(pilot, lambda: "queue depth target must be a number" in text(form.query_one("#form-error")),
                    message="the form's refusal")
        assert isinstance(app.screen, FormDialog)  # refused: not a number, nothing changed
        form.query_one("#field-queue").value = "8"
        form.query_one("#field-p99").value = "1500"
        form.query_one("#field-min").value = "3"
        form.query_one("#field-max").value = "2"
        form.submit()
        await until(pilot, lambda: text(form.query_one("#form-error")) == "min must not exceed max", message="the form's refusal")
        assert isinstance(app.screen, FormDialog)  # min above max: refused
        form.query_one("#field-min").value = "2"
        form.query_one("#field-max").value = "6"
        form.submit()
        await until(pilot, lambda: isinstance(app.screen, ReviewDialog), message="the review")
        await pilot.press("y")  # the review: y applies
        await until(pilot, lambda: app.advisor.policy.policy.target_queue_depth == 8.0, message="targets")
        p = app.advisor.policy.policy
        assert (p.target_p99_s, p.min_replicas, p.max_replicas) == (1.5, 2, 6)
        targets = [e for e in audit(tmp_path) if e.get("phase") == "outcome" and e["action"] == "advisor.targets"]
        assert [e["result"] for e in targets] == ["ok"] and "queue depth target 5 → 8" in targets[0]["summary"]
        assert row(pane, W)[3] == "1-10"  # shown from the next tick
        await tick(pilot, app, clock, 1.0)
        assert row(pane, W)[3] == "2-6"


async def test_no_auto_and_read_only_keep_auto_off(emu, sim, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    clock = Clock()
    app = make_app(tmp_path, emu, sim, clock, mode="auto", no_auto=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await setup(emu, sim, pilot, app)
        assert app.advisor.mode == "recommend"
        assert any("auto mode is off (--no-auto)" in line for line in app.log_lines)
        await pilot.press("o")
        dialog = await until(pilot, lambda: isinstance(app.screen, ChoiceDialog) and app.screen)
        assert [oid for oid, _ in dialog.options] == ["off", "recommend"]
        await pilot.press("escape")
    app = make_app(tmp_path, emu, sim, clock, mode="auto", read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await setup(emu, sim, pilot, app)
        assert app.advisor.mode == "recommend"
        for action in ("advisor_apply", "advisor_targets", "advisor_kill"):  # hidden when read-only
            assert app.check_action(action, ()) is False, action
