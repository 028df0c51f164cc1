"""Triage hooks into the Cluster pane's reads (issue 28 item 5; Pilot, the API emulator over HTTP): a
crash-loop verdict's remedy opens the pod's previous container log (as p on the pod), a blocked scale-up's
the Pending pod's events (as e); Enter on the remedy line or its key on the Triage pane. --read-only reads
them too; a replay says why it cannot."""

from __future__ import annotations

import pytest

from infertop.config import Config, GpuConfig, KubeConfig
from infertop.state.recording.replay import Player, Replay
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.kube_logs import KubeLogScreen
from infertop.ui.screens.kube_object import KubeTextScreen
from infertop.ui.widgets.triage import TriagePane, remedy_prompt
from pilot_wait import until

TOKEN = "triage-hooks-token"
NS = "default"
WAITING = "vllm:num_requests_waiting"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.1, crash_period=0.2)


T0 = 1_796_025_600.0  # a wall-clock time (replay refuses others)


class Clock:
    """The ticks' wall clock: moved on by each tick, so the verdicts' hold times pass without sleeping."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_app(tmp_path, kubeconfig, clock: Clock, **settings) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"), gpu=GpuConfig(nvml=False),
                 kube=KubeConfig(kubeconfig=str(kubeconfig), stuck_after_s=0.0, refresh_s=0.3))
    settings.setdefault("state_dir", str(tmp_path / "state"))
    return InfertopApp(Settings(config=cfg, endpoints=[], wall_clock=clock, **settings), poll=False)


async def ticks(app, clock: Clock, n: int) -> None:
    for _ in range(n):
        await app.poll_now()
        clock.t += 1.0


async def on_triage_with(pilot, app, clock: Clock, kind: str, n: int = 20):
    """``n`` ticks (the verdict's onset), the Triage pane on view; the verdict of ``kind``."""
    await ticks(app, clock, n)
    await pilot.press("8")
    pane = app.query_one(TriagePane)
    await until(pilot, lambda: any(v.kind == kind for v in pane.verdicts), what=kind)
    [v] = [v for v in pane.verdicts if v.kind == kind]
    return pane, v


def notes(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def highlight_remedy(pane: TriagePane, v, key: str):
    [(i, r)] = [(i, r) for i, r in enumerate(v.remedies) if r.key == key]
    row = next(n for n, row in enumerate(pane._rows) if row is not None and row.key == v.key and row.remedy == i)
    pane.options.highlighted = row
    pane.options.focus()
    return r


def crash_looping(emu) -> str:
    emu.fail_args("--crash-me", termination_reason="OOMKilled", exit_code=137)
    emu.add_deployment(NS, "vllm", replicas=1, args=["--model", "m", "--crash-me"])

    def looping():
        pods = emu.list("pods", NS, "app=vllm")
        cs = pods and (pods[0]["status"].get("containerStatuses") or [{}])[0]
        return cs and cs.get("restartCount", 0) >= 3 and pods[0]["metadata"]["name"]
    return emu.wait_until(looping, message="a pod restarted 3 times")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_a_crash_loop_verdict_opens_the_previous_container_log(emu, tmp_path, size):
    pod = crash_looping(emu)
    clock = Clock()
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), clock)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and any(
            p.restarts >= 3 for p in app.kube_ctl.connection.snapshot.pods), what="the restarts read")
        pane, v = await on_triage_with(pilot, app, clock, "crash-loop", 2)
        assert v.subject == f"{NS}/Pod/{pod}"
        assert ("pod", f"{NS}/{pod} CrashLoopBackOff") in {(e.signal, e.value) for e in v.evidence}
        r = highlight_remedy(pane, v, "p")
        assert r.target == f"{NS}/Pod/{pod}" and "previous container's log" in r.text
        assert remedy_prompt(r, True).plain.lstrip().startswith("p  the previous container's log")

        await pilot.press("enter")  # Enter on the remedy line
        screen = await until(pilot, lambda: isinstance(app.screen, KubeLogScreen) and app.screen.loaded
                             and app.screen.lines and app.screen, what="the previous log")
        assert screen.previous and screen.pod == pod
        assert screen.lines[-1].endswith("container vllm terminated: OOMKilled (exit code 137)")  # where it ended
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, KubeLogScreen), what="back")

        await pilot.press("p")  # the remedy's key on the Triage pane: the same screen
        await until(pilot, lambda: isinstance(app.screen, KubeLogScreen) and app.screen.previous, what="p")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, KubeLogScreen), what="back again")
        assert app.current_pane == "triage"


