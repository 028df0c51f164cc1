"""The one action pipeline in the app: confirmation, background execution, the list of running actions.

``ActionRunner`` is a base of the app's action mixins (local engines,
Kubernetes): :meth:`ActionRunner.start_action` takes any
:class:`~infertop.control.pipeline.ActionKind` through plan → diff →
preflight → :class:`ConfirmScreen` (``y`` only) → execute in a background
thread → follow with a countdown → audit. Actions on different objects run
side by side; a second one on the same object is refused with the reason.
Esc hides a running action's dialog, ``a`` lists the running actions and
reopens one; quitting with actions in flight asks first. A key that cannot
act here says why when pressed (:meth:`ActionRunner.action_denied_reason`).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape

from ..config import default_state_dir
from ..control.audit import AuditLog
from ..control.pipeline import (
    DONE,
    Abandoned,
    REVIEW,
    ActionBoard,
    ActionBusy,
    ActionKind,
    ActionRun,
    Outcome,
    Preflight,
    Progress,
    execute_audited,
)
from .screens.actions_list import ActionsListScreen, QuitScreen
from .screens.confirm import ConfirmScreen

CONFLICT_NOTE = "it was read again: review the change below and confirm again."


QUIT_ABORT_WAIT_S = 15.0  # how long quitting waits for aborted actions (their undrain) before exiting


def _quit_note(run: ActionRun) -> str:
    """What quitting does to ``run`` ("quitting aborts it and undrains …"); "" when it is abandoned."""
    fn = getattr(run.kind, "quit_note", None)
    return fn() if callable(fn) else ""


def quit_question(runs: list[ActionRun]) -> str:
    """"1 action in flight: restart tiny — quitting aborts it and undrains tiny at gateway gw; quit? y/n"."""
    n = len(runs)
    head = f"{n} action{'s' if n != 1 else ''} in flight"
    unknown = "Their outcome is not known yet: the next start reports them from the audit log."
    if not any(_quit_note(r) for r in runs):  # all abandoned on quit
        names = ", ".join(r.title for r in runs[:3]) + (" …" if n > 3 else "")
        return f"{head}: quit anyway? y/n\n{names}\n{unknown}"
    lines = [f"{r.title} — {_quit_note(r) or 'abandoned: its outcome is reported at the next start'}" for r in runs[:3]]
    if n == 1:
        return f"{head}: {lines[0]}; quit? y/n"
    return f"{head}: quit? y/n\n" + "\n".join(lines) + ("\n…" if n > 3 else "")


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
                pass  # the app's loop is gone (quit)
            return
        try:
            loop.call_soon_threadsafe(deliver, fut.set_result, result)
        except RuntimeError:
            pass

    threading.Thread(target=work, name=name, daemon=True).start()
    return await fut


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


class ActionRunner:
    """Mixin for InfertopApp (a base of EngineActions and KubeActions)."""

    _action_board: ActionBoard | None = None
    _actions_timer: Any = None

    @property
    def action_board(self) -> ActionBoard:
        if self._action_board is None:
            self._action_board = ActionBoard()
        return self._action_board

    def audit_log(self) -> AuditLog:
        """The one audit log (config ``audit_log``, else ``audit.jsonl`` in the state directory)."""
        s = self.settings  # type: ignore[attr-defined]
        path = s.config.audit_log or (Path(getattr(s, "state_dir", None) or default_state_dir()) / "audit.jsonl")
        return AuditLog(path)

    # ----- starting an action
    def start_action(self, kind: ActionKind, *, on_done: Callable[[Outcome], None] | None = None,
                     on_forbidden: Callable[[], None] | None = None, preflight_name: str = "check") -> bool:
        """Take ``kind`` through the pipeline in a worker; False (and a notice) while its object is busy."""
        try:
            run = self.action_board.begin(kind, kind.target)
        except ActionBusy as e:
            self.notify(str(e), severity="warning", timeout=6, markup=False)  # type: ignore[attr-defined]
            return False
        if self._actions_timer is None:
            self._actions_timer = self.set_interval(1.0, self._actions_tick)  # type: ignore[attr-defined]
        self.run_worker(self._pipeline(run, on_done, on_forbidden, preflight_name),  # type: ignore[attr-defined]
                        group=f"action {kind.object_key}", exit_on_error=False)
        return True

    async def _pipeline(self, run: ActionRun, on_done: Callable[[Outcome], None] | None,
                        on_forbidden: Callable[[], None] | None, preflight_name: str) -> str:
        kind = run.kind
        screen = ConfirmScreen(kind.target, dry_run="pending")
        run.view = screen
        self.push_screen(screen)  # type: ignore[attr-defined]
        note: str | None = None
        try:
            while True:
                try:
                    review = await asyncio.to_thread(kind.plan)
                except Exception as e:  # noqa: BLE001 — ActionRefused, KubeError, EngineError: one line
                    if getattr(e, "status", 0) == 403 and on_forbidden is not None:
                        on_forbidden()
                    screen.set_error(str(e))
                    return "failed"
                run.title = review.title
                run.review = review
                screen.set_title(review.title)
                screen.set_plan(review.summary, review.diff, review.notes, note)
                try:
                    pre = await asyncio.to_thread(kind.preflight)
                except Exception as e:  # noqa: BLE001
                    pre = Preflight(False, str(e), getattr(e, "status", 0))
                run.preflight = pre
                if not pre.ok:
                    if pre.status == 403 and on_forbidden is not None:
                        on_forbidden()
                    screen.set_dry_run(False, f"{preflight_name} failed — nothing was changed: {pre.message}")
                    self.log_event(f"[red]{escape(review.title)}: {preflight_name} failed:[/red] "  # type: ignore[attr-defined]
                                   f"{escape(pre.message)}")
                    return "failed"
                screen.set_dry_run(True, pre.message, pre.warnings)
                run.state = REVIEW
                if await screen.decision() != "confirm":
                    return "cancelled"
                run.start()
                screen = self._action_view(run)
                screen.start_running(abortable=kind.abortable, on_abort=run.abort.set)
                self._action_show(run)

                loop = asyncio.get_running_loop()

                def progress(p: Progress, run: ActionRun = run) -> None:
                    # from the action's thread: never waits for, nor fails because of, the screen
                    if run.abandoned:
                        raise Abandoned()
                    run.set_progress(p)
                    try:
                        loop.call_soon_threadsafe(self._action_show, run)
                    except RuntimeError:
                        raise Abandoned() from None  # the app's loop is gone

                audit = None if kind.audits_itself else self.audit_log()
                outcome = await in_daemon_thread(lambda: execute_audited(kind, audit, progress, run.abort, pre),
                                                 f"action {kind.object_key}")
                screen = self._action_view(run)
                if outcome.result == "conflict":  # what changed, then: read again, confirm again
                    note = f"⚠ {outcome.message} — {CONFLICT_NOTE}" if outcome.message else f"⚠ {CONFLICT_NOTE}"
                    run.progress = None
                    self.log_event(f"[yellow]{escape(review.title)}: conflict — {escape(outcome.message)}; "  # type: ignore[attr-defined]
                                   "re-read, confirm again[/yellow]")
                    if not screen.is_attached:  # hidden meanwhile: show the re-read change
                        screen = ConfirmScreen(kind.target, dry_run="pending")
                        run.view = screen
                        self.push_screen(screen)  # type: ignore[attr-defined]
                    continue
                if outcome.status == 403 and on_forbidden is not None:
                    on_forbidden()
                run.outcome, run.state = outcome, DONE
                if outcome.ok and getattr(self, "change_records", None) is not None:
                    self.change_records.add(time.time(), f"{review.summary} ({kind.action} {kind.target}, "  # type: ignore[attr-defined]
                                                         "from this console)")
                style = "green" if outcome.ok else ("yellow" if outcome.result == "aborted" else "red")
                self.log_event(f"[{style}]{escape(review.title)}: {outcome.result}[/{style}] — "  # type: ignore[attr-defined]
                               f"{escape(outcome.message)}")
                if screen.is_attached:
                    screen.finish(outcome.ok, outcome.message, outcome.result)
                else:
                    self.notify(f"{review.title}: {outcome.message}", markup=False, timeout=8,  # type: ignore[attr-defined]
                                severity="information" if outcome.ok else "error")
                if on_done is not None:
                    on_done(outcome)
                return outcome.result
        except Abandoned:
            return "unknown"
        finally:
            run.state = DONE
            self.action_board.end(run)
            self._actions_changed()

    def _action_view(self, run: ActionRun) -> ConfirmScreen:
        return run.view

    # ----- progress, countdown, the list
    def _action_text(self, run: ActionRun) -> str:
        return run.status_text()

    def _action_show(self, run: ActionRun, *, tell: bool = True) -> None:
        if not self.is_running:  # type: ignore[attr-defined]
            return
        screen = self._action_view(run)
        if screen is not None and screen.is_attached:
            try:
                screen.set_progress(self._action_text(run),
                                    run.progress.fraction if run.progress is not None else None)
            except Exception:  # noqa: BLE001 — a dialog being hidden right now: the next tick shows it
                pass
        if tell:
            self._actions_changed()

    def _actions_tick(self) -> None:
        """Every second: the countdowns move even when the action reports nothing."""
        runs = self.action_board.in_flight()
        for run in runs:
            self._action_show(run, tell=False)
        if runs or getattr(self, "kube_running_text", ""):
            self._actions_changed()

    def _actions_changed(self) -> None:
        """Tell the panes and an open list what runs now."""
        runs = self.action_board.in_flight()
        kube = [r for r in runs if r.kind.action.startswith("kube.")]
        text = " · ".join(f"{self._run_title(r)}: {self._action_text(r)}" for r in kube)
        if getattr(self, "kube_running_text", None) != text and hasattr(self, "kube_running_text"):
            self.kube_running_text = text
            render = getattr(self, "_kube_render", None)
            if render is not None and self.is_running:  # type: ignore[attr-defined]
                try:
                    render()
                except Exception:  # noqa: BLE001 — the pane is not mounted yet / torn down
                    pass
        for screen in self.screen_stack:  # type: ignore[attr-defined]
            if isinstance(screen, ActionsListScreen):
                screen.show([(r.kind.object_key, self._run_title(r), self._action_text(r)) for r in runs])

    def _run_title(self, run: ActionRun) -> str:
        """The run's title, naming its Kubernetes context when that is no longer the one on view."""
        ctx = getattr(getattr(getattr(run.kind, "control", None), "session", None), "context", None)
        now = getattr(getattr(self, "kube_session", None), "context", None)
        return f"{run.title} (context {ctx})" if ctx and now and ctx != now else run.title

    def action_actions_list(self) -> None:
        runs = self.action_board.in_flight()
        if not runs:
            self.notify("no action is running", timeout=3)  # type: ignore[attr-defined]
            return
        screen = ActionsListScreen([(r.kind.object_key, self._run_title(r), self._action_text(r)) for r in runs])
        self.push_screen(screen, self._reopen)  # type: ignore[attr-defined]

    def _reopen(self, key: str | None) -> None:
        run = next((r for r in self.action_board.in_flight() if r.kind.object_key == key), None)
        if run is None:
            return
        old = self._action_view(run)
        if old.is_attached:
            return
        pre, review = run.preflight, run.review
        screen = ConfirmScreen(run.title, review.summary if review else run.title, review.diff if review else "",
                               notes=(review.notes if review else ()) + tuple(
                                   f"! {w}" for w in (pre.warnings if pre else ())),
                               dry_run=pre.message if pre else None)
        screen.start_running(abortable=run.kind.abortable, on_abort=run.abort.set)
        screen.set_progress(self._action_text(run), run.progress.fraction if run.progress else None)
        run.view = screen
        self.push_screen(screen)  # type: ignore[attr-defined]

    # ----- quitting
    async def action_quit(self) -> None:
        if isinstance(self.screen, QuitScreen):  # type: ignore[attr-defined]
            return  # q again while asked: the answer is y or n
        runs = self.action_board.in_flight()
        if not runs:
            self.exit()  # type: ignore[attr-defined]
            return
        if self._quit_task is not None:
            return  # already quitting: waiting for aborted actions to undrain
        self.push_screen(QuitScreen(quit_question(runs)), self._quit_answer)  # type: ignore[attr-defined]

    _quit_task: asyncio.Task | None = None

    def _quit_answer(self, yes: bool | None) -> None:
        """y: abort the actions that can end cleanly on quit (local engines: their abort undrains),
        abandon the others, and exit once the aborted ones are done (≤ QUIT_ABORT_WAIT_S)."""
        if not yes:
            return
        aborted = []
        for run in self.action_board.in_flight():
            if _quit_note(run):
                run.abort.set()
                aborted.append(run)
            else:
                run.abandoned = True
        if not aborted:
            self.exit()  # type: ignore[attr-defined]
            return
        self.notify(f"aborting {len(aborted)} action{'s' if len(aborted) != 1 else ''}: quitting once "  # type: ignore[attr-defined]
                    f"{'they are' if len(aborted) != 1 else 'it is'} undone (at most {QUIT_ABORT_WAIT_S:g} s)",
                    markup=False, timeout=QUIT_ABORT_WAIT_S)
        self._quit_task = asyncio.get_running_loop().create_task(self._exit_after(aborted))

    async def _exit_after(self, runs: list[ActionRun]) -> None:
        deadline = asyncio.get_running_loop().time() + QUIT_ABORT_WAIT_S
        while any(r.in_flight for r in runs) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for r in runs:
            if r.in_flight:  # its abort did not finish in time: its outcome is reported at the next start
                r.abandoned = True
        self.exit()  # type: ignore[attr-defined]

    # ----- the audit of an earlier run
    def unfinished_actions(self) -> list[dict]:
        """Intents of earlier infertop runs that never got an outcome (blocking: reads the log).

        Each gets an ``unknown`` outcome line now, so that it is reported once, not at every start."""
        audit = self.audit_log()
        try:
            found = audit.unfinished(alive=_pid_alive)
        except Exception:  # noqa: BLE001 — an unreadable log is reported when an action writes
            return []
        for e in found:
            try:
                audit.outcome(e["op"], str(e.get("action")), str(e.get("target")), "unknown",
                              reason=f"infertop (pid {e.get('pid', '?')}) ended before the outcome was known")
            except Exception:  # noqa: BLE001 — reported again next time
                break
        return found

    def report_unfinished(self, entries: list[dict]) -> None:
        for e in entries:
            self.log_event(  # type: ignore[attr-defined]
                f"[yellow]audit: outcome unknown[/yellow] — {escape(str(e.get('action')))} "
                f"{escape(str(e.get('target')))} (intent {escape(str(e.get('time', '?')))} by "
                f"{escape(str(e.get('user', '?')))}, infertop pid {e.get('pid', '?')} ended before it finished): "
                "check its state")

    def on_data_table_row_highlighted(self, _event: Any) -> None:
        """Another object selected: what may run (engine managed? RBAC of its kind/namespace) changes."""
        self.refresh_bindings()  # type: ignore[attr-defined]
        keys = getattr(self, "_kube_keys", None)
        if keys is not None and getattr(self, "kube_session", None) is not None:
            try:
                keys()
            except Exception:  # noqa: BLE001 — the Cluster pane is not mounted yet
                pass

    # ----- keys that cannot act say why
    def action_denied_reason(self, action: str) -> str | None:
        """Why ``action`` cannot run now (None: it can, or it has nothing to say)."""
        for attr in ("engine_denied_reason", "kube_denied_reason"):
            fn = getattr(self, attr, None)
            if fn is not None:
                why = fn(action)
                if why:
                    return why
        return None

    async def run_action(self, action: Any, default_namespace: Any = None, namespaces: Any = None) -> bool:
        handled = await super().run_action(action, default_namespace, namespaces)  # type: ignore[misc]
        if not handled and isinstance(action, str) and (default_namespace is None or default_namespace is self):
            why = self.action_denied_reason(action.split("(")[0])
            if why:
                self.notify(why, severity="warning", timeout=5, markup=False)  # type: ignore[attr-defined]
                return True
        return handled
