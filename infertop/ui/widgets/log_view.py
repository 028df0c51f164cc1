"""The Log pane's view: a RichLog whose lines stay bounded before it is first shown.

Textual's RichLog keeps every write made while its size is unknown (a Log
pane never opened) and applies ``max_lines`` only once it renders them: a
console that never opens the Log pane held every line of its session (at 64
engines ~1.3 lines/s, the one thing still growing after the first minute).
Here those early lines wait in a deque of ``max_lines`` instead, and are
written, in order, when the view gets a size.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.events import Resize
from textual.widgets import RichLog


class LogView(RichLog):
    """RichLog with ``max_lines`` applied to the lines written before it is first shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unshown: deque[tuple[Any, tuple, dict]] = deque(maxlen=self.max_lines or None)

    def write(self, content: Any, *args: Any, **kwargs: Any) -> LogView:
        if not self.size.width:
            self._unshown.append((content, args, kwargs))
            return self
        self._write_unshown()
        super().write(content, *args, **kwargs)
        return self

    def _write_unshown(self) -> None:
        while self._unshown:
            content, args, kwargs = self._unshown.popleft()
            super().write(content, *args, **kwargs)

    def on_resize(self, event: Resize) -> None:
        # runs before RichLog.on_resize: what is written here is deferred by it, then rendered in order
        if event.size.width:
            self._write_unshown()
