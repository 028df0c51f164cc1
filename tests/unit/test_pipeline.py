"""The action pipeline's protocol (control/pipeline.py): audit order, one action per object, countdowns."""

from __future__ import annotations

import threading

import pytest

from infertop.control.audit import AuditLog
from infertop.control.pipeline import (
    Abandoned,
    ActionBoard,
    ActionBusy,
    ActionKind,
    Outcome,
    Preflight,
    Progress,
    Review,
    countdown_text,
    execute_audited,
)


class Weights:
    """A kind the pipeline audits itself (like the gateway's weights will be)."""

    action = "gateway.weights"
    abortable = True
    timeout_s = 60.0

    def __init__(self, audit_path, target: str = "gateway main", fail: BaseException | None = None) -> None:
        self.target, self.object_key = target, f"gateway:{target}"
        self.audit_path, self.fail = audit_path, fail
        self.lines_when_sent: list[str] | None = None

    def plan(self) -> Review:
        return Review("Weights: gateway main", "realtime 4 → 8")

    def preflight(self) -> Preflight:
        return Preflight(True, "the gateway accepts the weights (validate)")

    def execute(self, progress, abort: threading.Event) -> Outcome:
        self.lines_when_sent = self.audit_path.read_text().splitlines()
        progress(Progress("applied", 1.0))
        if self.fail is not None:
            raise self.fail
        return Outcome("ok", "realtime 4 → 8")

    def audit_details(self) -> dict:
        return {"old": {"realtime": 4}, "new": {"realtime": 8}, "summary": "realtime 4 → 8"}


def test_intent_is_written_before_the_kind_executes_and_the_outcome_after(tmp_path):
    audit = AuditLog(tmp_path / "audit.jsonl", user="alice")
    kind = Weights(audit.path)
    assert isinstance(kind, ActionKind)
    outcome = execute_audited(kind, audit, lambda p: None, threading.Event(), kind.preflight())
    assert outcome == Outcome("ok", "realtime 4 → 8")
    assert len(kind.lines_when_sent) == 1  # the intent, already on disk
    intent, done = audit.entries()
    assert (intent["phase"], intent["preflight"], intent["new"]) == ("intent", "the gateway accepts the weights "
                                                                     "(validate)", {"realtime": 8})
    assert (done["phase"], done["op"], done["result"], done["summary"]) == ("outcome", intent["op"], "ok",
                                                                            "realtime 4 → 8")


def test_a_failing_kind_is_a_failed_outcome_and_an_abandoned_one_leaves_the_intent_unfinished(tmp_path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    out = execute_audited(Weights(audit.path, fail=RuntimeError("gateway said no")), audit, lambda p: None,
                          threading.Event())
    assert (out.result, out.message) == ("failed", "RuntimeError: gateway said no")
    with pytest.raises(Abandoned):
        execute_audited(Weights(audit.path, target="gateway b", fail=Abandoned()), audit, lambda p: None,
                        threading.Event())
    phases = [(e["target"], e["phase"]) for e in audit.entries()]
    assert phases == [("gateway main", "intent"), ("gateway main", "outcome"), ("gateway b", "intent")]


def test_an_unwritable_audit_log_refuses_before_anything_is_sent(tmp_path):
    (tmp_path / "file").write_text("")
    kind = Weights(tmp_path / "file")
    out = execute_audited(kind, AuditLog(tmp_path / "file" / "audit.jsonl"), lambda p: None, threading.Event())
    assert out.result == "refused" and kind.lines_when_sent is None


def test_one_action_per_object_any_number_on_different_objects(tmp_path):
    board = ActionBoard()
    a = board.begin(Weights(tmp_path / "a"), "Weights: a")
    b = board.begin(Weights(tmp_path / "b", target="gateway b"), "Weights: b")
    a.start()
    with pytest.raises(ActionBusy, match="one action at a time on gateway main"):
        board.begin(Weights(tmp_path / "a"), "again")
    assert board.in_flight() == [a]
    board.end(a)
    board.begin(Weights(tmp_path / "a"), "again")  # free once the first ended
    assert len(board.runs()) == 2 and b in board.runs()


def test_the_countdown_uses_the_follow_deadline_else_the_kind_timeout(tmp_path):
    now = [100.0]
    board = ActionBoard()
    run = board.begin(Weights(tmp_path / "a"), "Weights")
    run.clock = lambda: now[0]
    run.start()
    now[0] += 15
    assert run.left_s() == 45.0 and run.status_text() == "running… — 0:45 left"
    run.set_progress(Progress("2/5 ready", 0.4, countdown_s=125.0))
    now[0] += 5
    assert run.left_s() == 120.0 and run.status_text() == "2/5 ready — 2:00 left"
    run.abort.set()
    assert run.status_text().startswith("aborting… 2/5 ready")
    assert countdown_text(-3) == "0:00 left" and countdown_text(3725) == "62:05 left"
