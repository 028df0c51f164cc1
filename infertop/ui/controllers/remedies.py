"""A triage remedy, one key away: the Triage pane hands the selected verdict's remedy to the action the
remedy names, pre-filled, through the same review / confirm / audit pipeline as that key in its own pane.

``m`` opens the max_num_seqs dialog of the remedy's engine with the proposed value, ``r`` the restart
of that engine, ``S`` the scale dialog of the workload running it (its pod's Deployment/StatefulSet),
with the proposed replicas, ``N`` the drain of the node named; ``p`` the previous container's log of a
crash-looping pod, ``e`` a Pending pod's events. ``--read-only`` opens only those two reads, a replay
nothing (no live cluster): there the remedies are text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...analysis.triage import Remedy, Verdict
from ...domain.kube import ClusterSnapshot, PodView, WorkloadView
from ...state.cluster_join import norm_url
from ...state.fleet_types import FleetState
from ..screens.verdict_detail import VerdictDetailScreen
from ..widgets.triage import OPENS, READS, TriagePane
from .navigation import NavigationHost


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


@dataclass(frozen=True)
class RemedyTargets:
    """Where the remedies' actions go (each the same call as the key in its own pane)."""

    set_seqs: Callable[[str, int | None], None]  # engine, proposed max_num_seqs
    restart: Callable[[str], None]
    engine_denied: Callable[[str], str | None]  # why engine actions cannot act on it (None: they can)
    engine_detail: Callable[[str], None]
    show_pane: Callable[[str], None]
    kube_refused: Callable[[str, str | None, str | None], str | None]  # action, namespace, kind → why not
    kube_snapshot: Callable[[], ClusterSnapshot | None]
    open_pod_read: Callable[[str, str], None]  # pod, key (p: previous log, e: events)
    scale: Callable[[WorkloadView, int | None], None]  # the scale flow (unless one runs on it)
    drain_node: Callable[[str], None]


class Remedies:
    """The Triage pane's keys: Enter on a verdict (its evidence) or a remedy, and a remedy's own key."""

    def __init__(self, host: NavigationHost, settings: Any, history: Any, targets: RemedyTargets, *,
                 replay: bool, state: Callable[[], FleetState | None],
                 current_pane: Callable[[], str]) -> None:
        self.host, self.settings, self.history, self.targets = host, settings, history, targets
        self.replay, self._state, self._current_pane = replay, state, current_pane

    def pane(self) -> TriagePane:
        return self.host.main.query_one(TriagePane)

    def on_triage(self) -> bool:
        """The Triage pane is on view and nothing covers it (a key there means its selected verdict)."""
        return self.host.screen is self.host.main and self._current_pane() == "triage"

    def text_only(self) -> str | None:
        """Why remedies open nothing here (None: they open)."""
        if self.replay:
            return "replay"
        if self.settings.read_only:
            return "read-only"
        return None

    def engine(self) -> str | None:
        """The engine an engine key (m, r) acts on from the Triage pane: the selected remedy's target, else
        the selected verdict's subject when that is an engine."""
        v, r = self.pane().selected()
        if v is None:
            return None
        st = self._state()
        for name in ((r.target if r is not None else None), v.subject):
            if name and st is not None and st.engine(name) is not None:
                return name
        return None

    def show(self, state: FleetState) -> None:
        """Paint the Triage pane from ``state``'s verdicts."""
        why = self.text_only()
        self.pane().show(state.verdicts, state.taken_at, actionable=why is None, why_text_only=why or "",
                         readable=not self.replay)

    # ----- the keys ------------------------------------------------------------------
    def open_selected(self) -> None:
        """Enter: a verdict line opens its evidence; a remedy line, the remedy's action."""
        v, r = self.pane().selected()
        if v is None:
            return
        if r is None:
            self.open_verdict(v)
        else:
            self.open_remedy(v, r)

    def open_verdict(self, v: Verdict) -> None:
        screen = VerdictDetailScreen(v, self.history)
        self.host.push_screen(screen)
        self.host.call_after_refresh(screen.show, self._state())

    def key(self, key: str) -> bool:
        """A remedy's key pressed: on the Triage pane it opens the selected verdict's remedy of that key
        (True: handled here); elsewhere the key is its pane's own (False)."""
        if not self.on_triage():
            return False
        v, selected = self.pane().selected()
        if v is None:
            self.host.notify("select a verdict first (↑ ↓)", timeout=3)
            return True
        r = selected if selected is not None and selected.key == key else next(
            (r for r in v.remedies if r.key == key), None)
        if r is None:
            self.host.notify(f"{v.kind} on {v.subject} proposes no remedy on {key}", timeout=4, markup=False)
            return True
        self.open_remedy(v, r)
        return True

    def open_remedy(self, v: Verdict, r: Remedy) -> None:
        """The remedy's action, pre-filled; or why it cannot open (read-only, replay, advice only)."""
        t, notify = self.targets, self.host.notify
        if r.key in READS:  # a read of the cluster: read-only reads it; a replay says why it cannot
            t.open_pod_read(r.target or v.subject, r.key)
            return
        why = self.text_only()
        if why is not None:
            notify(f"{why}: remedies are shown as text only; nothing opens", severity="warning", timeout=4)
            return
        if r.key not in OPENS:
            notify("advice only: there is no action to open for it", timeout=4)
            return
        target = r.target or v.subject
        if r.key in ("m", "r"):
            why = t.engine_denied(target)
            if why is not None:
                notify(why, severity="warning", timeout=6, markup=False)
                return
        if r.key == "m":
            t.set_seqs(target, r.value)
        elif r.key == "r":
            t.restart(target)
        elif r.key == "S":
            self._scale(target, r.value)
        elif r.key == "N":
            self._drain_node(target)
        elif r.key == "enter":
            t.engine_detail(target)
        elif r.key == "5":
            t.show_pane("cluster")

    def _scale(self, engine: str, replicas: int | None) -> None:
        """The scale dialog of the workload running ``engine``, with the proposed replicas."""
        t, notify = self.targets, self.host.notify
        st = self._state()
        e = st.engine(engine) if st is not None else None
        why = t.kube_refused("kube_scale", None, None)
        if why is not None:
            notify(f"cannot scale for {engine}: {why}", severity="warning", timeout=6, markup=False)
            return
        w = workload_of_engine(t.kube_snapshot(), engine, e.stats.url if e is not None else None,
                               self.settings.engine_pods)
        if w is None:
            notify(f"{engine} maps to no workload: no pod of a Deployment or StatefulSet in the cluster "
                   "serves it, so there is nothing to scale", severity="warning", timeout=8, markup=False)
            return
        why = t.kube_refused("kube_scale", w.namespace, w.kind)
        if why is not None:
            notify(f"cannot scale {w.ref}: {why}", severity="warning", timeout=6, markup=False)
            return
        t.scale(w, replicas)

    def _drain_node(self, node: str) -> None:
        if not node:
            self.host.notify("the verdict names no node to drain", severity="warning", timeout=4)
            return
        why = self.targets.kube_refused("kube_drain_node", None, "Node")
        if why is not None:
            self.host.notify(f"cannot drain node {node}: {why}", severity="warning", timeout=6, markup=False)
            return
        self.targets.drain_node(node)
