"""Kubernetes in the console, the connection part: session, informers, permissions and the Cluster pane.

:class:`KubeConnection` is a part of :class:`~infertop.ui.controllers.kube.KubeController`. The
blocking client runs in thread workers (``asyncio.to_thread``); informers (``sources/kube/read.py``)
keep the cluster view current and a timer repaints the pane (ages tick; only changed
cells go out). While reads fail the pane is stale (the header says since when
and why, objects are dimmed); when every resource was read again, permissions
are re-checked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from rich.markup import escape
from textual.widgets import TabbedContent

from ...config import KubeConfig
from ...control.kube import KubeControl, Permissions, check_permissions
from ...control.pipeline import ActionRun
from ...domain.kube import ClusterSnapshot
from ...sources.kube import ClusterWatcher, KubeError, KubeSession, PodLoadScraper, read_cluster, session_for
from ...sources.sanitize import error_text
from ...state.cluster_join import engine_urls, norm_url, pod_engines, pod_loads_from_engines
from ...state.fleet_types import STALE
from ..widgets.cluster import ClusterPane
from .actions import ActionsController
from .kube_header import cluster_header

# action name → the permission it needs (control.kube.PERMISSIONS)
KUBE_MUTATING = {
    "kube_scale": "scale", "kube_hpa": "hpa", "kube_args": "args", "kube_restart": "restart",
    "kube_delete_pod": "delete_pod", "kube_drain_pod": "drain_pod", "kube_cordon": "cordon",
    "kube_drain_node": "drain_node", "kube_configmap": "configmap",
}
MAX_SCRAPED_PODS = 64
NOT_CONFIGURED = ("Kubernetes is not configured: run with --context NAME [--namespace NS], set kube.context in "
                  "the config file, or press K to pick a context from your kubeconfig.")


class KubeConnection:
    """The Kubernetes session and the Cluster pane. ``host`` is the console (run_worker, call_from_thread,
    set_interval, notify, log_event, refresh_bindings, screen_stack, is_running); ``collector`` and
    ``state`` give the fleet's collector and the state on screen (the pods' engines and loads);
    ``keys_changed`` repaints the pane's key line (what may run changed)."""

    def __init__(self, host: Any, settings: Any, actions: ActionsController, *, collector: Callable[[], Any],
                 state: Callable[[], Any], joiner: Callable[[], Any], keys_changed: Callable[[], None]) -> None:
        self.host, self.settings, self.actions = host, settings, actions
        self._collector, self._state, self._keys_changed = collector, state, keys_changed
        self._joiner = joiner
        self.session: KubeSession | None = None
        self.watcher: ClusterWatcher | None = None
        self.control: KubeControl | None = None
        self.perms: Permissions | None = None
        self.snapshot: ClusterSnapshot | None = None
        self.loads: dict = {}
        self.error: str | None = None
        self.connecting = False
        self.running_text = ""  # the Kubernetes actions in flight, on the header's ▶ line
        self.perm_checks = 0  # permission checks run (on connect and after each reconnect)
        self.retired: list[KubeSession] = []  # sessions of a context left, kept while an action follows on one
        self._timer: Any = None
        self._rendered = -1
        self._refreshing = False
        self._loads_running = False
        self._loads_at = 0.0  # monotonic time of the last scrape of the pods' loads
        self._scrape_skip = 0
        self._pane_behind = False  # the Cluster pane missed a render while hidden
        self._pod_scraper: PodLoadScraper | None = None  # kept between refreshes: keep-alive clients, warm parsers
        self._poll_stale_since: float | None = None  # polling without watches: reads failing since
        self._poll_reconnects = 0
        self._reconnects_seen = 0
        self._was_stale = False
        self._relist_note = ""  # Ctrl+R feedback in the header
        actions.watch(self._runs_changed)

    # ----- the pane ---------------------------------------------------------------
    def main_screen(self) -> Any:
        """The screen with the panes (``query_one`` would search an open dialog)."""
        return self.host.screen_stack[0]

    def pane(self) -> ClusterPane:
        return self.main_screen().query_one(ClusterPane)

    def cluster_active(self) -> bool:
        return bool(self.main_screen().query_one("#panes", TabbedContent).active == "cluster")

    @property
    def cfg(self) -> KubeConfig:
        kube: KubeConfig = self.settings.config.kube
        return kube

    # ----- setup -----------------------------------------------------------------
    def setup(self) -> None:
        """On mount: connect when configured (the pane is repainted every kube.refresh_s once connecting)."""
        self.loads = {}
        pane = self.pane()
        self._keys_changed()
        if self.cfg.configured:
            pane.show_message("Kubernetes: connecting…", "dim")
            self.connect()
        else:
            pane.show_message(NOT_CONFIGURED)

    def _timer_on(self) -> None:
        """The pane's timer, from the first connect on: without a cluster it would wake the app every
        kube.refresh_s to find nothing to do."""
        if self._timer is None:
            self._timer = self.host.set_interval(self.cfg.refresh_s, self.tick)

    def shutdown(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        if self._pod_scraper is not None:
            self._pod_scraper.close()
            self._pod_scraper = None

    def _retire(self, old: KubeSession) -> None:
        """A session replaced by a context (or namespace) switch: closed now, or — while an action
        started on it still runs — kept for that action's follow and closed when it ends."""
        self.retired = [*self.retired, old]
        self._close_retired()

    def _close_retired(self) -> None:
        if not self.retired:
            return
        busy = {id(getattr(getattr(r.kind, "control", None), "session", None)) for r in self.actions.board.runs()}
        keep = [s for s in self.retired if id(s) in busy]
        for s in self.retired:
            if id(s) not in busy:
                s.close()
        self.retired = keep

    def _runs_changed(self, runs: list[ActionRun]) -> bool:
        """The running actions changed: the header's ▶ line; a retired session whose action ended closes."""
        kube = [r for r in runs if r.kind.action.startswith("kube.")]
        text = " · ".join(f"{self.actions.run_title(r)}: {r.status_text()}" for r in kube)
        if self.running_text != text:
            self.running_text = text
            if self.host.is_running:
                try:
                    self.render()
                except Exception:  # noqa: BLE001 — the pane is not mounted yet / torn down
                    pass
        self._close_retired()  # an action ended: the session of a context left meanwhile may go
        return bool(self.running_text)

    def connect(self, context: str | None = None, namespaces: list[str] | None = None) -> None:
        """Connect (or switch context / namespaces) in a thread worker."""
        self._timer_on()
        self.connecting = True
        self.host.run_worker(lambda: self._connect_work(context, namespaces), thread=True,
                             group="kube-connect", exclusive=True, exit_on_error=False)

    def _connect_work(self, context: str | None, namespaces: list[str] | None) -> None:
        cfg = self.cfg
        try:
            session = session_for(cfg, context, namespaces)
            perms = check_permissions(session)
            watcher = None
            if cfg.watch:
                watcher = ClusterWatcher(session, cfg).start()
                watcher.wait_synced(cfg.timeout_s)
                snap = watcher.snapshot()
            else:
                try:
                    snap = read_cluster(session, cfg)
                except KubeError as e:
                    if e.status != 0:
                        raise
                    # no answer yet: connect anyway, stale and empty, and keep polling until it answers
                    snap = ClusterSnapshot(context=session.context, namespaces=tuple(session.namespaces),
                                           taken_at=time.time(), user=session.user, server=session.server,
                                           stale_since=time.time(), stale_error=error_text(e))
        except KubeError as e:
            self.host.call_from_thread(self._failed, error_text(e))
            return
        self.host.call_from_thread(self._connected, session, watcher, perms, snap)

    def _failed(self, message: str) -> None:
        self.connecting = False
        self.error = message
        self.pane().show_message(f"Kubernetes: {message}", "bold red")
        self.host.log_event(f"[red]Kubernetes:[/red] {escape(message)}")
        self.host.refresh_bindings()

    def _connected(self, session: KubeSession, watcher: ClusterWatcher | None, perms: Permissions,
                   snap: ClusterSnapshot) -> None:
        old = self.session
        self.shutdown()
        if old is not None and old.api_client is not session.api_client:
            self._retire(old)
        self.connecting = False
        self.error = None
        self.session, self.watcher, self.perms = session, watcher, perms
        self.control = KubeControl(session, self.actions.audit_log(), self.cfg, watcher=watcher)
        self.snapshot = snap
        self.loads = {}
        self.pane().scope_note = None  # a new connection reads the namespaces it was given
        self.perm_checks += 1
        self._rendered = watcher.version if watcher is not None else -1
        self._reconnects_seen = watcher.reconnects if watcher is not None else 0
        self._poll_reconnects = 0
        self._poll_stale_since = snap.stale_since if watcher is None else None
        self.error = snap.stale_error if watcher is None else None
        self._was_stale = False
        self._relist_note = ""
        self.render()
        self._keys_changed()
        self.host.refresh_bindings()
        note = denied_note(perms)
        self.host.log_event(escape(f"Kubernetes: context {session.context}, namespace {', '.join(session.namespaces)}: "
                                   f"{len(snap.workloads)} workloads, {len(snap.pods)} pods{note}"))

    # ----- scope: the configured namespaces or all of them (0): kube_scope.py ------
    @property
    def all_namespaces(self) -> bool:
        """The Cluster pane lists every namespace's objects (its watcher reads across all namespaces)."""
        return bool(getattr(self.watcher, "all_namespaces", False))

    def adopt_watcher(self, session: KubeSession, watcher: ClusterWatcher, snap: ClusterSnapshot) -> None:
        """A new scope's watcher (synced) replaces the one on view, which stops."""
        old = self.watcher
        self.watcher, self.snapshot = watcher, snap
        if old is not None:
            old.stop()
        # actions started from now on follow through the new informers (a running one asks the server)
        self.control = KubeControl(session, self.actions.audit_log(), self.cfg, watcher=watcher)
        self._rendered = watcher.version
        self._reconnects_seen = watcher.reconnects

    # ----- refresh ---------------------------------------------------------------
    def tick(self) -> None:
        """Timer: rebuild the view when the informers saw a change (or poll without watches), else repaint
        the ages; after a reconnect, re-check permissions."""
        if self.session is None or not self.host.is_running:
            return
        watcher = self.watcher
        self._check_reconnect()
        if not self._refreshing:
            if watcher is None or watcher.version != self._rendered:
                self._refreshing = True
                self.host.run_worker(self._refresh_work(), group="kube-refresh", exit_on_error=False)
            elif self.cluster_active():
                self.render()  # nothing new from the server: the ages still move
        if self._scrape_skip > 0:
            self._scrape_skip -= 1
        elif self.cluster_active():  # the pods' loads are shown on the Cluster pane alone
            self._scrape_soon()

    def _scrape_soon(self) -> None:
        if not self._loads_running:
            self._loads_running = True
            self.host.run_worker(self._loads_work(), group="kube-loads", exit_on_error=False)

    def _check_reconnect(self) -> None:
        """Every resource was read again after a failure: what the user may do may have changed too."""
        session, watcher = self.session, self.watcher
        reconnects = watcher.reconnects if watcher is not None else self._poll_reconnects
        if session is None or reconnects == self._reconnects_seen:
            return
        self._reconnects_seen = reconnects
        self.host.run_worker(lambda: self._recheck_work(session), thread=True,
                             group="kube-recheck", exclusive=True, exit_on_error=False)

    def _recheck_work(self, session: KubeSession) -> None:
        perms = check_permissions(session)
        self.host.call_from_thread(self._rechecked, session, perms)

    def _rechecked(self, session: KubeSession, perms: Permissions) -> None:
        if session is not self.session:
            return  # switched context meanwhile
        self.perms = perms
        self.perm_checks += 1
        self._keys_changed()
        self.host.refresh_bindings()
        note = denied_note(perms)
        self.host.log_event(escape(f"Kubernetes: reconnected to {session.context}: every resource read again, "
                                   f"permissions re-checked{note}"))

    async def _refresh_work(self) -> None:
        try:
            await self.refresh()
        finally:
            self._refreshing = False

    async def _loads_work(self) -> None:
        try:
            await self.scrape()
        finally:
            self._loads_running = False

    async def refresh(self) -> None:
        """Read the cluster again (the informers' view, or a plain read without watches) and repaint."""
        session, watcher = self.session, self.watcher
        if session is None:
            return
        try:
            if watcher is not None:
                version = watcher.version
                snap = await asyncio.to_thread(watcher.snapshot)
                self._rendered = version
            else:
                snap = await asyncio.to_thread(read_cluster, session, self.cfg)
        except KubeError as e:
            if session is not self.session:
                return
            self.error = str(e)
            if watcher is None and self._poll_stale_since is None:
                last = self.snapshot
                self._poll_stale_since = last.taken_at if last is not None else time.time()
            self.render()
            return
        if session is not self.session:
            return  # switched context meanwhile
        if watcher is None and self._poll_stale_since is not None:
            self._poll_stale_since = None
            self._poll_reconnects += 1
        self.snapshot = snap
        self.error = None
        self.render()

    async def scrape(self) -> None:
        """Read running/waiting from the pods' engines (pod IP:port), when reachable from here — but not
        from the engines infertop polls already: theirs come from the fleet state (see _loads_now)."""
        snap = self.snapshot
        if snap is None:
            return
        polled = engine_urls(getattr(self._collector(), "collectors", ()))
        urls = {p.key: p.engine_url for p in snap.pods if p.engine_url and p.phase == "Running" and not p.terminating
                and norm_url(p.engine_url) not in polled}
        urls = dict(list(urls.items())[:MAX_SCRAPED_PODS])
        if self._pod_scraper is None:
            self._pod_scraper = PodLoadScraper(timeout_s=1.5)
        loads = await self._pod_scraper.scrape(urls)
        self.loads, self._loads_at = loads, time.monotonic()
        # pod IPs are often unreachable from where infertop runs: then try again only every 5th refresh
        self._scrape_skip = 4 if urls and all(v.error for v in loads.values()) else 0

    async def refresh_now(self) -> None:
        """Ctrl+R: relist every resource (with watches; a plain read without), scrape the pods, say so."""
        session, watcher = self.session, self.watcher
        if session is None:
            return
        self._relist_note = "relisting…"
        self.render()
        if watcher is not None:
            tokens = watcher.request_relist("Ctrl+R")
            await asyncio.to_thread(watcher.wait_relisted, tokens, self.cfg.timeout_s)
        await self.refresh()
        await self.scrape()
        if session is not self.session:
            return
        failed = self._stale() is not None
        self._relist_note = f"{'relist failed' if failed else 'relisted'} {time.strftime('%H:%M:%S')}"
        self.render()

    @property
    def stale_error(self) -> str | None:
        """Why the cluster cannot be read now (the objects shown are the last read), else None."""
        stale = self._stale()
        return stale[1] if stale is not None else None

    def _stale(self) -> tuple[float, str] | None:
        """(since, why) while the cluster cannot be read: the pane shows the last objects read."""
        snap = self.snapshot
        if self.watcher is not None:
            if snap is not None and snap.stale_since is not None:  # snap.stale
                return snap.stale_since, snap.stale_error or "failing"
            return None
        if self._poll_stale_since is not None:
            return self._poll_stale_since, self.error or "failing"
        return None

    def _engine_pods(self) -> dict[str, str]:
        """pod name → engine name as configured and as the sources tell it (dcgm's or Prometheus' pod label)."""
        return {**self.settings.engine_pods, **getattr(self._collector(), "engine_pods", {})}

    def _pod_engines(self, snap: ClusterSnapshot) -> dict[str, str]:
        """pod key → the engine it runs (by address, by the pod → engine map, by name), for the Pods view."""
        state = self._state()
        if state is None:
            return {}
        return {key: states[0].name for key, states in pod_engines(snap.pods, state.engines,
                                                                   self._engine_pods()).items()}

    def join(self) -> None:
        """Hand the latest read (or why the cluster cannot be read, and since when) to the fleet joiner:
        the next tick's state carries it, and the pane paints it (:meth:`render`)."""
        if not (self.cfg.configured or self.session is not None):
            return
        source = self.session.context if self.session is not None else (self.cfg.context or "kubernetes")
        stale = self._stale()
        error = self.error or (stale[1] if stale is not None else None)
        if error or self.snapshot is not None:
            self._joiner().set_cluster(self.snapshot, error=error, source=source,
                                       error_since=stale[0] if stale is not None else None)

    def render(self) -> None:
        """Paint the Cluster pane (its header and objects) — when on view; else it is painted when it comes.
        The objects and their freshness are the fleet state's cluster part (``ClusterState``), as the next
        tick's state carries them and a replay shows them: handed to the joiner first, then read back."""
        pane = self.pane()
        session = self.session
        if session is None:
            return
        self.join()
        cluster = self._joiner().cluster_state()
        snap = cluster.snapshot if cluster is not None else None
        if snap is None or cluster is None:
            return
        f = cluster.freshness
        stale = (f.since if f.since is not None else time.time(), f.reason or "failing") if f.status == STALE else None
        header, problems = cluster_header(snap, session, stale=stale, all_namespaces=self.all_namespaces,
                                          watching=self.watcher is not None, relist_note=self._relist_note,
                                          read_only=bool(self.settings.read_only), error=self.error,
                                          running_text=self.running_text)
        if (stale is not None) != self._was_stale:
            self._was_stale = stale is not None
            if stale is not None:
                self.host.log_event(f"[red]Kubernetes:[/red] {escape(problems[0])}")
        if not self.cluster_active():
            self._pane_behind = True  # a hidden pane is not painted; it is when it comes on view
            return
        self._pane_behind = False
        state = self._state()
        marks = {v.subject: v.severity for v in sorted(getattr(state, "verdicts", ()) or (),
                                                       key=lambda v: v.severity == "critical")}  # critical last: wins
        pane.show(snap, header, self._loads_now(snap), self._pod_engines(snap), stale=stale is not None,
                  marks=marks)

    def _loads_now(self, snap: ClusterSnapshot) -> dict:
        """Each pod's load: a pod that is a watched engine shows that engine's running and waiting at the
        tick on screen; the others, their last scrape."""
        scraped = self.loads
        if time.monotonic() - self._loads_at > 3 * self.cfg.refresh_s:
            scraped = {}  # not read while the pane was hidden: "—" until the next read, not old numbers
        state = self._state()
        if state is None:
            return scraped
        return {**scraped, **pod_loads_from_engines(snap.pods, state.engines, self._engine_pods())}

    def pane_shown(self) -> None:
        """The Cluster pane came on view: paint what it missed while hidden, and read the pods' loads
        (not read while it was hidden)."""
        if self.session is not None and self.cluster_active():
            self._scrape_soon()
        if self._pane_behind and self.cluster_active():
            self.render()


def denied_note(perms: Permissions) -> str:
    """"; not permitted: scale, drain" for the Log line of a connect or reconnect (empty when all may run)."""
    denied = [a for a, p in KUBE_MUTATING.items() if perms.allows(p) is False]
    return f"; not permitted: {', '.join(a.removeprefix('kube_') for a in denied)}" if denied else ""
