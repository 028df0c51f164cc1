"""The deployment controller: a Deployment's ReplicaSets (one per pod-template hash),
rolling updates (maxSurge/maxUnavailable) and Recreate, revisions and their history
limit, rollback by template, and the Deployment's status and conditions."""

from __future__ import annotations

from typing import Any

from .controller_base import DEPLOYMENTS, REPLICASETS, ControllerBase, controller_uid, is_active, omit_zero, owner_ref
from .quantities import resolve_intstr
from .store import clone
from .util import find_condition, parse_time, set_condition, template_hash

REVISION = "deployment.kubernetes.io/revision"


def _rev(rs: dict) -> int:
    try:
        return int(((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


class DeploymentController(ControllerBase):
    """Syncs one Deployment a call: its ReplicaSets, then its status."""

    def sync(self, d: dict) -> None:
        meta, spec = d["metadata"], d["spec"]
        ns, uid = meta["namespace"], meta["uid"]
        desired = spec.get("replicas", 1)
        h = template_hash(spec["template"])
        rss = [clone(rs) for rs in self.store.iter(REPLICASETS, ns) if controller_uid(rs) == uid]
        pods_by_rs = self._pods_by_owner(ns)
        new_rs = next((rs for rs in rss if rs["metadata"].get("labels", {}).get("pod-template-hash") == h), None)
        min_ready = spec.get("minReadySeconds", 0)
        strategy = spec.get("strategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        ru = strategy.get("rollingUpdate") or {}
        surge = resolve_intstr(ru.get("maxSurge", "25%"), desired, True) if rolling else 0
        unav = resolve_intstr(ru.get("maxUnavailable", "25%"), desired, False) if rolling else 0
        if rolling and surge == 0 and unav == 0:
            unav = 1
        created_new = False

        def active(rs):
            return [p for p in pods_by_rs.get(rs["metadata"]["uid"], []) if is_active(p)]

        def avail(rs):
            return sum(1 for p in active(rs) if self.pod_available(p, min_ready))

        def reps(rs):
            return rs["spec"].get("replicas", 0)

        def scale(rs, n):
            old = reps(rs)
            if old == n:
                return
            before = clone(rs)
            rs["spec"]["replicas"] = n
            rs["metadata"]["generation"] = rs["metadata"].get("generation", 1) + 1
            ann = rs["metadata"].setdefault("annotations", {})
            ann["deployment.kubernetes.io/desired-replicas"] = str(desired)
            ann["deployment.kubernetes.io/max-replicas"] = str(desired + surge)
            rs.update(self._save(REPLICASETS, before, rs))
            direction = "up" if n > old else "down"
            self._event(DEPLOYMENTS, d, "Normal", "ScalingReplicaSet",
                        f"Scaled {direction} replica set {rs['metadata']['name']} from {old} to {n}",
                        "deployment-controller")

        if not spec.get("paused"):
            max_rev = max((_rev(rs) for rs in rss), default=0)
            if new_rs is None:
                new_rs = self._create_rs(d, h, max_rev + 1, desired, surge)
                if new_rs is not None:
                    rss.append(new_rs)
                    created_new = True
            elif _rev(new_rs) < max_rev:
                before = clone(new_rs)
                new_rs["metadata"].setdefault("annotations", {})[REVISION] = str(max_rev + 1)
                new_rs.update(self._save(REPLICASETS, before, new_rs))
            olds = [rs for rs in rss if rs is not new_rs]
            if new_rs is not None:
                if not rolling:
                    active_old = [rs for rs in olds if reps(rs) > 0]
                    for rs in active_old:
                        scale(rs, 0)
                    old_pods = any(pods_by_rs.get(rs["metadata"]["uid"]) for rs in olds)
                    if not active_old and not old_pods:
                        scale(new_rs, desired)
                elif not any(reps(rs) > 0 for rs in olds):
                    scale(new_rs, desired)
                else:
                    total = sum(reps(rs) for rs in rss)
                    if reps(new_rs) < desired:
                        add = min(desired + surge - total, desired - reps(new_rs))
                        if add > 0:
                            scale(new_rs, reps(new_rs) + add)
                    elif reps(new_rs) > desired:
                        scale(new_rs, desired)
                    all_count = sum(reps(rs) for rs in rss)
                    min_available = desired - unav
                    new_unavailable = reps(new_rs) - avail(new_rs)
                    max_down = all_count - min_available - new_unavailable
                    if max_down > 0:
                        for rs in sorted(olds, key=_rev):  # first the unhealthy old replicas
                            unhealthy = reps(rs) - avail(rs)
                            if max_down <= 0:
                                break
                            if unhealthy > 0:
                                k = min(max_down, unhealthy)
                                scale(rs, reps(rs) - k)
                                max_down -= k
                        available = sum(min(avail(rs), reps(rs)) for rs in rss)
                        to_down = available - min_available
                        for rs in sorted(olds, key=_rev):
                            if to_down <= 0:
                                break
                            if reps(rs) > 0:
                                k = min(reps(rs), to_down)
                                scale(rs, reps(rs) - k)
                                to_down -= k
            # revision history: drop old, empty ReplicaSets beyond the limit
            limit = spec.get("revisionHistoryLimit", 10)
            empty = [rs for rs in olds if reps(rs) == 0 and not pods_by_rs.get(rs["metadata"]["uid"])]
            for rs in sorted(empty, key=_rev)[: max(0, len(empty) - limit)]:
                self.store.remove(REPLICASETS, ns, rs["metadata"]["name"])
                rss.remove(rs)

        self._deployment_status(d, rss, new_rs, pods_by_rs, desired, unav, min_ready, created_new)

    def _create_rs(self, d: dict, h: str, revision: int, desired: int, surge: int) -> dict | None:
        meta, spec = d["metadata"], d["spec"]
        tpl = clone(spec["template"])
        tpl.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
        selector = clone(spec["selector"])
        selector.setdefault("matchLabels", {})["pod-template-hash"] = h
        rs: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{h}",
                "namespace": meta["namespace"],
                "labels": dict(tpl["metadata"]["labels"]),
                "annotations": {
                    REVISION: str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(desired),
                    "deployment.kubernetes.io/max-replicas": str(desired + surge),
                },
                "ownerReferences": [owner_ref(DEPLOYMENTS, d)],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": spec.get("minReadySeconds", 0),
                "selector": selector,
                "template": tpl,
            },
        }
        if self.store.peek(REPLICASETS, meta["namespace"], rs["metadata"]["name"]) is not None:
            return None  # a name collision with a foreign ReplicaSet: leave it
        return self.api.create(REPLICASETS, meta["namespace"], rs)

    def _deployment_status(self, d, rss, new_rs, pods_by_rs, desired, unav, min_ready, created_new) -> None:
        before = self.store.peek(DEPLOYMENTS, d["metadata"]["namespace"], d["metadata"]["name"])
        if before is None:
            return
        new = clone(before)
        old_status = before.get("status") or {}
        counts = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "updatedReplicas": 0}
        total_spec = 0
        for rs in rss:
            pods = [p for p in pods_by_rs.get(rs["metadata"]["uid"], []) if is_active(p)]
            counts["replicas"] += len(pods)
            counts["readyReplicas"] += sum(1 for p in pods if self.pod_ready(p))
            counts["availableReplicas"] += sum(1 for p in pods if self.pod_available(p, min_ready))
            total_spec += rs["spec"].get("replicas", 0)
            if rs is new_rs:
                counts["updatedReplicas"] = len(pods)
        status = {
            "observedGeneration": new["metadata"].get("generation", 1),
            **counts,
            "unavailableReplicas": max(0, total_spec - counts["availableReplicas"]),
        }
        omit_zero(status, "replicas", "readyReplicas", "availableReplicas", "updatedReplicas",
                   "unavailableReplicas")
        conditions = clone(old_status.get("conditions") or [])
        now = self.ts()
        spec = d["spec"]
        ok = counts["availableReplicas"] >= desired - unav
        set_condition(conditions, "Available", "True" if ok else "False",
                      "MinimumReplicasAvailable" if ok else "MinimumReplicasUnavailable",
                      "Deployment has minimum availability." if ok
                      else "Deployment does not have minimum availability.",
                      now, update_time=True)
        rs_name = new_rs["metadata"]["name"] if new_rs else ""
        complete = (counts["updatedReplicas"] == desired and counts["replicas"] == desired
                    and counts["availableReplicas"] == desired)
        progressed = (
            counts["updatedReplicas"] > old_status.get("updatedReplicas", 0)
            or counts["readyReplicas"] > old_status.get("readyReplicas", 0)
            or counts["availableReplicas"] > old_status.get("availableReplicas", 0)
            or (counts["replicas"] - counts["updatedReplicas"])
            < (old_status.get("replicas", 0) - old_status.get("updatedReplicas", 0))
        )
        prog = find_condition(conditions, "Progressing")
        if spec.get("paused"):
            set_condition(conditions, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused",
                          now, update_time=True)
        elif complete:
            set_condition(conditions, "Progressing", "True", "NewReplicaSetAvailable",
                          f'ReplicaSet "{rs_name}" has successfully progressed.', now, update_time=True)
        elif created_new:
            set_condition(conditions, "Progressing", "True", "NewReplicaSetCreated",
                          f'Created new replica set "{rs_name}"', now, update_time=True)
        elif new["metadata"].get("generation") != old_status.get("observedGeneration"):
            set_condition(conditions, "Progressing", "True", "FoundNewReplicaSet",
                          f'Found new replica set "{rs_name}"', now, update_time=True)["lastUpdateTime"] = now
        elif progressed or prog is None:
            set_condition(conditions, "Progressing", "True", "ReplicaSetUpdated",
                          f'ReplicaSet "{rs_name}" is progressing.', now, update_time=True)["lastUpdateTime"] = now
        elif prog.get("status") == "True" and prog.get("reason") != "NewReplicaSetAvailable":
            deadline = spec.get("progressDeadlineSeconds", 600)
            last = parse_time(prog.get("lastUpdateTime")) or self.now
            if self.now - last > deadline:
                set_condition(conditions, "Progressing", "False", "ProgressDeadlineExceeded",
                              f'ReplicaSet "{rs_name}" has timed out progressing.', now, update_time=True)
        status["conditions"] = conditions
        if "collisionCount" in old_status:
            status["collisionCount"] = old_status["collisionCount"]
        new["status"] = status
        if new_rs is not None:
            new["metadata"].setdefault("annotations", {})[REVISION] = str(_rev(new_rs))
        self._save(DEPLOYMENTS, before, new)