async def test_a_blocked_scale_up_opens_the_pending_pods_events_read_only_too(emu, tmp_path):
    # 16 GPUs on the two nodes, 18 replicas of one GPU each: two Pending; the HPA's metric at 12 of 5 presses
    emu.add_deployment(NS, "vllm", replicas=18)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=20, desired_replicas=18,
                current_metrics=[{"type": "Pods", "pods": {"metric": {"name": WAITING},
                                                           "current": {"averageValue": "12"}}}])
    emu.wait_until(lambda: sum(1 for p in emu.list("pods", NS) if not p["spec"].get("nodeName")) == 2,
                   message="two pods Pending")
    clock = Clock()
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), clock, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.kube_ctl.connection.snapshot is not None and sum(
            1 for p in app.kube_ctl.connection.snapshot.pods if p.phase == "Pending") == 2, what="the Pending pods read")
        pane, v = await on_triage_with(pilot, app, clock, "autoscaler-blocked")
        pending = {p.name for p in app.kube_ctl.connection.snapshot.pods if p.phase == "Pending"}
        [where] = [e.value for e in v.evidence if e.signal == "pending pod"]
        assert where.split("/", 1)[0] == NS and where.split("/", 1)[1] in pending  # enough to find the pod
        r = highlight_remedy(pane, v, "e")
        assert r.target == f"{NS}/Pod/{where.split('/', 1)[1]}"
        # read-only: the scale remedies are text, this read opens
        assert remedy_prompt(r, False, True).plain.lstrip().startswith("e  the Pending pod")

        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, KubeTextScreen) and app.screen.loaded
                             and app.screen, what="the Pending pod's events")
        assert "FailedScheduling" in screen.text and "nvidia.com/gpu" in screen.text
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, KubeTextScreen), what="back")

        await pilot.press("e")  # the remedy's key
        await until(pilot, lambda: isinstance(app.screen, KubeTextScreen) and app.screen.loaded, what="e")
        assert "FailedScheduling" in app.screen.text


async def test_in_a_replay_the_remedy_says_why_it_cannot_open(emu, tmp_path):
    crash_looping(emu)
    path = tmp_path / "flight.infertop"
    clock = Clock()
    live = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"), clock, record_path=str(path))
    async with live.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: live.kube_ctl.connection.snapshot is not None and any(
            p.restarts >= 3 for p in live.kube_ctl.connection.snapshot.pods), what="the restarts read")
        await ticks(live, clock, 4)
        assert any(v.kind == "crash-loop" for v in live.state.verdicts)
    player = Player(Replay(str(path)), clock=Clock(1000.0))
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], read_only=True,
                               mode="replay", replay=player, replay_path=str(path)), poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.player.pause()
        app.player.seek(clock.t - 1.0)
        app.replay_ctl.jump()
        await pilot.press("8")
        pane = app.query_one(TriagePane)
        await until(pilot, lambda: any(v.kind == "crash-loop" for v in pane.verdicts), what="the recorded verdict")
        [v] = [v for v in pane.verdicts if v.kind == "crash-loop"]
        r = highlight_remedy(pane, v, "p")
        assert remedy_prompt(r, False, False).plain.startswith("        ·  ")  # no key: nothing opens
        await pilot.press("enter")
        await until(pilot, lambda: any(n.startswith("replay: there is no live cluster to read pod ") for n in notes(app)),
                    what="why not")
        assert app.screen is app.main
        await pilot.press("p")  # the key says the same, and opens nothing
        await until(pilot, lambda: sum(n.startswith("replay: there is no live") for n in notes(app)) == 2, what="p")
        assert app.screen is app.main
