"""A Kubernetes follow outlives a context switch (Pilot, API emulator).

The follow of a scale keeps the session (and client) of the context it was
started in until it ends: switching the context meanwhile neither fails it
nor audits it as failed; it ends ``ok`` when its pods become ready, or
``aborted`` when the operator aborts it, and its audit names the context it
ran in. The old session's client is closed once no follow needs it. Also: a pod drain on
a pod whose metrics cannot be read warns before confirmation and counts down.
"""

from __future__ import annotations

import json

from pilot_wait import until
from ports import free_port
from kube_ui import NS, TOKEN, audit, confirm, connected, make_app, ready, set_input

from infertop.ui.screens.actions_list import ActionsListScreen
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.kube_dialogs import ChoiceDialog, FormDialog

import pytest


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.2)


def two_contexts(emu, tmp_path):
    emu.add_namespace("team-b")
    emu.add_deployment("team-b", "mistral", replicas=1)
    doc = emu.kubeconfig(context="lab", namespace=NS)
    doc["contexts"].append({"name": "lab-b", "context": {"cluster": "lab", "user": "tester", "namespace": "team-b"}})
    path = tmp_path / "kc"
    path.write_text(json.dumps(doc))
    return path


async def start_stuck_scale(pilot, app, pane) -> ConfirmScreen:
    assert pane.select("workloads", "Deployment/default/slow")
    await pilot.press("S")
    form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
    await set_input(pilot, form, "replicas", "2")
    await pilot.press("enter")
    screen = await confirm(pilot, app, "replicas 1 → 2", press=False)
    await pilot.press("y")
    await until(pilot, lambda: "ImagePullBackOff" in screen.progress_text, what=screen.progress_text)
    return screen


async def switch_to_lab_b(pilot, app, screen: ConfirmScreen):
    """Hide the running scale and switch the context; returns the scale's run (what the list shows)."""
    (run,) = app.actions_ctl.board.in_flight()
    await pilot.press("escape")  # hide the running scale; it goes on
    await until(pilot, lambda: len(app.screen_stack) == 1)
    await pilot.press("K")
    dialog = await until(pilot, lambda: isinstance(app.screen, ChoiceDialog) and app.screen)
    assert [oid for oid, _ in dialog.options] == ["lab", "lab-b"]
    await pilot.press("down", "enter")
    await until(pilot, lambda: app.kube_ctl.connection.session is not None and app.kube_ctl.connection.session.context == "lab-b",
                what="context switch")
    await pilot.pause(0.3)  # ~6 follow polls at 0.05 s on the old context's session
    assert run.in_flight, run.status_text()
    return run


async def test_a_follow_survives_a_context_switch_and_ends_ok(emu, tmp_path):
    emu.fail_image("registry.local/slow*")
    emu.add_deployment(NS, "slow", replicas=1, image="registry.local/slow:1")
    app = make_app(tmp_path, two_contexts(emu, tmp_path), stuck_after_s=600.0)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        first = app.kube_ctl.connection.session
        screen = await start_stuck_scale(pilot, app, pane)
        run = await switch_to_lab_b(pilot, app, screen)
        assert app.kube_ctl.connection.session is not first
        assert app.kube_ctl.connection.retired == [first]  # kept open for the follow
        assert app.kube_ctl.connection.running_text.startswith("Scale: deployment default/slow (context lab): ")
        emu.clear_failures()  # the pods start: the scale completes, followed on the old context
        await until(pilot, lambda: run.outcome is not None, what=run.status_text())
        assert run.outcome.result == "ok", run.outcome
        assert ready(emu, "slow", 2)
        await until(pilot, lambda: app.kube_ctl.connection.retired == [], what="the old session is closed once its follow ended")
        assert len(first.api_client.rest_client.pool_manager.pools) == 0  # closed: no pooled connection left
    (outcome,) = [e for e in audit(tmp_path) if e.get("action") == "kube.scale"]
    assert (outcome["result"], outcome["context"]) == ("ok", "lab"), outcome


async def test_a_follow_aborted_after_a_context_switch_is_audited_aborted(emu, tmp_path):
    emu.fail_image("registry.local/slow*")
    emu.add_deployment(NS, "slow", replicas=1, image="registry.local/slow:1")
    app = make_app(tmp_path, two_contexts(emu, tmp_path), stuck_after_s=600.0)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        screen = await start_stuck_scale(pilot, app, pane)
        await switch_to_lab_b(pilot, app, screen)
        await pilot.press("a")  # the list of running actions: the scale on context lab is there
        listing = await until(pilot, lambda: isinstance(app.screen, ActionsListScreen) and app.screen)
        assert [title for _, title, _ in listing.runs] == ["Scale: deployment default/slow (context lab)"]
        await pilot.press("enter")
        reopened = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen)
        assert reopened.state == "running"
        await pilot.press("a")
        await until(pilot, lambda: reopened.state == "done", what=reopened.progress_text)
        assert reopened.result == "aborted", reopened.result_text
        assert "the change itself stays applied" in reopened.result_text
    (outcome,) = [e for e in audit(tmp_path) if e.get("action") == "kube.scale"]
    assert (outcome["result"], outcome["context"]) == ("aborted", "lab"), outcome


async def test_a_pod_drain_on_unreadable_metrics_warns_before_confirmation_and_counts_down(emu, tmp_path):
    """Issue 9: the pod drain said so only after confirmation, then waited 600 s without a countdown."""
    from kube_ui import rows

    dead_port = free_port()  # nothing listens here: the pod's /metrics cannot be read
    emu.set_pod_endpoint("blind-*", "127.0.0.1", dead_port)
    emu.add_deployment(NS, "blind", replicas=1)
    emu.add_service(NS, "blind", {"app": "blind"})
    emu.wait_until(lambda: ready(emu, "blind", 1))
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), drain_timeout_s=600.0)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await connected(pilot, app)
        await pilot.press("v")  # pods
        (pod,) = list(rows(pane, "pods"))
        assert pane.select("pods", pod)
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, ChoiceDialog))
        await pilot.press("enter")
        screen = await confirm(pilot, app, press=False)  # the check ran before confirmation…
        assert any(n.startswith("! the pod's in-flight requests cannot be read now") for n in screen.notes), \
            screen.notes
        await pilot.press("y")
        await until(pilot, lambda: "cannot read the engine's in-flight requests" in screen.progress_text,
                    what=screen.progress_text)
        assert "left" in screen.progress_text  # …and the wait counts down to drain_timeout_s
        await pilot.press("a")
        await until(pilot, lambda: screen.state == "done", what=screen.progress_text)
        assert screen.result == "aborted" and "labels restored" in screen.result_text
    assert emu.get("pods", pod.split("/")[1], NS)["metadata"]["labels"].get("app") == "blind"
