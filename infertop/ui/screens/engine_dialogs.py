"""Dialogs for local engines: pick a profile, edit arguments, confirm, follow progress."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, RichLog, Static
from textual.widgets.option_list import Option

DIALOG_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 90; max-width: 100%; height: auto; max-height: 90%;
    border: round $primary; background: $surface; padding: 0 1; }}
{name} .title {{ text-style: bold; padding: 0 0 1 0; }}
{name} .buttons {{ height: 3; align-horizontal: right; }}
{name} Button {{ margin: 0 0 0 1; }}
"""


class ProfilePicker(ModalScreen[str | None]):
    """Choose a launch profile to start."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]
    DEFAULT_CSS = DIALOG_CSS.format(name="ProfilePicker")

    def __init__(self, profiles: dict) -> None:
        super().__init__()
        self.profiles = profiles

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Start a vLLM engine from a launch profile", classes="title")
            options = []
            for name, p in self.profiles.items():
                seqs = f", max_num_seqs {p.max_num_seqs}" if p.max_num_seqs else ""
                options.append(Option(f"{name}  —  {p.served_model_name or p.model} on {p.host}:{p.port}{seqs}", id=name))
            yield OptionList(*options, id="profiles")
            yield Static("[dim]Enter starts it (after a confirmation), Esc cancels.[/dim]")

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


class ConfirmDialog(ModalScreen[bool]):
    """Show exactly what will happen; Enter or y confirms, Esc or n cancels."""

    BINDINGS = [Binding("escape,n", "dismiss(False)", "Cancel"), Binding("y", "dismiss(True)", "Confirm")]
    DEFAULT_CSS = DIALOG_CSS.format(name="ConfirmDialog")

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, classes="title")
            yield Static(self.body)
            with Horizontal(classes="buttons"):
                yield Button("Cancel (n)", id="no")
                yield Button("Confirm (y)", id="yes", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class ArgsDialog(ModalScreen[dict | None]):
    """Edit one launch argument; shows old → new before anything happens."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]
    DEFAULT_CSS = DIALOG_CSS.format(name="ArgsDialog")

    def __init__(self, engine: str, key: str, old: int | None) -> None:
        super().__init__()
        self.engine, self.key, self.old = engine, key, old

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Change {self.key} of {self.engine}", classes="title")
            yield Input(value=str(self.old or ""), placeholder="a positive integer", id="value", type="integer")
            yield Static(id="preview")
            yield Static("[dim]Stock vLLM cannot change it live: infertop drains the engine (SIGTERM, vLLM "
                         "finishes in-flight requests), restarts it with the new value, waits for /health and "
                         "checks the running process took it. Enter continues to the confirmation.[/dim]")

    def on_mount(self) -> None:
        self._preview(self.query_one("#value", Input).value)

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        self._preview(event.value)

    def _parse(self, value: str) -> int | None:
        try:
            n = int(value)
        except ValueError:
            return None
        return n if n >= 1 else None

    def _preview(self, value: str) -> None:
        n = self._parse(value)
        text = (f"{self.key}: [b]{self.old}[/b] → [b]{n}[/b]" if n is not None and n != self.old
                else "[yellow]enter a new positive integer[/yellow]")
        self.query_one("#preview", Static).update(Text.from_markup(text))

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        n = self._parse(event.value)
        if n is not None and n != self.old:
            self.dismiss({self.key: n})


class Feedback:
    """Thread-safe progress channel of an :class:`OperationScreen`."""

    def __init__(self, line: Callable[[str], None], status: Callable[[str], None]) -> None:
        self.line = line
        self.status = status


class OperationScreen(ModalScreen[object]):
    """Runs a blocking engine operation in a thread worker and shows its progress.

    ``run(progress)`` is called in a thread with a :class:`Feedback`:
    ``progress.line(text)`` appends to the log, ``progress.status(text)``
    replaces the live status line. The result (or the exception) goes to
    ``on_done`` when the operation finishes; Esc closes the screen then.
    """

    BINDINGS = [Binding("escape", "close", "Close")]
    DEFAULT_CSS = DIALOG_CSS.format(name="OperationScreen") + """
    OperationScreen RichLog { height: 14; border: none; background: $surface; }
    """

    def __init__(self, title: str, run: Callable[[Callable[[str], None]], object],
                 describe: Callable[[object], str], on_done: Callable[[object], None] | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.run_op = run
        self.describe = describe
        self.on_done = on_done
        self.result: object = None
        self.done = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, classes="title")
            yield RichLog(id="op-log", wrap=True, markup=False, max_lines=500)
            yield Static("working…", id="op-status")

    def on_mount(self) -> None:
        self._work()

    def _line(self, text: str) -> None:
        self.query_one("#op-log", RichLog).write(text)

    def _status(self, text: str) -> None:
        if not self.done:
            self.query_one("#op-status", Static).update(text)

    @work(thread=True, exclusive=True, group="engine-op", exit_on_error=False)
    def _work(self) -> None:
        progress = Feedback(lambda t: self.app.call_from_thread(self._line, t),
                            lambda t: self.app.call_from_thread(self._status, t))
        try:
            result = self.run_op(progress)
        except Exception as e:  # noqa: BLE001 — shown in place, never a traceback
            result = e
        self.app.call_from_thread(self._finish, result)

    def _finish(self, result: object) -> None:
        self.result, self.done = result, True
        if self.on_done is not None:
            self.on_done(result)
        ok = not isinstance(result, Exception)
        summary = self.describe(result)
        self._line(summary)
        status = self.query_one("#op-status", Static)
        status.update(Text.from_markup(("[green]done[/green]: " if ok else "[red]failed[/red]: ")
                                       + Text(summary.splitlines()[0]).markup + "   [dim](Esc closes)[/dim]"))

    def action_close(self) -> None:
        if self.done:
            self.dismiss(self.result)
        else:
            self.notify("still running: Esc closes this once it has finished", severity="warning", timeout=3)
