"""Replay: ask where to seek."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class SeekScreen(ModalScreen[str | None]):
    """One line: HH:MM[:SS], +5m (from the start) or -5m (from the end)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]
    DEFAULT_CSS = """
    SeekScreen { align: center middle; }
    SeekScreen > Vertical { width: 60; max-width: 100%; height: auto; border: round $primary;
        background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Seek to a time of the recording: HH:MM[:SS], +5m from its start, -5m from its end")
            yield Input(placeholder="10:42  or  +5m  or  -2m", id="seek-input")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
