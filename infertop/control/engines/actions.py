"""Start, stop, restart and forget: :class:`Actions`, the lifecycle actions of
:class:`~infertop.control.engines.EngineManager`, recorded in the engine's history; what their audit
lines say goes to the pipeline through :class:`~.audit.AuditNotes`.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...config import ProfileConfig
from ..audit import AuditLog
from .audit import AuditNotes, _r
from .command import _safe_args, effective_args, normalize_overrides
from .errors import AuditRefusedError, EngineBusyError, EngineError, InvalidArgsError, NotOurProcessError
from .gateway import GatewayStep
from .lifecycle import Lifecycle
from .progress import Progress, _Emitter
from .state import EngineRecord, StopResult, _profile_from_dict
from .store import EngineStore
from ..gateway.drain import GatewayDrain


class Actions:
    """start, stop, restart and forget of local engines, given the store and the lifecycle.

    Each action takes its :class:`~.audit.AuditNotes` (``notes``): the intent goes through it just before the
    first signal or spawn, the outcome's result and details are noted on it. ``gateway_audit`` is where the
    gateway steps around a stop (drain, undrain) are audited by the pipeline; ``profiles``: the config's
    launch profiles (where a restart reads the values of the environment it recorded by name only)."""

    def __init__(self, store: EngineStore, lifecycle: Lifecycle, profiles: Mapping[str, ProfileConfig],
                 gateway_audit: AuditLog) -> None:
        self.store, self.lifecycle, self.profiles, self.gateway_audit = store, lifecycle, profiles, gateway_audit

    # -- public: actions

    def start(
        self,
        name: str,
        profile: ProfileConfig,
        progress: Progress | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        profile_name: str | None = None,
        timeout_s: float | None = None,
        notes: AuditNotes | None = None,
        abort: threading.Event | None = None,
    ) -> EngineRecord:
        """Spawn the engine and wait for /health 200.

        Raises PortInUseError (nothing spawned), EngineStartError (exit,
        timeout, out of memory; the engine is killed and nothing is left),
        EngineAborted (``abort`` set during the wait: what was spawned is
        killed), EngineBusyError, InvalidArgsError, AuditRefusedError, or
        EngineError ("already running").
        """
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgsError("engine name: must not be empty")
        emit = _Emitter(progress, name, "start")
        notes = notes or AuditNotes()
        try:
            with self.store.operation(name):
                over = normalize_overrides(profile, overrides)
                new = effective_args(profile, over)
                rec = self.lifecycle.start(
                    name, profile, over, profile_name or name, emit, timeout_s, restarts=0,
                    before_spawn=lambda cmd: notes.intent(new=new, check={"port": "free"}, cmdline=cmd,
                                                          env_names=sorted(profile.env)),
                    abort=abort)
        except EngineError as e:
            notes.failed(e, new=_safe_args(profile, overrides))
            if not isinstance(e, (EngineBusyError, AuditRefusedError)):
                self.store.add_history(name, "start", "failed", reason=e.reason)
            raise
        except OSError as e:
            raise notes.fs_error("engine.start", name, e) from None
        notes.ok(new=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s))
        self.store.add_history(name, "start", "ok", args=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s))
        return rec

    def stop(self, name: str, grace_s: float | None = None, progress: Progress | None = None, *,
             notes: AuditNotes | None = None, abort: threading.Event | None = None,
             gateway: GatewayDrain | None = None) -> StopResult:
        """SIGTERM the main process (vLLM drains), SIGKILL the engine after ``grace_s``; nothing is left.

        ``grace_s`` defaults to the profile's ``stop_grace_s``, at least
        ``shutdown_timeout`` + 10 s.  With ``gateway`` (the infertop gateway in
        front of the engine) the engine is drained there first and undrained
        after (:class:`~infertop.control.engines.gateway.GatewayStep`).
        ``abort`` stops the waiting (EngineAborted says in what state).  Raises
        NotOurProcessError (refused, nothing signalled), EngineNotFound,
        EngineBusyError, EngineStopError, AuditRefusedError, EngineAborted.
        """
        emit = _Emitter(progress, name, "stop")
        notes = notes or AuditNotes()
        old = None
        try:
            with self.store.operation(name):
                st = self.store.require_state(name)
                old = st.get("args")
                step = self.gateway_step(gateway, st, emit, abort, notes.unaudited)
                try:
                    if step is not None:
                        step.begin(self.grace_for(st, grace_s), int(st["pid"]))
                    res = self.lifecycle.stop(st, grace_s, emit, abort=abort,
                                              before_signal=lambda info: notes.intent(old=old, check=info,
                                                                                grace_s=grace_s))
                except EngineError as e:
                    if step is not None:
                        step.fail(e)
                    raise
                if step is not None:
                    note = step.end(failed=False)
                    res = replace(res, reason=f"{step.summary()}; {res.reason}; {note}",
                                  gateway=f"{step.summary()}; {note}")
        except EngineError as e:
            notes.failed(e, old=old)
            raise
        except OSError as e:
            raise notes.fs_error("engine.stop", name, e) from None
        notes.ok(old=old, reason=res.reason, sigkill=res.sigkill, seconds=_r(res.seconds), pid=res.pid,
                 in_flight_before=res.in_flight_before, in_flight_after=res.in_flight_after, failed=res.failed)
        self.store.add_history(name, "stop", "ok", reason=res.reason, pid=res.pid, sigkill=res.sigkill,
                               stop_s=_r(res.seconds), exit_code=res.exit_code)
        return res

    def grace_for(self, st: Mapping[str, Any], grace_s: float | None) -> float:
        return float(grace_s) if grace_s is not None else self.lifecycle.default_grace(st)

    def gateway_step(self, gateway: GatewayDrain | None, st: Mapping[str, Any], emit: _Emitter,
                      abort: threading.Event | None, unaudited: bool) -> GatewayStep | None:
        """The gateway step for a running engine (nothing to drain for one already gone, or not ours)."""
        if gateway is None or self.store.identity(st)[0] != "alive":
            return None
        audit: AuditLog | None = self.gateway_audit
        if unaudited:
            try:
                self.gateway_audit.check_writable()
            except OSError:
                audit = None
        return GatewayStep(gateway, str(st["name"]), audit, emit, abort,
                           min(self.lifecycle.timings.poll_interval_s, 0.25))

    def restart(
        self,
        name: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        profile: ProfileConfig | None = None,
        progress: Progress | None = None,
        grace_s: float | None = None,
        timeout_s: float | None = None,
        notes: AuditNotes | None = None,
        abort: threading.Event | None = None,
        gateway: GatewayDrain | None = None,
    ) -> EngineRecord:
        """Stop (drain) and start again with the recorded profile (or ``profile``),
        the overrides set before, and ``overrides`` on top.  ``gateway``: drained there
        first, undrained once healthy (or on failure); ``abort`` as for :meth:`stop`,
        and while waiting for /health the new engine is left as it is."""
        emit = _Emitter(progress, name, "restart")
        notes = notes or AuditNotes()
        old = new = None
        try:
            with self.store.operation(name):
                st = self.store.require_state(name)
                old = st.get("args")
                prof = self.profile_for(st, profile)
                over = normalize_overrides(prof, {**(st.get("overrides") or {}), **dict(overrides or {})})
                new = effective_args(prof, over)
                step = self.gateway_step(gateway, st, emit, abort, notes.unaudited)
                try:
                    if step is not None:
                        step.begin(self.grace_for(st, grace_s), int(st["pid"]))
                    stopped = self.lifecycle.stop(st, grace_s, emit, abort=abort,
                                                  before_signal=lambda info: notes.intent(old=old, new=new, check=info))
                    rec = self.lifecycle.start(name, prof, over, st.get("profile_name") or name, emit, timeout_s,
                                               restarts=int(st.get("restarts", 0)) + 1, abort=abort,
                                         leave_on_abort=True)
                except EngineError as e:
                    if step is not None:
                        step.fail(e)
                    raise
                if step is not None:
                    emit("done", step.done(), pid=rec.pid, force=True)
        except EngineError as e:
            notes.failed(e, old=old, new=new)
            if not isinstance(e, (EngineBusyError, NotOurProcessError, AuditRefusedError)):
                self.store.add_history(name, "restart", "failed", reason=e.reason, args=new)
            raise
        except OSError as e:
            raise notes.fs_error("engine.restart", name, e) from None
        cut = stopped.failed  # vLLM's abort counter across the stop: requests cut, not finished
        if cut:
            emit("done", f"{cut} request(s) cut by the restart (aborted, or in flight when its drain ran out)",
                 pid=rec.pid, force=True)
        notes.ok(old=old, new=rec.args, pid=rec.pid, startup_s=_r(rec.startup_s), requests_cut=cut)
        self.store.add_history(name, "restart", "ok", args=rec.args, old=old, pid=rec.pid, startup_s=_r(rec.startup_s))
        return rec

    def profile_for(self, st: Mapping[str, Any], given: ProfileConfig | None) -> ProfileConfig:
        """The profile to start again from: ``given``, else the recorded one with its ``env``
        values read from the config's profile (only their names are stored)."""
        if given is not None:
            return given
        prof = _profile_from_dict(st.get("profile") or {})
        names = [n for n in st.get("env_names") or [] if isinstance(n, str)]
        if not names:
            return prof
        pname = str(st.get("profile_name") or st["name"])
        cfg = self.profiles.get(pname)
        missing = [n for n in names if cfg is None or n not in cfg.env]
        if missing or cfg is None:  # (cfg is None only with names missing)
            raise EngineError(f"profile {pname!r}: the value of {', '.join(missing)} is not in the config "
                              "(environment values are not stored with the engine's state); "
                              "add the profile back to the config")
        return replace(prof, env={n: cfg.env[n] for n in names})

    def forget(self, name: str, notes: AuditNotes | None = None) -> bool:
        """Drop a stale state file without signalling anything; True if one was dropped."""
        notes = notes or AuditNotes()
        st = self.store.read_state(name)
        if st is None:
            with self.store.lock:
                stale = self.store.stale.pop(name, None)
                exited = self.store.exited.pop(name, None)
            if stale is not None:
                self.store.add_history(name, "forget", "ok", reason="stale", pid=stale[0].get("pid"))
                notes.ok(old={"pid": stale[0].get("pid")}, reason=stale[1])
            return stale is not None or exited is not None
        kind, why = self.store.identity(st)
        if kind == "alive" or (kind == "gone" and self.store.live_group(st)):
            raise EngineError(f"engine {name!r} is running (pid {st['pid']}); stop it instead")
        self.store.drop_state(name)
        with self.store.lock:
            self.store.exited.pop(name, None)
        self.store.add_history(name, "forget", "ok", reason=why, pid=st.get("pid"))
        notes.ok(old={"pid": st.get("pid")}, reason=why)
        return True
