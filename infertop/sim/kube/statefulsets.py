"""The StatefulSet controller: ordinal pods (``<name>-<i>``), OrderedReady or Parallel
pod management, rolling updates with a partition, and the StatefulSet's status."""

from __future__ import annotations

from .controller_base import PODS, STATEFULSETS, ControllerBase, controller_uid, is_active, is_terminating, omit_zero
from .store import clone
from .util import template_hash


class StatefulSetController(ControllerBase):
    """Syncs one StatefulSet a call: its pods, then its status."""

    def sync(self, sts: dict) -> None:
        meta, spec = sts["metadata"], sts["spec"]
        ns, name = meta["namespace"], meta["name"]
        replicas = spec.get("replicas", 1)
        update_rev = f"{name}-{template_hash(spec['template'])}"
        current_rev = (sts.get("status") or {}).get("currentRevision") or update_rev
        ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        pods: dict[int, dict] = {}
        for p in self.store.iter(PODS, ns):
            if controller_uid(p) == meta["uid"]:
                suffix = p["metadata"]["name"][len(name) + 1:]
                if suffix.isdigit():
                    pods[int(suffix)] = p

        def healthy(p):
            return is_active(p) and p["status"].get("phase") == "Running" and self.pod_ready(p)

        def rev(p):
            return (p["metadata"].get("labels") or {}).get("controller-revision-hash")

        blocked = False
        for i in range(replicas):
            p = pods.get(i)
            if p is None:
                if ordered and blocked:
                    break
                pod_name = f"{name}-{i}"
                extra = {"hostname": pod_name}
                if spec.get("serviceName"):
                    extra["subdomain"] = spec["serviceName"]
                pod = self._new_pod(
                    STATEFULSETS, sts, spec["template"], name=pod_name,
                    extra_labels={"controller-revision-hash": update_rev,
                                  "statefulset.kubernetes.io/pod-name": pod_name,
                                  "apps.kubernetes.io/pod-index": str(i)},
                    spec_extra=extra,
                )
                pods[i] = pod
                self._event(STATEFULSETS, sts, "Normal", "SuccessfulCreate",
                            f"create Pod {pod_name} in StatefulSet {name} successful", "statefulset-controller")
                if ordered:
                    blocked = True
                    break
            elif not healthy(p):
                blocked = True
                if ordered:
                    break
        any_terminating = any(is_terminating(p) for p in pods.values())
        all_healthy = all(healthy(p) for i, p in pods.items() if i < replicas) and len(
            [i for i in pods if i < replicas]) == replicas
        extra_pods = sorted((i for i in pods if i >= replicas), reverse=True)
        if extra_pods:
            if not ordered:
                targets = [i for i in extra_pods if not is_terminating(pods[i])]
            elif not any_terminating and all_healthy:
                targets = extra_pods[:1]
            else:
                targets = []
            for i in targets:
                self._delete_pod(pods[i])
                self._event(STATEFULSETS, sts, "Normal", "SuccessfulDelete",
                            f"delete Pod {pods[i]['metadata']['name']} in StatefulSet {name} successful",
                            "statefulset-controller")
        elif (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate" \
                and not any_terminating and all_healthy:
            partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition", 0)
            for i in range(replicas - 1, partition - 1, -1):
                p = pods.get(i)
                if p is not None and rev(p) != update_rev:
                    self._delete_pod(p)
                    self._event(STATEFULSETS, sts, "Normal", "SuccessfulDelete",
                                f"delete Pod {p['metadata']['name']} in StatefulSet {name} successful",
                                "statefulset-controller")
                    break
        # status
        before = self.store.peek(STATEFULSETS, ns, name)
        if before is None:
            return
        live = [p for p in self.store.iter(PODS, ns) if controller_uid(p) == meta["uid"] and is_active(p)]
        updated = sum(1 for p in live if rev(p) == update_rev)
        if updated == replicas and len(live) == replicas:
            current_rev = update_rev
        status = {
            "observedGeneration": before["metadata"].get("generation", 1),
            "replicas": len(live),
            "readyReplicas": sum(1 for p in live if self.pod_ready(p)),
            "currentReplicas": sum(1 for p in live if rev(p) == current_rev),
            "updatedReplicas": updated,
            "availableReplicas": sum(1 for p in live if self.pod_available(p, spec.get("minReadySeconds", 0))),
            "currentRevision": current_rev,
            "updateRevision": update_rev,
            "collisionCount": 0,
        }
        omit_zero(status, "readyReplicas", "currentReplicas", "updatedReplicas")
        new = clone(before)
        new["status"] = status
        self._save(STATEFULSETS, before, new)
