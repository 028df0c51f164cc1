"""What a controller may ask of the console (the App implements it; a test passes a small fake)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from rich.text import Text

from ...control.audit import AuditLog
from ...control.pipeline import ActionKind, Outcome


class ConsoleHost(Protocol):
    """The console's services: tell the operator, ask through a dialog, run an action or a worker."""

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def log_event(self, text: str | Text) -> None: ...

    def start_action(self, kind: ActionKind, *, on_done: Callable[[Outcome], None] | None = None,
                     on_forbidden: Callable[[], None] | None = None, preflight_name: str = "check") -> bool: ...

    def run_worker(self, work: Any, *, group: str = "default", exclusive: bool = False,
                   exit_on_error: bool = True, thread: bool = False) -> Any: ...

    def push_screen(self, screen: Any, callback: Any = None) -> Any: ...

    async def push_screen_wait(self, screen: Any) -> Any: ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any) -> Any: ...

    def refresh_bindings(self) -> None: ...

    def render_snapshot(self, force: bool = False) -> None: ...

    def audit_log(self) -> AuditLog: ...
