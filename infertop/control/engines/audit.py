"""What one engine action tells the pipeline's audit trail: :class:`AuditNotes`. It writes nothing itself.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

from typing import Any

from ..pipeline import IntentFn, Outcome
from .errors import AuditRefusedError, EngineAborted, EngineError, NotOurProcessError


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


class AuditNotes:
    """An engine action's part of its audit: the intent just before its first signal or spawn, then what
    its outcome line says.

    ``send`` is the pipeline's intent writer (:meth:`~infertop.control.pipeline.AuditTrail.intent`); an
    unwritable log refuses the action there, before anything is done (:class:`AuditRefusedError`).
    ``ok`` / ``failed`` / ``fs_error`` note the outcome's result and details; :meth:`outcome` hands them
    to the pipeline, which writes the line (a one-shot entry when no intent was written).
    ``unaudited``: the operator asked to act even when the log cannot be written (the gateway step
    then goes unaudited too).
    """

    def __init__(self, send: IntentFn | None = None, *, unaudited: bool = False) -> None:
        self.send, self.unaudited = send, unaudited
        self.result: str | None = None  # None: nothing to say (nothing was done)
        self.details: dict[str, Any] = {}

    def intent(self, **details: Any) -> None:
        if self.send is None:
            return
        try:
            self.send(**details)
        except OSError as e:
            raise AuditRefusedError(f"refused: {e}; nothing was done (run it with --unaudited "
                                    "to act without an audit record)") from None

    def ok(self, **details: Any) -> None:
        self.result, self.details = "ok", details

    def failed(self, e: EngineError, **details: Any) -> None:
        if isinstance(e, AuditRefusedError):
            return  # nothing could be written, nothing was done
        self.result = ("refused" if isinstance(e, NotOurProcessError)
                       else "aborted" if isinstance(e, EngineAborted) else "failed")
        self.details = {"reason": e.reason, **details}

    def fs_error(self, action: str, target: str, e: OSError) -> EngineError:
        """A filesystem error (state directory, log) as one line; noted as the outcome."""
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        err = EngineError(f"{action.split('.')[-1]} {target!r}: {e.strerror or e}{where}")
        self.result, self.details = "failed", {"reason": err.reason}
        return err

    def outcome(self, result: str, message: str) -> Outcome:
        """The kind's outcome (``result``/``message``: its words for a person) carrying the noted line: its
        own result (a busy engine is a ``failed`` line, a ``refused`` outcome) and details."""
        if self.result is None:
            return Outcome(result, message)
        return Outcome(result, message, audit={"result": self.result, **self.details})
