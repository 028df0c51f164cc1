"""Read-only questions about local engines (:class:`Queries`, given the store): which engines
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
from .errors import EngineError, NotOurProcessError
from .state import EngineRecord, clean_line
from .store import EngineStore
from ..logtail import tail_file


class Queries:
    """adopt, status, list, logs, history, health and verify of local engines."""

    def __init__(self, store: EngineStore) -> None:
        self.store = store

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
            names = self.store.state_names()
        except OSError:
            return adopted
        for name in names:
            st = self.store.read_state(name)
            if st is None:
                continue
            kind, why = self.store.identity(st)
            if kind == "mismatch":
                if not self.store.busy(name):
                    self.store.set_stale(st, why)
                continue
            if kind == "alive" or (kind == "gone" and self.store.live_group(st)):
                with self.store.lock:
                    self.store.adopted.add(name)
                adopted.append(name)
                if st.get("phase") == "starting" and kind == "alive" and not self.store.busy(name):
                    # Its starter is gone: settle the phase with one /health probe.
                    with contextlib.suppress(httpx.HTTPError, HttpError, OSError):
                        if _health_status(st["url"], 1.0) == 200:
                            st.update(phase="running", healthy_at=st.get("healthy_at") or time.time())
                            self.store.write_state(name, st)
            elif not self.store.busy(name):
                self.store.drop_state(name)
                self.store.add_history(name, "dropped", "stale", reason=why, pid=st.get("pid"))
        return adopted

    def status(self, name: str) -> EngineRecord | None:
        """The engine's record (cheap: /proc only), or None if infertop knows none."""
        st = self.store.read_state(name)
        if st is None:
            with self.store.lock:
                stale = self.store.stale.get(name)
                if stale is not None:
                    return self.store.build_record(stale[0], "stale", stale[1])
                return self.store.exited.get(name)
        rec = self.store.record(st)
        if rec is None:
            with self.store.lock:
                return self.store.exited.get(name)
        return rec

    def list(self) -> list[EngineRecord]:  # noqa: A003 — the manager's natural verb
        """Every known engine: running ones, then those that exited this session."""
        out: dict[str, EngineRecord] = {}
        for name in self.store.state_names():
            rec = self.status(name)
            if rec is not None:
                out[rec.name] = rec
        with self.store.lock:
            stale = list(self.store.stale)
            for name, rec in self.store.exited.items():
                out.setdefault(name, rec)
        for name in stale:
            if name not in out and (rec := self.status(name)) is not None:
                out[name] = rec
        return sorted(out.values(), key=lambda r: (not r.alive, r.name))

    # builtins.list: below the method `list`, a bare `list` in an annotation names the method
    def tail_log(self, name: str, n: int = 50) -> builtins.list[str]:
        """The last ``n`` lines of the engine's log (read from the end of the file)."""
        return [clean_line(line, 1000) for line in tail_file(self.store.log_path(name), n)]

    def history(self, name: str, n: int = 50) -> builtins.list[dict]:
        """The last ``n`` lifecycle events (start, stop, restart, set, exited…), oldest first."""
        out = []
        for line in tail_file(self.store.history_path(name), n):
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
        st = self.store.require_state(name)
        kind, why = self.store.identity(st)
        if kind == "mismatch":
            raise NotOurProcessError(self.store.set_stale(st, why))
        return self.store.record_or_raise(st)


def _health_status(url: str, timeout_s: float) -> int:
    """The status of GET ``url``/health (its body, bounded, unread unless 200)."""
    return blocking_get(url + "/health", 64 * 1024, timeout_s=timeout_s, error_body=False)[0]
