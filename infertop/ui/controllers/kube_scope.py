"""Kubernetes in the console, the scope part: the configured namespaces or all of them (``0``).

The new watch starts (and syncs) off the UI thread; the old scope's objects stay on screen until it
has — or, refused, stay. A part of :class:`~infertop.ui.controllers.kube.KubeController`, given the
connection whose watcher it replaces.
"""

from __future__ import annotations

from rich.markup import escape

from ...domain.kube import ClusterSnapshot
from ...sources.kube import ClusterWatcher, KubeError, KubeSession
from ...sources.sanitize import error_text
from .kube_connection import KubeConnection


class KubeScope:
    """``0`` on the Cluster pane: all namespaces ⇄ the configured ones, for ``conn``'s session."""

    def __init__(self, conn: KubeConnection) -> None:
        self.conn = conn

    def toggle(self) -> None:
        """0: all namespaces ⇄ the configured ones; the new watch starts (and syncs) off the UI thread,
        and the old scope's objects stay on screen until it has — or, refused, stay."""
        session, pane = self.conn.session, self.conn.pane()
        if session is None:
            self.conn.host.notify("Kubernetes is not connected", severity="warning", timeout=4)
            return
        if self.conn.watcher is None:
            self.conn.host.notify("all namespaces needs the watch (kube.watch: true); polling reads the "
                                  "configured namespaces", severity="warning", timeout=5, markup=False)
            return
        want = not self.conn.all_namespaces
        back = ", ".join(session.namespaces)
        pane.scope_note = "all namespaces: listing…" if want else f"back to namespace {back}: listing…"
        pane.refilter()
        self.conn.host.run_worker(lambda: self._scope_work(session, want), thread=True,
                                  group="kube-scope", exclusive=True, exit_on_error=False)

    def _scope_work(self, session: KubeSession, want_all: bool) -> None:
        cfg = self.conn.cfg
        if want_all:  # may the user list across namespaces? one small list, before any informer
            try:
                session.raw(session.core.list_pod_for_all_namespaces, limit=1)
            except KubeError as e:
                why = ("forbidden: list pods (all namespaces)" if e.status == 403
                       else f"all namespaces: {error_text(e)}")
                self.conn.host.call_from_thread(self._scope_refused, session, why)
                return
        watcher = ClusterWatcher(session, cfg, all_namespaces=want_all).start()
        watcher.wait_synced(cfg.timeout_s)
        snap = watcher.snapshot()
        self.conn.host.call_from_thread(self._scoped, session, watcher, snap)

    def _scope_refused(self, session: KubeSession, why: str) -> None:
        if session is not self.conn.session:
            return
        pane = self.conn.pane()
        pane.scope_note = why  # in place, over the previous scope's objects (kept)
        pane.refilter()
        self.conn.host.log_event(f"[yellow]Kubernetes:[/yellow] {escape(why)}; still showing "
                                 f"{escape(', '.join(session.namespaces))}")

    def _scoped(self, session: KubeSession, watcher: ClusterWatcher, snap: ClusterSnapshot) -> None:
        if session is not self.conn.session or self.conn.watcher is None:
            watcher.stop()  # switched context (or disconnected) meanwhile
            return
        self.conn.adopt_watcher(session, watcher, snap)
        pane = self.conn.pane()
        pane.scope_note = None
        self.conn.render()
        pane.refilter()
        scope = "all namespaces" if watcher.all_namespaces else f"namespace {', '.join(session.namespaces)}"
        self.conn.host.log_event(escape(f"Kubernetes: {scope}: {len(snap.workloads)} workloads, "
                                        f"{len(snap.pods)} pods"))
