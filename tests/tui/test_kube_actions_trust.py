"""Kubernetes and advisor actions that must not lie (issue 27): an outcome the console
cannot know is "unknown", an apply that never happened is never "applied", a replica
count an autoscaler owns is said so before it is changed.

End to end against the API emulator through the real client (loopback only).
"""

from __future__ import annotations

import threading
import time

import pytest
from pilot_wait import until

from infertop.config import KubeConfig
from infertop.control.audit import AuditLog
from infertop.control.kube import KubeControl, Outcome, Progress
from infertop.sources.kube import KubeSession

TOKEN = "kube-trust-token"
NS = "default"


def poll(predicate, timeout_s: float = 20.0, what: str = ""):
    """Wait for ``predicate()`` to be true (bounded); its value."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or predicate}")


class Harness:
    def __init__(self, emu, tmp_path, **cfg) -> None:
        self.emu = emu
        path = emu.write_kubeconfig(tmp_path / "kubeconfig", context="lab", user="oncall")
        self.session = KubeSession.connect(str(path))
        self.audit = AuditLog(tmp_path / "audit.jsonl", user="alice")
        opts = {"stuck_after_s": 30.0, "rollout_timeout_s": 60.0} | cfg
        self.ctl = KubeControl(self.session, self.audit, KubeConfig(**opts), poll_s=0.02)
        self.progress: list[Progress] = []

    def record(self, p: Progress) -> None:
        self.progress.append(p)

    def texts(self) -> list[str]:
        return [p.text for p in list(self.progress)]

    def outcomes(self) -> list[dict]:
        return [e for e in self.audit.entries() if e.get("phase") != "intent"]


@pytest.fixture
def h(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.02, ready_delay=0.6)
    harness = Harness(emu, tmp_path)
    yield harness
    harness.session.close()


def ready_count(emu, app: str) -> int:
    pods = [p for p in emu.list("pods", NS, f"app={app}") if not p["metadata"].get("deletionTimestamp")]
    return sum({c["type"]: c["status"] for c in p["status"].get("conditions") or []}.get("Ready") == "True"
               for p in pods)


# ----------------------------------------------------------------- item 11

def test_a_scale_follow_through_an_api_outage_is_unknown_then_resumes(h):
    """The PATCH was accepted, then the API server went away: the follow says "outcome unknown —
    re-checking" (not failed) and finishes once the server answers again (before: ``failed``)."""
    h.emu.add_deployment(NS, "vllm", replicas=2)
    poll(lambda: ready_count(h.emu, "vllm") == 2, what="2 ready")
    plan = h.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=4)
    out: list[Outcome] = []
    t = threading.Thread(target=lambda: out.append(h.ctl.execute(plan, h.record)), daemon=True)
    t.start()
    poll(lambda: any("ready, " in x for x in h.texts()), what="the follow's first read")
    h.emu.stop()
    poll(lambda: any(x.startswith("outcome unknown — re-checking") for x in h.texts()) or out,
         what="outcome unknown")
    assert not out, f"the follow ended during the outage: {out}"
    h.emu.start()
    t.join(timeout=30)
    assert out and out[0].result == "ok", out
    assert out[0].message == "replicas 2 → 4: 4/4 ready"
    (entry,) = h.outcomes()
    assert entry["result"] == "ok"


def test_a_scale_follow_whose_deadline_passes_in_an_outage_is_unknown_not_failed(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.02, ready_delay=5.0)
    harness = Harness(emu, tmp_path, rollout_timeout_s=1.5)
    try:
        emu.add_deployment(NS, "vllm", replicas=1)
        poll(lambda: emu.get("deployments", "vllm", NS)["status"].get("replicas") == 1, what="1 pod")
        plan = harness.ctl.prepare("scale", "Deployment", NS, "vllm", replicas=2)
        out: list[Outcome] = []
        t = threading.Thread(target=lambda: out.append(harness.ctl.execute(plan, harness.record)), daemon=True)
        t.start()
        poll(lambda: any("ready, " in x for x in harness.texts()), what="the follow's first read")
        emu.stop()
        t.join(timeout=30)
        assert out and out[0].result == "unknown", out
        assert "outcome unknown — the change was sent" in out[0].message
        (entry,) = harness.outcomes()
        assert entry["result"] == "unknown"
    finally:
        emu.start()
        harness.session.close()


