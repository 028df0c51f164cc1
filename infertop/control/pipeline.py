"""The one action pipeline: plan → diff → preflight → confirm → execute → follow → audit.

Every kind of action (a local engine's stop, a Kubernetes scale, later the
gateway's weights or an autoscaler's apply) is an :class:`ActionKind`: it
plans (a fresh read and a pure diff), checks before anything is sent
(a server dry run, whether a pod's in-flight count can be read…), and
executes with progress callbacks and an abort event, within ``timeout_s``.
The UI drives the confirmation (``y`` only) and shows the progress;
:func:`execute_audited` writes the audit (an :class:`AuditTrail`: the intent
before the kind sends anything, the outcome once it is known) — the only
writer of action lines; :class:`ActionBoard` keeps the actions in flight (one
per object, any number on different objects).

Pure: no UI imports, no I/O of its own beyond the audit log it is given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .audit import AuditLog, AuditUnavailable

__all__ = [
    "Abandoned",
    "ActionBoard",
    "ActionBusy",
    "ActionKind",
    "ActionRefused",
    "ActionRun",
    "AuditTrail",
    "IntentFn",
    "Outcome",
    "Preflight",
    "Progress",
    "ProgressFn",
    "Review",
    "countdown_text",
    "execute_audited",
    "run_audited",
]


class ActionRefused(ValueError):
    """The action cannot be planned here (object gone, nothing to change, forbidden …): one line."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Abandoned(BaseException):  # noqa: N818 — a control-flow signal, like SystemExit
    """infertop quits with this action in flight: stop without writing an outcome (the next start reports
    the intent as unknown). A BaseException, so that no ``except Exception`` turns it into an outcome."""


class ActionBusy(RuntimeError):
    """Another action on the same object is still in flight."""


@dataclass(frozen=True)
class Review:
    """What the confirmation screen shows: the exact change, before anything is sent."""

    title: str
    summary: str  # one line: "replicas 3 → 5"
    diff: str = ""  # unified diff of the object before → after
    notes: tuple[str, ...] = ()  # steps, context; a note starting with "!" is a warning


@dataclass(frozen=True)
class Preflight:
    """The check before confirmation (a server dry run, a readable in-flight count …)."""

    ok: bool
    message: str  # "the server accepts the change (dry run)" or the one-line error
    status: int = 0  # HTTP status of a failure (403, 422 …)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Progress:
    """A step of a running action: ``fraction`` 0..1 when known, a line of text, an optional countdown."""

    text: str
    fraction: float | None = None
    countdown_s: float | None = None


