"""A triage remedy, one key away: the Triage pane hands the selected verdict's remedy to the action the
remedy names, pre-filled, through the same review / confirm / audit pipeline as that key in its own pane.

``m`` opens the max_num_seqs dialog of the remedy's engine with the proposed value, ``r`` the restart
of that engine, ``S`` the scale dialog of the workload running it (its pod's Deployment/StatefulSet),
with the proposed replicas, ``N`` the drain of the node named; ``p`` the previous container's log of a
crash-looping pod, ``e`` a Pending pod's events. ``--read-only`` opens only those two reads, a replay
nothing (no live cluster): there the remedies are text.

``RemedyActions`` is a mixin of :class:`~infertop.ui.app.InfertopApp`.
"""

from __future__ import annotations

from typing import Any

from ..analysis.triage import Remedy, Verdict
from ..domain.kube import ClusterSnapshot, PodView, WorkloadView
from ..state.cluster_join import norm_url
from .kube_connection import KUBE_MUTATING
from .screens.verdict_detail import VerdictDetailScreen
from .widgets.triage import OPENS, READS, TriagePane


def workload_of_engine(snap: ClusterSnapshot | None, name: str, url: str | None,
                       engine_pods: dict[str, str] | None = None) -> WorkloadView | None:
    """The Deployment/StatefulSet whose pod runs engine ``name``: the pod serving its URL (as the fleet
    join matches them), else a pod the pod → engine map names for it, else a pod of the engine's name."""
    if snap is None:
        return None
    want = norm_url(url)
    named = {pod for pod, engine in (engine_pods or {}).items() if engine == name}
    pod: PodView | None = None
    for match in (lambda p: want and norm_url(p.engine_url) == want, lambda p: p.name in named,
                  lambda p: p.name == name):
        pod = next((p for p in snap.pods if not p.terminating and match(p)), None)
        if pod is not None:
            break
    return snap.workload_of(pod) if pod is not None else None


