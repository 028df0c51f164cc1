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
        self.abortable, self.timeout_s = False, 5.0

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


class Sender:
    """A kind whose intent carries what it verified just before it sends (``intent_at_send``), like a local
    engine's stop: the pid it checked; its outcome line is in its own words (``Outcome.audit``)."""

    intent_at_send = True

    def __init__(self, *, refuse: str = "") -> None:
        self.refuse = refuse
        self.sent = 0
        self.action, self.target, self.object_key = "thing.stop", "thing t", "thing:t"
        self.audit_target = "t"
        self.abortable, self.timeout_s = False, 5.0

    def plan(self) -> Review:
        return Review("Stop thing t", "stop t")

    def preflight(self) -> Preflight:
        return Preflight(True, "")

    def audit_details(self) -> dict:
        return {}

    def execute(self, progress, abort: threading.Event, intent=None) -> Outcome:
        if self.refuse:  # refused before anything was sent: no intent
            return Outcome("refused", self.refuse, audit={"result": "refused", "reason": self.refuse})
        intent(check={"pid": 4242}, grace_s=None)  # None: left out of the line
        self.sent += 1
        return Outcome("ok", "stopped", audit={"result": "ok", "pid": 4242, "seconds": 1.5})


def test_a_kind_that_intends_at_send_is_audited_by_the_pipeline_in_its_own_words(tmp_path):
    """The command line's run: in this thread, confirmed by the command; the runner writes both lines."""
    kind = Sender()
    outcome = runner.run_blocking(ActionBoard().begin(kind, kind.target), runner.CommandLine(),
                                  audit=AuditLog(tmp_path / "audit.jsonl"))
    assert outcome.ok and kind.sent == 1
    intent, done = entries(tmp_path / "audit.jsonl")
    assert (intent["phase"], intent["target"], intent["check"]) == ("intent", "t", {"pid": 4242})
    assert "grace_s" not in intent and "preflight" not in intent
    assert (done["phase"], done["op"], done["result"], done["pid"], done["seconds"]) == (
        "outcome", intent["op"], "ok", 4242, 1.5)
    assert "message" not in done


def test_a_refusal_before_the_intent_is_one_line_and_an_unwritable_log_refuses_unless_unaudited(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    outcome = runner.run_blocking(ActionBoard().begin(k := Sender(refuse="not ours"), k.target),
                                  runner.CommandLine(), audit=log)
    [line] = log.entries()
    assert outcome.result == "refused" and (line["result"], line["reason"]) == ("refused", "not ours")
    assert "phase" not in line and k.sent == 0
    (tmp_path / "ro" / "audit.jsonl").mkdir(parents=True)  # no write can succeed
    blocked = AuditLog(tmp_path / "ro" / "audit.jsonl")
    outcome = runner.run_blocking(ActionBoard().begin(k := Sender(), k.target), runner.CommandLine(), audit=blocked)
    assert outcome.result == "failed" and k.sent == 0 and blocked.unwritten == []  # refused: nothing sent
    outcome = runner.run_blocking(ActionBoard().begin(k := Sender(), k.target), runner.CommandLine(), audit=blocked,
                                  unaudited=True)
    assert outcome.ok and k.sent == 1
    [missed] = blocked.unwritten  # acted without a record: whoever ran it hears that the log lacks it
    assert missed.startswith("outcome thing.stop t ok not recorded: audit log ")
