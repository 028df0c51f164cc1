"""One engine action's audit trail (intent, then outcome): :class:`_Audit`.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .errors import AuditRefusedError, EngineAborted, EngineError, NotOurProcessError

if TYPE_CHECKING:
    from ..audit import AuditLog


class _Audited(Protocol):
    """What :class:`_Audit` needs of the manager (its parts call it with themselves)."""

    audit: AuditLog


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


class _Audit:
    """One action's audit trail: an intent before execution, then its outcome.

    Failures before the intent (refusals, checks) become one-shot entries;
    an unwritable log refuses the action before anything is done, unless
    ``unaudited`` (then the outcome says so).
    """

    def __init__(self, mgr: _Audited, action: str, target: str, unaudited: bool) -> None:
        self.mgr, self.action, self.target, self.unaudited = mgr, action, target, unaudited
        self.op: str | None = None
        self.intended = False

    def intent(self, **details: Any) -> None:
        self.intended = True
        try:
            self.op = self.mgr.audit.intent(self.action, self.target, **_clean(details))
        except OSError as e:
            if not self.unaudited:
                self.intended = False
                raise AuditRefusedError(f"refused: {e}; nothing was done (run it with --unaudited "
                                        "to act without an audit record)") from None

    def _outcome(self, result: str, **details: Any) -> None:
        details = _clean(details)
        try:
            if self.op is not None:
                self.mgr.audit.outcome(self.op, self.action, self.target, result, **details)
            else:
                if self.intended:
                    details["unaudited"] = True
                self.mgr.audit.record(self.action, self.target, result, **details)
        except OSError as e:  # the action is done; its result is still returned, and the caller told
            self.mgr.audit.unwritten.append(f"outcome {self.action} {self.target} {result} not recorded: {e}")

    def ok(self, **details: Any) -> None:
        self._outcome("ok", **details)

    def failed(self, e: EngineError, **details: Any) -> None:
        if isinstance(e, AuditRefusedError):
            return  # nothing could be written, nothing was done
        result = ("refused" if isinstance(e, NotOurProcessError)
                  else "aborted" if isinstance(e, EngineAborted) else "failed")
        self._outcome(result, reason=e.reason, **details)

    def fs_error(self, e: OSError) -> EngineError:
        """A filesystem error (state directory, log) as one line; recorded as the outcome."""
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        err = EngineError(f"{self.action.split('.')[-1]} {self.target!r}: {e.strerror or e}{where}")
        self._outcome("failed", reason=err.reason)
        return err


def _clean(details: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if v is not None}
