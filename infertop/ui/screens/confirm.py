"""The one confirmation dialog of the action pipeline (Kubernetes, local engines, what comes next).

It shows the exact change (a one-line summary and a diff), the result of a
server-side dry run, what will happen step by step and any warnings; then,
once confirmed, the progress of the running action, and its result.

Lifecycle (driven by the caller, usually from an async worker)::

    screen = ConfirmScreen("Scale: deployment default/vllm", dry_run="pending")
    app.push_screen(screen)
    screen.set_plan("replicas 3 → 5", diff_text, notes=[...])
    screen.set_dry_run(True, "the server accepts the change (dry run)")
    if await screen.decision() == "confirm":
        screen.start_running(abortable=True, on_abort=stop_event.set)
        ... screen.set_progress("2/5 ready", 0.4) ...   # from the worker: app.call_from_thread
        screen.finish(True, "replicas 3 → 5: 5/5 ready")

Keys: ``y`` confirms (only once the dry run passed; Enter never does: the
focus sits on Cancel), ``n``/Esc cancels;
while running ``a`` aborts (when the action can be aborted) and Esc hides
the dialog (the action goes on; its result goes to the Log pane); when done
Esc/Enter closes. The dismiss value is ``"cancelled"``, ``"hidden"``, or
the final result (``"ok"``, ``"failed"`` …).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Button, ProgressBar, Static

REVIEW, LOADING, RUNNING, DONE = "review", "loading", "running", "done"


def diff_text(diff: str) -> Text:
    """Colour a unified diff: additions green, removals red, hunks dim."""
    out = Text()
    for i, line in enumerate(diff.splitlines()):
        if i:
            out.append("\n")
        if line.startswith(("+++", "---")):
            out.append(line, style="bold")
        elif line.startswith("+"):
            out.append(line, style="green")
        elif line.startswith("-"):
            out.append(line, style="red")
        elif line.startswith("@@"):
            out.append(line, style="cyan")
        else:
            out.append(line, style="dim")
    return out


class ConfirmScreen(ModalScreen[str]):
    """Preview → dry run → confirm → progress → result, for one change."""

    BINDINGS = [
        Binding("y", "confirm", "Confirm", show=False),
        Binding("n", "cancel", "Cancel", show=False),
        Binding("escape", "escape", "Cancel / hide", show=False),
        Binding("a", "abort", "Abort", show=False),
        Binding("down", "scroll_body(1)", show=False), Binding("up", "scroll_body(-1)", show=False),
        Binding("pagedown", "scroll_body(10)", show=False), Binding("pageup", "scroll_body(-10)", show=False),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > #confirm-box { width: 110; max-width: 100%; height: auto; max-height: 100%;
        border: round $warning; background: $surface; padding: 0 1; overflow-y: auto; }
    ConfirmScreen #confirm-title { text-style: bold; }
    ConfirmScreen #confirm-change { color: $text; text-style: bold; margin: 0 0 1 0; }
    ConfirmScreen #confirm-diff-box { height: auto; max-height: 14; border: none; }
    ConfirmScreen #confirm-notes { color: $text-muted; }
    ConfirmScreen #confirm-dryrun { margin: 1 0 0 0; }
    ConfirmScreen #confirm-progress { display: none; width: 100%; }
    ConfirmScreen #confirm-progress.visible { display: block; }
    ConfirmScreen #confirm-status { height: auto; }
    /* docked: on a small terminal (80x24) the body scrolls and the buttons stay on screen */
    ConfirmScreen #confirm-buttons { height: 3; align-horizontal: right; dock: bottom; }
    ConfirmScreen #confirm-buttons Button { margin: 0 0 0 1; min-width: 12; }
    """

    def __init__(self, title: str, change: str = "", diff: str = "", *, notes: Iterable[str] = (),
                 dry_run: str | None = "pending", confirm_label: str = "Confirm (y)",
                 on_abort: Callable[[], None] | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        self.title_text = title
        self._change = change
        self._diff = diff
        self._notes = list(notes)
        self._dry = dry_run  # "pending", None (not applicable) or text
        self.dry_run_ok: bool | None = None if dry_run == "pending" else True
        self.confirm_label = confirm_label
        self.on_abort = on_abort
        self.abortable = False
        self.state = LOADING if not change else REVIEW
        self.result_text = ""
        self.result = ""
        self.progress_text = ""
        self.progress_fraction: float | None = None
        self._decision: asyncio.Future[str] | None = None
        self._message = ""
        self._ran = False

    # ----- layout
    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.title_text, id="confirm-title", markup=False)
            yield Static(self._change or "reading the live object…", id="confirm-change", markup=False)
            with VerticalScroll(id="confirm-diff-box"):
                yield Static(diff_text(self._diff), id="confirm-diff")
            yield Static(self._notes_text(), id="confirm-notes")
            yield Static(self._dry_text(), id="confirm-dryrun")
            yield ProgressBar(total=100, show_eta=False, id="confirm-progress")
            yield Static("", id="confirm-status", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(self.confirm_label, id="confirm-yes", variant="error", disabled=True)
                yield Button("Abort (a)", id="confirm-abort", variant="warning")
                yield Button("Cancel (n)", id="confirm-no", variant="default")

    def action_scroll_body(self, lines: int) -> None:
        """The body scrolls by keys too (the focus sits on a button): what a small terminal cut off."""
        self.query_one("#confirm-box").scroll_relative(y=lines, animate=False)

    def on_mount(self) -> None:
        self._mounted_ok = True
        self._render_state()

    def _notes_text(self) -> Text:
        t = Text()
        for i, n in enumerate(self._notes):
            if i:
                t.append("\n")
            warn = n.startswith("!")
            t.append(("⚠ " + n[1:].strip()) if warn else ("• " + n), style="yellow" if warn else "")
        return t

    def _dry_text(self) -> Text:
        if self._dry is None:
            return Text("")
        if self._dry == "pending" or self.dry_run_ok is None:
            return Text("dry run: waiting for the server…", style="dim")
        mark, style = ("✓", "green") if self.dry_run_ok else ("✗", "bold red")
        return Text(f"{mark} {self._dry}", style=style)

    def _status_text(self) -> Text:
        if self.state == DONE and self.result_text:
            ok = self.result == "ok"
            return Text(("✓ " if ok else "✗ ") + self.result_text, style="bold green" if ok else "bold red")
        if self.state == RUNNING:
            return Text(self.progress_text or "running…", style="" if self.progress_text else "bold")
        return Text(self._message or "", style="bold yellow")

    def _render_state(self) -> None:
        """Paint every part from the current state (setters may run before the screen is mounted,
        or while it is being dismissed)."""
        if not getattr(self, "_mounted_ok", False) or not self.is_attached:
            return
        try:
            self._paint()
        except NoMatches:
            pass  # dismissed meanwhile (hidden): nothing to paint

    def _paint(self) -> None:
        self.query_one("#confirm-title", Static).update(self.title_text)
        self.query_one("#confirm-change", Static).update(
            self._change or ("" if self.state == DONE else "reading the live object…"))
        self.query_one("#confirm-diff", Static).update(diff_text(self._diff))
        self.query_one("#confirm-notes", Static).update(self._notes_text())
        self.query_one("#confirm-dryrun", Static).update(self._dry_text())
        bar = self.query_one("#confirm-progress", ProgressBar)
        bar.set_class(self.state in (RUNNING, DONE) and self._ran, "visible")
        if self.state == RUNNING and self.progress_fraction is None and self.progress_text:
            bar.update(total=None)
        elif self.state == DONE and self.result == "ok":
            bar.update(total=100, progress=100)
        else:
            bar.update(total=100, progress=round(100 * max(0.0, min(1.0, self.progress_fraction or 0.0))))
        self.query_one("#confirm-status", Static).update(self._status_text())
        yes = self.query_one("#confirm-yes", Button)
        no = self.query_one("#confirm-no", Button)
        abort = self.query_one("#confirm-abort", Button)
        yes.display = self.state in (REVIEW, LOADING)
        yes.disabled = not (self.state == REVIEW and self.dry_run_ok is True)
        abort.display = self.state == RUNNING and self.abortable
        no.label = {RUNNING: "Hide (Esc)", DONE: "Close (Esc)"}.get(self.state, "Cancel (n)")
        no.variant = "primary" if self.state == DONE else "default"
        if self.state != RUNNING:
            no.focus()  # Enter never confirms by accident: y does

    @property
    def change(self) -> str:
        """The one-line change shown (tests, other screens)."""
        return self._change

    @property
    def dry_run_text(self) -> str | None:
        return self._dry

    @property
    def notes(self) -> list[str]:
        return list(self._notes)

    # ----- caller API
    def set_title(self, title: str) -> None:
        self.title_text = title
        self._render_state()

    def set_plan(self, change: str, diff: str = "", notes: Iterable[str] = (), message: str | None = None) -> None:
        """Show a (new) change to review; the dry run result is cleared."""
        self._change, self._diff, self._notes = change, diff, list(notes)
        self._message = message or ""
        self.state = REVIEW
        self.dry_run_ok = None if self._dry is not None else True
        if self._dry is not None:
            self._dry = "pending"
        self._ran = False
        self.progress_text, self.progress_fraction = "", None
        self._render_state()

    def set_dry_run(self, ok: bool, text: str, warnings: Iterable[str] = ()) -> None:
        self.dry_run_ok = ok
        self._dry = text
        self._notes = self._notes + [f"! {w}" for w in warnings]
        if not ok:
            self.state = DONE
            self.result = "failed"
        self._render_state()

    def set_error(self, text: str) -> None:
        """Nothing can be done (the object is gone, forbidden, invalid input): show why, offer Close."""
        self.state = DONE
        self.result = "failed"
        self.result_text = text
        self._render_state()

    async def decision(self) -> str:
        """Wait for the operator: "confirm" or "cancel"."""
        loop = asyncio.get_running_loop()
        self._decision = loop.create_future()
        try:
            return await self._decision
        finally:
            self._decision = None

    def _decide(self, choice: str) -> None:
        if self._decision is not None and not self._decision.done():
            self._decision.set_result(choice)

    def start_running(self, *, abortable: bool = False, on_abort: Callable[[], None] | None = None) -> None:
        self.state = RUNNING
        self.abortable = abortable
        self._ran = True
        self._message = ""
        if on_abort is not None:
            self.on_abort = on_abort
        self._render_state()

    def set_progress(self, text: str, fraction: float | None = None) -> None:
        self.progress_text, self.progress_fraction = text, fraction
        if self.state == RUNNING:
            self._render_state()

    def finish(self, ok: bool, text: str, result: str | None = None) -> None:
        self.state = DONE
        self.result = result or ("ok" if ok else "failed")
        self.result_text = text
        self._render_state()

    # ----- keys and buttons
    def action_confirm(self) -> None:
        if self.state == REVIEW and self.dry_run_ok is True:
            self.state = LOADING  # no double confirm while the caller starts
            self._render_state()
            self._decide("confirm")

    def action_cancel(self) -> None:
        if self.state in (REVIEW, LOADING):
            self._decide("cancel")
            self.dismiss("cancelled")
        elif self.state == DONE:
            self.dismiss(self.result or "done")

    def action_escape(self) -> None:
        if self.state == RUNNING:
            self.dismiss("hidden")
        else:
            self.action_cancel()

    def action_abort(self) -> None:
        if self.state == RUNNING and self.abortable and self.on_abort is not None:
            self.on_abort()
            self.progress_text = "aborting…"
            self._render_state()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "confirm-yes":
            self.action_confirm()
        elif event.button.id == "confirm-abort":
            self.action_abort()
        else:
            self.action_escape()

    def on_unmount(self) -> None:
        self._decide("cancel")
