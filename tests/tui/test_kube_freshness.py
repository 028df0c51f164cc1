"""The Cluster pane tells the truth about time (Pilot): stale while the API server
is gone, recovery by itself when it comes back (permissions re-checked), ages
that move without watch events, Ctrl+R that relists and says so.

The app reads a kubeconfig in ``tmp_path`` pointing at the API emulator (real
``kubernetes`` client, nothing patched); waits are bounded polls of app state.
"""

from __future__ import annotations

import re
import time

import pytest

from infertop.config import Config, KubeConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.cluster import ClusterPane
from pilot_wait import until

NS = "default"
TOKEN = "kube-freshness-token"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_app(tmp_path, kubeconfig, **kube) -> InfertopApp:
    opts = {"refresh_s": 0.3, "timeout_s": 5.0} | kube
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"), kube=KubeConfig(kubeconfig=str(kubeconfig), **opts))
    return InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(tmp_path / "state")), poll=False)


def header(pane: ClusterPane) -> str:
    r = pane.query_one("#cluster-header").render()
    return str(getattr(r, "plain", r))


def workload_names(pane: ClusterPane) -> set[str]:
    t = pane.table("workloads")
    return {str(t.get_row(k)[1]) for k in t.rows}


async def connected(pilot, app: InfertopApp) -> ClusterPane:
    await until(pilot, lambda: app.kube_ctl.connection.session is not None and app.kube_ctl.connection.snapshot is not None, what="connect")
    await pilot.press("5")
    await until(pilot, lambda: app.current_pane == "cluster" and app.query_one(ClusterPane).snapshot is not None,
                what="the Cluster pane on view, painted")
    return app.query_one(ClusterPane)


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "poll"])
async def test_the_pane_goes_stale_when_the_api_server_dies_and_recovers_by_itself(kube_emulator, tmp_path,
                                                                                  watch):
    emu = kube_emulator(TOKEN, reconcile_interval=0.2)
    emu.add_configmap(NS, "counter")
    for i in range(60):  # a long history: after the reset the counter restarts well below what was seen
        emu.patch("configmaps", "counter", {"data": {"i": str(i)}}, NS)
    emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    emu.add_deployment(NS, "old", replicas=1, gpu_per_pod=0)
    emu.wait_until(lambda: len(emu.list("pods", NS)) == 2)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), watch=watch)
    async with app.run_test(size=(120, 30)) as pilot:
        pane = await connected(pilot, app)
        await until(pilot, lambda: workload_names(pane) == {"vllm", "old"}, what="first read")
        assert " · stale" not in header(pane) and not pane.has_class("-stale")
        assert app.kube_ctl.connection.perm_checks == 1
        checks = emu.count_requests("POST", SSAR)
        assert checks > 0

        emu.stop()
        text = await until(pilot, lambda: "cannot reach the API server: connection refused" in header(pane)
                           and header(pane), what="stale header")
        first, second = text.split("\n")
        assert first.endswith(" · stale") and "watching" not in first and "polling" not in first
        assert re.fullmatch(r"✗ stale since \d\d:\d\d:\d\d: cannot reach the API server: connection refused", second)
        assert pane.has_class("-stale")  # the tables are dimmed
        assert app.kube_ctl.connection.stale_error == "cannot reach the API server: connection refused"
        assert workload_names(pane) == {"vllm", "old"}  # the last objects read, still shown

        emu.reset_resource_versions()
        emu.start()
        emu.delete("deployments", "old", NS)
        emu.add_deployment(NS, "fresh", replicas=1, gpu_per_pod=0)
        def pod_names() -> set[str]:
            return {str(pane.table("pods").get_row(k)[0]) for k in pane.table("pods").rows}

        await until(pilot, lambda: workload_names(pane) == {"vllm", "fresh"} and not pane.has_class("-stale")
                    and len(pod_names()) == 2 and not any(p.startswith("old-") for p in pod_names()),
                    what="recovered without a K press")
        assert "stale" not in header(pane) and "✗" not in header(pane) and app.kube_ctl.connection.stale_error is None
        assert header(pane).split("\n")[0].endswith(" · watching" if watch else " · polling")
        await until(pilot, lambda: app.kube_ctl.connection.perm_checks >= 2, what="permissions re-checked")
        assert emu.count_requests("POST", SSAR) > checks


