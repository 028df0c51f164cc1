"""The Queue pane and its actions through the keyboard (Pilot), against a loopback
stand-in of the gateway (its /metrics and admin API) and the Kubernetes API
emulator (InferenceObjectives). Waits are bounded polls of app state."""

from __future__ import annotations

import json

import pytest

from infertop.config import Config, KubeConfig, QueueGatewayConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.kube_dialogs import ChoiceDialog, FormDialog
from infertop.ui.widgets.queue import QueuePane
from queue_gateway_fake import TOKEN, FakeGateway
from overview_view import tile
from pilot_wait import until

NS = "default"
KUBE_TOKEN = "queue-ui-token"


def make_app(tmp_path, gateway: FakeGateway | None = None, *, kubeconfig=None, admin: bool = True,
             read_only: bool = False) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"), read_only=read_only)
    if gateway is not None:
        cfg.queues.gateways.append(QueueGatewayConfig(url=gateway.url, name="gw",
                                                      admin_url=gateway.url if admin else None,
                                                      token_env="GW_TOKEN" if admin else None))
    if kubeconfig is not None:
        cfg.kube = KubeConfig(kubeconfig=str(kubeconfig), refresh_s=0.3)
    return InfertopApp(Settings(config=cfg, endpoints=[], read_only=read_only, state_dir=str(tmp_path / "state")),
                       poll=False)


def audit(tmp_path) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def cell(table, row: int, col: str) -> str:
    return table.get_row_at(row)[[k for k, _ in table.cols].index(col)].plain


async def dry_run(pilot, app) -> ConfirmScreen:
    return await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is not None
                       and app.screen, message="dry run")


@pytest.fixture
def gateway(monkeypatch):
    monkeypatch.setenv("GW_TOKEN", TOKEN)
    with FakeGateway() as gw:
        yield gw


async def test_the_queue_pane_reflects_a_burst_and_goes_stale(gateway, tmp_path):
    app = make_app(tmp_path, gateway)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        await app.poll_now()
        pane = app.query_one(QueuePane)
        classes = pane.classes_table
        assert [cell(classes, i, "class") for i in range(3)] == ["realtime", "batch", "background"]
        assert cell(classes, 0, "depth") == "0"
        gateway.burst("realtime", 25, oldest_s=1.5)
        gateway.engines["a"].in_flight = 8
        await app.poll_now()
        await until(pilot, lambda: cell(classes, 0, "depth") == "25" and cell(classes, 0, "oldest") == "1.50s", message='cell(classes, 0, "depth") == "25" and cell(classes, 0, "o…')
        assert cell(classes, 0, "depth") == "25" and cell(classes, 0, "oldest") == "1.50s"
        assert cell(classes, 0, "p99") == "— / 1.00s"  # no request left the queue yet: no p99, never 0
        engines = pane.engines_table
        assert (cell(engines, 0, "flight"), cell(engines, 0, "sat"), cell(engines, 0, "state")) == (
            "8/8", "100%", "serving")
        header = pane.query_one("#queue-header").render().plain
        assert "gateway gw" in header and "queued 25" in header and "oldest 1.50s" in header
        # the burst drains: dispatches show as shares and waits against the budget
        gateway.dispatch("realtime", "a", 25, wait_s=1.8)
        await app.poll_now()
        await until(pilot, lambda: cell(classes, 0, "share") == "100%" and cell(classes, 0, "depth") == "0", message='cell(classes, 0, "share") == "100%" and cell(classes, 0, …')
        assert cell(classes, 0, "share") == "100%" and cell(classes, 0, "depth") == "0"
        # an empty queue's oldest wait reads 0, as in its table, not "0µs"
        empty = pane.query_one("#queue-header").render().plain
        assert "queued 0 · oldest 0" in empty and "oldest 0µs" not in empty, empty
        p99 = classes.get_row_at(0)[[k for k, _ in classes.cols].index("p99")]
        assert p99.plain.endswith(" / 1.00s") and "red" in str(p99.style)  # over its 1 s budget
        # the Overview carries the total queued and the oldest wait
        gateway.burst("batch", 7, oldest_s=12.0)
        await app.poll_now()
        await pilot.press("1")
        await until(pilot, lambda: tile(app, "queued").startswith("7"), message='tile(app, "queued").startswith("7")')
        assert tile(app, "queued").startswith("7")
        assert tile(app, "queue_oldest") == "12.0s"
        # the gateway stops answering: the last values stay, dimmed, with why
        gateway.stop()
        await pilot.press("6")
        await app.poll_now()
        await until(pilot, lambda: "stale" in pane.query_one("#queue-header").render().plain, message="the header says stale")
        header = pane.query_one("#queue-header").render().plain
        assert "stale" in header and "connection refused" in header
        assert cell(classes, 1, "depth") == "7" and "dim" in str(classes.get_row_at(1)[3].style)
        assert any(s.kind == "gateway" and not s.ok for s in app.state.sources)
        assert "✗ gateway gw: connection refused" in app.query_one("#statusbar").render().plain


