"""Kubernetes reads that stay current: informers (list, then watch) and the cluster watcher.

An :class:`Informer` lists one resource, then watches from the list's
resourceVersion (bookmarks), in its own daemon thread. It relists whenever that
resourceVersion is in doubt: 410 Gone, "Too large resource version", a
resourceVersion that goes backwards (the API server was restarted or restored),
and after any failure (the server may have come back with a different history).
While a resource cannot be read the informer is *stale*: it keeps the last
objects, the error and the time it went stale. :class:`ClusterWatcher` keeps one
informer per resource and namespace, builds snapshots from their caches (no API
call in steady state) and counts recoveries (:attr:`ClusterWatcher.reconnects`).
This module never imports textual or rich.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ...config import KubeConfig
from ...domain.kube import ClusterSnapshot
from .autoscalers import discover_custom_kinds, read_wva_desired
from .session import (
    ALL_NAMESPACES,
    CUSTOM_KINDS,
    INFERENCE_KINDS,
    NAMESPACED_KINDS,
    KubeError,
    KubeSession,
    _one_line,
    as_kube_error,
    iter_lines_capped,
    list_all,
)
from .view import RawCluster, absent_text, build_snapshot

__all__ = [
    "ClusterWatcher",
    "Informer",
    "rv_too_large",
]

BACKOFF_S = (0.5, 5.0)  # first and longest wait between two failed attempts (jittered ±20 %)


class _InDoubt(Exception):
    """The resourceVersion can no longer be trusted: relist (not a failure)."""


# Bounds on what one informer holds and reads: a watch that adds pods without end
# must not grow the console's memory or freeze it (over either: stale, back off, relist).
MAX_OBJECTS_PER_KIND = 5_000  # an emulator pod is ~13 KB parsed: ~64 MB per kind
MAX_WATCH_EVENTS_PER_S = 5_000


def _rv_int(rv: Any) -> int | None:
    """A resourceVersion as a number when it is one (they are opaque strings, in practice etcd revisions)."""
    return int(rv) if isinstance(rv, str) and rv.isdigit() else None


def rv_too_large(message: str, status: int) -> bool:
    """The API server has not reached the resourceVersion asked for (it restarted with a lower counter)."""
    return status in (500, 504) and "too large resource version" in message.lower()


class Informer:
    """List, then watch from the list's resourceVersion; keeps every object in memory.

    Runs in its own daemon thread. A watch that ends (server timeout) resumes
    from the last resourceVersion seen (bookmarks keep it fresh). A doubt about
    that resourceVersion relists at once; other errors mark the informer stale
    (:attr:`error`, :attr:`stale_since`), back off (0.5 s doubling to 5 s,
    jittered) and relist when the server answers again.
    """

    def __init__(self, session: KubeSession, kind: str, namespace: str | None, selector: str = "",
                 on_change: Callable[[], None] | None = None, watch_timeout_s: int = 300, *,
                 clock: Callable[[], float] = time.time, backoff_s: tuple[float, float] = BACKOFF_S,
                 max_objects: int = 0, max_events_per_s: int = 0) -> None:
        self.session = session
        self.kind = kind
        self.max_objects = max_objects or MAX_OBJECTS_PER_KIND
        self.max_events_per_s = max_events_per_s or MAX_WATCH_EVENTS_PER_S
        self.namespace = namespace
        self.selector = selector
        self.on_change = on_change or (lambda: None)
        self.watch_timeout_s = watch_timeout_s
        self.clock = clock
        self.backoff_s = backoff_s
        self.items: dict[str, dict] = {}
        self.resource_version: str | None = None
        self.error: str | None = None
        self.status: int = 0
        self.stale_since: float | None = None  # when reads started failing (the last good read)
        self.last_good_at: float | None = None  # the last successful list or watch event
        self.relist_reason: str | None = None  # why the latest relist happened, when not the first list
        self.synced = threading.Event()
        self.lists = 0
        self.list_attempts = 0
        self.watches = 0
        self.recoveries = 0  # stale → current again
        self.rv_resets = 0  # a list's resourceVersion lower than one seen before: restarted or restored server
        self._max_rv: int | None = None
        self._relist_wanted = False
        self._lock = threading.Lock()
        self._attempted = threading.Condition()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"kube-informer-{kind}-{namespace or 'cluster'}",
                                        daemon=True)

    @property
    def where(self) -> str:
        if self.namespace == ALL_NAMESPACES:
            return f"{self.kind} in all namespaces"
        return f"{self.kind} in {self.namespace}" if self.namespace else self.kind

    def start(self) -> "Informer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._interrupt()

    def request_relist(self, reason: str = "relist requested") -> int:
        """Relist now (Ctrl+R): ends the current watch or back-off wait. Returns a token for :meth:`wait_listed`."""
        token = self.list_attempts
        self.relist_reason = reason
        self._relist_wanted = True
        self._wake.set()
        self._interrupt()
        return token

    def wait_listed(self, token: int, timeout: float) -> bool:
        """Wait until a list was attempted (succeeded or failed) after ``token``."""
        with self._attempted:
            return self._attempted.wait_for(lambda: self.list_attempts > token, timeout)

    def _interrupt(self) -> None:
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

    @property
    def not_allowed(self) -> bool:
        """Never read because the user may not (403/404): an error to show, not staleness."""
        return self.status in (403, 404) and self.lists == 0

    @staticmethod
    def _key(obj: dict) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def _run(self) -> None:
        backoff = self.backoff_s[0]
        doubts = 0
        while not self._stop.is_set():
            try:
                if self.resource_version is None or self._relist_wanted:
                    self._relist_wanted = False
                    self._relist()
                started = time.monotonic()
                if self._watch() == 0 and time.monotonic() - started < 1.0 and not self._relist_wanted:
                    self._pause(self.backoff_s[0])  # a server ending every watch at once: do not spin
                backoff, doubts = self.backoff_s[0], 0
            except _InDoubt as e:
                self.relist_reason, self._relist_wanted = str(e), True
                doubts += 1
                if doubts > 2:  # a server that keeps contradicting itself: do not spin
                    self._pause(backoff)
                    backoff = min(self.backoff_s[1], backoff * 2)
            except Exception as e:  # noqa: BLE001 — every failure: stale, back off, relist when it answers
                if self._stop.is_set():
                    return
                if self._relist_wanted and not isinstance(e, KubeError):
                    continue  # request_relist() cut the stream on purpose
                err = e if isinstance(e, KubeError) else as_kube_error(e, self.session.timeout_s)
                if err.status == 410 or rv_too_large(str(err), err.status):
                    self.relist_reason, self._relist_wanted = str(err), True
                    continue
                self._fail(str(err), err.status)
                self._relist_wanted = True
                self._pause(backoff)
                backoff = min(self.backoff_s[1], backoff * 2)

    def _pause(self, seconds: float) -> None:
        self._wake.wait(seconds * random.uniform(0.8, 1.2))
        self._wake.clear()

    def _fail(self, message: str, status: int) -> None:
        with self._lock:
            changed = (message, status) != (self.error, self.status) or self.stale_since is None
            self.error, self.status = message, status
            if self.stale_since is None:
                self.stale_since = self.clock()
        if status in (401, 403, 404):
            self.synced.set()  # read as far as we are allowed: say so, do not hang
        if changed:
            self.on_change()

    def _relist(self) -> None:
        try:
            objs, rv = list_all(self.session, self.kind, self.namespace, self.selector)
        finally:
            with self._attempted:
                self.list_attempts += 1
                self._attempted.notify_all()
        rv_now = _rv_int(rv)
        with self._lock:
            if rv_now is not None and self._max_rv is not None and rv_now < self._max_rv:
                self.rv_resets += 1
                self.relist_reason = (f"resourceVersion went back from {self._max_rv} to {rv_now}: "
                                      f"the API server was restarted or restored")
            self._max_rv = rv_now
            if len(objs) > self.max_objects:
                raise KubeError(self._too_many())
            self.items = {self._key(o): o for o in objs}
            self.resource_version = rv or None
            if self.stale_since is not None:
                self.recoveries += 1
            self.error, self.status, self.stale_since = None, 0, None
            self.last_good_at = self.clock()
            self.lists += 1
        self.synced.set()
        self.on_change()

    def _too_many(self) -> str:
        return (f"more than {self.max_objects} {self.kind} (the limit held per kind): "
                f"watch stopped, relisting with backoff")

    def _seen(self, rv: Any) -> None:
        """Check a watch event's resourceVersion: one lower than already seen puts the cache in doubt."""
        n = _rv_int(rv)
        if n is None:
            return
        if self._max_rv is not None and n < self._max_rv:
            raise _InDoubt(f"resourceVersion went back from {self._max_rv} to {n} in a watch")
        self._max_rv = n

    def _watch(self) -> int:
        """One watch, until the server ends it; returns the number of lines read."""
        fn, args, selective = self.session.list_call(self.kind, self.namespace)
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
        self._resp = resp  # before the checks: stop() / request_relist() either see it or are seen
        ordered = "resource_version" in kw  # from a resourceVersion, events only move forward
        lines = 0
        second, in_second = time.monotonic(), 0
        try:
            if self._stop.is_set() or self._relist_wanted:
                return lines
            for line in iter_lines_capped(resp, self.session.max_watch_line_bytes):
                if not line.strip():
                    continue
                lines += 1
                in_second += 1
                if in_second > self.max_events_per_s:  # bookmarks count too: a flood of anything is a flood
                    if time.monotonic() - second < 1.0:
                        raise KubeError(f"watch flood: more than {self.max_events_per_s} events/s; "
                                        f"watch stopped, relisting with backoff")
                    second, in_second = time.monotonic(), 1
                try:
                    ev = json.loads(line)
                except ValueError:
                    raise KubeError("the API server sent a watch event that is not JSON") from None
                if not isinstance(ev, dict):
                    raise KubeError("the API server sent a watch event that is not an object")
                etype, obj = ev.get("type"), ev.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code") or 0)
                    message = str(obj.get("message") or "")
                    if code == 410 or rv_too_large(message, code):
                        raise _InDoubt(_one_line(f"{code} {message}"))
                    raise KubeError(_one_line(f"{code} watch error: {message}"), code)
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if ordered:
                    self._seen(rv)
                if etype == "BOOKMARK":
                    if rv:
                        self.resource_version = rv
                    continue
                with self._lock:
                    if etype == "DELETED":
                        self.items.pop(self._key(obj), None)
                    else:
                        key = self._key(obj)
                        if key not in self.items and len(self.items) >= self.max_objects:
                            raise KubeError(self._too_many())
                        self.items[key] = obj
                    if rv:
                        self.resource_version = rv
                    self.last_good_at = self.clock()
                self.on_change()
                if self._stop.is_set() or self._relist_wanted:
                    return lines
            return lines
        finally:
            self._resp = None
            try:
                resp.close()
                resp.release_conn()
            except Exception:  # noqa: BLE001
                pass


