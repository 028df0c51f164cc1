"""Recording fleet states while the UI (or the headless recorder) runs.

:class:`StateLog` keeps the last minutes of documents in memory (for an
incident bundle) and, with a path, appends every tick to a flight
recording from a writer thread, so compressing a block never stalls the
UI. A write error is kept and reported, never raised into the caller.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

DEFAULT_RETENTION_S = 7 * 86400
BUNDLE_S = 15 * 60  # an incident bundle holds the last 15 minutes


class StateLog:
    """Recent states in memory, and optionally every state on disk."""

    def __init__(self, path: str | None = None, *, refresh_s: float = 1.0, keep_s: float = BUNDLE_S,
                 retention_s: float | None = DEFAULT_RETENTION_S) -> None:
        self.path = path
        self.recent: deque[tuple[float, dict]] = deque(maxlen=max(2, int(keep_s / max(refresh_s, 0.05)) + 1))
        self.error: str | None = None
        self.ticks = 0
        self._queue: queue.Queue[tuple[float, dict] | None] = queue.Queue(maxsize=10_000)
        self._thread: threading.Thread | None = None
        self._recorder: Any = None
        if path is not None:
            from .recorder import Recorder

            self._recorder = Recorder(path, retention_s=retention_s)
            self._thread = threading.Thread(target=self._write, name="infertop-recorder", daemon=True)
            self._thread.start()

    def add(self, ts: float, doc: Any) -> None:
        """Keep this tick (and queue it for the recording). ``doc`` is a document or anything with
        ``to_doc()`` (a FleetState): it is turned into a document only when written, off this thread."""
        if self.recent and ts <= self.recent[-1][0]:
            return  # the same tick painted twice (a repaint): recorded once
        self.recent.append((ts, doc))
        self.ticks += 1
        if self._thread is not None:
            try:
                self._queue.put_nowait((ts, doc))
            except queue.Full:
                self.error = "recorder falling behind: ticks dropped"

    def _write(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                break
            try:
                ts, doc = item
                self._recorder.append(ts, _doc(doc))
            except Exception as e:  # noqa: BLE001 — a recording problem must not stop the console
                self.error = f"recording {self.path}: {e}"

    def window(self, seconds: float) -> list[tuple[float, Any]]:
        """The ticks of the last ``seconds`` kept in memory, oldest first (states or documents:
        :func:`documents` turns them into documents, best in a worker thread)."""
        if not self.recent:
            return []
        start = self.recent[-1][0] - seconds
        return [(ts, doc) for ts, doc in list(self.recent) if ts >= start]

    def close(self) -> None:
        """Write what is queued and close the recording."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None
        if self._recorder is not None:
            try:
                self._recorder.close()
            except Exception as e:  # noqa: BLE001
                self.error = f"recording {self.path}: {e}"
            self._recorder = None


def _doc(item: Any) -> dict:
    return item.to_doc() if hasattr(item, "to_doc") else item


def documents(ticks: Iterable[tuple[float, Any]]) -> list[tuple[float, dict]]:
    """(ts, document) for each (ts, state or document)."""
    return [(ts, _doc(item)) for ts, item in ticks]


def save_bundle(path: str, states: Iterable[tuple[float, dict]], log_lines: list[str], audit_entries: list[dict],
                config_text: str) -> str:
    """Write an incident bundle (replayable with ``infertop replay``); returns its path."""
    from .bundle import write_bundle

    write_bundle(path, documents(states), log_lines, audit_entries, config_text)
    return path
