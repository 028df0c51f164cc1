"""The one pipeline's orchestration: plan → preflight → confirm → execute, audited → re-plan on a conflict.

Every kind of action goes through :func:`run`. Who confirms is the caller's part, a :class:`Confirmer`:
the console passes its confirmation screen (``y`` only), auto mode a :class:`StandingGrant` — the
switch to auto mode, itself an audited action of this pipeline, is the operator's standing
confirmation. The runner writes the audit: the intent before the kind sends anything, the outcome once
known, a failed check (nothing was sent), and, for a standing grant, a change it refused to send. A kind
whose intent carries what it verified just before its first signal (a local engine: its pids, its
in-flight count) is handed the intent writer (``intent_at_send``); its lines are still written here.
``infertop engine`` runs its actions through :func:`run_blocking` with a :class:`CommandLine`: the
command is the operator's confirmation.

No UI imports: asyncio and threads only, so a test drives it without a Pilot.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .audit import AuditLog, AuditUnavailable
from .pipeline import DONE, REVIEW, Abandoned, ActionRun, Outcome, Preflight, Progress, Review, execute_audited

CONFLICT_NOTE = "it was read again: review the change below and confirm again."


class Confirmer(Protocol):
    """What the runner tells, and asks, whoever confirms this run (the console's screen, a grant)."""

    #: a plan refused under a standing grant is audited (decided and never sent); a person sees it instead
    audits_refusals: bool
    #: after a conflict, plan and ask again (a person); a grant returns the conflict (the next tick decides)
    reconfirms: bool

    def planned(self, run: ActionRun, review: Review, note: str | None) -> None: ...

    def plan_failed(self, run: ActionRun, error: Exception) -> None: ...

    def checked(self, run: ActionRun, pre: Preflight) -> None: ...

    async def decide(self, run: ActionRun) -> bool: ...

    def started(self, run: ActionRun) -> None: ...

    def progressed(self, run: ActionRun) -> None: ...

    def conflict(self, run: ActionRun, note: str) -> None: ...

    def finished(self, run: ActionRun, outcome: Outcome) -> None: ...


class _Silent:
    """A confirmer that says nothing while it runs."""

    def planned(self, run: ActionRun, review: Review, note: str | None) -> None:
        pass

    def plan_failed(self, run: ActionRun, error: Exception) -> None:
        pass

    def checked(self, run: ActionRun, pre: Preflight) -> None:
        pass

    async def decide(self, run: ActionRun) -> bool:
        return True

    def started(self, run: ActionRun) -> None:
        pass

    def progressed(self, run: ActionRun) -> None:
        pass

    def conflict(self, run: ActionRun, note: str) -> None:
        pass

    def finished(self, run: ActionRun, outcome: Outcome) -> None:
        pass


class CommandLine(_Silent):
    """A command typed by the operator (``infertop engine stop e``): the command is the confirmation.

    The command prints its own progress and result; a refusal is the command's to print (a person
    reads it), not an audit line; a conflict is returned (the command exits with it)."""

    audits_refusals = False
    reconfirms = False


class StandingGrant(_Silent):
    """Auto mode's confirmation: granted once (an audited ``advisor.mode`` action), within its bounds.

    Says nothing while it runs; a conflict is not confirmed again by itself (the next tick decides
    afresh), so :func:`run` returns it as the outcome."""

    audits_refusals = True
    reconfirms = False


async def in_daemon_thread(fn: Callable[[], Any], name: str) -> Any:
    """Run ``fn`` in a daemon thread: unlike ``asyncio.to_thread``, quitting never waits for it."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        if not fut.done():
            setter(value)

    def work() -> None:
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 — handed to the awaiting coroutine
            try:
                loop.call_soon_threadsafe(deliver, fut.set_exception, e)
            except RuntimeError:
                pass  # the loop is gone (quit)
            return
        try:
            loop.call_soon_threadsafe(deliver, fut.set_result, result)
        except RuntimeError:
            pass

    threading.Thread(target=work, name=name, daemon=True).start()
    return await fut


def record_refusal(audit: AuditLog | None, kind: Any, why: str, result: str = "refused", **extra: Any) -> None:
    """One audit line for a change that was decided and never sent: the log and the audit agree."""
    if audit is None:
        return
    details = _details(kind) | extra
    try:
        audit.record(kind.action, kind.target, result, reason=why, message=why, **details)
    except AuditUnavailable:
        pass  # nothing was sent: there is no intent to reconcile


def _details(kind: Any) -> dict[str, Any]:
    try:
        details = dict(kind.audit_details())
    except Exception:  # noqa: BLE001 — a kind that cannot say more is audited with its name and target
        details = {}
    details.pop("message", None)
    details.pop("reason", None)
    return details


async def run(run: ActionRun, confirmer: Confirmer, *, audit: AuditLog | None,
              on_forbidden: Callable[[], None] | None = None, preflight_name: str = "check",
              log: Callable[[str, str], None] = lambda style, text: None,
              changed: Callable[[float, str], None] | None = None,
              unaudited: bool = False, inline: bool = False) -> Outcome:
    """Take ``run.kind`` through the pipeline; its outcome (``cancelled`` when not confirmed).

    ``log(style, text)`` gets one plain line per step worth a Log line (a failed check, a conflict,
    the outcome); ``changed(wall_s, text)`` a line for "what changed" when the action succeeded.
    ``unaudited``: an audit log that cannot be written does not refuse the action (the operator asked
    for that: ``--unaudited``). ``inline``: plan, check and execute in the loop's own thread, progress
    passed on at once (:func:`run_blocking`). The caller began ``run`` on its board and ends it there."""
    kind = run.kind
    note: str | None = None

    async def off_loop(fn: Callable[[], Any]) -> Any:
        return fn() if inline else await asyncio.to_thread(fn)

    try:
        while True:
            try:
                review = await off_loop(kind.plan)
            except Exception as e:  # noqa: BLE001 — ActionRefused, KubeError, EngineError: one line
                if getattr(e, "status", 0) == 403 and on_forbidden is not None:
                    on_forbidden()
                confirmer.plan_failed(run, e)
                if confirmer.audits_refusals:
                    record_refusal(audit, kind, f"not applied: {e}")
                return Outcome("refused", str(e), getattr(e, "status", 0))
            run.title = review.title if not run.title or run.title == kind.target else run.title
            run.review = review
            confirmer.planned(run, review, note)
            try:
                pre = await off_loop(kind.preflight)
            except Exception as e:  # noqa: BLE001
                pre = Preflight(False, str(e), getattr(e, "status", 0))
            run.preflight = pre
            confirmer.checked(run, pre)
            if not pre.ok:
                if pre.status == 403 and on_forbidden is not None:
                    on_forbidden()
                message = f"{preflight_name} failed — nothing was changed: {pre.message}"
                record_refusal(audit, kind, pre.message, result="failed", dry_run=True)
                log("red", f"{review.title}: {preflight_name} failed: {pre.message}")
                return Outcome("failed", message, pre.status)
            run.state = REVIEW
            if not await confirmer.decide(run):
                return Outcome("cancelled", "not confirmed")
            run.start()
            confirmer.started(run)
            loop = asyncio.get_running_loop()

            def progress(p: Progress, run: ActionRun = run) -> None:
                # from the action's thread: never waits for, nor fails because of, whoever shows it
                if run.abandoned:
                    raise Abandoned()
                run.set_progress(p)
                if inline:
                    confirmer.progressed(run)
                    return
                try:
                    loop.call_soon_threadsafe(confirmer.progressed, run)
                except RuntimeError:
                    raise Abandoned() from None  # the loop is gone

            def execute(pre: Preflight = pre) -> Outcome:
                return execute_audited(kind, audit, progress, run.abort, pre, unaudited=unaudited)

            outcome = execute() if inline else await in_daemon_thread(execute, f"action {kind.object_key}")
            if outcome.result == "conflict" and confirmer.reconfirms:
                note = f"⚠ {outcome.message} — {CONFLICT_NOTE}" if outcome.message else f"⚠ {CONFLICT_NOTE}"
                run.progress = None
                log("yellow", f"{review.title}: conflict — {outcome.message}; re-read, confirm again")
                confirmer.conflict(run, note)
                continue
            if outcome.status == 403 and on_forbidden is not None:
                on_forbidden()
            run.outcome, run.state = outcome, DONE
            if outcome.ok and changed is not None:
                changed(time.time(), f"{review.summary} ({kind.action} {kind.target}, from this console)")
            log("green" if outcome.ok else ("yellow" if outcome.result == "aborted" else "red"),
                f"{review.title}: {outcome.result} — {outcome.message}")
            confirmer.finished(run, outcome)
            return outcome
    except Abandoned:
        return Outcome("unknown", "abandoned: infertop quit with it in flight")
    finally:
        run.state = DONE


def run_blocking(run_: ActionRun, confirmer: Confirmer, *, audit: AuditLog | None, unaudited: bool = False,
                 **kw: Any) -> Outcome:
    """:func:`run` for a command line, in the calling thread on an event loop of its own: the kind runs in
    this thread, so Ctrl-C reaches it as it would a plain call (a start it interrupts stops what it spawned).
    Not for a thread whose event loop is running."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run(run_, confirmer, audit=audit, unaudited=unaudited, inline=True, **kw))
    finally:
        loop.close()