async def test_at_80_columns_the_classes_scroll_right_with_source_and_class_pinned(gateway, tmp_path):
    app = make_app(tmp_path, gateway)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("6")
        await app.poll_now()
        classes = app.query_one(QueuePane).classes_table
        await until(pilot, lambda: classes.row_count == 3 and classes.has_focus, message="the classes, focused")
        await until(pilot, lambda: classes.virtual_size.width > classes.size.width, message='classes.virtual_size.width > classes.size.width')
        assert classes.virtual_size.width > classes.size.width  # more columns than fit
        assert classes.show_horizontal_scrollbar  # … and the table says so
        first = classes.render_line(1).text  # the header row under no scroll
        assert "Share" not in first
        for _ in range(40):  # → until the last column is in view
            if classes.scroll_x >= classes.max_scroll_x > 0:
                break
            await pilot.press("right")
            await pilot.pause()  # kept: inside a loop that tests the scroll each turn
        assert classes.scroll_x == classes.max_scroll_x > 0
        header = classes.render_line(0).text
        assert header.split()[:2] == ["Source", "Class"]  # pinned
        assert "Share" in header  # the last column came into view


async def test_editing_a_weight_goes_through_the_pipeline_and_a_401_is_a_clear_refusal(gateway, tmp_path):
    app = make_app(tmp_path, gateway)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        await app.poll_now()
        pane = app.query_one(QueuePane)
        await until(pilot, lambda: pane.classes_table.row_count == 3, message="the classes listed")
        pane.classes_table.move_cursor(row=1)  # batch
        await until(pilot, lambda: pane.selected_class == ("gw", "batch"), message='pane.selected_class == ("gw", "batch")')
        assert pane.selected_class == ("gw", "batch")
        await pilot.press("w")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        assert form.query_one("#field-weight").value == "2" and form.query_one("#field-max_wait_s").value == "30"
        form.query_one("#field-weight").value = "6"
        form.submit()
        screen = await dry_run(pilot, app)
        assert screen.dry_run_ok, screen.dry_run_text
        assert screen.change == "weight 2 → 6"
        assert "dry run" in screen.dry_run_text
        assert gateway.classes["batch"].weight == 2 and ("PATCH", "/admin/classes/batch?dry_run=1") in gateway.requests
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done", message="weight change done")
        assert screen.result == "ok", screen.result_text
        assert gateway.classes["batch"].weight == 6 and gateway.changes == [("class", "batch", {"weight": 6.0})]
        entries = [e for e in audit(tmp_path) if e.get("action") == "gateway.class"]
        assert [e["phase"] for e in entries] == ["intent", "outcome"] and entries[1]["result"] == "ok"
        assert entries[0]["old"] == {"weight": 2} and entries[0]["new"] == {"weight": 6.0}
        assert TOKEN not in (tmp_path / "audit.jsonl").read_text()
        await pilot.press("escape")
        await app.poll_now()
        await until(pilot, lambda: cell(pane.classes_table, 1, "weight") == "6", message='cell(pane.classes_table, 1, "weight") == "6"')
        assert cell(pane.classes_table, 1, "weight") == "6"
        # the gateway no longer takes our token: a clear refusal, nothing sent
        gateway.token = "rotated"
        await pilot.press("w")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        form.query_one("#field-weight").value = "3"
        form.submit()
        screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.state == "done"
                             and app.screen)
        assert screen.result_text == ("gateway gw refused the admin token (401): check token_env / token_file "
                                      "— nothing was changed")
        assert gateway.classes["batch"].weight == 6 and len(gateway.changes) == 1


async def test_draining_an_engine_follows_in_flight_to_zero_then_undrains(gateway, tmp_path):
    gateway.engines["b"].in_flight = 3
    app = make_app(tmp_path, gateway)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        await app.poll_now()
        pane = app.query_one(QueuePane)
        await until(pilot, lambda: pane.engines_table.row_count >= 2, message="the engines listed")
        await pilot.press("f")  # to the engines table
        assert pane.engines_table.has_focus
        pane.engines_table.move_cursor(row=1)
        await until(pilot, lambda: pane.selected_engine == ("gw", "b"), message="engine b selected")
        await pilot.press("d")
        screen = await dry_run(pilot, app)
        assert screen.change == "drain b: in flight 3 → 0" and screen.dry_run_ok
        assert gateway.engines["b"].draining is False
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done", message="drain followed to 0")
        assert screen.result == "ok" and "0 in flight" in screen.result_text
        assert gateway.engines["b"].draining and gateway.engines["b"].in_flight == 0
        await pilot.press("escape")
        await app.poll_now()
        await until(pilot, lambda: cell(pane.engines_table, 1, "state") == "drained", message='cell(pane.engines_table, 1, "state") == "drained"')
        assert cell(pane.engines_table, 1, "state") == "drained"
        await pilot.press("d")  # the same key undrains a drained engine
        screen = await dry_run(pilot, app)
        assert screen.change == "undrain b: takes requests again"
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done")
        assert screen.result == "ok" and gateway.engines["b"].draining is False
        actions = [(e["action"], e["phase"]) for e in audit(tmp_path)]
        assert actions == [("gateway.drain", "intent"), ("gateway.drain", "outcome"),
                           ("gateway.undrain", "intent"), ("gateway.undrain", "outcome")]


