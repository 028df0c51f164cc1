"""Kubernetes in the app, the action half: capabilities and every Kubernetes action.

``KubeActions`` is a mixin of :class:`~infertop.ui.app.InfertopApp`; the session,
informers and Cluster pane are its base :class:`~infertop.ui.kube_connection.KubeConnection`.
Every action is a :class:`~infertop.control.kube.KubeAction` handed to the one
action pipeline (:meth:`~infertop.ui.action_runner.ActionRunner.start_action`):
fresh read → pure plan (diff) → server dry run → ``ConfirmScreen`` → execute
(audit intent first) → follow in the background → audit outcome; a 409 re-reads
and asks again, a 403 disables the action for that kind and namespace.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from textual.widgets import TabbedContent

from ..control.gateway.drain import find_gateway
from ..control.kube import KubeAction
from ..domain.kube import HpaView, NodeView, PodView, WorkloadView
from ..sources.kube import KubeError, kube_contexts, namespaces_list
from .kube_connection import KUBE_MUTATING
from .kube_reads import READ_ACTIONS, KubeReads
from .screens.kube_dialogs import ChoiceDialog, args_dialog, configmap_dialog, hpa_dialog, scale_dialog, text_dialog

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


class KubeActions(KubeReads):
    """Mixin for InfertopApp: what the operator can do in the cluster, and the keys for it."""

    def _kube_keys(self) -> None:
        parts = []
        for action, key, word in KEY_HINTS:
            if self.kube_action_state(action):
                parts.append(f"{key}:{word}")
        self._pane().set_keys(" ".join(parts))  # type: ignore[attr-defined]

    # ----- capabilities ----------------------------------------------------------
    def _kube_scope(self, action: str) -> tuple[str | None, str | None]:
        """(namespace, kind) of the object ``action`` would act on: the Cluster pane's selection."""
        want = KUBE_TARGET.get(action)
        try:
            if action == "kube_configmap":
                _view, obj = self._pane().selected()
                ns = getattr(obj, "namespace", None) or (self.kube_session.namespaces[0] if self.kube_session else None)
                return ns, "ConfigMap"
            target = self._kube_target(want) if want else None
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

    def kube_denied_reason(self, action: str) -> str | None:
        """Why a Kubernetes key cannot act now (shown when it is pressed)."""
        if action not in KUBE_ACTIONS or action in READ_ACTIONS:
            return None  # d/y/e/l/p elsewhere are other panes' keys: nothing to say here
        if action in ("cluster_view", "kube_context"):
            return None
        if self.kube_session is None:
            return ("Kubernetes is not connected: " + self.kube_error) if self.kube_error else \
                "Kubernetes is not configured: press K to pick a context"
        if action == "kube_namespace":
            return None
        if self.settings.read_only:  # type: ignore[attr-defined]
            return "read-only mode: nothing can be changed"
        perm = KUBE_MUTATING.get(action)
        if perm is None or self.kube_perms is None:
            return None
        ns, kind = self._kube_scope(action)
        return self.kube_perms.denied(perm, ns, kind)

    def kube_action_state(self, action: str) -> bool | None:
        """For check_action: None hides (read-only, not connected, not permitted here), True shows.

        Permissions are those of the selected object's kind and namespace (deny
        only ``deployments/scale``: S is hidden on a Deployment, offered on a StatefulSet)."""
        if action in ("cluster_view", "kube_context"):
            return True
        if action in READ_ACTIONS:
            return self.kube_read_state(action)
        return None if self.kube_denied_reason(action) else True

    def _kube_denied(self, action: str, namespace: str | None, kind: str | None) -> None:
        """The server said 403: disable the action for that kind and namespace from now on."""
        if self.kube_perms is None:
            return
        perm = KUBE_MUTATING.get(action)
        if perm:
            self.kube_perms.deny(perm, namespace, kind)
            self.refresh_bindings()  # type: ignore[attr-defined]
            self._kube_keys()

    # ----- targets ---------------------------------------------------------------
    def _cluster_active(self) -> bool:
        return self._main_screen().query_one("#panes", TabbedContent).active == "cluster"

    def _kube_target(self, want: str) -> Any:
        """The object the operator selected in the Cluster pane, as ``want`` (workload, hpa, pod, node)."""
        pane = self._pane()
        snap = self.kube_snapshot
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
        target = self._kube_target(want)
        if target is not None and self._cluster_active():
            return target
        if not self._cluster_active():
            self.action_show_pane("cluster")  # type: ignore[attr-defined]
        pane = self._pane()
        if pane.view != view and target is None:
            pane.set_view(view)
        self.notify(f"Select {what} in the Cluster pane, then press the key again.", timeout=4)  # type: ignore[attr-defined]
        return None

    def _start(self, coro) -> None:
        """The input dialog of an action (then the pipeline); never blocks actions on other objects."""
        self.run_worker(coro, group="kube-input", exit_on_error=False)  # type: ignore[attr-defined]

    def _kube_busy(self, kind: str, namespace: str | None, name: str) -> bool:
        """Refuse, before any dialog, a second action on an object that has one in flight."""
        if self.kube_session is None:
            return False
        key = f"kube:{self.kube_session.context}:{kind}/{namespace or ''}/{name}"
        run = next((r for r in self.action_board.runs() if r.kind.object_key == key), None)
        if run is not None:
            self.notify(f"{run.title} is still running ({run.status_text()}): one action at a time on it; "  # type: ignore[attr-defined]
                        "press a to see the running actions", severity="warning", timeout=6, markup=False)
        return run is not None

    # ----- the actions -----------------------------------------------------------
    def action_cluster_view(self) -> None:
        if not self._cluster_active():
            self.action_show_pane("cluster")  # type: ignore[attr-defined]
            return
        self._pane().cycle()  # type: ignore[attr-defined]

    def action_kube_scale(self) -> None:
        w = self._need("workload", "workloads", "a Deployment or StatefulSet")
        if w is not None and not self._kube_busy(w.kind, w.namespace, w.name):
            self._start(self._scale_flow(w))

    async def _scale_flow(self, w: WorkloadView, replicas: int | None = None) -> None:
        """The scale dialog (``replicas`` filled in: a triage remedy's proposal), then the pipeline."""
        dialog = scale_dialog(w.ref, w.desired)
        if replicas is not None:
            dialog.fields[0] = dataclasses.replace(dialog.fields[0], value=str(replicas))
        values = await self.push_screen_wait(dialog)  # type: ignore[attr-defined]
        if values:
            self._kube_flow("scale", w.kind, w.namespace, w.name, replicas=values["replicas"])

    def action_kube_hpa(self) -> None:
        h = self._need("hpa", "hpas", "an HPA (or a workload that has one)")
        if h is not None and not self._kube_busy("HorizontalPodAutoscaler", h.namespace, h.name):
            self._start(self._hpa_flow(h))

    async def _hpa_flow(self, h: HpaView) -> None:
        values = await self.push_screen_wait(hpa_dialog(f"HPA {h.namespace}/{h.name}", h.min_replicas,  # type: ignore[attr-defined]
                                                        h.max_replicas))
        if values:
            self._kube_flow("hpa", "HorizontalPodAutoscaler", h.namespace, h.name,
                            min_replicas=values["min"], max_replicas=values["max"])

    def action_kube_args(self) -> None:
        w = self._need("workload", "workloads", "a Deployment or StatefulSet")
        if w is not None and not self._kube_busy(w.kind, w.namespace, w.name):
            self._start(self._args_flow(w))

    async def _args_flow(self, w: WorkloadView) -> None:
        values = await self.push_screen_wait(args_dialog(w.ref, w.container, w.args))  # type: ignore[attr-defined]
        if values:
            self._kube_flow("args", w.kind, w.namespace, w.name, changes=values["changes"],
                            container=w.container or "")

    def action_kube_restart(self) -> None:
        w = self._need("workload", "workloads", "a Deployment or StatefulSet")
        if w is not None and not self._kube_busy(w.kind, w.namespace, w.name):
            self._kube_flow("restart", w.kind, w.namespace, w.name)

    def action_kube_delete_pod(self) -> None:
        p = self._need("pod", "pods", "a pod")
        if p is not None and not self._kube_busy("Pod", p.namespace, p.name):
            self._kube_flow("delete_pod", "Pod", p.namespace, p.name)

    def action_kube_drain_pod(self) -> None:
        p = self._need("pod", "pods", "a pod")
        if p is not None and not self._kube_busy("Pod", p.namespace, p.name):
            self._start(self._drain_pod_flow(p))

    async def _drain_pod_flow(self, p: PodView) -> None:
        choice = await self.push_screen_wait(ChoiceDialog(  # type: ignore[attr-defined]
            f"Drain pod {p.namespace}/{p.name}: once nothing is in flight…",
            [("delete", "delete it (its controller starts a fresh replica)"),
             ("scale-down", "scale its Deployment/StatefulSet down by one")],
            current=self.kube_cfg.drain_then,
            hint="The pod leaves its Service first (label patch) and, when a gateway with admin access fronts "
                 "its engine, that gateway; then infertop watches vllm:num_requests_running + waiting fall to "
                 "0. Abort (a) puts the label back and undrains at the gateway."))
        if choice:
            self._kube_flow("drain_pod", "Pod", p.namespace, p.name, then=choice, gateway=self._gateway_finder(p))

    def _gateway_finder(self, p: PodView) -> Any:
        """url → (the gateway fronting the pod's engine, warnings): every path traffic takes is drained."""
        config = self.settings.config  # type: ignore[attr-defined]
        engine = self.settings.engine_pods.get(p.name, p.name)  # type: ignore[attr-defined]
        return lambda url: find_gateway(config, engine, url)

    def action_kube_cordon(self) -> None:
        n = self._need("node", "nodes", "a node (or a pod on it)")
        if n is not None and not self._kube_busy("Node", None, n.name):
            self._kube_flow("uncordon" if n.cordoned else "cordon", "Node", None, n.name)

    def action_kube_drain_node(self) -> None:
        n = self._need("node", "nodes", "a node (or a pod on it)")
        if n is not None and not self._kube_busy("Node", None, n.name):
            self._kube_flow("drain_node", "Node", None, n.name)

    def action_kube_configmap(self) -> None:
        if self.kube_session is None:
            return
        view, obj = self._pane().selected()  # type: ignore[attr-defined]
        ns = getattr(obj, "namespace", None) or self.kube_session.namespaces[0]
        self._start(self._configmap_flow(ns))

    async def _configmap_flow(self, namespace: str) -> None:
        control = self.kube_control
        if control is None:
            return
        try:
            names = await asyncio.to_thread(control.configmaps, namespace)
        except KubeError as e:
            names = []
            self.notify(f"cannot list ConfigMaps: {e}", severity="warning")  # type: ignore[attr-defined]
        default = self.kube_cfg.configmap if self.kube_cfg.configmap in names or not names else names[0]
        values = await self.push_screen_wait(configmap_dialog(namespace, names, default))  # type: ignore[attr-defined]
        if values:
            self._kube_flow("configmap", "ConfigMap", namespace, values["name"], key=values["key"],
                            value=values["value"])

    def action_kube_context(self) -> None:
        self.run_worker(self._context_flow(), group="kube-nav", exclusive=True, exit_on_error=False)  # type: ignore[attr-defined]

    async def _context_flow(self) -> None:
        try:
            names, active = await asyncio.to_thread(kube_contexts, self.kube_cfg.kubeconfig)
        except KubeError as e:
            self.notify(str(e), severity="error")  # type: ignore[attr-defined]
            return
        current = self.kube_session.context if self.kube_session else active
        choice = await self.push_screen_wait(ChoiceDialog(  # type: ignore[attr-defined]
            "Kubernetes context", [(n, n) for n in names], current=current,
            hint="Enter switches (infertop reconnects and re-checks what you may do). Esc cancels."))
        if choice:
            self.action_show_pane("cluster")  # type: ignore[attr-defined]
            self._pane().show_message(f"Kubernetes: connecting to {choice}…", "dim")  # type: ignore[attr-defined]
            keep = self.kube_cfg.namespaces or None
            self.kube_connect(choice, keep)

    def action_kube_namespace(self) -> None:
        if self.kube_session is None:
            return
        self.run_worker(self._namespace_flow(), group="kube-nav", exclusive=True, exit_on_error=False)  # type: ignore[attr-defined]

    async def _namespace_flow(self) -> None:
        session = self.kube_session
        if session is None:
            return
        try:
            names = await asyncio.to_thread(namespaces_list, session)
        except KubeError:
            names = []
        current = ",".join(session.namespaces)
        if names:
            choice = await self.push_screen_wait(ChoiceDialog(  # type: ignore[attr-defined]
                "Namespace", [(n, n) for n in names], current=current, hint="Enter switches. Esc cancels."))
        else:
            values = await self.push_screen_wait(text_dialog(  # type: ignore[attr-defined]
                "Namespace", "Namespace(s), comma-separated", current,
                hint="You may not list namespaces here: type the name."))
            choice = values["value"] if values else None
        if choice and choice != current:
            self._pane().show_message(f"Kubernetes: switching to {choice}…", "dim")  # type: ignore[attr-defined]
            self.kube_connect(session.context, [n.strip() for n in choice.split(",") if n.strip()])

    # ----- the one pipeline -------------------------------------------------------
    def _kube_flow(self, action: str, kind: str, namespace: str | None, name: str, **params: Any) -> bool:
        """Hand the action to the pipeline (plan → dry run → confirm → execute → follow → audit)."""
        control = self.kube_control
        if control is None or self.settings.read_only:  # type: ignore[attr-defined]
            return False
        ui_action = "kube_cordon" if action in ("cordon", "uncordon") else f"kube_{action}"

        def done(_outcome: Any) -> None:
            self.run_worker(self._kube_refresh(), group="kube-refresh-after", exit_on_error=False)  # type: ignore[attr-defined]

        return self.start_action(KubeAction(control, action, kind, namespace, name, **params), on_done=done,
                                 on_forbidden=lambda: self._kube_denied(ui_action, namespace, kind),
                                 preflight_name="dry run")
