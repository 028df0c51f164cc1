"""The one pipeline's orchestration (control/runner.py), driven without a Pilot or a socket: who confirms is
a scripted confirmer or auto mode's standing grant; the runner alone writes the audit."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from infertop.control import runner
from infertop.control.audit import AuditLog
from infertop.control.pipeline import ActionBoard, ActionRefused, Outcome, Preflight, Review


class Counter:
    """An in-memory object with a count: plan reads it, execute sets it (a conflict when it moved)."""

    def __init__(self, value: int, target: int, *, refuse: str = "", check: Preflight | None = None) -> None:
        self.value, self.want = value, target
        self.refuse, self.check = refuse, check or Preflight(True, "accepted (dry run)")
        self.planned_from: int | None = None
        self.moves: list[int] = []  # a writer elsewhere changes it before the next execute
        self.executed = 0
        self.action, self.target, self.object_key = "counter.set", "counter c", "counter:c"
        self.abortable, self.timeout_s, self.audits_itself = False, 5.0, False

    def plan(self) -> Review:
        if self.refuse:
            raise ActionRefused(self.refuse)
        self.planned_from = self.value
        return Review(f"Set counter c to {self.want}", f"count {self.value} → {self.want}")

    def preflight(self) -> Preflight:
        return self.check

    def execute(self, progress, abort: threading.Event) -> Outcome:
        self.executed += 1
        if self.moves:
            self.value = self.moves.pop(0)
        if self.value != self.planned_from:
            return Outcome("conflict", f"count is {self.value} now")
        self.value = self.want
        return Outcome("ok", f"count {self.want}")

    def audit_details(self) -> dict:
        return {"old": self.planned_from, "new": self.want}


class Scripted(runner.StandingGrant):
    """A person at the confirmation screen: answers from a script, re-confirms after a conflict."""

    audits_refusals = False
    reconfirms = True

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.seen: list[str] = []

    def planned(self, run, review, note) -> None:
        self.seen.append(f"planned: {review.summary}" + (f" ({note})" if note else ""))

    async def decide(self, run) -> bool:
        return self.answers.pop(0)


def entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def go(kind, confirmer, tmp_path: Path) -> tuple[Outcome, list[dict]]:
    board = ActionBoard()
    run = board.begin(kind, kind.target)
    try:
        outcome = await runner.run(run, confirmer, audit=AuditLog(tmp_path / "audit.jsonl"))
    finally:
        board.end(run)
    assert board.runs() == []
    return outcome, entries(tmp_path / "audit.jsonl")


async def test_a_standing_grant_executes_and_the_runner_writes_intent_then_outcome(tmp_path):
    kind = Counter(3, 5)
    outcome, audit = await go(kind, runner.StandingGrant(), tmp_path)
    assert outcome.ok and kind.value == 5
    assert [(e["phase"], e.get("result")) for e in audit] == [("intent", None), ("outcome", "ok")]
    assert audit[0]["old"] == 3 and audit[0]["new"] == 5 and audit[0]["op"] == audit[1]["op"]


async def test_not_confirmed_sends_nothing_and_audits_nothing(tmp_path):
    kind = Counter(3, 5)
    outcome, audit = await go(kind, Scripted(False), tmp_path)
    assert outcome.result == "cancelled" and kind.executed == 0 and kind.value == 3
    assert audit == []


async def test_a_refused_plan_is_audited_under_a_grant_only(tmp_path):
    outcome, audit = await go(Counter(3, 5, refuse="deployment gone"), runner.StandingGrant(), tmp_path / "a")
    assert outcome.result == "refused" and "deployment gone" in outcome.message
    assert [(e["result"], e["reason"]) for e in audit] == [("refused", "not applied: deployment gone")]
    _, audit = await go(Counter(3, 5, refuse="deployment gone"), Scripted(True), tmp_path / "b")
    assert audit == []  # the operator read it on the screen: nothing was decided


async def test_a_failed_check_is_audited_once_and_nothing_is_sent(tmp_path):
    kind = Counter(3, 5, check=Preflight(False, "admission webhook denied", 422))
    outcome, audit = await go(kind, Scripted(True), tmp_path)
    assert outcome.result == "failed" and outcome.status == 422 and "nothing was changed" in outcome.message
    assert kind.executed == 0
    assert [(e["result"], e["dry_run"], e["reason"]) for e in audit] == [
        ("failed", True, "admission webhook denied")]


async def test_a_conflict_is_read_again_and_confirmed_again_by_a_person(tmp_path):
    kind = Counter(3, 5)
    kind.moves = [4]  # someone scaled it to 4 between the plan and the write
    person = Scripted(True, True)
    outcome, audit = await go(kind, person, tmp_path)
    assert outcome.ok and kind.value == 5 and kind.executed == 2
    assert person.seen[0] == "planned: count 3 → 5"
    assert person.seen[1].startswith("planned: count 4 → 5 (⚠ count is 4 now")
    assert [e.get("result") for e in audit if e["phase"] == "outcome"] == ["conflict", "ok"]


async def test_a_conflict_under_a_grant_is_its_outcome_the_next_tick_decides_again(tmp_path):
    kind = Counter(3, 5)
    kind.moves = [4]
    outcome, audit = await go(kind, runner.StandingGrant(), tmp_path)
    assert outcome.result == "conflict" and kind.executed == 1 and kind.value == 4
    assert [e.get("result") for e in audit if e["phase"] == "outcome"] == ["conflict"]


async def test_an_audit_log_that_cannot_be_written_refuses_before_anything_is_sent(tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "audit.jsonl").mkdir()  # a directory where the log should be: no write can succeed
    kind = Counter(3, 5)
    board = ActionBoard()
    run = board.begin(kind, kind.target)
    outcome = await runner.run(run, runner.StandingGrant(), audit=AuditLog(tmp_path / "ro" / "audit.jsonl"))
    board.end(run)
    assert outcome.result == "refused" and "nothing was sent" in outcome.message
    assert kind.executed == 0 and kind.value == 3
