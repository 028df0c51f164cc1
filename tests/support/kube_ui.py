"""The Cluster pane in tests (Pilot): ``make_app`` (the console on a kubeconfig that points at the
API emulator), the emulator's ``TOKEN`` and namespace ``NS``, the audit lines, a workload ``ready``,
waiting until ``connected``, reading ``rows`` and ``text``, filling a form (``set_input``) and
``confirm`` (the one confirmation screen)."""

from __future__ import annotations

import json

from kube_emulator import KubeEmulator
from pilot_wait import until

from infertop.config import Config, KubeConfig
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.widgets.cluster import ClusterPane


TOKEN = "kube-ui-token"


NS = "default"


def make_app(tmp_path, kubeconfig=None, *, read_only: bool = False, endpoints=(), engine_pods=None,
             **kube) -> InfertopApp:
    opts = {"stuck_after_s": 0.0, "refresh_s": 0.3, "eviction_retry_s": 0.1, "follow_poll_s": 0.05} | kube
    cfg = Config(audit_log=str(tmp_path / "audit.jsonl"), read_only=read_only,
                 kube=KubeConfig(kubeconfig=str(kubeconfig) if kubeconfig else None, **opts))
    return InfertopApp(Settings(config=cfg, endpoints=list(endpoints), read_only=read_only,
                                state_dir=str(tmp_path / "state"), engine_pods=dict(engine_pods or {})), poll=False)


def audit_all(tmp_path) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def audit(tmp_path) -> list[dict]:
    """Outcomes (and one-shot entries): every executed action also has an intent line before it."""
    return [e for e in audit_all(tmp_path) if e.get("phase") != "intent"]


def ready(emu: KubeEmulator, app: str, n: int) -> bool:
    pods = [p for p in emu.list("pods", NS, f"app={app}") if not p["metadata"].get("deletionTimestamp")]
    return len(pods) == n and all({c["type"]: c["status"] for c in p["status"].get("conditions") or []}.get("Ready")
                                  == "True" for p in pods)


async def connected(pilot, app: InfertopApp) -> ClusterPane:
    await until(pilot, lambda: app.kube_ctl.connection.session is not None and app.kube_ctl.connection.snapshot is not None, what="connect")
    await pilot.press("5")
    await until(pilot, lambda: app.current_pane == "cluster" and app.query_one(ClusterPane).snapshot is not None,
                what="the Cluster pane on view, painted")
    return app.query_one(ClusterPane)


def rows(pane: ClusterPane, view: str) -> dict[str, list[str]]:
    t = pane.table(view)
    return {k.value: [str(getattr(c, "plain", c)) for c in t.get_row(k)] for k in t.rows}


def text(widget) -> str:
    r = widget.render()
    return str(getattr(r, "plain", r))


async def set_input(pilot, screen, field: str, value: str) -> None:
    box = screen.query_one(f"#field-{field}")
    box.value = value
    box.focus()
    await until(pilot, lambda: screen.app.focused is box and box.value == value, what=f"{field} set and focused")


async def confirm(pilot, app, change: str | None = None, *, press: bool = True) -> ConfirmScreen:
    """Wait for the dry run in the confirmation, check the change, confirm and wait for the end."""
    screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok is not None
                         and app.screen, what="dry run")
    assert screen.dry_run_ok, screen.dry_run_text
    if change is not None:
        assert screen.change == change
    if press:
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done", what=f"action done: {screen.progress_text}")
    return screen
