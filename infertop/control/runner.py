"""The one pipeline's orchestration: plan → preflight → confirm → execute, audited → re-plan on a conflict.

Every kind of action goes through :func:`run`. Who confirms is the caller's part, a :class:`Confirmer`:
the console passes its confirmation screen (``y`` only), auto mode a :class:`StandingGrant` — the
switch to auto mode, itself an audited action of this pipeline, is the operator's standing
confirmation. The runner writes the audit: the intent before the kind sends anything, the outcome once
known, a failed check (nothing was sent), and, for a standing grant, a change it refused to send.
Kinds whose executor still writes its own lines (``audits_itself``: the local engine manager, whose
intent carries the process it verified just before its first signal) are executed unaudited here.

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


class StandingGrant:
    """Auto mode's confirmation: granted once (an audited ``advisor.mode`` action), within its bounds.

    Says nothing while it runs; a conflict is not confirmed again by itself (the next tick decides
    afresh), so :func:`run` returns it as the outcome."""

    audits_refusals = True
    reconfirms = False

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
              changed: Callable[[float, str], None] | None = None) -> Outcome:
    """Take ``run.kind`` through the pipeline; its outcome (``cancelled`` when not confirmed).

    ``log(style, text)`` gets one plain line per step worth a Log line (a failed check, a conflict,
    the outcome); ``changed(wall_s, text)`` a line for "what changed" when the action succeeded.
    The caller began ``run`` on its board and ends it there."""
    kind = run.kind
    note: str | None = None
    try:
        while True:
            try:
                review = await asyncio.to_thread(kind.plan)
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
                pre = await asyncio.to_thread(kind.preflight)
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
                try:
                    loop.call_soon_threadsafe(confirmer.progressed, run)
                except RuntimeError:
                    raise Abandoned() from None  # the loop is gone

            outcome = await in_daemon_thread(lambda: execute_audited(kind, audit, progress, run.abort, pre),
                                             f"action {kind.object_key}")
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