async def test_without_admin_access_or_read_only_the_keys_say_why(gateway, tmp_path):
    app = make_app(tmp_path, gateway, admin=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        await app.poll_now()
        await until(pilot, lambda: app.query_one(QueuePane).classes_table.row_count == 3, message="the gateway read and shown")
        assert app.check_action("queue_edit", ()) is False
        why = app.queue_ctl.denied_reason("queue_edit")
        assert why == "gateway gw: no admin_url and token configured (queues.gateways[].admin_url, token_env)"
        await pilot.press("w")
        await pilot.pause()  # nothing to wait for: no dialog may open
        assert not isinstance(app.screen, (FormDialog, ConfirmScreen))
        assert app.check_action("queue_objective", ()) is False  # no Kubernetes: absent
    app = make_app(tmp_path, gateway, read_only=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        await app.poll_now()
        for action in ("queue_edit", "queue_drain", "queue_objective"):
            assert app.check_action(action, ()) is False, action  # not offered
        footer = {b.binding.key for b in app.screen.active_bindings.values()
                  if b.binding.show and app.check_action(b.binding.action, ()) is not False}
        assert not footer & {"w", "d", "i"}, footer
        await pilot.press("w")  # pressed anyway: it says why, and opens nothing
        await until(pilot, lambda: any("read-only mode" in str(n.message) for n in app._notifications),
                    message="the read-only notice")
        assert not isinstance(app.screen, (FormDialog, ConfirmScreen))
        assert any("read-only mode" in str(n.message) for n in app._notifications), list(app._notifications)
        app.clear_notifications()
        await pilot.press("S")  # no Kubernetes here either: read-only is still the first reason given
        await until(pilot, lambda: list(app._notifications), message="a notice for S")
        said = [str(n.message) for n in app._notifications]
        assert said and all("read-only mode" in m for m in said), said


@pytest.mark.parametrize("installed,permitted", [(True, True), (False, True), (True, False)])
async def test_inference_objective_priority_against_the_emulator(kube_emulator, tmp_path, installed, permitted):
    emu = kube_emulator(KUBE_TOKEN, reconcile_interval=0.2)
    if not permitted:
        emu.set_rules([(["get", "list", "watch"], "*", "*")])
    if installed:
        emu.install("InferenceObjective")
        emu.create({"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferenceObjective",
                    "metadata": {"name": "interactive", "namespace": NS},
                    "spec": {"priority": 10, "poolRef": {"name": "pool"}}})
    app = make_app(tmp_path, kubeconfig=emu.write_kubeconfig(tmp_path / "kc", token=KUBE_TOKEN))
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.session is not None, message="kube connected")
        await pilot.press("6")
        app.tick()
        await until(pilot, lambda: app.queue_ctl.objective_api is not None or app.queue_ctl.objective_why != "Kubernetes is not connected",
                    message="InferenceObjectives probed")
        if not (installed and permitted):
            assert app.queue_ctl.objective_api is None
            assert app.queue_ctl.objective_why == ("the InferenceObjective resource type is not installed on this cluster"
                                         if not installed else
                                         "not permitted to patch InferenceObjectives in namespace default")
            assert app.check_action("queue_objective", ()) is False
            await pilot.press("i")
            await pilot.pause()  # nothing to wait for: no dialog may open
            assert not isinstance(app.screen, (ChoiceDialog, FormDialog, ConfirmScreen))
            return
        assert app.check_action("queue_objective", ()) is True
        assert "i InferenceObjective priority" in app.query_one(QueuePane).key_hint
        await pilot.press("i")
        choice = await until(pilot, lambda: isinstance(app.screen, ChoiceDialog) and app.screen)
        assert [oid for oid, _ in choice.options] == ["interactive"]
        await pilot.press("enter")
        form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen)
        assert form.query_one("#field-priority").value == "10"
        form.query_one("#field-priority").value = "100"
        form.submit()
        screen = await dry_run(pilot, app)
        assert screen.dry_run_ok and screen.change == "priority 10 → 100"
        assert emu.get("InferenceObjective", "interactive", NS)["spec"]["priority"] == 10
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done")
        assert screen.result == "ok", screen.result_text
        assert emu.get("InferenceObjective", "interactive", NS)["spec"]["priority"] == 100
        entries = [e for e in audit(tmp_path) if e.get("action") == "kube.objective_priority"]
        assert [e["phase"] for e in entries] == ["intent", "outcome"]