# ----------------------------------------------------------------- item 8 (Pilot: the app's auto mode)

def _advisor_ui():
    import advisor_ui as ui  # the Autoscaler pane's harness: fake wall clock, ticks driven by the test
    return ui


async def test_an_auto_apply_that_never_happened_is_logged_not_applied_and_audited(kube_emulator, tmp_path):
    """Another action holds the Deployment: the decision log said "applied 1 → 4" and started a cooldown
    (no audit line, replicas unchanged). Now: "not applied", an audit line, no cooldown, and once the
    workload is free the next tick applies it."""
    from infertop.control.kube import KubeAction
    from infertop.sim import SimCluster

    ui = _advisor_ui()
    emu = kube_emulator(ui.TOKEN, reconcile_interval=0.2)
    sim = SimCluster(1, seed=5, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.wait_until(lambda: ui.ready(emu, 1))
        clock = ui.Clock()
        app = ui.make_app(tmp_path, emu, sim, clock, mode="auto")
        async with app.run_test(size=(140, 45)) as pilot:
            pane = await ui.setup(emu, sim, pilot, app)
            await ui.tick(pilot, app, clock, 0.0)
            holder = KubeAction(app.kube_ctl.connection.control, "scale", "Deployment", NS, "vllm", replicas=2)
            held = app.actions_ctl.board.begin(holder, "scale deployment default/vllm (someone else's)")
            ui.burst(sim)
            await ui.tick(pilot, app, clock, 1.0)
            await ui.tick(pilot, app, clock, 2.0)
            await ui.until(pilot, lambda: ui.W in app.advisor.outcomes, message="apply outcome")
            latest = app.advisor.logs[ui.W][-1]
            assert latest["action"] == "not applied", latest
            assert "not applied: " in latest["reason"] and "still open" in latest["reason"]
            assert app.advisor.policy.cooldown_left_s(ui.W, clock.now) is None  # nothing changed: no cooldown
            assert emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 1
            (entry,) = ui.audit(tmp_path)
            assert (entry["action"], entry["result"], entry["old"], entry["new"]) == ("kube.scale", "refused", 1, 4)
            assert entry["reason"].startswith("not applied: ") and "advisor auto" in entry["summary"]
            app.actions_ctl.board.end(held)
            await ui.tick(pilot, app, clock, 1.0)
            await ui.until(pilot, lambda: emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 4,
                           message="applied once free")
            await ui.until(pilot, lambda: app.advisor.logs[ui.W][-1]["action"] == "applied", message="log applied")
            await ui.tick(pilot, app, clock, 0.5)
            detail = ui.text(pane.query_one("#as-detail"))
            assert "not applied 1 → 4" in detail and "applied     1 → 4" in detail, detail
    finally:
        sim.stop()


async def test_p_is_not_offered_when_patch_deployments_scale_is_denied(kube_emulator, tmp_path):
    from infertop.sim import SimCluster
    from infertop.ui.screens.confirm import ConfirmScreen

    ui = _advisor_ui()
    emu = kube_emulator(ui.TOKEN, reconcile_interval=0.2)
    sim = SimCluster(1, seed=5, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.wait_until(lambda: ui.ready(emu, 1))
        emu.set_rules([("*", "*", "*"), ("get", "apps", "deployments/scale")])  # no patch on the scale
        clock = ui.Clock()
        app = ui.make_app(tmp_path, emu, sim, clock)
        async with app.run_test(size=(140, 45)) as pilot:
            await ui.setup(emu, sim, pilot, app)
            await ui.tick(pilot, app, clock, 0.0)
            ui.burst(sim)
            await ui.tick(pilot, app, clock, 1.0)
            await ui.tick(pilot, app, clock, 2.0)
            assert app.advisor.logs[ui.W][-1]["action"] == "recommended"
            await ui.until(pilot, lambda: app.kube_ctl.connection.perms is not None and app.kube_ctl.connection.perms.denied(
                "scale", NS, "Deployment"), message="access reviews")
            assert not app.check_action("advisor_apply", ())
            await pilot.press("p")
            await pilot.pause()  # nothing to wait for: no confirmation may open
            assert not isinstance(app.screen, ConfirmScreen)
    finally:
        sim.stop()


# ----------------------------------------------------------------- item 9

def test_scale_review_names_the_hpa_that_owns_the_count_and_an_undo_is_undone_not_ok(h):
    """S 2 → 4 under an HPA: the review says the HPA owns the count (and its bounds); the HPA setting it
    back while the follow runs ends as ``undone`` (before: "ok: 2/2 ready", no word of the HPA)."""
    from infertop.control.kube import KubeAction
    from infertop.control.pipeline import execute_audited

    h.emu.add_deployment(NS, "vllm", replicas=2)
    h.emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=9, current_replicas=2, desired_replicas=2)
    poll(lambda: ready_count(h.emu, "vllm") == 2, what="2 ready")
    kind = KubeAction(h.ctl, "scale", "Deployment", NS, "vllm", replicas=4)
    review = kind.plan()
    owner = "HPA default/vllm (min 1, max 9) owns the replica count"
    assert any(n.startswith("! ") and owner in n and "change its bounds instead" in n for n in review.notes), review
    assert kind.preflight().ok

    def hpa_sets_it_back() -> None:
        poll(lambda: h.emu.get("deployments", "vllm", NS)["spec"]["replicas"] == 4, what="our write")
        h.emu.set_hpa_status(NS, "vllm", desired_replicas=2, scale_target=True)

    undo = threading.Thread(target=hpa_sets_it_back, daemon=True)
    undo.start()
    outcome = execute_audited(kind, h.ctl.audit, h.record, threading.Event())  # the pipeline's audited step
    undo.join(timeout=20)
    assert outcome.result == "undone", outcome
    assert outcome.message == ("replicas 2 → 4: undone — replicas set back to 2 by HPA default/vllm "
                               "(min 1, max 9)")
    (entry,) = h.outcomes()
    assert entry["result"] == "undone"


def test_a_keda_scaled_object_is_named_as_the_owner_not_its_hpa(h):
    from infertop.control.kube import KubeAction

    h.emu.install("ScaledObject")
    h.emu.add_deployment(NS, "vllm", replicas=2)
    h.emu.add_scaled_object(NS, "vllm-so", "vllm", min_replicas=1, max_replicas=9)
    review = KubeAction(h.ctl, "scale", "Deployment", NS, "vllm", replicas=4).plan()
    owners = [n for n in review.notes if "owns the replica count" in n]
    assert owners == ["! KEDA ScaledObject default/vllm-so (min 1, max 9) owns the replica count: it sets it "
                      "back at its next sync — change its bounds instead (H on the Cluster pane)"], review.notes


async def test_the_advisor_takes_its_bounds_from_the_scaled_object_that_owns_the_workload(kube_emulator, tmp_path):
    from infertop.sim import SimCluster

    ui = _advisor_ui()
    emu = kube_emulator(ui.TOKEN, reconcile_interval=0.2)
    emu.install("ScaledObject")
    sim = SimCluster(1, seed=5, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", sim.engines[0].port)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.add_scaled_object(NS, "vllm-so", "vllm", min_replicas=1, max_replicas=9, with_hpa=False)
        emu.wait_until(lambda: ui.ready(emu, 1))
        clock = ui.Clock()
        app = ui.make_app(tmp_path, emu, sim, clock)
        async with app.run_test(size=(140, 45)) as pilot:
            pane = await ui.setup(emu, sim, pilot, app)
            await ui.until(pilot, lambda: app.kube_ctl.connection.snapshot.scaled_objects, message="the ScaledObject read")
            await ui.tick(pilot, app, clock, 0.0)
            assert ui.row(pane, ui.W)[3] == "1-9 keda"  # before: the config's 1-10
            assert app.state.autoscalers[0]["bounds_from"] == "KEDA ScaledObject default/vllm-so"
            assert app.advisor.logs[ui.W][-1]["max_replicas"] == 9
    finally:
        sim.stop()


# ----------------------------------------------------------------- items 10 and 18 (Pilot)

async def _targets_form(pilot, app):
    from infertop.ui.screens.kube_dialogs import FormDialog

    ui = _advisor_ui()
    await pilot.press("T")
    return await ui.until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen, message="the form")


async def _type(pilot, text: str) -> None:
    for ch in text:
        await pilot.press({"\b": "backspace"}.get(ch, ch))


async def test_the_targets_dialog_reviews_before_applying_and_esc_discards(kube_emulator, tmp_path):
    """Typed values are shown for review (y applies) and Esc at the review or the form discards; a TTFT
    target of 1 ms is refused naming the limit (before: saved at once, 1 ms accepted)."""
    from infertop.sim import SimCluster
    from infertop.ui.screens.kube_dialogs import FormDialog, ReviewDialog

    ui = _advisor_ui()
    emu = kube_emulator(ui.TOKEN, reconcile_interval=0.2)
    sim = SimCluster(1, seed=5, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    try:
        emu.add_deployment(NS, "vllm", replicas=1)
        clock = ui.Clock()
        app = ui.make_app(tmp_path, emu, sim, clock)
        async with app.run_test(size=(140, 45)) as pilot:
            await ui.setup(emu, sim, pilot, app)
            before = app.advisor.policy.policy
            form = await _targets_form(pilot, app)
            await pilot.press("enter")  # queue depth as it is
            form.query_one("#field-p99").value = ""
            await _type(pilot, "1")
            await pilot.press("enter", "enter", "enter")  # the last field: submit
            await ui.until(pilot, lambda: "p99 target" in ui.text(form.query_one("#form-error")), message="the form's error")
            assert isinstance(app.screen, FormDialog)
            assert ui.text(form.query_one("#form-error")) == "p99 target must be from 10 to 3.6e+06 ms"
            await pilot.press("escape")  # the form: discarded
            await ui.until(pilot, lambda: not isinstance(app.screen, FormDialog), message="closed")
            assert app.advisor.policy.policy == before

            form = await _targets_form(pilot, app)
            form.query_one("#field-max").value = "9"
            form.submit()
            review = await ui.until(pilot, lambda: isinstance(app.screen, ReviewDialog) and app.screen,
                                    message="the review")
            assert review.lines == ["bounds without an HPA 1-10 → 1-9"]
            await pilot.press("enter")  # a late Enter meant for the form never applies
            await pilot.press("escape")
            await ui.until(pilot, lambda: not isinstance(app.screen, ReviewDialog), message="discarded")
            assert app.advisor.policy.policy == before

            form = await _targets_form(pilot, app)
            form.query_one("#field-max").value = "9"
            form.submit()
            await ui.until(pilot, lambda: isinstance(app.screen, ReviewDialog), message="the review")
            await pilot.press("y")
            await ui.until(pilot, lambda: app.advisor.policy.policy.max_replicas == 9, message="applied")
    finally:
        sim.stop()


async def test_at_80x24_the_targets_form_and_a_drain_confirmation_fit_or_scroll(kube_emulator, tmp_path):
    """The last field of the targets form and the pod-drain confirmation's buttons are on screen at 80x24
    (before: below the bottom edge, no scrolling)."""
    from infertop.control.kube import plan_drain_pod
    from infertop.sim import SimCluster
    from infertop.ui.screens.confirm import ConfirmScreen

    ui = _advisor_ui()
    emu = kube_emulator(ui.TOKEN, reconcile_interval=0.2)
    sim = SimCluster(1, seed=5, load="none", realtime=False, max_num_seqs=4, dcgm=False).start()
    try:
        emu.add_deployment(NS, "vllm", replicas=1)
        clock = ui.Clock()
        app = ui.make_app(tmp_path, emu, sim, clock)
        async with app.run_test(size=(80, 24)) as pilot:
            await ui.setup(emu, sim, pilot, app)
            form = await _targets_form(pilot, app)
            await pilot.press("enter", "enter", "enter")
            await ui.until(pilot, lambda: app.focused is form.query_one("#field-max"), message="the last field focused")
            last = form.query_one("#field-max")
            assert app.focused is last
            box = form.query_one("Vertical").region.shrink((1, 1, 1, 1))  # inside the border
            assert box.bottom <= 24 and box.contains_region(last.region), (box, last.region)

            await pilot.press("escape")
            pod = emu.list("pods", NS, "app=vllm")[0]
            services = emu.list("services", NS) or [{"metadata": {"name": "vllm", "namespace": NS},
                                                     "spec": {"selector": {"app": "vllm"}}}]
            plan = plan_drain_pod(pod, services, emu.get("deployments", "vllm", NS), "Deployment", "delete")
            notes = list(plan.steps) + [f"! {w}" for w in plan.warnings] + ["context lab, user oncall"]
            screen = ConfirmScreen(plan.title, plan.summary, plan.diff, notes=notes)
            app.push_screen(screen)
            screen.set_dry_run(True, "the server accepts the label patch and the deletion (dry run); in flight "
                                     "now: 3")
            await ui.until(pilot, lambda: app.screen is screen and screen.query_one("#confirm-no").region.height > 0,
                           message="the confirmation laid out")
            for button in ("#confirm-yes", "#confirm-no"):
                region = screen.query_one(button).region
                assert region.bottom <= 24 and region.y >= 0, (button, region)
            box = screen.query_one("#confirm-box")
            if box.max_scroll_y:
                await pilot.press("pagedown")
                await until(pilot, lambda: box.scroll_y > 0, 'box.scroll_y > 0')
                assert box.scroll_y > 0
    finally:
        sim.stop()


# ----------------------------------------------------------------- item 7

class AdminGateway:
    """A loopback server speaking the infertop gateway's admin API (GET /admin/state, POST
    /admin/engines/NAME/drain|undrain), fronting one engine; it records the requests in order."""

    def __init__(self, engine: str, engine_url: str) -> None:
        import json as _json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        gw = self
        self.engine, self.engine_url, self.draining, self.calls = engine, engine_url, False, []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def _send(self, doc: dict) -> None:
                body = _json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send({"engines": [{"name": gw.engine, "url": gw.engine_url, "cap": 4, "in_flight": 0,
                                         "draining": gw.draining, "up": True}]})

            def do_POST(self) -> None:
                verb = self.path.rsplit("/", 1)[-1]
                gw.calls.append(verb)
                gw.draining = verb == "drain"
                self._send({"name": gw.engine, "draining": gw.draining})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine():
    from infertop.sim import SimCluster

    sim = SimCluster(1, seed=11, load="none", realtime=False).start()
    yield sim
    sim.stop()


def _busy(sim, n: int) -> None:
    from infertop.sim.model import SimRequest

    eng = sim.engines[0]
    with eng.lock:
        for _ in range(n):
            eng.core.submit(SimRequest(prompt_tokens=100, max_tokens=60))
    sim.advance(0.2)


def _gateway_config(gw: AdminGateway):
    from types import SimpleNamespace

    return SimpleNamespace(gateway=None, queues=SimpleNamespace(gateways=[{"url": gw.url, "admin_url": gw.url}]))


def test_a_pod_drain_covers_the_gateway_says_so_and_undrains_it_after(kube_emulator, tmp_path, engine):
    """The demo's gateway ignores the Service label: the drain drains the engine there too, says which
    paths it covered, and undrains it once the pod is gone (before: the gateway was never drained, so in
    flight never fell; drained by hand it stayed drained for the replacement)."""
    from infertop.control.gateway.drain import find_gateway

    emu = kube_emulator(TOKEN, reconcile_interval=0.02)
    h = Harness(emu, tmp_path, drain_timeout_s=30.0)
    gw = AdminGateway("e0", engine.engines[0].url)
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", engine.engines[0].port)
        emu.add_deployment(NS, "vllm", replicas=1)
        emu.add_service(NS, "vllm", {"app": "vllm"})
        poll(lambda: ready_count(emu, "vllm") == 1, what="1 ready")
        pod = [p for p in emu.list("pods", NS, "app=vllm")][0]["metadata"]["name"]
        _busy(engine, 3)
        cfg = _gateway_config(gw)
        plan = h.ctl.prepare("drain_pod", "Pod", NS, pod, gateway=lambda url: find_gateway(cfg, pod, url))
        label = f"gateway 127.0.0.1:{gw.server.server_address[1]}"
        assert plan.summary.startswith(f"take pod {pod} out of vllm and {label}, wait")
        assert any(s.startswith(f"drain engine e0 at {label}") for s in plan.steps), plan.steps
        out: list[Outcome] = []
        t = threading.Thread(target=lambda: out.append(h.ctl.execute(plan, h.record)), daemon=True)
        t.start()
        poll(lambda: any(x.startswith("in flight: 3") for x in h.texts()), what="the drain watches the engine")
        assert gw.calls == ["drain"] and gw.draining
        engine.advance(30.0)  # the engine finishes its requests
        t.join(20)
        assert out and out[0].result == "ok", out
        assert out[0].message == (f"pod {pod} drained (0 in flight) and deleted; it had been taken out of vllm "
                                  f"and {label}; engine e0 undrained at {label}")
        assert gw.calls == ["drain", "undrain"] and not gw.draining  # the replacement gets traffic again
    finally:
        gw.stop()
        h.session.close()


def test_a_pod_drain_aborted_undrains_at_the_gateway(kube_emulator, tmp_path, engine):
    from infertop.control.gateway.drain import find_gateway

    emu = kube_emulator(TOKEN, reconcile_interval=0.02)
    h = Harness(emu, tmp_path)
    gw = AdminGateway("e0", engine.engines[0].url)
    try:
        emu.set_pod_endpoint("vllm-*", "127.0.0.1", engine.engines[0].port)
        emu.add_deployment(NS, "vllm", replicas=1)
        poll(lambda: ready_count(emu, "vllm") == 1, what="1 ready")
        pod = [p for p in emu.list("pods", NS, "app=vllm")][0]["metadata"]["name"]
        _busy(engine, 3)
        cfg = _gateway_config(gw)
        plan = h.ctl.prepare("drain_pod", "Pod", NS, pod, gateway=lambda url: find_gateway(cfg, pod, url))
        assert not any(w.startswith("no Service selects") for w in plan.warnings)  # the gateway is the path
        abort = threading.Event()
        out: list[Outcome] = []
        t = threading.Thread(target=lambda: out.append(h.ctl.execute(plan, h.record, abort)), daemon=True)
        t.start()
        poll(lambda: any(x.startswith("in flight: 3") for x in h.texts()), what="draining")
        abort.set()
        t.join(10)
        assert out and out[0].result == "aborted" and "engine e0 undrained at gateway" in out[0].message, out
        assert gw.calls == ["drain", "undrain"]
    finally:
        gw.stop()
        h.session.close()
