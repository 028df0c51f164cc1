"""Read-only questions to :class:`~infertop.control.engines.EngineManager`: which engines
exist (re-adopting those that still run), their records, logs, histories and health.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import time

import httpx

from ...sources.http_client import HttpError, blocking_get
from .errors import EngineError, EngineNotFound, NotOurProcessError
from .state import EngineRecord, clean_line
from .store import _StoreMixin
from ..logtail import tail_file


class _QueriesMixin(_StoreMixin):
    """Queries of :class:`~infertop.control.engines.EngineManager` (adopt, status, list, logs, health)."""

    # -- public: queries

    def managed(self, name: str | None) -> EngineRecord | None:
        """The live engine infertop manages under ``name``, or None — for any name, never raising
        on what a name contains or on an unreadable state directory (key-availability checks)."""
        if not isinstance(name, str) or not name:
            return None
        try:
            rec = self.status(name)
        except (OSError, EngineError, ValueError):
            return None
        return rec if rec is not None and rec.alive else None

    def adopt(self) -> list[str]:
        """Re-adopt engines whose state file matches a live process; drop stale state files.

        Returns the names adopted.  Called on construction.
        """
        adopted: list[str] = []
        try:
            names = self._state_names()
        except OSError:
            return adopted
        for name in names:
            st = self._read_state(name)
            if st is None:
                continue
            kind, why = self._identity(st)
            if kind == "mismatch":
                if not self._busy(name):
                    self._set_stale(st, why)
                continue
            if kind == "alive" or (kind == "gone" and self._live_group(st)):
                with self._lock:
                    self._adopted.add(name)
                adopted.append(name)
                if st.get("phase") == "starting" and kind == "alive" and not self._busy(name):
                    # Its starter is gone: settle the phase with one /health probe.
                    with contextlib.suppress(httpx.HTTPError, HttpError, OSError):
                        if _health_status(st["url"], 1.0) == 200:
                            st.update(phase="running", healthy_at=st.get("healthy_at") or time.time())
                            self._write_state(name, st)
            elif not self._busy(name):
                self._drop_state(name)
                self._history(name, "dropped", "stale", reason=why, pid=st.get("pid"))
        return adopted

    def status(self, name: str) -> EngineRecord | None:
        """The engine's record (cheap: /proc only), or None if infertop knows none."""
        st = self._read_state(name)
        if st is None:
            with self._lock:
                stale = self._stale.get(name)
                if stale is not None:
                    return self._build_record(stale[0], "stale", stale[1])
                return self._exited.get(name)
        rec = self._record(st)
        if rec is None:
            with self._lock:
                return self._exited.get(name)
        return rec

    def list(self) -> list[EngineRecord]:  # noqa: A003 — the manager's natural verb
        """Every known engine: running ones, then those that exited this session."""
        out: dict[str, EngineRecord] = {}
        for name in self._state_names():
            rec = self.status(name)
            if rec is not None:
                out[rec.name] = rec
        with self._lock:
            stale = list(self._stale)
            for name, rec in self._exited.items():
                out.setdefault(name, rec)
        for name in stale:
            if name not in out and (rec := self.status(name)) is not None:
                out[name] = rec
        return sorted(out.values(), key=lambda r: (not r.alive, r.name))

    # builtins.list: below the method `list`, a bare `list` in an annotation names the method
    def tail_log(self, name: str, n: int = 50) -> builtins.list[str]:
        """The last ``n`` lines of the engine's log (read from the end of the file)."""
        return [clean_line(line, 1000) for line in tail_file(self.log_path(name), n)]

    def history(self, name: str, n: int = 50) -> builtins.list[dict]:
        """The last ``n`` lifecycle events (start, stop, restart, set, exited…), oldest first."""
        out = []
        for line in tail_file(self.history_path(name), n):
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def health(self, name: str, timeout_s: float = 1.0) -> bool:
        """True when the engine answers GET /health with 200."""
        rec = self.status(name)
        if rec is None or not rec.alive:
            return False
        try:
            return _health_status(rec.url, timeout_s) == 200
        except (httpx.HTTPError, HttpError):
            return False

    def verify(self, name: str) -> EngineRecord:
        """The record, after checking the PID is still the engine; raises NotOurProcessError."""
        st = self._require_state(name)
        kind, why = self._identity(st)
        if kind == "mismatch":
            raise NotOurProcessError(self._set_stale(st, why))
        return self._record_or_raise(st)


def _health_status(url: str, timeout_s: float) -> int:
    """The status of GET ``url``/health (its body, bounded, unread unless 200)."""
    return blocking_get(url + "/health", 64 * 1024, timeout_s=timeout_s, error_body=False)[0]
