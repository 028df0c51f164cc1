"""Help: every key binding, generated from the action table."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from ..actions import visible_actions


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 72; max-width: 100%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1; }
    HelpScreen DataTable { height: auto; }
    """

    def __init__(self, read_only: bool = False) -> None:
        super().__init__()
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            mode = "  (read-only: actions that change anything are disabled)" if self.read_only else ""
            yield Static(f"[b]infertop keys[/b]{mode}")
            table = DataTable(cursor_type="none", show_cursor=False, id="help-keys")
            table.add_columns("Key", "Action", "Group")
            for a in visible_actions(self.read_only):
                table.add_row(a.display_keys, a.title, a.group)
            yield table
            yield Static("[dim]Esc closes. Ctrl+P opens the command palette with the same actions.[/dim]")
