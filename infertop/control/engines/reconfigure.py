"""Changing a running engine's launch arguments (:class:`Reconfigure`, behind :meth:`EngineManager.set_args`):
drain, restart with them, verify, roll back on failure.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ...config import ProfileConfig
from ...domain.engine import EngineStats
from .actions import Actions
from .audit import AuditNotes, _r
from .command import _kv, normalize_overrides
from .errors import (
    AuditRefusedError,
    EngineBusyError,
    EngineError,
    EngineStartError,
    InvalidArgsError,
    NotOurProcessError,
    SetArgsError,
    VerifyError,
)
from .progress import Progress, _Emitter, observe_once
from .lifecycle import Lifecycle
from .state import EngineRecord, SetResult
from .store import EngineStore
from ..gateway.drain import GatewayDrain


class Reconfigure:
    """set_args of local engines, given the store, the lifecycle and the actions (profiles, the gateway step)."""

    def __init__(self, store: EngineStore, lifecycle: Lifecycle, actions: Actions) -> None:
        self.store, self.lifecycle, self.actions = store, lifecycle, actions

    def set_args(
        self,
        name: str,
        changes: Mapping[str, Any],
        progress: Progress | None = None,
        *,
        check: Callable[[EngineRecord], str | None] | None = None,
        grace_s: float | None = None,
        timeout_s: float | None = None,
        rollback: bool = True,
        stats: Callable[[EngineRecord], EngineStats | None] | None = None,
        profile: ProfileConfig | None = None,
        notes: AuditNotes | None = None,
        abort: threading.Event | None = None,
        gateway: GatewayDrain | None = None,
    ) -> SetResult:
        """Change launch arguments: drain → restart with them → wait healthy → verify.

        Verification reads ``/proc/<pid>/cmdline`` of the new engine and
        compares the last value of each changed flag; ``check(record)`` may
        add a behaviour check (return an error message, or None when fine).
        If the new engine fails to start and ``rollback`` is set, the old
        arguments are started again and SetArgsError(rolled_back=True) is
        raised.  Unchanged values return ``changed=False`` without a restart.

        ``before``/``after`` come from ``stats(record)`` when given (the TUI
        passes its collector's latest stats: instant), else from one scrape
        of /metrics bounded by ``observe_timeout_s`` (None if it fails).

        ``gateway`` (an infertop gateway in front): drained there first, its
        in-flight followed to 0, undrained once the new engine is verified (or
        on any failure).  ``abort``: as for :meth:`restart`.
        """
        emit = _Emitter(progress, name, "set")
        notes = notes or AuditNotes()
        t0 = time.monotonic()
        old_vals: dict[str, Any] = {}
        new_vals: dict[str, Any] = {}
        try:
            with self.store.operation(name):
                st = self.store.require_state(name)
                prof = self.actions.profile_for(st, profile)
                changes = normalize_overrides(prof, changes)
                if not changes:
                    raise InvalidArgsError("nothing to change")
                cur_args = dict(st.get("args") or {})
                old_vals = {k: cur_args.get(k) for k in changes}
                new_vals = dict(changes)
                kind, why = self.store.identity(st)
                if kind == "mismatch":
                    raise NotOurProcessError(self.store.set_stale(st, why))
                if old_vals == new_vals and kind == "alive":
                    rec = self.store.record_or_raise(st)
                    notes.ok(old=old_vals, new=new_vals, reason="unchanged")
                    return SetResult(name, False, old_vals, new_vals, rec, {}, None, None, None, None,
                                     time.monotonic() - t0)
                old_over = dict(st.get("overrides") or {})
                new_over = normalize_overrides(prof, {**old_over, **changes})
                before = self._stats(self.store.record_or_raise(st), stats) if kind == "alive" else None
                step = self.actions.gateway_step(gateway, st, emit, abort, notes.unaudited)
                try:
                    if step is not None:
                        step.begin(self.actions.grace_for(st, grace_s), int(st["pid"]))
                    stop_res = self.lifecycle.stop(
                        st, grace_s, emit, abort=abort,
                        before_signal=lambda info: notes.intent(old=old_vals, new=new_vals, check=info,
                                                                diff=f"{_kv(old_vals)} → {_kv(new_vals)}"))
                    rec = self._start_or_roll_back(st, prof, new_over, old_over, new_vals, old_vals, emit,
                                                   timeout_s, rollback, abort)
                    emit("verifying", "verifying the new arguments took effect", pid=rec.pid, force=True)
                    verified = self.store.verify_args(rec, changes)
                    if check is not None:
                        msg = check(rec)
                        if msg:
                            raise VerifyError(f"behaviour check failed: {msg}")
                    if step is not None and "max_num_seqs" in changes:
                        step.retune_cap(old_vals.get("max_num_seqs"), changes["max_num_seqs"])
                    after = self._stats(rec, stats)
                except EngineError as e:
                    if step is not None:
                        step.fail(e)
                    raise
                if step is not None:
                    stop_res = replace(stop_res, gateway=step.done())
                total = time.monotonic() - t0
                emit("done", f"{_kv(old_vals)} → {_kv(new_vals)} in {total:.1f} s", pid=rec.pid, force=True)
        except EngineError as e:
            notes.failed(e, old=old_vals or None, new=new_vals or None)
            if not isinstance(e, (EngineBusyError, NotOurProcessError, AuditRefusedError)):
                self.store.add_history(name, "set", "failed", old=old_vals, new=new_vals, reason=e.reason)
            raise
        except OSError as e:
            raise notes.fs_error("engine.set", name, e) from None
        notes.ok(old=old_vals, new=new_vals, pid=rec.pid, startup_s=_r(rec.startup_s), total_s=_r(total),
                 verified=verified, in_flight_before=stop_res.in_flight_before,
                 in_flight_after=stop_res.in_flight_after, failed=stop_res.failed, gateway=stop_res.gateway or None)
        self.store.add_history(name, "set", "ok", old=old_vals, new=new_vals, pid=rec.pid, args=rec.args,
                               startup_s=_r(rec.startup_s), total_s=_r(total), stop_s=_r(stop_res.seconds))
        return SetResult(name, True, old_vals, new_vals, rec, verified, before, after, stop_res,
                         rec.startup_s, total)

    def _start_or_roll_back(self, st: dict, prof: ProfileConfig, new_over: dict[str, Any], old_over: dict[str, Any],
                            new_vals: dict[str, Any], old_vals: dict[str, Any], emit: _Emitter,
                            timeout_s: float | None, rollback: bool, abort: threading.Event | None) -> EngineRecord:
        """Start with the new arguments; when that fails, with the old ones again (``rollback``), and raise
        :class:`SetArgsError` saying which state the engine is in."""
        name = st["name"]
        restarts = int(st.get("restarts", 0)) + 1
        profile_name = st.get("profile_name") or name
        try:
            return self.lifecycle.start(name, prof, new_over, profile_name, emit, timeout_s, restarts=restarts,
                                        abort=abort, leave_on_abort=True)
        except EngineStartError as e:
            if not rollback:
                raise SetArgsError(f"engine did not start with {_kv(new_vals)}: {e.reason}; "
                                   "it is stopped", log_tail=e.log_tail) from None
            emit("rollback", f"new arguments failed ({e.reason}); starting again with {_kv(old_vals)}", force=True)
            try:
                self.lifecycle.start(name, prof, old_over, profile_name, emit, timeout_s, restarts=restarts,
                                     abort=abort, leave_on_abort=True)
            except EngineError as e2:
                raise SetArgsError(
                    f"engine did not start with {_kv(new_vals)}: {e.reason}; rollback to "
                    f"{_kv(old_vals)} failed too: {e2.reason}; it is stopped",
                    log_tail=e.log_tail) from None
            raise SetArgsError(f"engine did not start with {_kv(new_vals)}: {e.reason}; "
                               f"rolled back to {_kv(old_vals)}", log_tail=e.log_tail, rolled_back=True) from None

    def _stats(self, rec: EngineRecord, fn: Callable[[EngineRecord], EngineStats | None] | None) -> EngineStats | None:
        if fn is not None:
            try:
                return fn(rec)
            except Exception:  # noqa: BLE001 — informative only
                return None
        return observe_once(rec.endpoint(self.lifecycle.timings.observe_timeout_s))
