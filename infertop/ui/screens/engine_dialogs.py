"""Dialogs for local engines: pick a profile, edit an argument. (Confirmation and progress: the one
:class:`~infertop.ui.screens.confirm.ConfirmScreen` of the action pipeline.)"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
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


class ArgsDialog(ModalScreen[dict | None]):
    """Edit one launch argument; shows old → new before anything happens."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]
    DEFAULT_CSS = DIALOG_CSS.format(name="ArgsDialog")

    def __init__(self, engine: str, key: str, old: int | None, value: int | None = None) -> None:
        super().__init__()
        self.engine, self.key, self.old = engine, key, old
        self.value = value  # filled in (a triage remedy's proposal); else the current value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Change {self.key} of {self.engine}", classes="title")
            yield Input(value=str(self.value or self.old or ""), placeholder="a positive integer", id="value", type="integer")
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
