"""One stop of one engine, from its first signal to its result: :class:`StopRun` (for :class:`~.lifecycle.Lifecycle`).

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..procfs import ProcStat, _send_verified
from .errors import EngineAborted, EngineStopError
from .progress import _Emitter, _InFlightWatcher
from .state import _ENGINE_STOPPED, StopResult, _LogFollower
from .store import EngineStore


class StopRun:
    """SIGTERM, then follow the drain until no process of the engine is left (SIGKILL when it must).

    ``alive``: the main (API-server) process is there and gets the SIGTERM; else the processes left
    of it (``members``) get it. ``before_n`` / ``aborted0``: the in-flight and aborted counts read
    before the signal. ``signal_members(st, sig)`` signals the whole engine (its verified members).
    """

    def __init__(self, store: EngineStore, timings: Any, st: dict, grace: float, emit: _Emitter,
                 abort: threading.Event | None, *, alive: bool, members: list[ProcStat],
                 before_n: int | None, aborted0: float | None,
                 signal_members: Callable[[dict, int], None]) -> None:
        self.store, self.timings, self.st, self.grace, self.emit, self.abort = store, timings, st, grace, emit, abort
        self.alive, self.members, self.before_n, self.aborted0 = alive, members, before_n, aborted0
        self.signal_members = signal_members
        self.name, self.pid = st["name"], int(st["pid"])
        self.watcher = (_InFlightWatcher(store.endpoint(st), timings.metrics_interval_s, before_n)
                        if alive else None)
        self.follower = self._follow_log()
        self.sigkill = False
        self.kill_why = f"SIGKILL after {grace:g} s grace"
        self.signalled = ""
        self.engine_stopped_at: float | None = None  # vLLM logged that its engine stopped
        self.main_gone_at: float | None = None
        self.leftovers_termed = False
        self.t0 = 0.0

    def _follow_log(self) -> _LogFollower | None:
        log_path = Path(self.st.get("log_path") or self.store.log_path(self.name))
        try:
            return _LogFollower(log_path, log_path.stat().st_size)
        except OSError:
            return None

    def run(self) -> StopResult:
        self.t0 = time.monotonic()
        try:
            self._first_signal()
            while left := self.store.live_group(self.st):
                if self._step(left, time.monotonic()):
                    break
        finally:
            if self.watcher is not None:
                self.watcher.close()
        self._check_gone()
        return self._result(time.monotonic() - self.t0)

    def _first_signal(self) -> None:
        pid, grace = self.pid, self.grace
        if self.alive:
            _send_verified(pid, int(self.st["starttime"]), signal.SIGTERM)
            self.signalled = f"main process {pid}"
            self.emit("draining", f"SIGTERM sent to the main process {pid}{_in_flight_text(self.before_n)}; "
                      "vLLM drains in-flight requests "
                      f"(SIGKILL after {grace:g} s)", pid=pid, in_flight=self.before_n, force=True,
                      countdown_s=grace)
            return
        self.signal_members(self.st, signal.SIGTERM)
        self.leftovers_termed = True
        self.main_gone_at = self.t0
        pids = ", ".join(str(m.pid) for m in self.members)
        self.signalled = "processes " + pids
        self.emit("draining", f"main process exited; SIGTERM sent to {len(self.members)} process(es) left: {pids}",
                  pid=pid, force=True)

    def _step(self, left: list[ProcStat], now: float) -> bool:
        """One look at what is left; True once it is killed (the wait is over)."""
        elapsed = now - self.t0
        if self.engine_stopped_at is None and self.follower is not None \
                and any(_ENGINE_STOPPED.search(x) for x in self.follower.poll()):
            self.engine_stopped_at = now
        main_alive = any(m.pid == self.pid for m in left)
        if not main_alive and self.main_gone_at is None:
            self.main_gone_at = now
        waited_http = self.engine_stopped_at is not None and now - self.engine_stopped_at >= self.timings.http_close_s
        waited_orphans = self.main_gone_at is not None and now - self.main_gone_at >= self.timings.orphan_grace_s
        if waited_orphans and not self.leftovers_termed:
            self._term_leftovers(left, now)  # and look again at once
            return False
        if elapsed >= self.grace or waited_http or waited_orphans:
            self._kill(left, elapsed, waited_http, waited_orphans)
            return True
        self._report(main_alive, elapsed)
        if self.abort is not None and self.abort.is_set():
            raise self._aborted(elapsed)
        if self.abort is not None:
            self.abort.wait(min(self.timings.poll_interval_s, 0.2))
        else:
            time.sleep(min(self.timings.poll_interval_s, 0.2))
        return False

    def _term_leftovers(self, left: list[ProcStat], now: float) -> None:
        # e.g. the multiprocessing resource tracker: do not wait the whole grace for it.
        self.leftovers_termed = True
        self.main_gone_at = now
        self.emit("draining", f"main process exited; SIGTERM to {len(left)} process(es) left: "
                  f"{', '.join(str(m.pid) for m in left)}", pid=self.pid, force=True)
        self.signal_members(self.st, signal.SIGTERM)

    def _kill(self, left: list[ProcStat], elapsed: float, waited_http: bool, waited_orphans: bool) -> None:
        self.sigkill = True
        if waited_http and elapsed < self.grace:
            self.kill_why = (f"engine drained and stopped, but its HTTP server still waited for client "
                             f"connections after {self.timings.http_close_s:g} s: SIGKILL")
        elif waited_orphans and elapsed < self.grace:
            self.kill_why = (f"main process exited; SIGKILL to {len(left)} process(es) that outlived it: "
                             f"{', '.join(str(m.pid) for m in left)}")
        self.emit("killing", f"{self.kill_why} (process group {self.st['pgid']})", pid=self.pid, force=True)
        self.signal_members(self.st, signal.SIGKILL)
        deadline = time.monotonic() + self.timings.kill_wait_s
        while self.store.live_group(self.st) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _report(self, main_alive: bool, elapsed: float) -> None:
        if self.engine_stopped_at is not None:
            self.emit("draining", "engine stopped; waiting for the HTTP server to close its connections", pid=self.pid)
        elif main_alive:
            n = self.watcher.value if self.watcher is not None else None
            msg = f"draining ({n} in flight)" if n is not None else "draining"
            self.emit("draining", f"{msg}, {elapsed:.0f} s of {self.grace:g} s grace", in_flight=n, pid=self.pid,
                      countdown_s=self.grace - elapsed)

    def _aborted(self, elapsed: float) -> EngineAborted:
        n = self.watcher.value if self.watcher is not None else None
        drain = (self.st.get("args") or {}).get("shutdown_timeout")
        return EngineAborted(
            f"aborted during the drain, {elapsed:.0f} s after SIGTERM to the {self.signalled}: the engine "
            f"is still stopping ({_in_flight_text(n).strip(' ()') or 'in flight unknown'}); vLLM drains "
            f"on and exits by itself{f' within its {drain:g} s shutdown timeout' if drain else ''}; "
            f"no SIGKILL is sent (`infertop engine stop {self.name}` ends it)")

    def _check_gone(self) -> None:
        left = self.store.live_group(self.st)
        if left:
            desc = ", ".join(f"{m.pid} ({m.state})" for m in left)
            self.st["phase"] = "stopping"
            with contextlib.suppress(OSError):
                self.store.write_state(self.name, self.st)
            raise EngineStopError(f"processes of engine {self.name!r} left after SIGKILL: {desc}")

    def _result(self, seconds: float) -> StopResult:
        rc = self.store.owned_rc(self.pid)
        w = self.watcher
        after_n = w.last_value if w is not None else None
        failed = None
        if w is not None and self.aborted0 is not None and w.aborted is not None:
            failed = max(0, int(round(w.aborted - self.aborted0)))
        # vLLM aborts what is still running when its shutdown_timeout runs out and exits before the abort
        # counter can be read again (a stop under 16 streams cut 7 and read "0 aborted"): what was in
        # flight at the last scrape of a drain that ran out is cut, whatever the counter says.
        drain_s = (self.st.get("args") or {}).get("shutdown_timeout")
        ran_out = self.sigkill or (isinstance(drain_s, (int, float)) and seconds >= float(drain_s) - 1.0)
        cut_in_flight = after_n if ran_out and after_n else 0
        if cut_in_flight > (failed or 0):
            failed = cut_in_flight
        reason = self._reason(seconds, after_n, failed, cut_in_flight, drain_s)
        self.store.drop_state(self.name)
        self.emit("stopped", reason, pid=self.pid, force=True)
        return StopResult(self.name, self.pid, seconds, self.sigkill, rc, reason,
                          w.max_seen if w is not None else None,
                          in_flight_before=self.before_n, in_flight_after=after_n, failed=failed,
                          signalled=self.signalled)

    def _reason(self, seconds: float, after_n: int | None, failed: int | None, cut_in_flight: int,
                drain_s: object) -> str:
        reason = self.kill_why if self.sigkill else f"exited {seconds:.1f} s after SIGTERM"
        before_n, w = self.before_n, self.watcher
        if before_n is not None:
            reason += f"; in flight: {before_n} before SIGTERM"
            if after_n is not None:
                reason += f", {after_n} at the last scrape"
            if w is not None and w.max_seen:
                reason += f" (drained up to {w.max_seen} in flight)"
        if cut_in_flight and failed == cut_in_flight:
            reason += (f"; {failed} request(s) cut: still in flight when the drain ran out"
                       + (f" (shutdown_timeout {drain_s:g} s)"
                          if isinstance(drain_s, (int, float)) and not self.sigkill else ""))
        elif failed is not None:
            reason += f"; {failed} request(s) aborted by the engine"
        return reason


def _in_flight_text(n: int | None) -> str:
    return f" ({n} in flight)" if n is not None else ""
