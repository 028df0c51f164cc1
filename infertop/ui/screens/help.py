"""Help: every key binding, generated from the action table, on the terminal's
whole width; long descriptions wrap instead of being cut."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from ..actions import key_display, visible_actions

CLOSE_KEYS = "escape,question_mark"  # q quits infertop everywhere (a priority binding)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding(CLOSE_KEYS, "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 100%; height: 100%; margin: 0 1;
        border: round $primary; background: $surface; padding: 0 1; }
    HelpScreen DataTable { height: 1fr; scrollbar-size-horizontal: 0; scrollbar-size-vertical: 1; }
    HelpScreen #help-hint { color: $text-muted; }
    """

    def __init__(self, read_only: bool = False) -> None:
        super().__init__()
        self.read_only = read_only
        self._width = 0

    def _offered(self, action: str) -> bool:
        """Only what may run: the same gate as the key bindings (RBAC per kind and namespace…).
        Greyed-out actions (False: e.g. no local engine selected) are listed; hidden ones (None) are not."""
        try:
            return self.app.check_action(action, ()) is not None
        except Exception:  # noqa: BLE001 — a gate that cannot decide hides nothing
            return True

    def compose(self) -> ComposeResult:
        mode = "  (read-only: actions that change anything are disabled)" if self.read_only else ""
        closers = ", ".join(key_display(k) for k in CLOSE_KEYS.split(","))
        with Vertical():
            yield Static(f"[b]infertop keys[/b]{mode}")
            yield DataTable(cursor_type="none", show_cursor=False, id="help-keys")
            yield Static(Text(f"{closers} close · ↑ ↓ PgUp PgDn scroll · ^P: the same actions by name"),
                         id="help-hint")

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()  # arrows and PgUp/PgDn scroll it

    def on_resize(self) -> None:
        self._fill(self.size.width)

    def _fill(self, screen_width: int) -> None:
        """Columns sized to the screen: Key and Group as wide as their longest
        entry, Action takes the rest and wraps."""
        if screen_width == self._width:
            return
        self._width = screen_width
        actions = [a for a in visible_actions(self.read_only) if self._offered(a.action.split("(")[0])]
        keys = [a.display_keys for a in actions]
        key_w = max(len("Key"), *(len(k) for k in keys))
        group_w = max(len("Group"), *(len(a.group) for a in actions))
        # screen margin 2, border 2, padding 2, scrollbar 1, three cells of padding 1 on each side
        action_w = max(20, screen_width - 7 - 6 - key_w - group_w)
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_column("Key", width=key_w, key="key")
        table.add_column("Action", width=action_w, key="action")
        table.add_column("Group", width=group_w, key="group")
        for a, k in zip(actions, keys):
            table.add_row(k, Text(a.title), a.group, height=None)
