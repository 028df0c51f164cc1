"""The ReplicaSet controller: creates or deletes a ReplicaSet's pods to match its
replicas (the least useful pods go first) and keeps its status."""

from __future__ import annotations

from .controller_base import PODS, REPLICASETS, ControllerBase, controller_uid, is_active, omit_zero
from .selectors import selector_from_label_selector
from .store import clone


class ReplicaSetController(ControllerBase):
    """Syncs one ReplicaSet a call: its pods, then its status."""

    def sync(self, rs: dict) -> None:
        meta, spec = rs["metadata"], rs["spec"]
        ns = meta["namespace"]
        pods = [p for p in self.store.iter(PODS, ns) if controller_uid(p) == meta["uid"]]
        active = [p for p in pods if is_active(p)]
        want = spec.get("replicas", 1)
        if len(active) < want:
            for _ in range(want - len(active)):
                pod = self._new_pod(REPLICASETS, rs, spec["template"])
                self._event(REPLICASETS, rs, "Normal", "SuccessfulCreate",
                            f"Created pod: {pod['metadata']['name']}", "replicaset-controller")
        elif len(active) > want:
            phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}

            def rank(p):
                return (
                    bool(p["spec"].get("nodeName")),
                    phase_rank.get((p.get("status") or {}).get("phase"), 1),
                    self.pod_ready(p),
                    # newer first: negate the creation order
                    tuple(-ord(ch) for ch in p["metadata"].get("creationTimestamp", "")),
                    tuple(-ord(ch) for ch in p["metadata"]["name"]),
                )

            for pod in sorted(active, key=rank)[: len(active) - want]:
                self._delete_pod(pod)
                self._event(REPLICASETS, rs, "Normal", "SuccessfulDelete",
                            f"Deleted pod: {pod['metadata']['name']}", "replicaset-controller")
        # status from the pods as they are now
        before = self.store.peek(REPLICASETS, ns, meta["name"])
        if before is None:
            return
        pods = [p for p in self.store.iter(PODS, ns) if controller_uid(p) == meta["uid"] and is_active(p)]
        selector = selector_from_label_selector(spec.get("selector"))
        status = {
            "replicas": len(pods),
            "fullyLabeledReplicas": sum(1 for p in pods if selector(p["metadata"].get("labels") or {})),
            "readyReplicas": sum(1 for p in pods if self.pod_ready(p)),
            "availableReplicas": sum(1 for p in pods if self.pod_available(p, spec.get("minReadySeconds", 0))),
            "observedGeneration": before["metadata"].get("generation", 1),
        }
        omit_zero(status, "fullyLabeledReplicas", "readyReplicas", "availableReplicas")
        new = clone(before)
        new["status"] = status
        self._save(REPLICASETS, before, new)
