"""The Kubernetes and running-actions controllers without a Pilot: a small host stands in for the console
(what it is told, the screens it is asked to show, whether it exited); no cluster, no App."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from infertop.config import Config
from infertop.state.fleet_join import FleetJoiner
from infertop.control.pipeline import DONE
from infertop.ui.controllers.actions import ActionsController
from infertop.ui.controllers.kube import KubeController
from infertop.ui.screens.actions_list import QuitScreen


class Host:
    """The console's services, recorded; not running (nothing is painted)."""

    is_running = False

    def __init__(self) -> None:
        self.told: list[str] = []
        self.pushed: list = []
        self.exited = False
        self.screen = None
        self.screen_stack: list = []

    def notify(self, message, *, title="", severity="information", timeout=None, markup=True) -> None:
        self.told.append(str(message))

    def push_screen(self, screen, callback=None) -> None:
        self.pushed.append((screen, callback))

    def exit(self) -> None:
        self.exited = True

    def set_interval(self, *_a, **_k) -> None:
        return None

    def refresh_bindings(self) -> None:
        pass


def make(read_only: bool = False, context: str | None = None):
    host = Host()
    settings = SimpleNamespace(config=Config(), read_only=read_only, engine_pods={}, state_dir=None)
    actions = ActionsController(host, settings, changed=None, log_event=lambda _t: None, context=lambda: context)
    joiner = FleetJoiner(SimpleNamespace(collectors=[]), slo=settings.config.slo, refresh_s=1.0, window_s=60.0,
                         wall=lambda: 1000.0)
    kube = KubeController(host, settings, actions, collector=lambda: None, state=lambda: None,
                          joiner=lambda: joiner, replay=False, on_triage=lambda: False, show_pane=lambda _p: None)
    kube.joiner = joiner  # the tests' handle on it
    return host, actions, kube


def test_a_kube_action_without_a_session_is_hidden_and_says_why():
    _host, _actions, kube = make()
    assert kube.action_state("kube_scale") is None
    assert kube.denied_reason("kube_scale") == "Kubernetes is not configured: press K to pick a context"
    kube.connection.error = "connection refused"
    assert kube.denied_reason("kube_drain_node") == "Kubernetes is not connected: connection refused"
    assert kube.action_state("kube_context") is True  # K picks a context: always offered
    kube.connection.session = SimpleNamespace(context="lab", namespaces=["default"])  # connected, no perms read
    assert kube.action_state("kube_scale") is True


def test_read_only_hides_a_kube_action_even_when_connected():
    _host, _actions, kube = make(read_only=True)
    kube.connection.session = SimpleNamespace(context="lab", namespaces=["default"])
    assert kube.action_state("kube_restart") is None
    assert kube.denied_reason("kube_restart") == "read-only mode: nothing can be changed"


def test_quitting_asks_about_the_running_action_and_aborts_it_on_yes():
    host, actions, _kube = make()
    kind = SimpleNamespace(object_key="engine:tiny", target="engine tiny", action="engine.restart",
                           quit_note=lambda: "quitting aborts it and undrains tiny at gateway gw")
    run = actions.board.begin(kind, "restart tiny")
    run.start()

    async def scenario() -> None:
        await actions.quit()
        assert not host.exited
        (screen, answer), = host.pushed
        assert isinstance(screen, QuitScreen)
        assert screen.question == ("1 action in flight: restart tiny — quitting aborts it and undrains tiny at "
                                   "gateway gw; quit? y/n")
        answer(True)
        assert run.abort.is_set() and host.told[-1].startswith("aborting 1 action: quitting once it is undone")
        run.state = DONE  # its abort finished (undrained): quitting goes on
        await asyncio.wait_for(actions._quit_task, 5)

    asyncio.run(scenario())
    assert host.exited


def test_quitting_with_nothing_running_exits_at_once():
    host, actions, _kube = make()
    asyncio.run(actions.quit())
    assert host.exited and host.pushed == []


def test_a_running_kube_action_is_on_the_cluster_header_naming_its_own_context():
    _host, actions, kube = make(context="lab")
    session = SimpleNamespace(context="old")
    kind = SimpleNamespace(object_key="kube:old:Deployment/default/vllm", target="deployment default/vllm",
                           action="kube.scale", timeout_s=0, control=SimpleNamespace(session=session))
    run = actions.board.begin(kind, "Scale: deployment default/vllm")
    run.start()
    actions.changed()
    assert kube.connection.running_text == "Scale: deployment default/vllm (context old): running…"
    actions.board.end(run)
    actions.changed()
    assert kube.connection.running_text == ""


def test_the_cluster_header_says_stale_and_why_unless_an_action_runs():
    from infertop.domain.kube import ClusterSnapshot
    from infertop.ui.controllers.kube_header import cluster_header

    snap = ClusterSnapshot(context="lab", namespaces=("default",), taken_at=0.0)
    session = SimpleNamespace(context="lab", namespaces=["default"], user="alice")
    opts = dict(all_namespaces=False, watching=True, relist_note="", read_only=True, error=None)
    header, problems = cluster_header(snap, session, stale=(0.0, "connection refused"), running_text="", **opts)
    assert " · stale" in header.plain and " · read-only" in header.plain and "watching" not in header.plain
    assert problems[0].endswith(": connection refused") and header.plain.endswith(problems[0])
    header, _ = cluster_header(snap, session, stale=None, running_text="Scale: x: running…", **opts)
    assert header.plain.startswith("⎈ lab · ns default · alice · 0 workloads, 0 pods")
    assert " · watching" in header.plain and header.plain.endswith("\n▶ Scale: x: running…")


def test_the_cluster_read_goes_to_the_fleet_state_stale_since_the_reads_failed_not_since_it_was_told():
    """The pane paints the fleet state's cluster part: a read failing since 940 s (polling, no watches) is
    stale since 940 in the state too — not since the first tick that heard of it (1000)."""
    from infertop.domain.kube import ClusterSnapshot
    from infertop.state.fleet_types import FRESH, STALE

    _host, _actions, kube = make()
    c = kube.connection
    c.session = SimpleNamespace(context="lab", namespaces=["default"], user="alice")
    c.snapshot = ClusterSnapshot(context="lab", namespaces=("default",), taken_at=930.0)
    kube.join_cluster()
    got = kube.joiner.cluster_state()
    assert got.snapshot is c.snapshot and got.freshness.status == FRESH and got.freshness.source == "lab"
    c.error, c._poll_stale_since = "connection refused", 940.0
    kube.join_cluster()
    got = kube.joiner.cluster_state()
    assert got.snapshot is c.snapshot  # the objects last read, kept
    assert (got.freshness.status, got.freshness.since, got.freshness.reason) == (STALE, 940.0, "connection refused")
