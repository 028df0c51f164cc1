"""The advisor's controller without a Pilot: a small host stands in for the console (what it is told, the
dialogs it is asked, the actions it is handed), the audit log is a real file."""

from __future__ import annotations

import json
from types import SimpleNamespace

from infertop.config import AdvisorConfig, Config, SloConfig
from infertop.control.advisor.actions import AdvisorKillSwitch, AdvisorModeChange
from infertop.control.audit import AuditLog
from infertop.control.pipeline import ActionBoard
from infertop.state.advisor.core import Advisor
from infertop.ui.controllers.advisor import AdvisorController


class Host:
    """The console's services, recorded."""

    def __init__(self, audit: AuditLog, answers=()) -> None:
        self.audit = audit
        self.told: list[str] = []
        self.logged: list[str] = []
        self.actions: list = []
        self.workers: list = []
        self.answers = list(answers)
        self.painted = 0

    def notify(self, message, *, title="", severity="information", timeout=None, markup=True) -> None:
        self.told.append(str(message))

    def log_event(self, text) -> None:
        self.logged.append(str(text))

    def start_action(self, kind, *, on_done=None, on_forbidden=None, preflight_name="check") -> bool:
        self.actions.append(kind)
        return True

    def run_worker(self, work, *, group="default", exclusive=False, exit_on_error=True):
        self.workers.append(work)

    async def push_screen_wait(self, screen):
        return self.answers.pop(0)

    def render_snapshot(self, force: bool = False) -> None:
        self.painted += 1

    def audit_log(self) -> AuditLog:
        return self.audit


def controller(tmp_path, *, mode="recommend", allow_auto=True, read_only=False, pane_on_view="autoscaler",
               answers=()):
    adv = Advisor(AdvisorConfig(mode=mode), SloConfig(), allow_auto=allow_auto)
    settings = SimpleNamespace(config=Config(advisor=AdvisorConfig(mode=mode)), read_only=read_only,
                               no_auto=not allow_auto, notes=[], wall_clock=lambda: 1000.0)
    host = Host(AuditLog(tmp_path / "audit.jsonl"), answers)
    ctl = AdvisorController(host, adv, settings, pane=lambda: None, kube=lambda: None, perms=lambda: None,
                            board=ActionBoard(), actions_changed=lambda: None, refresh_kube=lambda: None,
                            pane_on_view=lambda: pane_on_view)
    return ctl, host, settings


def test_the_kill_switch_brakes_at_once_and_is_audited_without_a_review(tmp_path):
    ctl, host, _ = controller(tmp_path, mode="auto")
    ctl.kill()
    assert ctl.advisor.paused and host.actions == []  # no confirmation held it up
    (entry,) = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()
                if json.loads(line).get("phase") == "outcome"]
    assert (entry["action"], entry["result"]) == ("advisor.kill_switch", "ok")
    assert any("kill switch ON" in line for line in host.logged)


def test_releasing_the_kill_switch_is_reviewed_through_the_pipeline(tmp_path):
    ctl, host, _ = controller(tmp_path, mode="auto")
    ctl.advisor.paused = True
    ctl.kill()
    (kind,) = host.actions
    assert isinstance(kind, AdvisorKillSwitch) and not kind.on
    assert ctl.advisor.paused  # nothing changed until the operator confirms


async def test_choosing_auto_hands_the_pipeline_a_mode_change_and_changes_nothing_itself(tmp_path):
    ctl, host, _ = controller(tmp_path, answers=["auto"])
    await ctl._mode_flow()
    (kind,) = host.actions
    assert isinstance(kind, AdvisorModeChange) and (kind.old, kind.new) == ("recommend", "auto")
    assert ctl.advisor.mode == "recommend"


def test_keys_follow_the_pane_on_view_and_read_only(tmp_path):
    ctl, _, _ = controller(tmp_path)
    assert ctl.action_state("advisor_mode") is True and ctl.action_state("advisor_apply") is True
    ctl, _, _ = controller(tmp_path, pane_on_view="engines")
    assert ctl.action_state("advisor_mode") is False and ctl.action_state("advisor_kill") is True
    ctl, _, _ = controller(tmp_path, pane_on_view=None)  # a dialog on top
    assert ctl.action_state("advisor_targets") is False
    ctl, _, _ = controller(tmp_path, read_only=True)
    assert ctl.action_state("advisor_apply") is None  # hidden


def test_auto_configured_but_not_allowed_says_so_once(tmp_path):
    _, _, settings = controller(tmp_path, mode="auto", allow_auto=False)
    assert settings.notes == ["Advisor: auto mode is off (--no-auto): decisions are recommended only."]


def test_apply_without_kubernetes_says_why(tmp_path):
    ctl, host, _ = controller(tmp_path)
    ctl._pane = lambda: SimpleNamespace(selected={"name": "vllm", "workload": "Deployment/default/vllm",
                                                  "kind": "Deployment", "namespace": "default",
                                                  "latest": {"action": "recommended", "current": 2,
                                                             "desired": 3}})
    ctl.apply()
    assert host.told == ["Kubernetes is not connected: nothing can be applied"] and host.actions == []
