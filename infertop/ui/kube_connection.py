"""Kubernetes in the app, the connection half: session, informers, permissions and the Cluster pane.

``KubeConnection`` is a mixin of :class:`~infertop.ui.app.InfertopApp` (through
:class:`~infertop.ui.kube_actions.KubeActions`). The blocking client runs in
thread workers (``asyncio.to_thread``); informers (``sources/kube/read.py``) keep the
cluster view current and a timer repaints the pane (ages tick; only changed
cells go out). While reads fail the pane is stale (the header says since when
and why, objects are dimmed); when every resource was read again, permissions
are re-checked.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rich.markup import escape
from rich.text import Text

from ..config import KubeConfig
from ..control.audit import AuditLog
from ..control.kube import KubeControl, Permissions, check_permissions
from ..domain.kube import ClusterSnapshot
from ..sources.sanitize import error_text
from ..sources.kube import ClusterWatcher, KubeError, KubeSession, PodLoadScraper, read_cluster, session_for
from ..state.cluster_join import engine_urls, norm_url, pod_engines, pod_loads_from_engines
from .action_runner import ActionRunner
from .widgets.cluster import ClusterPane

# action name → the permission it needs (control.kube.PERMISSIONS)
KUBE_MUTATING = {
    "kube_scale": "scale", "kube_hpa": "hpa", "kube_args": "args", "kube_restart": "restart",
    "kube_delete_pod": "delete_pod", "kube_drain_pod": "drain_pod", "kube_cordon": "cordon",
    "kube_drain_node": "drain_node", "kube_configmap": "configmap",
}
MAX_SCRAPED_PODS = 64
NOT_CONFIGURED = ("Kubernetes is not configured: run with --context NAME [--namespace NS], set kube.context in "
                  "the config file, or press K to pick a context from your kubeconfig.")


class KubeConnection(ActionRunner):
    """Mixin for InfertopApp: the Kubernetes session and the Cluster pane. Needs ``settings``, ``collector``,
    ``log_event``, ``query_one``, ``notify``, and the action half's ``_kube_keys``/``kube_action_state``."""

    kube_session: KubeSession | None = None
    kube_watcher: ClusterWatcher | None = None
    kube_control: KubeControl | None = None
    kube_perms: Permissions | None = None
    kube_snapshot: ClusterSnapshot | None = None
    kube_loads: dict = {}
    kube_error: str | None = None
    kube_connecting: bool = False
    kube_running_text: str = ""
    _kube_rendered = -1
    _kube_poll_at = 0.0
    _kube_refreshing = False
    _kube_loads_running = False
    _kube_loads_at = 0.0  # monotonic time of the last scrape of the pods' loads
    _kube_scrape_skip = 0
    _kube_pane_behind = False  # the Cluster pane missed a render while hidden
    _pod_scraper: PodLoadScraper | None = None  # kept between refreshes: keep-alive clients, warm parsers
    _kube_poll_stale_since: float | None = None  # polling without watches: reads failing since
    _kube_poll_reconnects = 0
    _kube_reconnects_seen = 0
    _kube_was_stale = False
    _kube_relist_note = ""  # Ctrl+R feedback in the header
    kube_perm_checks = 0  # permission checks run (on connect and after each reconnect)


    # ----- setup -----------------------------------------------------------------
    def _main_screen(self) -> Any:
        """The screen with the panes (``query_one`` would search an open dialog)."""
        return self.screen_stack[0]  # type: ignore[attr-defined]

    def _pane(self) -> ClusterPane:
        return self._main_screen().query_one(ClusterPane)

    @property
    def kube_cfg(self) -> KubeConfig:
        return self.settings.config.kube  # type: ignore[attr-defined]

    def kube_audit(self) -> AuditLog:
        return self.audit_log()

    def kube_setup(self) -> None:
        """On mount: connect when configured (the pane is repainted every kube.refresh_s once connecting)."""
        self.kube_loads = {}
        pane = self._pane()
        self._kube_keys()
        if self.kube_cfg.configured:
            pane.show_message("Kubernetes: connecting…", "dim")
            self.kube_connect()
        else:
            pane.show_message(NOT_CONFIGURED)

    def _kube_timer_on(self) -> None:
        """The pane's timer, from the first connect on: without a cluster it would wake the app every
        kube.refresh_s to find nothing to do."""
        if getattr(self, "_kube_timer", None) is None:
            self._kube_timer = self.set_interval(self.kube_cfg.refresh_s, self._kube_tick)  # type: ignore[attr-defined]

    def kube_shutdown(self) -> None:
        if self.kube_watcher is not None:
            self.kube_watcher.stop()
            self.kube_watcher = None
        if self._pod_scraper is not None:
            self._pod_scraper.close()
            self._pod_scraper = None

    def _kube_retire(self, old: KubeSession) -> None:
        """A session replaced by a context (or namespace) switch: closed now, or — while an action
        started on it still runs — kept for that action's follow and closed when it ends."""
        self._kube_retired = [*getattr(self, "_kube_retired", ()), old]
        self._kube_close_retired()

    def _kube_close_retired(self) -> None:
        retired = getattr(self, "_kube_retired", ())
        if not retired:
            return
        busy = {id(getattr(getattr(r.kind, "control", None), "session", None)) for r in self.action_board.runs()}
        keep = [s for s in retired if id(s) in busy]
        for s in retired:
            if id(s) not in busy:
                s.close()
        self._kube_retired = keep

    def _actions_changed(self) -> None:
        super()._actions_changed()
        self._kube_close_retired()  # an action ended: the session of a context left meanwhile may go

    def kube_connect(self, context: str | None = None, namespaces: list[str] | None = None) -> None:
        """Connect (or switch context / namespaces) in a thread worker."""
        self._kube_timer_on()
        self.kube_connecting = True
        self.run_worker(lambda: self._kube_connect_work(context, namespaces), thread=True,  # type: ignore[attr-defined]
                        group="kube-connect", exclusive=True, exit_on_error=False)

    def _kube_connect_work(self, context: str | None, namespaces: list[str] | None) -> None:
        cfg = self.kube_cfg
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
            self.call_from_thread(self._kube_failed, error_text(e))  # type: ignore[attr-defined]
            return
        self.call_from_thread(self._kube_connected, session, watcher, perms, snap)  # type: ignore[attr-defined]

    def _kube_failed(self, message: str) -> None:
        self.kube_connecting = False
        self.kube_error = message
        self._pane().show_message(f"Kubernetes: {message}", "bold red")  # type: ignore[attr-defined]
        self.log_event(f"[red]Kubernetes:[/red] {escape(message)}")  # type: ignore[attr-defined]
        self.refresh_bindings()  # type: ignore[attr-defined]

    def _kube_connected(self, session: KubeSession, watcher: ClusterWatcher | None, perms: Permissions,
                        snap: ClusterSnapshot) -> None:
        old = self.kube_session
        self.kube_shutdown()
        if old is not None and old.api_client is not session.api_client:
            self._kube_retire(old)
        self.kube_connecting = False
        self.kube_error = None
        self.kube_session, self.kube_watcher, self.kube_perms = session, watcher, perms
        self.kube_control = KubeControl(session, self.kube_audit(), self.kube_cfg, watcher=watcher)
        self.kube_snapshot = snap
        self.kube_loads = {}
        self._pane().scope_note = None  # a new connection reads the namespaces it was given
        self.kube_perm_checks += 1
        self._kube_rendered = watcher.version if watcher is not None else -1
        self._kube_reconnects_seen = watcher.reconnects if watcher is not None else 0
        self._kube_poll_reconnects = 0
        self._kube_poll_stale_since = snap.stale_since if watcher is None else None
        self.kube_error = snap.stale_error if watcher is None else None
        self._kube_was_stale = False
        self._kube_relist_note = ""
        self._kube_render()
        self._kube_keys()
        self.refresh_bindings()  # type: ignore[attr-defined]
        note = _denied_note(perms)
        self.log_event(escape(f"Kubernetes: context {session.context}, namespace {', '.join(session.namespaces)}: "  # type: ignore[attr-defined]
                              f"{len(snap.workloads)} workloads, {len(snap.pods)} pods{note}"))

    # ----- scope: the configured namespaces or all of them (0) ---------------------
    @property
    def kube_all_namespaces(self) -> bool:
        """The Cluster pane lists every namespace's objects (its watcher reads across all namespaces)."""
        return bool(getattr(self.kube_watcher, "all_namespaces", False))

    def action_cluster_all_namespaces(self) -> None:
        """0: all namespaces ⇄ the configured ones; the new watch starts (and syncs) off the UI thread,
        and the old scope's objects stay on screen until it has — or, refused, stay."""
        session, pane = self.kube_session, self._pane()
        if session is None:
            self.notify("Kubernetes is not connected", severity="warning", timeout=4)  # type: ignore[attr-defined]
            return
        if self.kube_watcher is None:
            self.notify("all namespaces needs the watch (kube.watch: true); polling reads the configured "  # type: ignore[attr-defined]
                        "namespaces", severity="warning", timeout=5, markup=False)
            return
        want = not self.kube_all_namespaces
        back = ", ".join(session.namespaces)
        pane.scope_note = "all namespaces: listing…" if want else f"back to namespace {back}: listing…"
        pane.refilter()
        self.run_worker(lambda: self._kube_scope_work(session, want), thread=True,  # type: ignore[attr-defined]
                        group="kube-scope", exclusive=True, exit_on_error=False)

    def _kube_scope_work(self, session: KubeSession, want_all: bool) -> None:
        cfg = self.kube_cfg
        if want_all:  # may the user list across namespaces? one small list, before any informer
            try:
                session.raw(session.core.list_pod_for_all_namespaces, limit=1)
            except KubeError as e:
                why = ("forbidden: list pods (all namespaces)" if e.status == 403
                       else f"all namespaces: {error_text(e)}")
                self.call_from_thread(self._kube_scope_refused, session, why)  # type: ignore[attr-defined]
                return
        watcher = ClusterWatcher(session, cfg, all_namespaces=want_all).start()
        watcher.wait_synced(cfg.timeout_s)
        snap = watcher.snapshot()
        self.call_from_thread(self._kube_scoped, session, watcher, snap)  # type: ignore[attr-defined]

    def _kube_scope_refused(self, session: KubeSession, why: str) -> None:
        if session is not self.kube_session:
            return
        pane = self._pane()
        pane.scope_note = why  # in place, over the previous scope's objects (kept)
        pane.refilter()
        self.log_event(f"[yellow]Kubernetes:[/yellow] {escape(why)}; still showing {escape(', '.join(session.namespaces))}")  # type: ignore[attr-defined]

    def _kube_scoped(self, session: KubeSession, watcher: ClusterWatcher, snap: ClusterSnapshot) -> None:
        if session is not self.kube_session or self.kube_watcher is None:
            watcher.stop()  # switched context (or disconnected) meanwhile
            return
        old = self.kube_watcher
        self.kube_watcher, self.kube_snapshot = watcher, snap
        old.stop()
        # actions started from now on follow through the new informers (a running one asks the server)
        self.kube_control = KubeControl(session, self.kube_audit(), self.kube_cfg, watcher=watcher)
        self._kube_rendered = watcher.version
        self._kube_reconnects_seen = watcher.reconnects
        pane = self._pane()
        pane.scope_note = None
        self._kube_render()
        pane.refilter()
        scope = "all namespaces" if watcher.all_namespaces else f"namespace {', '.join(session.namespaces)}"
        self.log_event(escape(f"Kubernetes: {scope}: {len(snap.workloads)} workloads, {len(snap.pods)} pods"))  # type: ignore[attr-defined]

    # ----- refresh ---------------------------------------------------------------
    def _kube_tick(self) -> None:
        """Timer: rebuild the view when the informers saw a change (or poll without watches), else repaint
        the ages; after a reconnect, re-check permissions."""
        if self.kube_session is None or not self.is_running:  # type: ignore[attr-defined]
            return
        watcher = self.kube_watcher
        self._kube_check_reconnect()
        if not self._kube_refreshing:
            if watcher is None or watcher.version != self._kube_rendered:
                self._kube_refreshing = True
                self.run_worker(self._kube_refresh_work(), group="kube-refresh", exit_on_error=False)  # type: ignore[attr-defined]
            elif self._cluster_active():
                self._kube_render()  # nothing new from the server: the ages still move
        if self._kube_scrape_skip > 0:
            self._kube_scrape_skip -= 1
        elif self._cluster_active():  # the pods' loads are shown on the Cluster pane alone
            self._kube_scrape_soon()

    def _kube_scrape_soon(self) -> None:
        if not self._kube_loads_running:
            self._kube_loads_running = True
            self.run_worker(self._kube_loads_work(), group="kube-loads", exit_on_error=False)  # type: ignore[attr-defined]

    def _kube_check_reconnect(self) -> None:
        """Every resource was read again after a failure: what the user may do may have changed too."""
        session, watcher = self.kube_session, self.kube_watcher
        reconnects = watcher.reconnects if watcher is not None else self._kube_poll_reconnects
        if session is None or reconnects == self._kube_reconnects_seen:
            return
        self._kube_reconnects_seen = reconnects
        self.run_worker(lambda: self._kube_recheck_work(session), thread=True,  # type: ignore[attr-defined]
                        group="kube-recheck", exclusive=True, exit_on_error=False)

    def _kube_recheck_work(self, session: KubeSession) -> None:
        perms = check_permissions(session)
        self.call_from_thread(self._kube_rechecked, session, perms)  # type: ignore[attr-defined]

    def _kube_rechecked(self, session: KubeSession, perms: Permissions) -> None:
        if session is not self.kube_session:
            return  # switched context meanwhile
        self.kube_perms = perms
        self.kube_perm_checks += 1
        self._kube_keys()
        self.refresh_bindings()  # type: ignore[attr-defined]
        note = _denied_note(perms)
        self.log_event(escape(f"Kubernetes: reconnected to {session.context}: every resource read again, "  # type: ignore[attr-defined]
                              f"permissions re-checked{note}"))

    async def _kube_refresh_work(self) -> None:
        try:
            await self._kube_refresh()
        finally:
            self._kube_refreshing = False

    async def _kube_loads_work(self) -> None:
        try:
            await self._kube_scrape()
        finally:
            self._kube_loads_running = False

    async def _kube_refresh(self) -> None:
        session, watcher = self.kube_session, self.kube_watcher
        if session is None:
            return
        try:
            if watcher is not None:
                version = watcher.version
                snap = await asyncio.to_thread(watcher.snapshot)
                self._kube_rendered = version
            else:
                snap = await asyncio.to_thread(read_cluster, session, self.kube_cfg)
        except KubeError as e:
            if session is not self.kube_session:
                return
            self.kube_error = str(e)
            if watcher is None and self._kube_poll_stale_since is None:
                last = self.kube_snapshot
                self._kube_poll_stale_since = last.taken_at if last is not None else time.time()
            self._kube_render()
            return
        if session is not self.kube_session:
            return  # switched context meanwhile
        if watcher is None and self._kube_poll_stale_since is not None:
            self._kube_poll_stale_since = None
            self._kube_poll_reconnects += 1
        self.kube_snapshot = snap
        self.kube_error = None
        self._kube_render()

    async def _kube_scrape(self) -> None:
        """Read running/waiting from the pods' engines (pod IP:port), when reachable from here — but not
        from the engines infertop polls already: theirs come from the fleet state (see _kube_loads_now)."""
        snap = self.kube_snapshot
        if snap is None:
            return
        polled = engine_urls(getattr(self.collector, "collectors", ()))  # type: ignore[attr-defined]
        urls = {p.key: p.engine_url for p in snap.pods if p.engine_url and p.phase == "Running" and not p.terminating
                and norm_url(p.engine_url) not in polled}
        urls = dict(list(urls.items())[:MAX_SCRAPED_PODS])
        if self._pod_scraper is None:
            self._pod_scraper = PodLoadScraper(timeout_s=1.5)
        loads = await self._pod_scraper.scrape(urls)
        self.kube_loads, self._kube_loads_at = loads, time.monotonic()
        # pod IPs are often unreachable from where infertop runs: then try again only every 5th refresh
        self._kube_scrape_skip = 4 if urls and all(v.error for v in loads.values()) else 0

    async def kube_refresh_now(self) -> None:
        """Ctrl+R: relist every resource (with watches; a plain read without), scrape the pods, say so."""
        session, watcher = self.kube_session, self.kube_watcher
        if session is None:
            return
        self._kube_relist_note = "relisting…"
        self._kube_render()
        if watcher is not None:
            tokens = watcher.request_relist("Ctrl+R")
            await asyncio.to_thread(watcher.wait_relisted, tokens, self.kube_cfg.timeout_s)
        await self._kube_refresh()
        await self._kube_scrape()
        if session is not self.kube_session:
            return
        failed = self._kube_stale() is not None
        self._kube_relist_note = f"{'relist failed' if failed else 'relisted'} {time.strftime('%H:%M:%S')}"
        self._kube_render()

    @property
    def kube_stale_error(self) -> str | None:
        """Why the cluster cannot be read now (the objects shown are the last read), else None."""
        stale = self._kube_stale()
        return stale[1] if stale is not None else None

    def _kube_stale(self) -> tuple[float, str] | None:
        """(since, why) while the cluster cannot be read: the pane shows the last objects read."""
        snap = self.kube_snapshot
        if self.kube_watcher is not None:
            return (snap.stale_since, snap.stale_error or "failing") if snap is not None and snap.stale else None
        if self._kube_poll_stale_since is not None:
            return self._kube_poll_stale_since, self.kube_error or "failing"
        return None

    def _engine_pods(self) -> dict[str, str]:
        """pod name → engine name as configured and as the sources tell it (dcgm's or Prometheus' pod label)."""
        return {**self.settings.engine_pods, **getattr(self.collector, "engine_pods", {})}  # type: ignore[attr-defined]

    def _pod_engines(self, snap: ClusterSnapshot) -> dict[str, str]:
        """pod key → the engine it runs (by address, by the pod → engine map, by name), for the Pods view."""
        state = self.state  # type: ignore[attr-defined]
        if state is None:
            return {}
        return {key: states[0].name for key, states in pod_engines(snap.pods, state.engines,
                                                                   self._engine_pods()).items()}

    def _kube_render(self) -> None:
        pane = self._pane()
        snap, session = self.kube_snapshot, self.kube_session
        if snap is None or session is None:
            return
        not_ready = sum(1 for p in snap.pods if not p.ready and not p.terminating)
        gpus = sum(n.gpu_allocatable or 0 for n in snap.nodes)
        header = Text()
        header.append("⎈ ", style="bold")
        header.append(f"{session.context}", style="bold")
        if self.kube_all_namespaces:
            header.append(" · ")
            header.append("all namespaces", style="bold cyan")
            header.append(f" ({len(snap.namespaces)} with objects) · {session.user or '?'} · ")
        else:
            header.append(f" · ns {', '.join(session.namespaces)} · {session.user or '?'} · ")
        header.append(f"{len(snap.workloads)} workloads, {len(snap.pods)} pods")
        if not_ready:
            header.append(f" ({not_ready} not ready)", style="yellow")
        if "nodes" in snap.absent:  # not "0 nodes/0 GPUs": none could be read
            header.append(f", nodes {snap.absent['nodes']}", style="yellow")
        else:
            header.append(f", {len(snap.nodes)} nodes/{gpus} GPUs")
        stale = self._kube_stale()
        if stale is not None:
            header.append(" · stale", style="bold red")
        else:
            header.append(" · watching" if self.kube_watcher is not None else " · polling", style="dim")
        if self._kube_relist_note:
            header.append(f" · {self._kube_relist_note}", style="dim")
        if self.settings.read_only:  # type: ignore[attr-defined]
            header.append(" · read-only", style="bold yellow")
        problems = list(snap.errors) + ([self.kube_error] if self.kube_error else [])
        if stale is not None:
            since = time.strftime("%H:%M:%S", time.localtime(stale[0]))
            problems.insert(0, f"stale since {since}: {stale[1]}")
        if self.kube_running_text:
            header.append(f"\n▶ {self.kube_running_text}", style="bold cyan")
        elif problems:
            header.append(f"\n✗ {problems[0]}", style="bold red")
        if (stale is not None) != self._kube_was_stale:
            self._kube_was_stale = stale is not None
            if stale is not None:
                self.log_event(f"[red]Kubernetes:[/red] {escape(problems[0])}")  # type: ignore[attr-defined]
        if not self._cluster_active():
            self._kube_pane_behind = True  # a hidden pane is not painted; it is when it comes on view
            return
        self._kube_pane_behind = False
        state = getattr(self, "state", None)
        marks = {v.subject: v.severity for v in sorted(getattr(state, "verdicts", ()) or (),
                                                       key=lambda v: v.severity == "critical")}  # critical last: wins
        pane.show(snap, header, self._kube_loads_now(snap), self._pod_engines(snap), stale=stale is not None,
                  marks=marks)

    def _kube_loads_now(self, snap: ClusterSnapshot) -> dict:
        """Each pod's load: a pod that is a watched engine shows that engine's running and waiting at the
        tick on screen; the others, their last scrape."""
        scraped = self.kube_loads
        if time.monotonic() - self._kube_loads_at > 3 * self.kube_cfg.refresh_s:
            scraped = {}  # not read while the pane was hidden: "—" until the next read, not old numbers
        state = self.state  # type: ignore[attr-defined]
        if state is None:
            return scraped
        return {**scraped, **pod_loads_from_engines(snap.pods, state.engines, self._engine_pods())}

    def kube_pane_shown(self) -> None:
        """The Cluster pane came on view: paint what it missed while hidden, and read the pods' loads
        (not read while it was hidden)."""
        if self.kube_session is not None and self._cluster_active():
            self._kube_scrape_soon()
        if self._kube_pane_behind and self._cluster_active():
            self._kube_render()


def _denied_note(perms: Permissions) -> str:
    """"; not permitted: scale, drain" for the Log line of a connect or reconnect (empty when all may run)."""
    denied = [a for a, p in KUBE_MUTATING.items() if perms.allows(p) is False]
    return f"; not permitted: {', '.join(a.removeprefix('kube_') for a in denied)}" if denied else ""
