"""The Autoscaler pane's harness (Pilot): the console on the API emulator and one simulated engine
(``make_app``), its ticks driven by the test (``tick``) on a fake wall ``Clock``; ``setup`` opens the
pane, ``burst`` queues requests, ``row``/``text``/``audit`` read what it shows and wrote; ``W`` is
the workload, ``TOKEN`` and ``NS`` the emulator's."""

from __future__ import annotations

import json
import time

from pilot_wait import until  # the Autoscaler tests import their wait from here

from infertop.config import AdvisorConfig, Config, KubeConfig
from infertop.sim.model import SimRequest
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.autoscaler import AutoscalerPane


TOKEN = "advisor-ui-token"


NS = "default"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def make_app(tmp_path, emu, sim, clock: Clock, *, mode: str = "recommend", no_auto: bool = False,
             read_only: bool = False) -> InfertopApp:
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"), read_only=read_only,
                 kube=KubeConfig(kubeconfig=str(emu.write_kubeconfig(tmp_path / "kc")), refresh_s=0.3,
                                 stuck_after_s=0.0, follow_poll_s=0.05),
                 advisor=AdvisorConfig(mode=mode, target_p99_s=600.0, cooldown_s=5.0, scale_up_window_s=2.0,
                                       scale_down_window_s=20.0))
    return InfertopApp(Settings(config=cfg, endpoints=[EngineEndpoint("llama", sim.engines[0].url)],
                                read_only=read_only, state_dir=str(tmp_path / "state"), wall_clock=clock,
                                no_auto=no_auto), poll=False)


def ready(emu, n: int) -> bool:
    pods = [p for p in emu.list("pods", NS, "app=vllm") if not p["metadata"].get("deletionTimestamp")]
    return len(pods) == n and all({c["type"]: c["status"] for c in p["status"].get("conditions") or []}.get("Ready")
                                  == "True" for p in pods)


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


def row(pane: AutoscalerPane, key: str) -> list[str]:
    return [str(getattr(c, "plain", c)) for c in pane.table.get_row(key)]


def audit(tmp_path) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def burst(sim, n: int = 20) -> None:
    eng = sim.engines[0]
    with eng.lock:
        for _ in range(n):
            eng.core.submit(SimRequest(prompt_tokens=50, max_tokens=2000))
    sim.advance(0.5)


async def tick(pilot, app, clock: Clock, dt: float) -> None:
    clock.now += dt
    await app.kube_ctl.connection.refresh_now()
    await app.poll_now()
    await pilot.pause()  # kept: the tick is awaited and painted synchronously; this only lets its frame happen


W = "Deployment/default/vllm"


async def setup(emu, sim, pilot, app) -> AutoscalerPane:
    await until(pilot, lambda: app.kube_ctl.connection.session is not None and app.kube_ctl.connection.snapshot is not None, message="connect")
    await pilot.press("7")
    await until(pilot, lambda: app.current_pane == "autoscaler", message="the Autoscaler pane on view")
    return app.query_one(AutoscalerPane)
