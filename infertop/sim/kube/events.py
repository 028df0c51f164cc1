"""Events as client-go's recorder writes them: a new Event, or the same one again
(same object, type, reason, message and field) with its count and lastTimestamp bumped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .resources import ResourceType, resource_type

if TYPE_CHECKING:
    from .api import Api

NAMESPACES = resource_type("namespaces")
EVENTS = resource_type("events")


class EventRecorder:
    """Writes the Events of the controllers and of the tests' ``record_event``, through the Api."""

    def __init__(self, api: "Api"):
        self.api = api
        self.store = api.store
        self._index: dict[tuple, str] = {}  # the Event's identity -> its name

    def record(self, involved_rt: ResourceType, involved: dict, etype: str, reason: str, message: str,
               component: str, *, host: str | None = None, field_path: str | None = None) -> None:
        """Create an Event, or bump count/lastTimestamp of the same one (as client-go's recorder)."""
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (namespace, meta.get("uid"), etype, reason, message, field_path)
        now = self.api.now()
        with self.store.lock:
            name = self._index.get(key)
            existing = self.store.get(EVENTS, namespace, name) if name else None
            if existing is not None:
                existing["count"] = existing.get("count", 1) + 1
                existing["lastTimestamp"] = now
                self.store.put(EVENTS, existing)
                return
            if self.store.peek(NAMESPACES, "", namespace) is None:
                return
            name = f"{meta['name']}.{self.api.emu.rng.getrandbits(64):016x}"
            ref = {
                "kind": involved_rt.kind,
                "namespace": meta.get("namespace") or "",
                "name": meta["name"],
                "uid": meta.get("uid"),
                "apiVersion": involved_rt.api_version,
                "resourceVersion": meta.get("resourceVersion"),
            }
            if not involved_rt.namespaced:
                ref.pop("namespace")
            if field_path:
                ref["fieldPath"] = field_path
            source = {"component": component}
            if host:
                source["host"] = host
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "type": etype,
                "count": 1,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "source": source,
                "reportingComponent": component,
                "reportingInstance": host or "",
                "eventTime": None,
            }
            self.api.create(EVENTS, namespace, event)
            self._index[key] = name
