"""The gateway step of a local engine's stop / restart / set: drain there first, undrain after.

Part of :mod:`infertop.control.engines`.  No UI imports.

vLLM 0.32 answers HTTP 500 to requests that arrive while it drains after
SIGTERM. When an infertop gateway fronts the engine, :class:`GatewayStep`
drains it there first (the gateway sends it nothing new: requests wait in
its queue or go to other engines), follows the gateway's in-flight count
for it down to 0 (bounded by the grace, with a countdown), and — once the
engine is signalled, restarted and healthy, or on any failure or abort —
undrains it again (only when it was this step that drained it). The drain
and the undrain are each audited (intent, then outcome) through
:func:`~infertop.control.pipeline.run_audited`.
"""

from __future__ import annotations

import threading
import time

from ..audit import AuditLog
from .errors import AuditRefusedError, EngineAborted, EngineError
from .progress import _Emitter
from ..gateway.drain import STEP_DRAIN_WHY, GatewayDrain, GatewayError
from ..pipeline import Outcome, run_audited


class GatewayStep:
    """Drain one engine at its gateway before the signal; undrain it after (see the module doc)."""

    def __init__(self, gw: GatewayDrain, name: str, audit: AuditLog | None, emit: _Emitter,
                 abort: threading.Event | None, poll_s: float = 0.25) -> None:
        self.gw, self.name, self.audit, self.emit = gw, name, audit, emit
        self.abort = abort or threading.Event()
        self.poll_s = poll_s
        self.drained = False  # by this step (undrained again by end())
        self.in_flight_before: int | None = None
        self.in_flight_at_signal: int | None = None
        self.wait_s: float | None = None
        self.note = ""  # what end() did, one line
        self.cap_note = ""

    @property
    def target(self) -> str:
        return f"engine {self.gw.engine} at {self.gw.label}"

    def begin(self, grace_s: float, pid: int) -> None:
        """Drain at the gateway and wait (≤ ``grace_s``) for its in-flight to reach 0.

        Raises EngineError (the gateway failed: nothing signalled), AuditRefusedError,
        or EngineAborted (the operator aborted: nothing signalled)."""
        try:
            before = self.gw.state()
        except GatewayError as e:
            raise EngineError(f"{e}; nothing was signalled") from None
        self.in_flight_before = _int(before.get("in_flight"))
        if before.get("draining"):
            self.emit("draining", f"{self.gw.engine} is already draining at {self.gw.label} "
                      "(left drained afterwards, as it was)", force=True)
        else:
            out = run_audited(self.audit, "gateway.drain", self.target,
                              {"engine": self.name, "in_flight": self.in_flight_before,
                               "why": STEP_DRAIN_WHY}, self._drain)
            if out.result == "refused":
                raise AuditRefusedError(f"refused: {out.message}")
            if not out.ok:
                raise EngineError(f"draining at {self.gw.label} failed: {out.message}; nothing was signalled")
            self.drained = True
        t0 = time.monotonic()
        n = self.in_flight_before
        while True:
            if self.abort.is_set():
                raise EngineAborted(f"aborted while draining at {self.gw.label} ({_n(n)} in flight there): "
                                    f"nothing was signalled; the engine runs on (pid {pid})")
            try:
                n = self.gw.in_flight()
            except GatewayError as e:
                raise EngineError(f"{e} while draining there; nothing was signalled") from None
            waited = time.monotonic() - t0
            if n == 0:
                self.emit("draining", f"0 in flight at {self.gw.label} after {waited:.1f} s: "
                          "signalling the engine", in_flight=0, force=True)
                break
            if waited >= grace_s:
                self.emit("draining", f"{n} still in flight at {self.gw.label} after {grace_s:g} s: "
                          "signalling the engine anyway (vLLM drains them)", in_flight=n, force=True)
                break
            self.emit("draining", f"drained at {self.gw.label}: {n} in flight there, new requests wait in its "
                      "queue", in_flight=n, countdown_s=grace_s - waited)
            self.abort.wait(self.poll_s)
        self.in_flight_at_signal, self.wait_s = n, time.monotonic() - t0

    def _drain(self) -> Outcome:
        self.gw.drain()
        return Outcome("ok", f"drained at {self.gw.label}")

    def _undrain(self) -> Outcome:
        self.gw.undrain()
        return Outcome("ok", f"undrained at {self.gw.label}")

    def retune_cap(self, old_seqs: object, new_seqs: object) -> None:
        """The gateway's cap for the engine followed its max_num_seqs: follow the change (audited)."""
        if not isinstance(new_seqs, int) or isinstance(new_seqs, bool) or old_seqs == new_seqs:
            return
        try:
            cap = self.gw.state().get("cap")
        except GatewayError:
            return
        if cap != old_seqs:
            return  # a cap of its own: the operator's to change
        out = run_audited(self.audit, "gateway.cap", self.target,
                          {"engine": self.name, "old": {"cap": cap}, "new": {"cap": new_seqs},
                           "why": f"max_num_seqs {old_seqs} → {new_seqs}"}, lambda: self._cap(new_seqs))
        self.cap_note = (f"its cap there {cap} → {new_seqs}" if out.ok
                         else f"! its cap at {self.gw.label} stays {cap}: {out.message}")
        self.emit("verifying", self.cap_note, force=True)

    def _cap(self, cap: int) -> Outcome:
        self.gw.set_cap(cap)
        return Outcome("ok", f"cap {cap} at {self.gw.label}")

    def _wait_up(self, timeout_s: float) -> bool:
        """Until the gateway sees the engine up again (its next /metrics poll): an undrained engine it
        still thinks down would make it answer 502 to the requests waiting for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.gw.state().get("up"):
                    return True
            except GatewayError:
                pass
            if time.monotonic() >= deadline or self.abort.is_set():
                return False
            self.emit("undraining", f"waiting for {self.gw.label} to see the engine up",
                      countdown_s=deadline - time.monotonic())
            time.sleep(self.poll_s)

    def end(self, *, failed: bool, up_timeout_s: float = 15.0) -> str:
        """Undrain when this step drained (also after a failure or an abort); returns the note.
        After a success, first wait (≤ ``up_timeout_s``) until the gateway sees the engine up."""
        if not self.drained:
            self.note = "" if self.in_flight_before is None else f"left as it was at {self.gw.label}"
            return self.note
        seen_up = True if failed else self._wait_up(up_timeout_s)
        out = run_audited(self.audit, "gateway.undrain", self.target,
                          {"engine": self.name, "why": "the action failed" if failed else "engine healthy again"},
                          self._undrain)
        unaudited = ""
        if out.result == "refused":  # the audit log failed mid-action: undo our own drain anyway, and say so
            unaudited = f" (not audited: {out.message.removeprefix('nothing was sent: ')})"
            out = run_audited(None, "gateway.undrain", self.target, {}, self._undrain)
        if out.ok:
            self.drained = False
            self.note = f"undrained at {self.gw.label}: it takes requests again"
            if not seen_up:
                self.note += f" (it did not see the engine up within {up_timeout_s:g} s)"
            self.note += unaudited
        else:
            self.note = (f"! still drained at {self.gw.label}: undrain failed ({out.message}); undrain it with "
                         f"POST /admin/engines/{self.gw.engine}/undrain")
        self.emit("undrained", self.note, force=True)
        return self.note

    def fail(self, e: EngineError) -> None:
        """End after the action failed (undrain if drained); the gateway's note goes on the error."""
        append_note(e, self.end(failed=True))

    def done(self) -> str:
        """End after the action succeeded: "<how the drain went>; <what the gateway saw after>"."""
        summary = self.summary()
        return f"{summary}; {self.end(failed=False)}"

    def summary(self) -> str:
        """How the gateway drain went, for results and the audit."""
        if self.in_flight_before is None:
            return ""
        waited = f" in {self.wait_s:.1f} s" if self.wait_s is not None else ""
        return (f"drained at {self.gw.label} first ({self.in_flight_before} in flight there → "
                f"{_n(self.in_flight_at_signal)} at the signal{waited})"
                + (f"; {self.cap_note}" if self.cap_note else ""))


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _n(v: int | None) -> str:
    return "?" if v is None else str(v)


def append_note(e: EngineError, note: str) -> None:
    """Add what the gateway step did to an error's one line."""
    if note:
        e.reason = f"{e.reason}; {note}"
        e.args = (e.reason,)
