"""An engine action its caller has already decided on, run through the one pipeline: :class:`EngineCall`.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..pipeline import IntentFn, Outcome, Preflight, ProgressFn, Review
from .audit import AuditNotes


class EngineCall:
    """A local engine action as a caller that has decided asks for it (``infertop engine stop e``, a direct
    :class:`~infertop.control.engines.EngineManager` call), as an
    :class:`~infertop.control.pipeline.ActionKind`.

    Nothing to plan or check first: the manager refuses with its own errors, which :meth:`returned`
    raises again for the caller. The pipeline writes the audit (``intent_at_send``: the intent just before
    the first signal or spawn, with the process verified then; the outcome in the manager's words).
    ``do(notes)`` runs the manager's action with the notes it is to tell the audit through.
    """

    intent_at_send = True
    abortable = False  # the caller holds its own abort event (``abort=``), if any
    timeout_s: float | None = None

    def __init__(self, verb: str, name: str, do: Callable[[AuditNotes], Any], *, unaudited: bool = False) -> None:
        self.verb, self.name, self.do, self.unaudited = verb, name, do, unaudited
        self.action = f"engine.{verb}"
        self.target = f"engine {name}"
        self.audit_target = name  # the engine lines' target: the engine's name
        self.object_key = f"engine:{name}"
        self._result: Any = None
        self._error: Exception | None = None

    def plan(self) -> Review:
        return Review(f"{self.verb.capitalize()} engine {self.name}", f"{self.verb} {self.name}")

    def preflight(self) -> Preflight:
        return Preflight(True, "")

    def audit_details(self) -> dict[str, Any]:
        return {}

    def execute(self, progress: ProgressFn, abort: threading.Event, intent: IntentFn | None = None) -> Outcome:
        """``intent``: the pipeline's intent writer (``intent_at_send``); None outside the pipeline: unaudited."""
        notes = AuditNotes(intent, unaudited=self.unaudited)
        try:
            self._result = self.do(notes)
        except Exception as e:  # noqa: BLE001 — the caller gets it again from returned()
            self._error = e
            return notes.outcome("failed", str(e))
        return notes.outcome("ok", str(self._result))

    def returned(self) -> Any:
        """The manager's result, or its error raised again."""
        if self._error is not None:
            raise self._error
        return self._result
