"""Watch streams: newline-delimited JSON events in HTTP chunks, from a resourceVersion
or with the initial state (``sendInitialEvents``), bookmarks, ``timeoutSeconds``, 410 Gone
for a resourceVersion older than the history and 504 for one newer than the server's."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from . import errors as E
from .errors import ApiError
from .resources import ResourceType
from .store import Expired, clone
from .util import bool_param

if TYPE_CHECKING:
    from .http_server import Handler
    from .server import KubeEmulator


class WatchStream:
    """One watch stream: newline-delimited JSON events in HTTP chunks."""

    def __init__(self, emu: "KubeEmulator", handler: Handler, rt: ResourceType, namespace: str | None,
                 label_pred, field_pred, query: dict):
        self.emu, self.handler, self.rt, self.namespace = emu, handler, rt, namespace
        self.label_pred, self.field_pred, self.query = label_pred, field_pred, query

    def matches(self, obj: dict) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.label_pred(meta.get("labels") or {}) and self.field_pred(obj)

    def transform(self, ev) -> tuple[str, dict] | None:
        new_ok = self.matches(ev.obj)
        if ev.type in ("ADDED", "DELETED"):
            return (ev.type, ev.obj) if new_ok else None
        old_ok = ev.old is not None and self.matches(ev.old)
        if new_ok and old_ok:
            return ("MODIFIED", ev.obj)
        if new_ok:
            return ("ADDED", ev.obj)
        if old_ok:
            return ("DELETED", ev.obj)
        return None

    def send(self, etype: str, obj: dict) -> bool:
        line = json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n"
        return self.handler.write_chunk(line)

    def bookmark(self, rv: int, initial_end: bool = False) -> bool:
        meta: dict = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return self.send("BOOKMARK", {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta})

    def error(self, code: int, reason: str, message: str) -> bool:
        return self.send("ERROR", ApiError(code, reason, message).status())

    def run(self) -> None:
        store, q = self.emu.store, self.query
        try:
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else self.emu.watch_timeout
        except ValueError:
            raise E.bad_request("timeoutSeconds must be an integer") from None
        deadline = time.monotonic() + timeout
        bookmarks = bool_param(q.get("allowWatchBookmarks"))
        send_initial = bool_param(q.get("sendInitialEvents"))
        rv_param = q.get("resourceVersion") or ""
        initial: list[dict] = []
        with store.lock:
            if rv_param in ("", "0") or send_initial:
                initial = [clone(o) for o in store.iter(self.rt, self.namespace) if self.matches(o)]
                cursor = store.resource_version
            else:
                try:
                    cursor = int(rv_param)
                except ValueError:
                    raise E.bad_request(f"invalid resource version: {rv_param!r}") from None
                # as the API server's watch cache: wait a little for a resourceVersion from the
                # future, then answer 504 "Too large resource version" (after a restart, a restore)
                store.changed.wait_for(lambda: store.resource_version >= cursor or store.closed,
                                       timeout=self.emu.too_large_rv_wait)
                if cursor > store.resource_version:
                    raise E.too_large_resource_version(cursor, store.resource_version)
        self.handler.start_stream()
        for obj in initial:
            if not self.send("ADDED", obj):
                return
        if send_initial and not self.bookmark(cursor, initial_end=True):
            return
        while True:
            with store.lock:
                remaining = deadline - time.monotonic()
                if store.closed or remaining <= 0:
                    break
                try:
                    events = store.events_after(cursor, self.rt.key)
                except Expired as exc:
                    self.error(410, "Expired", str(exc))
                    self.handler.end_stream()
                    return
                cursor = store.resource_version
                if not events:
                    store.changed.wait(min(remaining, 0.5))
                    continue
            for ev in events:
                out = self.transform(ev)
                if out is not None and not self.send(*out):
                    return
        if bookmarks and not store.closed:
            self.bookmark(cursor)
        self.handler.end_stream()
