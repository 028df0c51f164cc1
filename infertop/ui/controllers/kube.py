"""Kubernetes in the console: capabilities and every Kubernetes action, over its parts.

:class:`KubeController` is a plain object the App owns (``app.kube_ctl``), composed of its parts:
``connection`` (:class:`~infertop.ui.controllers.kube_connection.KubeConnection`: session, informers,
permissions, the Cluster pane), ``reads`` (:class:`~infertop.ui.controllers.kube_reads.KubeReads`:
describe, YAML, events, logs) and ``scope`` (:class:`~infertop.ui.controllers.kube_scope.KubeScope`:
all namespaces). Every action is a :class:`~infertop.control.kube.KubeAction` handed to the one
action pipeline (:meth:`~infertop.ui.controllers.actions.ActionsController.start_action`):
fresh read → pure plan (diff) → server dry run → ``ConfirmScreen`` → execute
(audit intent first) → follow in the background → audit outcome; a 409 re-reads
and asks again, a 403 disables the action for that kind and namespace.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

from ...control.gateway.drain import find_gateway
from ...control.kube import KubeAction
from ...domain.kube import HpaView, NodeView, PodView, WorkloadView
from ...sources.kube import KubeError, kube_contexts, namespaces_list
from ..screens.kube_dialogs import ChoiceDialog, args_dialog, configmap_dialog, hpa_dialog, scale_dialog, text_dialog
from .actions import ActionsController
from .kube_connection import KUBE_MUTATING, KubeConnection
from .kube_reads import READ_ACTIONS, TRIAGE_READS, KubeReads
from .kube_scope import KubeScope

KUBE_ACTIONS = set(KUBE_MUTATING) | {"kube_context", "kube_namespace", "cluster_view"} | READ_ACTIONS
KEY_HINTS = (  # (action, key, word) for the Cluster pane's key line
    ("kube_scale", "S", "scale"), ("kube_hpa", "H", "hpa"), ("kube_args", "A", "args"),
    ("kube_restart", "R", "restart"), ("kube_drain_pod", "D", "drain"), ("kube_delete_pod", "^D", "delete"),
    ("kube_cordon", "C", "cordon"), ("kube_drain_node", "N", "node-drain"), ("kube_configmap", "M", "cm"),
    ("kube_context", "K", "ctx"), ("kube_namespace", "^N", "ns"),
)

# action → which selected object it acts on (for per-kind, per-namespace permissions)
KUBE_TARGET = {"kube_scale": "workload", "kube_args": "workload", "kube_restart": "workload", "kube_hpa": "hpa",
               "kube_delete_pod": "pod", "kube_drain_pod": "pod", "kube_cordon": "node", "kube_drain_node": "node"}


class KubeController:
    """What the operator can do in the cluster, and the keys for it. ``host`` is the console (run_worker,
    push_screen(_wait), notify, call_from_thread, refresh_bindings, set_interval, screen, screen_stack,
    log_event); ``actions`` runs the pipeline; ``collector`` / ``state`` give the fleet's collector and the
    state on screen; ``replay`` whether this console replays a recording; ``on_triage`` whether the Triage
    pane is on view (p and e are its remedies there); ``show_pane`` brings a pane on view."""

    def __init__(self, host: Any, settings: Any, actions: ActionsController, *, collector: Callable[[], Any],
                 state: Callable[[], Any], joiner: Callable[[], Any], replay: bool, on_triage: Callable[[], bool],
                 show_pane: Callable[[str], None]) -> None:
        self.host, self.settings, self.actions = host, settings, actions
        self._on_triage, self._show_pane = on_triage, show_pane
        self.connection = KubeConnection(host, settings, actions, collector=collector, state=state, joiner=joiner,
                                         keys_changed=self.update_keys)
        self.reads = KubeReads(host, self.connection, replay=replay)
        self.scope = KubeScope(self.connection)

    def update_keys(self) -> None:
        """The Cluster pane's key line: the keys that may act on its selection now."""
        parts = []
        for action, key, word in KEY_HINTS:
            if self.action_state(action):
                parts.append(f"{key}:{word}")
        self.connection.pane().set_keys(" ".join(parts))

    def row_highlighted(self) -> None:
        """Another object selected: what may run (engine managed? its kind's and namespace's RBAC) changes."""
        self.host.refresh_bindings()
        if self.connection.session is not None:
            try:
                self.update_keys()
            except Exception:  # noqa: BLE001 — the Cluster pane is not mounted yet
                pass

    # ----- capabilities ----------------------------------------------------------
    def _scope_of(self, action: str) -> tuple[str | None, str | None]:
        """(namespace, kind) of the object ``action`` would act on: the Cluster pane's selection."""
        want = KUBE_TARGET.get(action)
        session = self.connection.session
        try:
            if action == "kube_configmap":
                _view, obj = self.connection.pane().selected()
                ns = getattr(obj, "namespace", None) or (session.namespaces[0] if session else None)
                return ns, "ConfigMap"
            target = self.target(want) if want else None
        except Exception:  # noqa: BLE001 — the pane is not mounted (yet): any object
            return None, None
        if target is None:
            return None, None
        if isinstance(target, WorkloadView):
            return target.namespace, target.kind
        if isinstance(target, HpaView):
            return target.namespace, "HorizontalPodAutoscaler"
        if isinstance(target, PodView):
            return target.namespace, "Pod"
        return None, "Node"

    def denied_reason(self, action: str) -> str | None:
        """Why a Kubernetes key cannot act now (shown when it is pressed)."""
        if action not in KUBE_ACTIONS or action in READ_ACTIONS:
            return None  # d/y/e/l/p elsewhere are other panes' keys: nothing to say here
        if action in ("cluster_view", "kube_context"):
            return None
        conn = self.connection
        if conn.session is None:
            return ("Kubernetes is not connected: " + conn.error) if conn.error else \
                "Kubernetes is not configured: press K to pick a context"
        if action == "kube_namespace":
            return None
        if self.settings.read_only:
            return "read-only mode: nothing can be changed"
        return self._perm_denied(action, *self._scope_of(action))

    def _perm_denied(self, action: str, namespace: str | None, kind: str | None) -> str | None:
        """What RBAC says of ``action`` on that namespace and kind (None: allowed, or not known yet)."""
        perm, perms = KUBE_MUTATING.get(action), self.connection.perms
        return perms.denied(perm, namespace, kind) if perm is not None and perms is not None else None

    def read_state(self, action: str) -> bool:
        """Offered on the Cluster pane of the main screen; elsewhere the key is another pane's — but on the
        Triage pane p and e open the selected verdict's pod (its previous log, its events)."""
        if action in TRIAGE_READS and self._on_triage():
            return True
        return self.host.screen is self.connection.main_screen() and self.connection.cluster_active()

    def action_state(self, action: str) -> bool | None:
        """For check_action: None hides (read-only, not connected, not permitted here), True shows.

        Permissions are those of the selected object's kind and namespace (deny
        only ``deployments/scale``: S is hidden on a Deployment, offered on a StatefulSet)."""
        if action in ("cluster_view", "kube_context"):
            return True
        if action in READ_ACTIONS:
            return self.read_state(action)
        return None if self.denied_reason(action) else True

    def _denied(self, action: str, namespace: str | None, kind: str | None) -> None:
        """The server said 403: disable the action for that kind and namespace from now on."""
        perms = self.connection.perms
        if perms is None:
            return
        perm = KUBE_MUTATING.get(action)
        if perm:
            perms.deny(perm, namespace, kind)
            self.host.refresh_bindings()
            self.update_keys()

    # ----- targets ---------------------------------------------------------------
    def target(self, want: str) -> Any:
        """The object the operator selected in the Cluster pane, as ``want`` (workload, hpa, pod, node)."""
        pane = self.connection.pane()
        snap = self.connection.snapshot
        if snap is None:
            return None
        view, obj = pane.selected()
        if want == "workload":
            if isinstance(obj, WorkloadView):
                return obj
            if isinstance(obj, PodView):
                return snap.workload_of(obj)
            if isinstance(obj, HpaView):
                return snap.workload_for_hpa(obj)
        elif want == "hpa":
            if isinstance(obj, HpaView):
                return obj
            if isinstance(obj, PodView):
                obj = snap.workload_of(obj)
            if isinstance(obj, WorkloadView):
                return snap.hpa_for(obj)
        elif want == "pod":
            if isinstance(obj, PodView):
                return obj
        elif want == "node":
            if isinstance(obj, NodeView):
                return obj
            if isinstance(obj, PodView) and obj.node:
                return next((n for n in snap.nodes if n.name == obj.node), None) or NodeView(obj.node)
        return None

    def _need(self, want: str, view: str, what: str) -> Any:
        target = self.target(want)
        active = self.connection.cluster_active()
        if target is not None and active:
            return target
        if not active:
            self._show_pane("cluster")
        pane = self.connection.pane()
        if pane.view != view and target is None:
            pane.set_view(view)
        self.host.notify(f"Select {what} in the Cluster pane, then press the key again.", timeout=4)
        return None

    def start(self, coro: Coroutine[Any, Any, None]) -> None:
        """The input dialog of an action (then the pipeline); never blocks actions on other objects."""
        self.host.run_worker(coro, group="kube-input", exit_on_error=False)

    def busy(self, kind: str, namespace: str | None, name: str) -> bool:
        """Refuse, before any dialog, a second action on an object that has one in flight."""
        session = self.connection.session
        if session is None:
            return False
        key = f"kube:{session.context}:{kind}/{namespace or ''}/{name}"
        run = next((r for r in self.actions.board.runs() if r.kind.object_key == key), None)
        if run is not None:
            self.host.notify(f"{run.title} is still running ({run.status_text()}): one action at a time on it; "
                             "press a to see the running actions", severity="warning", timeout=6, markup=False)
        return run is not None

    # ----- what the fleet join and the triage remedies ask ---------------------------
    def join_cluster(self) -> None:
        """Hand the cluster's latest read (or why it cannot be read) to the fleet joiner, before a build."""
        self.connection.join()

    def refused(self, action: str, namespace: str | None, kind: str | None) -> str | None:
        """Why the mutating action cannot act here (not connected, RBAC), or None."""
        c = self.connection
        if c.session is None:
            return ("Kubernetes is not connected: " + c.error) if c.error else "Kubernetes is not configured"
        return self._perm_denied(action, namespace, kind)

    def open_scale(self, w: WorkloadView, replicas: int | None) -> None:
        """The scale dialog of ``w`` with ``replicas`` proposed (a remedy), unless an action runs on it."""
        if not self.busy(w.kind, w.namespace, w.name):
            self.start(self.scale_flow(w, replicas))

    def open_drain_node(self, node: str) -> None:
        """The drain of ``node`` (a remedy), unless an action runs on it."""
        if not self.busy("Node", None, node):
            self.flow("drain_node", "Node", None, node)

    # ----- the actions -----------------------------------------------------------
    def cluster_view(self) -> None:
        if not self.connection.cluster_active():
            self._show_pane("cluster")
            return
        self.connection.pane().cycle()

    def scale(self) -> None:
        w = self._need("workload", "workloads", "a Deployment or StatefulSet")
        if w is not None and not self.busy(w.kind, w.namespace, w.name):
            self.start(self.scale_flow(w))

    async def scale_flow(self, w: WorkloadView, replicas: int | None = None) -> None:
        """The scale dialog (``replicas`` filled in: a triage remedy's proposal), then the pipeline."""
        dialog = scale_dialog(w.ref, w.desired)
        if replicas is not None:
            dialog.fields[0] = dataclasses.replace(dialog.fields[0], value=str(replicas))
        values = await self.host.push_screen_wait(dialog)
        if values:
            self.flow("scale", w.kind, w.namespace, w.name, replicas=values["replicas"])

    def hpa(self) -> None:
        h = self._need("hpa", "hpas", "an HPA (or a workload that has one)")
        if h is not None and not self.busy("HorizontalPodAutoscaler", h.namespace, h.name):
            self.start(self._hpa_flow(h))

    async def _hpa_flow(self, h: HpaView) -> None:
        values = await self.host.push_screen_wait(hpa_dialog(f"HPA {h.namespace}/{h.name}", h.min_replicas,
                                                             h.max_replicas))
        if values:
            self.flow("hpa", "HorizontalPodAutoscaler", h.namespace, h.name,
                      min_replicas=values["min"], max_replicas=values["max"])

    def args(self) -> None:
        w = self._need("workload", "workloads", "a Deployment or StatefulSet")
        if w is not None and not self.busy(w.kind, w.namespace, w.name):
            self.start(self._args_flow(w))

    async def _args_flow(self, w: WorkloadView) -> None:
        values = await self.host.push_screen_wait(args_dialog(w.ref, w.container, w.args))
        if values:
            self.flow("args", w.kind, w.namespace, w.name, changes=values["changes"], container=w.container or "")

    def restart(self) -> None:
        w = self._need("workload", "workloads", "a Deployment or StatefulSet")
        if w is not None and not self.busy(w.kind, w.namespace, w.name):
            self.flow("restart", w.kind, w.namespace, w.name)

    def delete_pod(self) -> None:
        p = self._need("pod", "pods", "a pod")
        if p is not None and not self.busy("Pod", p.namespace, p.name):
            self.flow("delete_pod", "Pod", p.namespace, p.name)

    def drain_pod(self) -> None:
        p = self._need("pod", "pods", "a pod")
        if p is not None and not self.busy("Pod", p.namespace, p.name):
            self.start(self._drain_pod_flow(p))

    async def _drain_pod_flow(self, p: PodView) -> None:
        choice = await self.host.push_screen_wait(ChoiceDialog(
            f"Drain pod {p.namespace}/{p.name}: once nothing is in flight…",
            [("delete", "delete it (its controller starts a fresh replica)"),
             ("scale-down", "scale its Deployment/StatefulSet down by one")],
            current=self.connection.cfg.drain_then,
            hint="The pod leaves its Service first (label patch) and, when a gateway with admin access fronts "
                 "its engine, that gateway; then infertop watches vllm:num_requests_running + waiting fall to "
                 "0. Abort (a) puts the label back and undrains at the gateway."))
        if choice:
            self.flow("drain_pod", "Pod", p.namespace, p.name, then=choice, gateway=self._gateway_finder(p))

    def _gateway_finder(self, p: PodView) -> Any:
        """url → (the gateway fronting the pod's engine, warnings): every path traffic takes is drained."""
        config = self.settings.config
        engine = self.settings.engine_pods.get(p.name, p.name)
        return lambda url: find_gateway(config, engine, url)

    def cordon(self) -> None:
        n = self._need("node", "nodes", "a node (or a pod on it)")
        if n is not None and not self.busy("Node", None, n.name):
            self.flow("uncordon" if n.cordoned else "cordon", "Node", None, n.name)

    def drain_node(self) -> None:
        n = self._need("node", "nodes", "a node (or a pod on it)")
        if n is not None and not self.busy("Node", None, n.name):
            self.flow("drain_node", "Node", None, n.name)

    def configmap(self) -> None:
        session = self.connection.session
        if session is None:
            return
        view, obj = self.connection.pane().selected()
        ns = getattr(obj, "namespace", None) or session.namespaces[0]
        self.start(self._configmap_flow(ns))

    async def _configmap_flow(self, namespace: str) -> None:
        control, cfg = self.connection.control, self.connection.cfg
        if control is None:
            return
        try:
            names = await asyncio.to_thread(control.configmaps, namespace)
        except KubeError as e:
            names = []
            self.host.notify(f"cannot list ConfigMaps: {e}", severity="warning")
        default = cfg.configmap if cfg.configmap in names or not names else names[0]
        values = await self.host.push_screen_wait(configmap_dialog(namespace, names, default))
        if values:
            self.flow("configmap", "ConfigMap", namespace, values["name"], key=values["key"], value=values["value"])

    def context(self) -> None:
        self.host.run_worker(self._context_flow(), group="kube-nav", exclusive=True, exit_on_error=False)

    async def _context_flow(self) -> None:
        conn = self.connection
        try:
            names, active = await asyncio.to_thread(kube_contexts, conn.cfg.kubeconfig)
        except KubeError as e:
            self.host.notify(str(e), severity="error")
            return
        current = conn.session.context if conn.session else active
        choice = await self.host.push_screen_wait(ChoiceDialog(
            "Kubernetes context", [(n, n) for n in names], current=current,
            hint="Enter switches (infertop reconnects and re-checks what you may do). Esc cancels."))
        if choice:
            self._show_pane("cluster")
            conn.pane().show_message(f"Kubernetes: connecting to {choice}…", "dim")
            keep = conn.cfg.namespaces or None
            conn.connect(choice, keep)

    def namespace(self) -> None:
        if self.connection.session is None:
            return
        self.host.run_worker(self._namespace_flow(), group="kube-nav", exclusive=True, exit_on_error=False)

    async def _namespace_flow(self) -> None:
        session = self.connection.session
        if session is None:
            return
        try:
            names = await asyncio.to_thread(namespaces_list, session)
        except KubeError:
            names = []
        current = ",".join(session.namespaces)
        if names:
            choice = await self.host.push_screen_wait(ChoiceDialog(
                "Namespace", [(n, n) for n in names], current=current, hint="Enter switches. Esc cancels."))
        else:
            values = await self.host.push_screen_wait(text_dialog(
                "Namespace", "Namespace(s), comma-separated", current,
                hint="You may not list namespaces here: type the name."))
            choice = values["value"] if values else None
        if choice and choice != current:
            self.connection.pane().show_message(f"Kubernetes: switching to {choice}…", "dim")
            self.connection.connect(session.context, [n.strip() for n in choice.split(",") if n.strip()])

    # ----- the one pipeline -------------------------------------------------------
    def refresh_after(self) -> None:
        """An action changed the cluster: read it again (in a worker)."""
        self.host.run_worker(self.connection.refresh(), group="kube-refresh-after", exit_on_error=False)

    def flow(self, action: str, kind: str, namespace: str | None, name: str, **params: Any) -> bool:
        """Hand the action to the pipeline (plan → dry run → confirm → execute → follow → audit)."""
        control = self.connection.control
        if control is None or self.settings.read_only:
            return False
        ui_action = "kube_cordon" if action in ("cordon", "uncordon") else f"kube_{action}"
        return self.actions.start_action(KubeAction(control, action, kind, namespace, name, **params),
                                         on_done=lambda _outcome: self.refresh_after(),
                                         on_forbidden=lambda: self._denied(ui_action, namespace, kind),
                                         preflight_name="dry run")
