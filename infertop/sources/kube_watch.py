"""Kubernetes reads that stay current: informers (list, then watch) and the cluster watcher.

An :class:`Informer` lists one resource once, then watches from the list's
resourceVersion (bookmarks; relist on 410 Gone; back-off on errors), in its own
daemon thread. :class:`ClusterWatcher` keeps one per resource and namespace and
builds snapshots from their caches: no API call in steady state.
This module never imports textual or rich.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from ..config import KubeConfig
from ..domain.kube import ClusterSnapshot
from .kube_session import (
    NAMESPACED_KINDS,
    KubeError,
    KubeSession,
    _one_line,
    as_kube_error,
    describe_api_error,
    list_all,
)
from .kube_view import RawCluster, build_snapshot

__all__ = [
    "ClusterWatcher",
    "Informer",
]


class Informer:
    """List once, then watch from the list's resourceVersion; keeps every object in memory.

    Runs in its own daemon thread. A watch that ends (server timeout) resumes
    from the last resourceVersion seen (bookmarks keep it fresh); 410 Gone
    relists; other errors back off (1 s doubling to 30 s) and are reported in
    :attr:`error`.
    """

    def __init__(self, session: KubeSession, kind: str, namespace: str | None, selector: str = "",
                 on_change: Callable[[], None] | None = None, watch_timeout_s: int = 300) -> None:
        self.session = session
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.on_change = on_change or (lambda: None)
        self.watch_timeout_s = watch_timeout_s
        self.items: dict[str, dict] = {}
        self.resource_version: str | None = None
        self.error: str | None = None
        self.status: int = 0
        self.synced = threading.Event()
        self.lists = 0
        self.watches = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"kube-informer-{kind}-{namespace or 'cluster'}",
                                        daemon=True)

    def start(self) -> "Informer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            conn = getattr(resp, "connection", None)
            sock = getattr(conn, "sock", None) if conn else None
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def join(self, timeout: float = 2.0) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def objects(self) -> list[dict]:
        with self._lock:
            return list(self.items.values())

    @staticmethod
    def _key(obj: dict) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._relist()
                self._watch()
                backoff = 1.0
            except KubeError as e:
                if self._stop.is_set():
                    return
                if e.status == 410:
                    self.resource_version = None
                    continue
                self.error, self.status = str(e), e.status
                if e.status in (401, 403, 404):
                    self.synced.set()  # read as far as we are allowed: say so, do not hang
                self._stop.wait(backoff)
                backoff = min(30.0, backoff * 2)
            except Exception as e:  # noqa: BLE001 — a broken stream: resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self.error = describe_api_error(e, self.session.timeout_s)
                self._stop.wait(backoff)
                backoff = min(30.0, backoff * 2)

    def _relist(self) -> None:
        objs, rv = list_all(self.session, self.kind, self.namespace, self.selector)
        self.lists += 1
        with self._lock:
            self.items = {self._key(o): o for o in objs}
            self.resource_version = rv or None
            self.error, self.status = None, 0
        self.synced.set()
        self.on_change()

    def _watch(self) -> None:
        fn, namespaced, selective = self.session.list_fn(self.kind)
        args = (self.namespace,) if namespaced else ()
        kw: dict[str, Any] = {"watch": True, "allow_watch_bookmarks": True, "timeout_seconds": self.watch_timeout_s,
                              "_preload_content": False}
        if self.resource_version:
            kw["resource_version"] = self.resource_version
        if selective and self.selector:
            kw["label_selector"] = self.selector
        self.session.count()
        self.watches += 1
        try:
            resp = fn(*args, _request_timeout=(self.session.timeout_s, self.watch_timeout_s + 30), **kw)
        except Exception as e:  # noqa: BLE001
            raise as_kube_error(e, self.session.timeout_s) from None
        self._resp = resp
        try:
            if self._stop.is_set():
                return
            for line in iter_resp_lines(resp):
                if not line.strip():
                    continue
                ev = json.loads(line)
                etype, obj = ev.get("type"), ev.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code") or 0)
                    if code == 410:
                        self.resource_version = None
                        return
                    raise KubeError(_one_line(f"{code} watch error: {obj.get('message')}"), code)
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "BOOKMARK":
                    if rv:
                        self.resource_version = rv
                    continue
                with self._lock:
                    if etype == "DELETED":
                        self.items.pop(self._key(obj), None)
                    else:
                        self.items[self._key(obj)] = obj
                    if rv:
                        self.resource_version = rv
                    self.error, self.status = None, 0
                self.on_change()
                if self._stop.is_set():
                    return
        finally:
            self._resp = None
            try:
                resp.close()
                resp.release_conn()
            except Exception:  # noqa: BLE001
                pass


class ClusterWatcher:
    """Informers for every resource of the Cluster pane; :meth:`snapshot` reads their caches."""

    def __init__(self, session: KubeSession, cfg: KubeConfig | None = None, *, watch_timeout_s: int = 300) -> None:
        self.session = session
        self.cfg = cfg or KubeConfig()
        self._version = 0
        self._vlock = threading.Lock()
        self._cached: tuple[int, ClusterSnapshot] | None = None
        self.informers: list[Informer] = []
        for ns in session.namespaces:
            for kind in NAMESPACED_KINDS:
                self.informers.append(Informer(session, kind, ns, self.cfg.selector, self._changed, watch_timeout_s))
        self.informers.append(Informer(session, "nodes", None, "", self._changed, watch_timeout_s))

    def _changed(self) -> None:
        with self._vlock:
            self._version += 1

    @property
    def version(self) -> int:
        """Grows with every change seen; a refresh only rebuilds when it moved."""
        return self._version

    def start(self) -> "ClusterWatcher":
        for inf in self.informers:
            inf.start()
        return self

    def stop(self) -> None:
        for inf in self.informers:
            inf.stop()

    def join(self, timeout: float = 2.0) -> None:
        for inf in self.informers:
            inf.join(timeout)

    @property
    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def wait_synced(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        for inf in self.informers:
            if not inf.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def snapshot(self) -> ClusterSnapshot:
        """The current view, from memory (no API call); rebuilt only when something changed."""
        version = self._version
        if self._cached is not None and self._cached[0] == version:
            return self._cached[1]
        raw = RawCluster(synced=self.synced)
        for inf in self.informers:
            raw.items[inf.kind].extend(inf.objects())
            if inf.error and not (inf.kind == "events" and inf.status == 403):
                where = f" in {inf.namespace}" if inf.namespace else ""
                raw.errors.append(f"{inf.kind}{where}: {inf.error}")
        snap = build_snapshot(raw, context=self.session.context, namespaces=self.session.namespaces,
                              user=self.session.user, server=self.session.server, selector=self.cfg.selector,
                              container=self.cfg.vllm_container, metrics_port=self.cfg.metrics_port)
        self._cached = (version, snap)
        return snap
