"""Errors of local engine actions (:mod:`infertop.control.engines`).  No UI imports."""

from __future__ import annotations


class EngineError(Exception):
    """An engine action failed or was refused; ``str(e)`` is the reason."""

    def __init__(self, reason: str, *, log_tail: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_tail: list[str] = list(log_tail or [])


class EngineNotFound(EngineError):
    """No engine of that name is known (no state file)."""


class EngineBusyError(EngineError):
    """Another start/stop/restart/set of the same engine is in progress."""


class InvalidArgsError(EngineError, ValueError):
    """An override key or value is not acceptable."""


class PortInUseError(EngineError):
    """The profile's port is taken; nothing was started."""


class NotOurProcessError(EngineError):
    """The recorded PID now belongs to another process: refused, nothing signalled."""


class EngineAborted(EngineError):
    """The operator aborted the action; ``reason`` says what state the engine is left in."""


class AuditRefusedError(EngineError):
    """The audit log cannot be written: the action was refused before anything was done."""


class EngineStartError(EngineError):
    """The engine did not become healthy; nothing of it is left running."""

    def __init__(self, reason: str, *, log_tail: list[str] | None = None, log_path: str | None = None,
                 pid: int | None = None, elapsed_s: float | None = None) -> None:
        super().__init__(reason, log_tail=log_tail)
        self.log_path = log_path
        self.pid = pid
        self.elapsed_s = elapsed_s


class EngineStopError(EngineError):
    """Processes of the engine's group survived SIGKILL."""


class VerifyError(EngineError):
    """The engine restarted but the new argument is not in effect."""


class SetArgsError(EngineError):
    """``set_args`` failed; ``rolled_back`` says whether the old args run again."""

    def __init__(self, reason: str, *, log_tail: list[str] | None = None, rolled_back: bool = False) -> None:
        super().__init__(reason, log_tail=log_tail)
        self.rolled_back = rolled_back
