"""Kubernetes in the console, the reading part: one object's describe (d), YAML (y), events (e) and its
container's logs (l; p: the previous container), each on a screen of its own, on the keys a k9s
user knows — on the Cluster pane only (elsewhere ``d`` and ``p`` are the Queue and Autoscaler
panes' keys). Nothing here writes to the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...domain.kube import EventView, HpaView, NodeView, PodView, WorkloadView
from ...sources.kube.describe import describe, event_lines, to_yaml
from ...sources.kube.session import KubeError, KubeSession
from ..screens.kube_logs import KubeLogScreen
from ..screens.kube_object import KubeTextScreen
from .kube_connection import KubeConnection

# p and e on the Triage pane: the selected verdict's remedy of that key (Remedies.key, controllers/remedies.py)
TRIAGE_READS = {"kube_logs_previous": "p", "kube_events": "e"}
READ_ACTIONS = {"kube_describe", "kube_yaml", "kube_logs", "kube_logs_previous", "kube_events", "cluster_filter",
                "cluster_sort", "cluster_all_namespaces"}


def object_ref(obj: Any) -> tuple[str, str | None, str] | None:
    """(kind, namespace, name) of a Cluster pane row (an event: the object it is about)."""
    if isinstance(obj, WorkloadView):
        return obj.kind, obj.namespace, obj.name
    if isinstance(obj, PodView):
        return "Pod", obj.namespace, obj.name
    if isinstance(obj, NodeView):
        return "Node", None, obj.name
    if isinstance(obj, HpaView):
        return "HorizontalPodAutoscaler", obj.namespace, obj.name
    if isinstance(obj, EventView):
        return obj.kind, (obj.namespace if obj.kind != "Node" else None), obj.name
    ref = getattr(obj, "ref_tuple", None)  # the rollout's objects (ReplicaSets, Services, …)
    return ref if isinstance(ref, tuple) else None


def describe_lines(session: KubeSession, kind: str, namespace: str | None, name: str) -> list[str]:
    """Blocking: the object, its events and (a node) its pods, described."""
    obj = session.read_object(kind, namespace, name)
    notes: list[str] = []
    try:
        events: list[dict] | None = session.events_of(kind, namespace, name)
    except KubeError as e:
        events = None
        notes.append(f"Events: {'forbidden (list events)' if e.status == 403 else e}")
    pods: list[dict] = []
    if kind == "Node":
        pods, note = session.pods_on_node(name)
        if note:
            notes.append(note)
    return describe(kind, obj, events, pods=pods) + notes


def event_text(session: KubeSession, kind: str, namespace: str | None, name: str) -> list[str]:
    events = session.events_of(kind, namespace, name)
    return [f"{len(events)} event(s) of {kind} {name}, the newest last", *event_lines(events, time.time(), 500)]


class KubeReads:
    """d / y / e / l / p on the Cluster pane's selected object, on ``conn``'s session; ``host`` shows the
    screens and notices; ``replay`` whether this console replays a recording (no live cluster)."""

    def __init__(self, host: Any, conn: KubeConnection, *, replay: bool) -> None:
        self.host, self.conn, self.replay = host, conn, replay

    def open_pod_read(self, target: str, key: str) -> None:
        """A triage remedy's read of pod ``target`` ("namespace/Pod/name"): ``p`` its previous container's
        log, ``e`` its events — the screens p and e open on the pod in the Cluster pane; or why not."""
        what = "previous container's log" if key == "p" else "events"
        ns, kind, name = (target.split("/", 2) + ["", ""])[:3]
        if kind != "Pod" or not ns or not name:
            self.host.notify(f"the verdict names no pod to read the {what} of", severity="warning", timeout=4)
            return
        if self.replay:
            self.host.notify(f"replay: there is no live cluster to read pod {ns}/{name}'s {what} from; the "
                             "verdict's evidence is what was recorded", severity="warning", timeout=6, markup=False)
            return
        session = self.conn.session
        if session is None:
            error = self.conn.error
            self.host.notify(f"cannot read pod {ns}/{name}'s {what}: Kubernetes is not "
                             + (f"connected: {error}" if error else "configured"), severity="warning", timeout=6,
                             markup=False)
            return
        if key == "e":
            self.host.push_screen(KubeTextScreen(f"Events · Pod {ns}/{name}",
                                                 lambda: event_text(session, "Pod", ns, name)))
            return
        snap = self.conn.snapshot
        pod = next((p for p in snap.pods if p.namespace == ns and p.name == name), None) if snap else None
        # the pod gone from the snapshot: the API still answers (or says it is not found, in place)
        self.host.push_screen(KubeLogScreen(session, ns, name, pod.container if pod is not None else None,
                                            previous=True))

    def _read_target(self, what: str) -> tuple[KubeSession, Any] | None:
        session = self.conn.session
        if session is None:
            self.host.notify("Kubernetes is not connected", severity="warning", timeout=4)
            return None
        _view, obj = self.conn.pane().selected()
        if obj is None:
            self.host.notify(f"Select an object in the Cluster pane to {what} it.", timeout=4)
            return None
        return session, obj

    def _open_text(self, what: str, title: str,
                   load: Callable[[KubeSession, str, str | None, str], list[str]]) -> None:
        got = self._read_target(what)
        if got is None:
            return
        session, obj = got
        ref = object_ref(obj)
        if ref is None:
            self.host.notify(f"nothing to {what} here", timeout=3)
            return
        kind, ns, name = ref
        where = f"{ns}/{name}" if ns else name
        self.host.push_screen(KubeTextScreen(f"{title} · {kind} {where}", lambda: load(session, kind, ns, name),
                                             headings=title != "YAML"))

    def describe(self) -> None:
        self._open_text("describe", "Describe", describe_lines)

    def yaml(self) -> None:
        self._open_text("show the YAML of", "YAML",
                        lambda s, kind, ns, name: to_yaml(s.read_object(kind, ns, name)).splitlines())

    def events(self) -> None:
        self._open_text("list the events of", "Events", event_text)

    def _log_pod(self, obj: Any) -> PodView | None:
        """The pod whose log ``l``/``p`` opens: the selected pod, a workload's first (not ready first)."""
        if isinstance(obj, PodView):
            return obj
        snap = self.conn.snapshot
        if snap is None:
            return None
        if isinstance(obj, HpaView):
            obj = snap.workload_for_hpa(obj)
        if isinstance(obj, EventView) and obj.kind == "Pod":
            return next((p for p in snap.pods if p.namespace == obj.namespace and p.name == obj.name), None)
        if isinstance(obj, WorkloadView):
            pods = sorted(snap.pods_of(obj), key=lambda p: (p.ready, -p.restarts, p.name))
            return pods[0] if pods else None
        return None

    def logs(self, previous: bool = False) -> None:
        got = self._read_target("read the logs of")
        if got is None:
            return
        session, obj = got
        pod = self._log_pod(obj)
        if pod is None:
            self.host.notify("Logs are a pod's: select a pod (or a workload that has one).", timeout=4)
            return
        self.host.push_screen(KubeLogScreen(session, pod.namespace, pod.name, pod.container, previous=previous))

    def filter(self) -> None:
        self.conn.pane().open_filter()

    def sort(self) -> None:
        self.host.notify(f"sorted by {self.conn.pane().cycle_sort()}", timeout=2)