@dataclass(frozen=True)
class Outcome:
    result: str  # ok, failed, aborted, stuck, timeout, conflict, refused, unknown (sent; the API stopped
    # answering), undone (sent; an autoscaler or another client set it back)
    message: str
    status: int = 0  # HTTP status of a failure (409, 403, …)
    # the outcome line's details in the kind's own words (a local engine's pid, drain counts, reason), written
    # instead of message and reason, with its own "result" when given; None: the line says message and reason
    audit: Mapping[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.result == "ok"


ProgressFn = Callable[[Progress], None]
#: writes the audit intent with these details (raises :class:`AuditUnavailable`: nothing may be sent)
IntentFn = Callable[..., None]


@runtime_checkable
class ActionKind(Protocol):
    """One action on one object, as the pipeline runs it.

    ``plan`` and ``preflight`` may block (thread workers) and raise
    :class:`ActionRefused`; ``execute`` blocks until the action and its follow
    end, reports through ``progress``, stops early when ``abort`` is set, and
    returns an :class:`Outcome` (``"conflict"`` means: plan and confirm again).

    The pipeline writes the audit. A kind whose intent must carry what it
    verified just before its first signal (a local engine: the pids, the
    in-flight count) sets ``intent_at_send = True``; its ``execute`` then
    takes a third argument, an :data:`IntentFn` it calls right before it
    sends anything, and its outcome's ``audit`` words the outcome line.
    """

    action: str  # audit name: "kube.scale", "engine.stop"
    target: str  # "deployment default/vllm", "engine fake"
    object_key: str  # one action at a time per object
    abortable: bool
    timeout_s: float | None

    def plan(self) -> Review: ...

    def preflight(self) -> Preflight: ...

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome: ...

    def audit_details(self) -> dict[str, Any]: ...


class AuditTrail:
    """One action's audit lines: the intent before anything is sent, then the outcome (``op`` links them).

    :meth:`intent` raises :class:`AuditUnavailable` when the log cannot be written (the action is refused:
    nothing may be sent) — unless ``unaudited``: then the action goes on, and its outcome, a one-shot line,
    says ``unaudited``. An outcome with no intent (the kind refused or failed before sending) is a one-shot
    line; one that says nothing (``audit`` None) when nothing was sent is not written. An outcome that cannot
    be written is kept in ``audit.unwritten`` for whoever ran the action (unless it was an ``ok`` that sent
    nothing: nothing is hidden then)."""

    def __init__(self, audit: AuditLog | None, action: str, target: str, details: Mapping[str, Any] | None = None,
                 *, unaudited: bool = False) -> None:
        self.audit, self.action, self.target = audit, action, target
        self.details = dict(details or {})
        self.unaudited = unaudited
        self.op: str | None = None
        self.intended = False  # the intent was asked for (written, or skipped when unaudited)
        self.refused = False  # the intent could not be written: nothing was sent, nothing more is written

    def intent(self, **details: Any) -> None:
        """Write the intent: the trail's details and ``details`` (those that are not None)."""
        self.intended = True
        if self.audit is None:
            return
        try:
            self.op = self.audit.intent(self.action, self.target, **{**self.details, **_given(details)})
        except AuditUnavailable:
            if not self.unaudited:
                self.intended, self.refused = False, True
                raise

    def outcome(self, outcome: Outcome) -> None:
        if self.audit is None or self.refused or (outcome.audit is None and not self.intended):
            return
        result = outcome.result
        if outcome.audit is not None:
            details = _given(outcome.audit)
            result = str(details.pop("result", result))
        else:
            details = {"message": outcome.message, "reason": None if outcome.ok else outcome.message,
                       **{k: self.details[k] for k in OUTCOME_KEYS if k in self.details}}
        try:
            if self.op is not None:
                self.audit.outcome(self.op, self.action, self.target, result, **details)
            else:
                if self.intended:
                    details["unaudited"] = True
                self.audit.record(self.action, self.target, result, **details)
        except AuditUnavailable as e:
            if self.intended or result != "ok":  # the intent is on disk (or was skipped): the outcome is missed
                self.audit.unwritten.append(f"outcome {self.action} {self.target} {result} not recorded: {e}")


def _given(details: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if v is not None}


def run_audited(audit: AuditLog | None, action: str, target: str, details: dict[str, Any],
                run: Callable[[], Outcome]) -> Outcome:
    """Intent on disk → ``run()`` → outcome. An audit log that cannot be written refuses the action
    (nothing is sent); an exception of ``run`` is a ``failed`` outcome, never a traceback."""
    trail = AuditTrail(audit, action, target, details)
    try:
        trail.intent()
    except AuditUnavailable as e:
        return Outcome("refused", f"nothing was sent: {e}")
    return _run_into(trail, run)


def _run_into(trail: AuditTrail, run: Callable[[], Outcome]) -> Outcome:
    try:
        outcome = run()
    except Exception as e:  # noqa: BLE001
        outcome = Outcome("failed", f"{type(e).__name__}: {e}")
    trail.outcome(outcome)
    return outcome


OUTCOME_KEYS = ("old", "new", "diff", "summary", "context", "kube_user", "server")  # repeated on the outcome line


def execute_audited(kind: ActionKind, audit: AuditLog | None, progress: ProgressFn,
                    abort: threading.Event, preflight: Preflight | None = None, *,
                    unaudited: bool = False) -> Outcome:
    """Run ``kind`` with its audit. The intent goes before ``execute``, or — ``intent_at_send`` — when the kind
    calls it, just before its first signal; ``unaudited``: an unwritable log does not refuse the action."""
    details = kind.audit_details()
    if preflight is not None and preflight.message:
        details.setdefault("preflight", preflight.message)
    trail = AuditTrail(audit, kind.action, getattr(kind, "audit_target", kind.target), details, unaudited=unaudited)
    if getattr(kind, "intent_at_send", False):
        execute: Any = kind.execute  # (progress, abort, intent): see ActionKind
        return _run_into(trail, lambda: execute(progress, abort, trail.intent))
    try:
        trail.intent()
    except AuditUnavailable as e:
        return Outcome("refused", f"nothing was sent: {e}")
    return _run_into(trail, lambda: kind.execute(progress, abort))


def countdown_text(seconds: float) -> str:
    """'12:05 left' (minutes:seconds), '0:00 left' once past."""
    s = max(0, int(round(seconds)))
    return f"{s // 60}:{s % 60:02d} left"


PLANNING, REVIEW, RUNNING, DONE = "planning", "review", "running", "done"


@dataclass
class ActionRun:
    """One pass of one action through the pipeline (what the list of running actions shows)."""

    kind: ActionKind
    title: str
    state: str = PLANNING
    progress: Progress | None = None
    outcome: Outcome | None = None
    started_at: float | None = None  # monotonic, when execution began
    abort: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], float] = time.monotonic
    review: Review | None = None
    preflight: Preflight | None = None
    abandoned: bool = False  # the app quit with it in flight: stop without an outcome
    view: Any = None  # the UI's dialog of this run (opaque here)
    progress_at: float = 0.0

    @property
    def in_flight(self) -> bool:
        """Sent (or being sent) and not finished: what quitting must not lose silently."""
        return self.state == RUNNING

    def start(self) -> None:
        self.state = RUNNING
        self.started_at = self.clock()

    def set_progress(self, p: Progress) -> None:
        self.progress, self.progress_at = p, self.clock()

    def left_s(self) -> float | None:
        """Seconds until the timeout while running: the follow's own countdown, else the kind's timeout."""
        if self.state != RUNNING:
            return None
        p = self.progress
        if p is not None and p.countdown_s is not None:
            return max(0.0, p.countdown_s - (self.clock() - self.progress_at))
        if self.started_at is None or not self.kind.timeout_s:
            return None
        return max(0.0, self.kind.timeout_s - (self.clock() - self.started_at))

    def status_text(self) -> str:
        if self.state == DONE and self.outcome is not None:
            return f"{self.outcome.result}: {self.outcome.message}"
        if self.state == RUNNING:
            text = self.progress.text if self.progress is not None else "running…"
            left = self.left_s()
            text += f" — {countdown_text(left)}" if left is not None else ""
            return ("aborting… " + text) if self.abort.is_set() else text
        return "waiting for confirmation" if self.state == REVIEW else "planning…"


class ActionBoard:
    """The actions in flight: at most one per object, any number on different objects."""

    def __init__(self) -> None:
        self._runs: dict[str, ActionRun] = {}
        self._lock = threading.Lock()

    def begin(self, kind: ActionKind, title: str) -> ActionRun:
        """Register a new run; raises :class:`ActionBusy` while another one holds the same object."""
        with self._lock:
            cur = self._runs.get(kind.object_key)
            if cur is not None and cur.state != DONE:
                raise ActionBusy(f"{cur.title} is still {'running' if cur.in_flight else 'open'} "
                                 f"({cur.status_text()}): one action at a time on {kind.target}")
            run = ActionRun(kind, title)
            self._runs[kind.object_key] = run
            return run

    def end(self, run: ActionRun) -> None:
        with self._lock:
            if self._runs.get(run.kind.object_key) is run:
                del self._runs[run.kind.object_key]

    def runs(self) -> list[ActionRun]:
        with self._lock:
            return list(self._runs.values())

    def in_flight(self) -> list[ActionRun]:
        return [r for r in self.runs() if r.in_flight]