class ClusterWatcher:
    """Informers for every resource of the Cluster pane; :meth:`snapshot` reads their caches.

    :attr:`reconnects` grows each time the watcher comes back from stale (every
    resource read again): the app re-checks permissions then. ``all_namespaces``: one informer per
    kind across every namespace instead of one per configured namespace (the session is unchanged:
    permissions and actions stay the configured namespaces').
    """

    def __init__(self, session: KubeSession, cfg: KubeConfig | None = None, *, watch_timeout_s: int = 300,
                 clock: Callable[[], float] = time.time, backoff_s: tuple[float, float] = BACKOFF_S,
                 all_namespaces: bool = False) -> None:
        self.session = session
        self.all_namespaces = all_namespaces
        self.scope: list[str] = [ALL_NAMESPACES] if all_namespaces else list(session.namespaces)
        self.cfg = cfg or KubeConfig()
        self.clock = clock
        self.reconnects = 0
        self._was_stale = False
        self._version = 0
        self._vlock = threading.Lock()
        self._cached: tuple[int, ClusterSnapshot] | None = None
        self.informers: list[Informer] = []
        opts: dict[str, Any] = {"clock": clock, "backoff_s": backoff_s}
        for ns in self.scope:
            for kind in NAMESPACED_KINDS:
                self.informers.append(Informer(session, kind, ns, self.cfg.selector, self._changed, watch_timeout_s,
                                               **opts))
        self.informers.append(Informer(session, "nodes", None, "", self._changed, watch_timeout_s, **opts))
        self._informer_opts = (watch_timeout_s, opts)
        # the autoscaler custom resources (KEDA, llm-d): informers only for the types discovery finds
        self.discovered = threading.Event()
        self.discovery_errors: tuple[str, ...] = ()
        self.not_served: dict[str, str] = {}  # the Pools view's kinds discovery did not find: kind → why
        self.wva_desired: dict[tuple[str, str], float] = {}
        self.wva_error: str | None = None
        self._discovery = threading.Thread(target=self._discover, name="kube-discovery", daemon=True)
        self._stopped = threading.Event()

    def _discover(self) -> None:
        """Ask once which autoscaler types exist (retrying while the API server does not answer),
        then start their informers; with a wva_metrics_url, poll wva_desired_replicas."""
        wait = BACKOFF_S[0]
        while not self._stopped.is_set():
            try:
                found = discover_custom_kinds(self.session)
                break
            except KubeError:
                self._stopped.wait(wait)
                wait = min(BACKOFF_S[1], wait * 2)
        else:
            return
        timeout_s, opts = self._informer_opts
        added = [Informer(self.session, kind, ns, "", self._changed, timeout_s, **opts)
                 for kind in found.present for ns in self.scope]
        self.discovery_errors = found.errors
        self.not_served = {k: absent_text(k, 404) for k in INFERENCE_KINDS
                           if k not in found.present and not any(e.startswith(f"{k}:") for e in found.errors)}
        self.informers = self.informers + added  # a new list: readers iterate the old one safely
        for inf in added:
            inf.start()
        self.discovered.set()
        self._changed()
        url = self.cfg.wva_metrics_url
        if url and "variantautoscalings" in found.present:
            while not self._stopped.is_set():
                try:
                    values, error = read_wva_desired(url, min(self.session.timeout_s, 5.0)), None
                except KubeError as e:
                    values, error = self.wva_desired, str(e)
                if values != self.wva_desired or error != self.wva_error:
                    self.wva_desired, self.wva_error = values, error
                    self._changed()
                self._stopped.wait(self.cfg.refresh_s)

    def _changed(self) -> None:
        with self._vlock:
            self._version += 1
            stale = self.stale() is not None
            if self._was_stale and not stale:
                self.reconnects += 1
            self._was_stale = stale

    @property
    def version(self) -> int:
        """Grows with every change seen (objects, errors, staleness); a refresh only rebuilds when it moved."""
        return self._version

    @property
    def lists(self) -> int:
        return sum(inf.lists for inf in self.informers)

    @property
    def rv_resets(self) -> int:
        """How often a list's resourceVersion was lower than one seen before (restarted or restored server)."""
        return sum(inf.rv_resets for inf in self.informers)

    def stale(self) -> tuple[float, str] | None:
        """(since, error) while some resource cannot be read; None when every informer is current."""
        failing = [(inf.stale_since, inf.error or "failing") for inf in self.informers
                   if inf.stale_since is not None and not inf.not_allowed]
        if not failing and self.informers and all(inf.not_allowed for inf in self.informers):
            # nothing at all may be read: that is failing ("unauthorized"), not a fresh, empty cluster
            first = min(self.informers, key=lambda inf: inf.stale_since or 0.0)
            return first.stale_since or self.clock(), f"unauthorized: every read refused ({first.error})"
        return outage(failing)

    def start(self) -> "ClusterWatcher":
        for inf in self.informers:
            inf.start()
        self._discovery.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        for inf in self.informers:
            inf.stop()

    def join(self, timeout: float = 2.0) -> None:
        if self._discovery.is_alive():
            self._discovery.join(timeout)
        for inf in self.informers:
            inf.join(timeout)

    def request_relist(self, reason: str = "relist requested") -> list[int]:
        """Every informer relists now; the tokens are for :meth:`wait_relisted`."""
        return [inf.request_relist(reason) for inf in self.informers]

    def wait_relisted(self, tokens: list[int], timeout: float = 10.0) -> bool:
        """Wait until every informer tried a list after :meth:`request_relist` (it may have failed: see stale)."""
        deadline = time.monotonic() + timeout
        return all(inf.wait_listed(tok, max(0.0, deadline - time.monotonic()))
                   for inf, tok in zip(self.informers, tokens))

    @property
    def synced(self) -> bool:
        return self.discovered.is_set() and all(inf.synced.is_set() for inf in self.informers)

    def wait_synced(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        if not self.discovered.wait(timeout):
            return False
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
            if inf.error and not (inf.kind == "events" and inf.status == 403) and not (
                    inf.kind in CUSTOM_KINDS and inf.status == 404):  # a type removed since discovery: absent
                raw.errors.append(f"{inf.where}: {inf.error}")
        raw.errors.extend(self.discovery_errors)
        raw.absent = absent_kinds([(inf.kind, inf.status if inf.not_allowed else 0) for inf in self.informers
                                   if inf.kind not in CUSTOM_KINDS or inf.kind in INFERENCE_KINDS],
                                  all_namespaces=self.all_namespaces)
        raw.absent.update(self.not_served)
        raw.wva_desired = dict(self.wva_desired)
        if self.wva_error:
            raw.errors.append(self.wva_error)
        stale = self.stale()
        if stale is not None:
            raw.stale_since, raw.stale_error = stale
        namespaces = self.session.namespaces
        if self.all_namespaces:  # the namespaces of the objects read (the pane prefixes each row's)
            namespaces = sorted({(o.get("metadata") or {}).get("namespace") or "" for objs in raw.items.values()
                                 for o in objs if isinstance(o, dict)} - {""})
        snap = build_snapshot(raw, context=self.session.context, namespaces=namespaces,
                              all_namespaces=self.all_namespaces,
                              user=self.session.user, server=self.session.server, selector=self.cfg.selector,
                              container=self.cfg.vllm_container, metrics_port=self.cfg.metrics_port,
                              now=self.clock())
        self._cached = (version, snap)
        return snap


def absent_kinds(reads: list[tuple[str, int]], *, all_namespaces: bool = False) -> dict[str, str]:
    """kind → why it is not shown, for the kinds refused (403) or not served (404) in every namespace read;
    ``reads``: (kind, the refusal's status, 0 when it was read)."""
    by_kind: dict[str, set[int]] = {}
    for kind, status in reads:
        by_kind.setdefault(kind, set()).add(status)
    return {kind: absent_text(kind, statuses.pop(), all_namespaces=all_namespaces and kind != "nodes")
            for kind, statuses in by_kind.items()
            if len(statuses) == 1 and next(iter(statuses)) in (403, 404)}


def outage(failing: list[tuple[float, str]]) -> tuple[float, str] | None:
    """(since, error) of the cluster view from its failing reads' (since, error): the outage, not the
    oldest failure — one resource refused an hour ago (a 404) must not date an API server that stopped
    answering a minute ago. The error most reads share, from the first of them to fail; between equals,
    the latest onset."""
    if not failing:
        return None
    by_error: dict[str, list[float]] = {}
    for since, error in failing:
        by_error.setdefault(error, []).append(since)
    error, onsets = max(by_error.items(), key=lambda kv: (len(kv[1]), min(kv[1])))
    return min(onsets), error