async def test_ages_move_between_two_renders_without_a_watch_event(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=None)  # nothing changes unless the test says so
    emu.add_deployment(NS, "vllm", replicas=2, gpu_per_pod=0)
    emu.reconcile()
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 30)) as pilot:
        pane = await connected(pilot, app)
        await until(pilot, lambda: app.kube_ctl.connection.watcher.version == app.kube_ctl.connection._rendered and not app.kube_ctl.connection._refreshing,
                    what="rendered")
        clock = FakeClock(time.time() + 30)
        pane.clock = clock
        app.kube_ctl.connection.tick()
        pods, events = pane.table("pods"), pane.table("events")
        age = {k.value: str(pods.get_row(k)[7]) for k in pods.rows}
        assert len(age) == 2 and all(re.fullmatch(r"\d+s", a) for a in age.values())
        assert events.row_count > 0
        version = app.kube_ctl.connection.watcher.version
        counts = {v: pane.table(v).cells_updated for v in ("workloads", "pods", "nodes", "hpas", "events")}

        clock.t += 600
        app.kube_ctl.connection.tick()
        assert app.kube_ctl.connection.watcher.version == version  # no watch event in between
        later = {k.value: str(pods.get_row(k)[7]) for k in pods.rows}
        assert all(re.fullmatch(r"1\dm", a) for a in later.values()), later
        event_ages = [str(events.get_row(k)[1]) for k in events.rows]
        assert all(a.endswith("m") for a in event_ages), event_ages
        # only the cells whose text changed were repainted: one Age cell per pod and per event
        delta = {v: pane.table(v).cells_updated - n for v, n in counts.items()}
        assert delta == {"workloads": 0, "pods": 2, "nodes": 0, "hpas": 0, "events": events.row_count}
        app.kube_ctl.connection.tick()  # same clock: nothing to repaint
        assert pane.table("pods").cells_updated - counts["pods"] == 2


async def test_ctrl_r_relists_and_says_so(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.2)
    emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    emu.wait_until(lambda: len(emu.list("pods", NS)) == 1)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 30)) as pilot:
        pane = await connected(pilot, app)
        assert all(inf.lists == 1 for inf in app.kube_ctl.connection.watcher.informers)
        emu.clear_requests()
        await pilot.press("ctrl+r")
        text = await until(pilot, lambda: "relisted" in header(pane) and header(pane), what="feedback")
        assert re.search(r" · relisted \d\d:\d\d:\d\d", text.split("\n")[0])
        assert all(inf.lists == 2 for inf in app.kube_ctl.connection.watcher.informers)
        assert emu.count_requests(predicate=lambda r: r.query.get("watch") != "true" and r.method == "GET") >= 6


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "poll"])
async def test_an_api_server_down_at_start_is_waited_for(kube_emulator, tmp_path, watch):
    emu = kube_emulator(TOKEN, reconcile_interval=0.2)
    emu.add_deployment(NS, "vllm", replicas=1, gpu_per_pod=0)
    emu.wait_until(lambda: len(emu.list("pods", NS)) == 1)
    kubeconfig = emu.write_kubeconfig(tmp_path / "kc")
    emu.stop()
    app = make_app(tmp_path, kubeconfig, watch=watch, timeout_s=1.0)
    async with app.run_test(size=(120, 30)) as pilot:
        pane = await connected(pilot, app)
        await until(pilot, lambda: "✗ stale since" in header(pane), what="stale from the start")
        assert "cannot reach the API server" in header(pane) and workload_names(pane) == set()
        emu.start()
        await until(pilot, lambda: workload_names(pane) == {"vllm"} and "stale" not in header(pane),
                    what="the first read once it answers (retries back off up to 5 s)")
        await until(pilot, lambda: app.kube_ctl.connection.perm_checks == 2, what="permissions checked again")
        assert app.kube_ctl.connection.perms.allows("scale") is True  # unknown while it was down, known now
