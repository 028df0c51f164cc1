"""The sort picker: the Engines table's columns in a list (as htop's F6); the
column already sorted on is marked, and choosing it again reverses it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option


class SortPicker(ModalScreen[str | None]):
    """Returns the chosen column key, or None when closed with Esc."""

    BINDINGS = [Binding("escape", "cancel", "Close")]
    DEFAULT_CSS = """
    SortPicker { align: center middle; }
    SortPicker > Vertical { width: 46; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1; }
    SortPicker OptionList, SortPicker OptionList:focus { height: auto; max-height: 22; border: none; padding: 0; }
    SortPicker #sort-hint { color: $text-muted; }
    """

    def __init__(self, columns: list[tuple[str, str]], current: str, descending: bool) -> None:
        """``columns``: (key, title) in the order to offer them."""
        super().__init__()
        self.columns = columns
        self.current = current
        self.descending = descending

    def compose(self) -> ComposeResult:
        arrow = "▼" if self.descending else "▲"
        options = []
        for key, title in self.columns:
            mark = f"  {arrow} (again: reverse)" if key == self.current else ""
            options.append(Option(f"{title}{mark}", id=key))
        with Vertical():
            yield Static("[b]Sort engines by[/b]")
            yield OptionList(*options, id="sort-options")
            yield Static("Enter sorts · Esc closes", id="sort-hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        keys = [key for key, _ in self.columns]
        if self.current in keys:
            options.highlighted = keys.index(self.current)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