class RemedyActions:
    """The Triage pane's keys: Enter on a verdict (its evidence) or a remedy, and a remedy's own key."""

    def triage_pane(self) -> TriagePane:
        return self.main.query_one(TriagePane)  # type: ignore[attr-defined]

    def on_triage(self) -> bool:
        """The Triage pane is on view and nothing covers it (a key there means its selected verdict)."""
        return self.screen is self.main and self.current_pane == "triage"  # type: ignore[attr-defined]

    def remedies_text_only(self) -> str | None:
        """Why remedies open nothing here (None: they open)."""
        if self.player is not None:  # type: ignore[attr-defined]
            return "replay"
        if self.settings.read_only:  # type: ignore[attr-defined]
            return "read-only"
        return None

    def triage_engine(self) -> str | None:
        """The engine an engine key (m, r) acts on from the Triage pane: the selected remedy's target, else
        the selected verdict's subject when that is an engine."""
        v, r = self.triage_pane().selected()
        if v is None:
            return None
        st = self.state  # type: ignore[attr-defined]
        for name in ((r.target if r is not None else None), v.subject):
            if name and st is not None and st.engine(name) is not None:
                return name
        return None

    # ----- the keys ------------------------------------------------------------------
    def action_triage_open(self) -> None:
        """Enter: a verdict line opens its evidence; a remedy line, the remedy's action."""
        v, r = self.triage_pane().selected()
        if v is None:
            return
        if r is None:
            self.open_verdict(v)
        else:
            self.open_remedy(v, r)

    def open_verdict(self, v: Verdict) -> None:
        screen = VerdictDetailScreen(v, self.history)  # type: ignore[attr-defined]
        self.push_screen(screen)  # type: ignore[attr-defined]
        self.call_after_refresh(screen.show, self.state)  # type: ignore[attr-defined]

    def remedy_key(self, key: str) -> bool:
        """A remedy's key pressed: on the Triage pane it opens the selected verdict's remedy of that key
        (True: handled here); elsewhere the key is its pane's own (False)."""
        if not self.on_triage():
            return False
        v, selected = self.triage_pane().selected()
        if v is None:
            self.notify("select a verdict first (↑ ↓)", timeout=3)  # type: ignore[attr-defined]
            return True
        r = selected if selected is not None and selected.key == key else next(
            (r for r in v.remedies if r.key == key), None)
        if r is None:
            self.notify(f"{v.kind} on {v.subject} proposes no remedy on {key}", timeout=4,  # type: ignore[attr-defined]
                        markup=False)
            return True
        self.open_remedy(v, r)
        return True

    def open_remedy(self, v: Verdict, r: Remedy) -> None:
        """The remedy's action, pre-filled; or why it cannot open (read-only, replay, advice only)."""
        if r.key in READS:  # a read of the cluster: read-only reads it; a replay says why it cannot
            self.open_pod_read(r.target or v.subject, r.key)  # type: ignore[attr-defined]
            return
        why = self.remedies_text_only()
        if why is not None:
            self.notify(f"{why}: remedies are shown as text only; nothing opens", severity="warning",  # type: ignore[attr-defined]
                        timeout=4)
            return
        if r.key not in OPENS:
            self.notify("advice only: there is no action to open for it", timeout=4)  # type: ignore[attr-defined]
            return
        target = r.target or v.subject
        if r.key in ("m", "r"):
            why = self._engine_denied(target)
            if why is not None:
                self.notify(why, severity="warning", timeout=6, markup=False)  # type: ignore[attr-defined]
                return
        if r.key == "m":
            self.engines_ctl.set_seqs(target, r.value)  # type: ignore[attr-defined]
        elif r.key == "r":
            self.engines_ctl.restart(target)  # type: ignore[attr-defined]
        elif r.key == "S":
            self._scale_remedy(target, r.value)
        elif r.key == "N":
            self._drain_node_remedy(target)
        elif r.key == "enter":
            self.action_engine_detail(target)  # type: ignore[attr-defined]
        elif r.key == "5":
            self.action_show_pane("cluster")  # type: ignore[attr-defined]

    def _engine_denied(self, name: str) -> str | None:
        """Why an engine action cannot act on ``name`` (the same words as its key in the Engines pane)."""
        if self.engine_manager is None:  # type: ignore[attr-defined]
            return "local engine control is not ready"
        if self.managed(name) is None:  # type: ignore[attr-defined]
            return f"{name} was not started by infertop: it can be watched, not stopped or changed"
        return None

    def _kube_refused(self, action: str, namespace: str | None, kind: str | None) -> str | None:
        if self.kube_session is None:  # type: ignore[attr-defined]
            error = self.kube_error  # type: ignore[attr-defined]
            return ("Kubernetes is not connected: " + error) if error else "Kubernetes is not configured"
        perms = self.kube_perms  # type: ignore[attr-defined]
        if perms is not None:
            return perms.denied(KUBE_MUTATING[action], namespace, kind)
        return None

    def _scale_remedy(self, engine: str, replicas: int | None) -> None:
        """The scale dialog of the workload running ``engine``, with the proposed replicas."""
        e = self.state.engine(engine) if self.state is not None else None  # type: ignore[attr-defined]
        why = self._kube_refused("kube_scale", None, None)
        if why is not None:
            self.notify(f"cannot scale for {engine}: {why}", severity="warning", timeout=6, markup=False)  # type: ignore[attr-defined]
            return
        w = workload_of_engine(self.kube_snapshot, engine, e.stats.url if e is not None else None,  # type: ignore[attr-defined]
                               self.settings.engine_pods)  # type: ignore[attr-defined]
        if w is None:
            self.notify(f"{engine} maps to no workload: no pod of a Deployment or StatefulSet in the cluster "  # type: ignore[attr-defined]
                        "serves it, so there is nothing to scale", severity="warning", timeout=8, markup=False)
            return
        why = self._kube_refused("kube_scale", w.namespace, w.kind)
        if why is not None:
            self.notify(f"cannot scale {w.ref}: {why}", severity="warning", timeout=6, markup=False)  # type: ignore[attr-defined]
            return
        if not self._kube_busy(w.kind, w.namespace, w.name):  # type: ignore[attr-defined]
            self._start(self._scale_flow(w, replicas))  # type: ignore[attr-defined]

    def _drain_node_remedy(self, node: str) -> None:
        if not node:
            self.notify("the verdict names no node to drain", severity="warning", timeout=4)  # type: ignore[attr-defined]
            return
        why = self._kube_refused("kube_drain_node", None, "Node")
        if why is not None:
            self.notify(f"cannot drain node {node}: {why}", severity="warning", timeout=6, markup=False)  # type: ignore[attr-defined]
            return
        if not self._kube_busy("Node", None, node):  # type: ignore[attr-defined]
            self._kube_flow("drain_node", "Node", None, node)  # type: ignore[attr-defined]

    def show_triage(self, state: Any) -> None:
        """Paint the Triage pane from ``state``'s verdicts."""
        why = self.remedies_text_only()
        self.triage_pane().show(state.verdicts, state.taken_at, actionable=why is None, why_text_only=why or "",
                                readable=self.player is None)  # type: ignore[attr-defined]
