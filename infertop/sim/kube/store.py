"""The object store: every object of every type, one resourceVersion counter.

Objects are plain JSON dicts. Every write (create, update, delete) takes
the next value of a cluster-wide counter as ``metadata.resourceVersion``
(a string, as the real API) and appends a watch event to a bounded
history, so a watch can resume from any resourceVersion still in it; one
older than the history answers 410 Gone. One re-entrant lock guards
everything; ``changed`` (a Condition on it) wakes watchers, the
reconcile loop and :meth:`KubeEmulator.wait_until` after each write.
"""

from __future__ import annotations

import builtins
import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from .resources import RESOURCE_TYPES, ResourceType


def clone(obj: Any) -> Any:
    """Deep copy of a JSON value (faster than copy.deepcopy for JSON)."""
    return json.loads(json.dumps(obj))


class Expired(Exception):
    """A watch asked for a resourceVersion older than the history."""

    def __init__(self, requested: int, oldest: int):
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    key: tuple[str, str]
    type: str  # ADDED / MODIFIED / DELETED
    obj: dict  # the object after the write (for DELETED: as it was deleted)
    old: dict | None  # the object before the write (None for ADDED)


class Store:
    def __init__(self, history_size: int = 5000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = {
            rt.key: {} for rt in RESOURCE_TYPES
        }
        self._rv = 0
        self._history: deque[WatchEvent] = deque(maxlen=history_size)
        self._floor = 0  # every event with rv > floor is still in the history
        self.closed = False

    # ------------------------------------------------------------- reads
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self._objects[rt.key].get((namespace or "", name))
            return clone(obj) if obj is not None else None

    def peek(self, rt: ResourceType, namespace: str, name: str) -> dict | None:
        """The stored object itself, not a copy: callers must not modify it."""
        return self._objects[rt.key].get((namespace or "", name))

    def list(self, rt: ResourceType, namespace: str | None = None) -> list[dict]:
        with self.lock:
            return [clone(o) for o in self.iter(rt, namespace)]

    def iter(self, rt: ResourceType, namespace: str | None = None):
        """Stored objects (not copies), sorted by namespace/name; hold the lock."""
        items = self._objects[rt.key]
        for key in sorted(items):
            if namespace is None or key[0] == namespace:
                yield items[key]

    def count(self, rt: ResourceType) -> int:
        return len(self._objects[rt.key])

    # ------------------------------------------------------------ writes
    def put(self, rt: ResourceType, obj: dict) -> dict:
        """Create or replace ``obj``; stamps the next resourceVersion and
        returns a copy of what was stored."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace") or "", meta["name"])
            old = self._objects[rt.key].get(key)
            self._rv += 1
            stored = clone(obj)
            stored["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[rt.key][key] = stored
            self._record(WatchEvent(self._rv, rt.key, "MODIFIED" if old else "ADDED", stored, old))
            return clone(stored)

    def remove(self, rt: ResourceType, namespace: str, name: str) -> dict | None:
        """Delete an object; returns it (with the deletion's resourceVersion)."""
        with self.lock:
            old = self._objects[rt.key].pop((namespace or "", name), None)
            if old is None:
                return None
            self._rv += 1
            gone = clone(old)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._record(WatchEvent(self._rv, rt.key, "DELETED", gone, old))
            return clone(gone)

    def _record(self, event: WatchEvent) -> None:
        if self._history.maxlen and len(self._history) == self._history.maxlen:
            self._floor = self._history[0].rv
        self._history.append(event)
        self.changed.notify_all()

    # ------------------------------------------------------------- watch
    def events_after(self, rv: int, key: tuple[str, str] | None = None) -> builtins.list[WatchEvent]:  # list: a method here
        """Events with resourceVersion > rv (hold the lock)."""
        if rv < self._floor:
            raise Expired(rv, self._floor + 1)
        out = []
        for ev in reversed(self._history):
            if ev.rv <= rv:
                break
            if key is None or ev.key == key:
                out.append(ev)
        out.reverse()
        return out

    def compact(self) -> None:
        """Forget the watch history (a watch from an older rv gets 410 Gone)."""
        with self.lock:
            self._history.clear()
            self._floor = self._rv

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()

    def reopen(self) -> None:
        with self.lock:
            self.closed = False

    def reset_resource_versions(self) -> None:
        """Restart the counter, as an API server restored from a backup: every
        object is stamped again from 1 and the watch history is gone, so a
        resourceVersion a client saw before may now be unknown or in the future."""
        with self.lock:
            self._rv = 0
            for objects in self._objects.values():
                for key in sorted(objects):
                    self._rv += 1
                    objects[key]["metadata"]["resourceVersion"] = str(self._rv)
            self._history.clear()
            self._floor = 0
            self.changed.notify_all()
