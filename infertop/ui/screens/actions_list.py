"""The running actions (reopen one with Enter) and the question asked before quitting with some in flight."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 100; max-width: 100%; height: auto; max-height: 90%;
    border: round $primary; background: $surface; padding: 0 1; }}
{name} .title {{ text-style: bold; padding: 0 0 1 0; }}
{name} .hint {{ color: $text-muted; }}
{name} OptionList {{ height: auto; max-height: 20; }}
"""


class ActionsListScreen(ModalScreen[str | None]):
    """Actions in flight, each with its progress and countdown; Enter reopens its dialog, Esc closes."""

    BINDINGS = [Binding("escape,a", "close", "Close", show=False)]
    DEFAULT_CSS = _CSS.format(name="ActionsListScreen")

    def __init__(self, runs: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.runs = list(runs)  # (key, title, status)
        self._answered = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Running actions", classes="title")
            yield OptionList(*self._options(), id="actions-list")
            yield Static("Enter opens the action (abort it there with a). Esc closes; the actions go on.",
                         classes="hint")

    def _options(self) -> list[Option]:
        return [Option(f"{title}\n  {status}", id=key) for key, title, status in self.runs]

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def show(self, runs: list[tuple[str, str, str]]) -> None:
        """Repaint with the current runs (keeps the highlighted one)."""
        self.runs = list(runs)
        if not self.is_attached:
            return
        ol = self.query_one(OptionList)
        keep = ol.highlighted
        ol.clear_options()
        ol.add_options(self._options())
        if self.runs:
            ol.highlighted = min(keep or 0, len(self.runs) - 1)

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._close(event.option.id)

    def action_close(self) -> None:
        self._close(None)

    def _close(self, key: str | None) -> None:
        # once: keys typed ahead (Enter, then a) would pop the screen below it too (a crash on a busy host)
        if not self._answered:
            self._answered = True
            self.dismiss(key)


class QuitScreen(ModalScreen[bool]):
    """"2 actions in flight: quit anyway? y/n" — only y quits."""

    BINDINGS = [Binding("y", "answer(True)", "Quit", show=False),
                Binding("n,escape", "answer(False)", "Stay", show=False)]
    DEFAULT_CSS = _CSS.format(name="QuitScreen")

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, markup=False, id="quit-question")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
