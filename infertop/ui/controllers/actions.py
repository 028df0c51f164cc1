"""The console's side of the one action pipeline: its confirmation screen, the list of running actions.

:meth:`ActionsController.start_action` hands any :class:`~infertop.control.pipeline.ActionKind` to the
pipeline (:func:`infertop.control.runner.run`: plan → diff → preflight → confirm → execute in a
background thread → audit) with :class:`ScreenConfirmer` — :class:`ConfirmScreen` (``y`` only) and
the follow with a countdown. Actions on different objects run
side by side; a second one on the same object is refused with the reason.
Esc hides a running action's dialog, ``a`` lists the running actions and
reopens one; quitting with actions in flight asks first.

The controller is a plain object the App owns (``app.actions_ctl``); its host is the App (notify,
push_screen, run_worker, set_interval, exit, screen / screen_stack, is_running) and what else it needs
is given explicitly: the settings (where the audit log is), ``changed`` (the fleet's change records),
``log_event`` and ``context`` (the Kubernetes context on view, to name a run's own when it differs).
Others hear of every change of the running actions through :meth:`ActionsController.watch`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape

from ...private_fs import default_state_dir
from ...control import runner
from ...control.audit import AuditLog
from ...control.pipeline import ActionBoard, ActionBusy, ActionKind, ActionRun, Outcome, Preflight
from ..screens.actions_list import ActionsListScreen, QuitScreen
from ..screens.confirm import ConfirmScreen

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


class ScreenConfirmer:
    """The console's part of the pipeline (:class:`~infertop.control.runner.Confirmer`): the
    confirmation screen (``y`` only), shown again after a conflict if it was hidden meanwhile.
    ``actions`` is the controller whose host shows the screens and whose list shows the progress."""

    audits_refusals = False  # the operator sees a refused plan on the screen: nothing was decided
    reconfirms = True

    def __init__(self, actions: ActionsController, run: ActionRun, preflight_name: str) -> None:
        self.actions, self.preflight_name = actions, preflight_name
        run.view = ConfirmScreen(run.kind.target, dry_run="pending")
        actions.host.push_screen(run.view)

    def planned(self, run: ActionRun, review: Any, note: str | None) -> None:
        run.view.set_title(review.title)
        run.view.set_plan(review.summary, review.diff, review.notes, note)

    def plan_failed(self, run: ActionRun, error: Exception) -> None:
        run.view.set_error(str(error))

    def checked(self, run: ActionRun, pre: Preflight) -> None:
        if pre.ok:
            run.view.set_dry_run(True, pre.message, pre.warnings)
        else:
            run.view.set_dry_run(False, f"{self.preflight_name} failed — nothing was changed: {pre.message}")

    async def decide(self, run: ActionRun) -> bool:
        return bool(await run.view.decision() == "confirm")

    def started(self, run: ActionRun) -> None:
        run.view.start_running(abortable=run.kind.abortable, on_abort=run.abort.set)
        self.actions.show(run)

    def progressed(self, run: ActionRun) -> None:
        self.actions.show(run)

    def conflict(self, run: ActionRun, note: str) -> None:
        if not run.view.is_attached:  # hidden meanwhile: show the re-read change
            run.view = ConfirmScreen(run.kind.target, dry_run="pending")
            self.actions.host.push_screen(run.view)

    def finished(self, run: ActionRun, outcome: Outcome) -> None:
        if run.view.is_attached:
            run.view.finish(outcome.ok, outcome.message, outcome.result)
        else:
            self.actions.host.notify(f"{run.title}: {outcome.message}", markup=False, timeout=8,
                                     severity="information" if outcome.ok else "error")


class ActionsController:
    """The running actions: the board, the audit log, the pipeline, the list (``a``) and quitting."""

    def __init__(self, host: Any, settings: Any, *, changed: Callable[[float, str], None] | None,
                 log_event: Callable[[str], None], context: Callable[[], str | None]) -> None:
        self.host, self.settings = host, settings
        self._changed_record, self._log_event, self._context = changed, log_event, context
        self.board = ActionBoard()
        self._timer: Any = None
        self._quit_task: asyncio.Task | None = None
        self._watchers: list[Callable[[list[ActionRun]], bool]] = []
        self._watcher_shows = False  # a watcher still shows a run (the Cluster pane's ▶ line)

    def watch(self, fn: Callable[[list[ActionRun]], bool]) -> None:
        """``fn(runs)`` at every change of the running actions (and every second while it shows one);
        it returns whether it shows something still."""
        self._watchers.append(fn)

    def audit_log(self) -> AuditLog:
        """The one audit log (config ``audit_log``, else ``audit.jsonl`` in the state directory)."""
        s = self.settings
        path = s.config.audit_log or (Path(getattr(s, "state_dir", None) or default_state_dir()) / "audit.jsonl")
        return AuditLog(path)

    # ----- starting an action
    def start_action(self, kind: ActionKind, *, on_done: Callable[[Outcome], None] | None = None,
                     on_forbidden: Callable[[], None] | None = None, preflight_name: str = "check") -> bool:
        """Take ``kind`` through the pipeline in a worker; False (and a notice) while its object is busy."""
        try:
            run = self.board.begin(kind, kind.target)
        except ActionBusy as e:
            self.host.notify(str(e), severity="warning", timeout=6, markup=False)
            return False
        if self._timer is None:
            self._timer = self.host.set_interval(1.0, self.tick)
        self.host.run_worker(self._pipeline(run, on_done, on_forbidden, preflight_name),
                             group=f"action {kind.object_key}", exit_on_error=False)
        return True

    async def _pipeline(self, run: ActionRun, on_done: Callable[[Outcome], None] | None,
                        on_forbidden: Callable[[], None] | None, preflight_name: str) -> str:
        """The pipeline (control/runner.py) with this console's confirmation screen."""
        try:
            outcome = await runner.run(
                run, ScreenConfirmer(self, run, preflight_name), audit=self.audit_log(), on_forbidden=on_forbidden,
                preflight_name=preflight_name, changed=self._changed_record,
                log=lambda style, text: self._log_event(f"[{style}]{escape(text)}[/{style}]"))
            if on_done is not None and run.outcome is not None:
                on_done(outcome)
            return outcome.result
        finally:
            self.board.end(run)
            self.changed()

    # ----- progress, countdown, the list
    def show(self, run: ActionRun, *, tell: bool = True) -> None:
        """Put ``run``'s progress on its dialog (when on view); ``tell``: and on the panes and the list."""
        if not self.host.is_running:
            return
        screen = run.view
        if screen is not None and screen.is_attached:
            try:
                screen.set_progress(run.status_text(), run.progress.fraction if run.progress is not None else None)
            except Exception:  # noqa: BLE001 — a dialog being hidden right now: the next tick shows it
                pass
        if tell:
            self.changed()

    def tick(self) -> None:
        """Every second: the countdowns move even when the action reports nothing."""
        runs = self.board.in_flight()
        for run in runs:
            self.show(run, tell=False)
        if runs or self._watcher_shows:
            self.changed()

    def changed(self) -> None:
        """Tell the panes and an open list what runs now."""
        runs = self.board.in_flight()
        shows = False
        for fn in self._watchers:
            shows = bool(fn(runs)) or shows
        self._watcher_shows = shows
        for screen in self.host.screen_stack:
            if isinstance(screen, ActionsListScreen):
                screen.show([(r.kind.object_key, self.run_title(r), r.status_text()) for r in runs])

    def run_title(self, run: ActionRun) -> str:
        """The run's title, naming its Kubernetes context when that is no longer the one on view."""
        ctx = getattr(getattr(getattr(run.kind, "control", None), "session", None), "context", None)
        now = self._context()
        return f"{run.title} (context {ctx})" if ctx and now and ctx != now else run.title

    def actions_list(self) -> None:
        """``a``: the running actions; Enter reopens one's dialog."""
        runs = self.board.in_flight()
        if not runs:
            self.host.notify("no action is running", timeout=3)
            return
        screen = ActionsListScreen([(r.kind.object_key, self.run_title(r), r.status_text()) for r in runs])
        self.host.push_screen(screen, self._reopen)

    def _reopen(self, key: str | None) -> None:
        run = next((r for r in self.board.in_flight() if r.kind.object_key == key), None)
        if run is None:
            return
        old = run.view
        if old.is_attached:
            return
        pre, review = run.preflight, run.review
        screen = ConfirmScreen(run.title, review.summary if review else run.title, review.diff if review else "",
                               notes=(review.notes if review else ()) + tuple(
                                   f"! {w}" for w in (pre.warnings if pre else ())),
                               dry_run=pre.message if pre else None)
        screen.start_running(abortable=run.kind.abortable, on_abort=run.abort.set)
        screen.set_progress(run.status_text(), run.progress.fraction if run.progress else None)
        run.view = screen
        self.host.push_screen(screen)

    # ----- quitting
    async def quit(self) -> None:
        """q: exit, or — with actions in flight — ask first (:func:`quit_question`)."""
        if isinstance(self.host.screen, QuitScreen):
            return  # q again while asked: the answer is y or n
        runs = self.board.in_flight()
        if not runs:
            self.host.exit()
            return
        if self._quit_task is not None:
            return  # already quitting: waiting for aborted actions to undrain
        self.host.push_screen(QuitScreen(quit_question(runs)), self._quit_answer)

    def _quit_answer(self, yes: bool | None) -> None:
        """y: abort the actions that can end cleanly on quit (local engines: their abort undrains),
        abandon the others, and exit once the aborted ones are done (≤ QUIT_ABORT_WAIT_S)."""
        if not yes:
            return
        aborted = []
        for run in self.board.in_flight():
            if _quit_note(run):
                run.abort.set()
                aborted.append(run)
            else:
                run.abandoned = True
        if not aborted:
            self.host.exit()
            return
        self.host.notify(f"aborting {len(aborted)} action{'s' if len(aborted) != 1 else ''}: quitting once "
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
        self.host.exit()

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
            self._log_event(
                f"[yellow]audit: outcome unknown[/yellow] — {escape(str(e.get('action')))} "
                f"{escape(str(e.get('target')))} (intent {escape(str(e.get('time', '?')))} by "
                f"{escape(str(e.get('user', '?')))}, infertop pid {e.get('pid', '?')} ended before it finished): "
                "check its state")
