"""A small, deterministic stand-in for kube-controller-manager, the
scheduler and the kubelets.

One :meth:`Controllers.run_pass` runs every controller once, under the
store lock, in this order: namespace termination, garbage collection
(ownerReferences), Deployments (-> ReplicaSets, rolling updates),
ReplicaSets (-> Pods), StatefulSets (-> Pods), the scheduler (nodeName,
GPUs, cordons, taints), the kubelet (IPs, container states, readiness,
failure modes, termination), PodDisruptionBudgets, HPAs. A pass writes
only what changes, so repeated passes reach a fixed point; the emulator's
``reconcile()`` runs passes until one writes nothing.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from .resources import RESOURCE_TYPES, resource_type
from .selectors import selector_from_label_selector
from .store import clone
from .util import find_condition, format_time, parse_time, set_condition, template_hash
from .validation import parse_quantity, resolve_intstr

if TYPE_CHECKING:
    from .server import KubeEmulator

PODS = resource_type("pods")
NODES = resource_type("nodes")
NAMESPACES = resource_type("namespaces")
DEPLOYMENTS = resource_type("deployments")
REPLICASETS = resource_type("replicasets")
STATEFULSETS = resource_type("statefulsets")
PDBS = resource_type("poddisruptionbudgets")
HPAS = resource_type("horizontalpodautoscalers")

GPU = "nvidia.com/gpu"
REVISION = "deployment.kubernetes.io/revision"


def controller_uid(obj: dict) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def owner_ref(rt, owner: dict) -> dict:
    return {
        "apiVersion": rt.api_version,
        "kind": rt.kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_terminating(obj: dict) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def is_active(pod: dict) -> bool:
    return not is_terminating(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_gpus(pod: dict) -> float:
    total = 0.0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        q = (res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU)
        if q is not None:
            total += parse_quantity(q)
    return total


def _rev(rs: dict) -> int:
    try:
        return int(((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def _omit_zero(status: dict, *keys: str) -> dict:
    for k in keys:
        if not status.get(k):
            status.pop(k, None)
    return status


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Controllers:
    def __init__(self, emu: "KubeEmulator"):
        self.emu = emu
        self.store = emu.store
        self.api = emu.api
        self.terminating: dict[str, float] = {}  # pod uid -> when the kubelet removes it
        self.started: dict[str, float] = {}  # pod uid -> when its sandbox started (float precision)
        self._sched_cursor = 0
        self._ip_counter = 1

    # ---------------------------------------------------------- helpers
    @property
    def now(self) -> float:
        return self.emu.clock()

    def ts(self) -> str:
        return format_time(self.now)

    def _save(self, rt, before: dict, after: dict) -> dict:
        if after != before:
            return self.store.put(rt, after)
        return before

    def pod_ready(self, pod: dict) -> bool:
        if is_terminating(pod):
            return False
        cond = find_condition((pod.get("status") or {}).get("conditions"), "Ready")
        return bool(cond and cond.get("status") == "True")

    def pod_available(self, pod: dict, min_ready_seconds: int = 0) -> bool:
        if not self.pod_ready(pod):
            return False
        if not min_ready_seconds:
            return True
        cond = find_condition(pod["status"].get("conditions"), "Ready")
        since = parse_time(cond.get("lastTransitionTime"))
        return since is None or self.now - since >= min_ready_seconds

    def _pods_by_owner(self, namespace: str | None = None) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = defaultdict(list)
        for pod in self.store.iter(PODS, namespace):
            uid = controller_uid(pod)
            if uid:
                out[uid].append(pod)
        return out

    def _event(self, rt, obj: dict, etype: str, reason: str, message: str, component: str, **kw) -> None:
        self.api.record_event(rt, obj, etype, reason, message, component, **kw)

    def _new_pod(self, owner_rt, owner: dict, template: dict, *, name: str | None = None,
                 extra_labels: dict | None = None, spec_extra: dict | None = None) -> dict:
        tpl_meta = template.get("metadata") or {}
        meta: dict[str, Any] = {
            "namespace": owner["metadata"]["namespace"],
            "labels": {**(tpl_meta.get("labels") or {}), **(extra_labels or {})},
            "ownerReferences": [owner_ref(owner_rt, owner)],
        }
        if tpl_meta.get("annotations"):
            meta["annotations"] = dict(tpl_meta["annotations"])
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = owner["metadata"]["name"] + "-"
        spec = clone(template.get("spec") or {})
        spec.update(spec_extra or {})
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        return self.api.create(PODS, meta["namespace"], pod)

    def _delete_pod(self, pod: dict) -> None:
        self.api._delete_pod(clone(pod), {}, dry_run=False)

    # ------------------------------------------------------------- pass
    def run_pass(self) -> bool:
        with self.store.lock:
            rv0 = self.store.resource_version
            self._namespaces()
            self._nodes()
            self._garbage_collect()
            for d in list(self.store.iter(DEPLOYMENTS)):
                self._sync_deployment(clone(d))
            for rs in list(self.store.iter(REPLICASETS)):
                self._sync_replicaset(clone(rs))
            for sts in list(self.store.iter(STATEFULSETS)):
                self._sync_statefulset(clone(sts))
            self._schedule()
            self._kubelet()
            for pdb in list(self.store.iter(PDBS)):
                pdb = clone(pdb)
                new = clone(pdb)
                new["status"] = self.pdb_status(pdb)
                self._save(PDBS, pdb, new)
            for hpa in list(self.store.iter(HPAS)):
                self._sync_hpa(clone(hpa))
            return self.store.resource_version != rv0

    # ------------------------------------------------------- namespaces
    def _namespaces(self) -> None:
        for ns in list(self.store.iter(NAMESPACES)):
            if not is_terminating(ns):
                continue
            name = ns["metadata"]["name"]
            for rt in RESOURCE_TYPES:
                if rt.namespaced:
                    for obj in list(self.store.iter(rt, name)):
                        self.store.remove(rt, name, obj["metadata"]["name"])
            self.store.remove(NAMESPACES, "", name)

    def _nodes(self) -> None:
        """The node lifecycle controller's TaintNodesByCondition for cordons:
        the unschedulable taint follows ``spec.unschedulable``."""
        key = "node.kubernetes.io/unschedulable"
        for node in list(self.store.iter(NODES)):
            spec = node.get("spec") or {}
            taints = spec.get("taints") or []
            has = any(t.get("key") == key for t in taints)
            want = bool(spec.get("unschedulable"))
            if has == want:
                continue
            new = clone(node)
            if want:
                new["spec"]["taints"] = taints + [{"key": key, "effect": "NoSchedule", "timeAdded": self.ts()}]
            else:
                rest = [t for t in taints if t.get("key") != key]
                if rest:
                    new["spec"]["taints"] = rest
                else:
                    new["spec"].pop("taints", None)
            self.store.put(NODES, new)

    def _garbage_collect(self) -> None:
        uids = set()
        for rt in RESOURCE_TYPES:
            for obj in self.store.iter(rt):
                uids.add(obj["metadata"].get("uid"))
        for rt in RESOURCE_TYPES:
            if not rt.namespaced:
                continue
            for obj in list(self.store.iter(rt)):
                refs = obj["metadata"].get("ownerReferences") or []
                if refs and not any(r.get("uid") in uids for r in refs):
                    if rt is PODS:
                        if not is_terminating(obj):
                            self._delete_pod(obj)
                    else:
                        self.store.remove(rt, obj["metadata"]["namespace"], obj["metadata"]["name"])

    # ------------------------------------------------------ deployments
    def _sync_deployment(self, d: dict) -> None:
        meta, spec = d["metadata"], d["spec"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
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
        rs = {
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
        _omit_zero(status, "replicas", "readyReplicas", "availableReplicas", "updatedReplicas",
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
                          f'Found new replica set "{rs_name}"', now, update_time=True)
            find_condition(conditions, "Progressing")["lastUpdateTime"] = now
        elif progressed or prog is None:
            set_condition(conditions, "Progressing", "True", "ReplicaSetUpdated",
                          f'ReplicaSet "{rs_name}" is progressing.', now, update_time=True)
            find_condition(conditions, "Progressing")["lastUpdateTime"] = now
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

    # ------------------------------------------------------ replicasets
    def _sync_replicaset(self, rs: dict) -> None:
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
        _omit_zero(status, "fullyLabeledReplicas", "readyReplicas", "availableReplicas")
        new = clone(before)
        new["status"] = status
        self._save(REPLICASETS, before, new)

    # ----------------------------------------------------- statefulsets
    def _sync_statefulset(self, sts: dict) -> None:
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
        _omit_zero(status, "readyReplicas", "currentReplicas", "updatedReplicas")
        new = clone(before)
        new["status"] = status
        self._save(STATEFULSETS, before, new)

    # -------------------------------------------------------- scheduler
    @staticmethod
    def node_ready(node: dict) -> bool:
        cond = find_condition((node.get("status") or {}).get("conditions"), "Ready")
        return cond is None or cond.get("status") == "True"

    @staticmethod
    def _tolerates(pod: dict, taint: dict) -> bool:
        for t in (pod.get("spec") or {}).get("tolerations") or []:
            if t.get("effect") and t.get("effect") != taint.get("effect"):
                continue
            if t.get("operator") == "Exists":
                if not t.get("key") or t.get("key") == taint.get("key"):
                    return True
            elif t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
                return True
        return False

    def _schedule(self) -> None:
        nodes = list(self.store.iter(NODES))
        used: Counter = Counter()
        for pod in self.store.iter(PODS):
            node = pod["spec"].get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                used[node] += pod_gpus(pod)
        for pod in list(self.store.iter(PODS)):
            if pod["spec"].get("nodeName") or is_terminating(pod):
                continue
            if pod["spec"].get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            need = pod_gpus(pod)
            reasons: Counter = Counter()
            chosen = None
            n = len(nodes)
            for k in range(n):
                idx = (self._sched_cursor + k) % n
                node = nodes[idx]
                labels = node["metadata"].get("labels") or {}
                if (node.get("spec") or {}).get("unschedulable"):
                    reasons["node(s) were unschedulable"] += 1
                    continue
                if not self.node_ready(node):
                    reasons["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"] += 1
                    continue
                bad = next((t for t in (node.get("spec") or {}).get("taints") or []
                            if t.get("effect") in ("NoSchedule", "NoExecute") and not self._tolerates(pod, t)),
                           None)
                if bad is not None:
                    reasons[f"node(s) had untolerated taint {{{bad.get('key')}: {bad.get('value', '')}}}"] += 1
                    continue
                selector = pod["spec"].get("nodeSelector") or {}
                if any(labels.get(k2) != v for k2, v in selector.items()):
                    reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                    continue
                alloc = (node.get("status") or {}).get("allocatable") or {}
                free = parse_quantity(alloc.get(GPU, 0)) - used[node["metadata"]["name"]]
                if need > 0 and free < need:
                    reasons[f"Insufficient {GPU}"] += 1
                    continue
                chosen = node
                self._sched_cursor = idx + 1
                break
            new = clone(pod)
            conds = new.setdefault("status", {}).setdefault("conditions", [])
            if chosen is not None:
                node_name = chosen["metadata"]["name"]
                new["spec"]["nodeName"] = node_name
                used[node_name] += need
                set_condition(conds, "PodScheduled", "True", None, None, self.ts(), probe=True)
                self.store.put(PODS, new)
                self._event(PODS, new, "Normal", "Scheduled",
                            f"Successfully assigned {new['metadata']['namespace']}/{new['metadata']['name']} "
                            f"to {node_name}", "default-scheduler")
            else:
                if not nodes:
                    message = "no nodes available to schedule pods"
                else:
                    detail = ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
                    message = (f"0/{len(nodes)} nodes are available: {detail}. preemption: 0/{len(nodes)} nodes "
                               f"are available: {len(nodes)} Preemption is not helpful for scheduling.")
                old = find_condition(conds, "PodScheduled")
                if old is not None and old.get("message") == message and old.get("status") == "False":
                    continue
                set_condition(conds, "PodScheduled", "False", "Unschedulable", message, self.ts(), probe=True)
                self.store.put(PODS, new)
                self._event(PODS, new, "Warning", "FailedScheduling", message, "default-scheduler")

    # ----------------------------------------------------------- kubelet
    def _alloc_ip(self, pod: dict) -> tuple[str, int | None]:
        mapped = self.emu._endpoint_for(pod["metadata"]["namespace"], pod["metadata"]["name"])
        if mapped is not None:
            return mapped
        while True:
            self._ip_counter += 1
            n = self._ip_counter
            a, b, c = (n >> 16) & 255, (n >> 8) & 255, n & 255
            if c not in (0, 255):
                return f"127.{a}.{b}.{c}", None

    def _kubelet(self) -> None:
        nodes = {n["metadata"]["name"]: n for n in self.store.iter(NODES)}
        now = self.now
        for pod in list(self.store.iter(PODS)):
            node_name = pod["spec"].get("nodeName")
            if not node_name:
                continue
            uid = pod["metadata"]["uid"]
            if is_terminating(pod):
                if now >= self.terminating.get(uid, 0.0):
                    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                        if "running" in (cs.get("state") or {}):
                            self._event(PODS, pod, "Normal", "Killing", f"Stopping container {cs['name']}",
                                        "kubelet", host=node_name,
                                        field_path=f"spec.containers{{{cs['name']}}}")
                    self.store.remove(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
                    self.terminating.pop(uid, None)
                    self.started.pop(uid, None)
                continue
            node = nodes.get(node_name)
            if node is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            self._sync_pod(pod, node, now)

    def _sync_pod(self, stored: dict, node: dict, now: float) -> None:
        before, pod = stored, clone(stored)  # one copy per pod and pass: the stored object is left untouched
        meta, spec = pod["metadata"], pod["spec"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        status = pod.setdefault("status", {})
        started = self.started.setdefault(uid, parse_time(status.get("startTime")) or now)
        status.setdefault("startTime", format_time(started))
        ts_now = format_time(now)
        if not status.get("podIP"):
            ip, port = self._alloc_ip(pod)
            status["podIP"] = ip
            status["podIPs"] = [{"ip": ip}]
            if port is not None and spec.get("containers"):
                ports = spec["containers"][0].setdefault("ports", [])
                if ports:
                    ports[0]["containerPort"] = port
                else:
                    ports.append({"name": "http", "containerPort": port, "protocol": "TCP"})
        host_ip = next((a["address"] for a in (node.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"), "10.0.0.1")
        status["hostIP"] = host_ip
        status["hostIPs"] = [{"ip": host_ip}]
        elapsed = now - started
        override = self.emu._ready_overrides.get((ns, name))
        prev_statuses = {cs["name"]: cs for cs in status.get("containerStatuses") or []}
        statuses, pending, not_ready = [], False, []
        events: list[tuple] = []
        for c in spec.get("containers") or []:
            cname, image = c["name"], c.get("image", "")
            prev = prev_statuses.get(cname) or {}
            prev_state = prev.get("state") or {}
            fpath = f"spec.containers{{{cname}}}"
            cs: dict[str, Any] = {"name": cname, "image": image, "imageID": "", "ready": False,
                                  "restartCount": 0, "started": False, "state": {}, "lastState": {}}
            image_failure = self.emu._image_failure(image)
            args_failure = self.emu._args_failure(c)
            image_id = f"docker.io/{image.split(':')[0]}@sha256:{_sha(image)}"
            container_id = f"containerd://{_sha(uid + cname)}"
            if image_failure:
                pending = True
                if image_failure == "ErrImagePull":
                    msg = f'failed to pull and unpack image "{image}": not found'
                else:
                    msg = f'Back-off pulling image "{image}"'
                cs["state"] = {"waiting": {"reason": image_failure, "message": msg}}
                if (prev_state.get("waiting") or {}).get("reason") != image_failure:
                    events.append(("Normal", "Pulling", f'Pulling image "{image}"', fpath))
                    events.append(("Warning", "Failed",
                                   f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to '
                                   f'pull and unpack image "{image}": not found', fpath))
                    events.append(("Normal", "BackOff", f'Back-off pulling image "{image}"', fpath))
            elif elapsed < self.emu.start_delay:
                pending = True
                cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
            elif args_failure:
                reason, exit_code = args_failure
                run_for = now - started - self.emu.start_delay
                restarts = 1 + int(run_for // self.emu.crash_period)
                backoff = min(10 * 2 ** (restarts - 1), 300)
                cs.update(imageID=image_id, containerID=container_id, restartCount=restarts)
                last_start = format_time(started + self.emu.start_delay + (restarts - 1) * self.emu.crash_period)
                cs["state"] = {"waiting": {
                    "reason": reason,
                    "message": f"back-off {backoff}s restarting failed container={cname} pod={name}_{ns}({uid})",
                }}
                cs["lastState"] = {"terminated": {"exitCode": exit_code, "reason": "Error",
                                                  "startedAt": last_start, "finishedAt": last_start,
                                                  "containerID": container_id}}
                if prev.get("restartCount", 0) != restarts:
                    if not prev.get("restartCount"):
                        events.append(("Normal", "Pulled",
                                       f'Container image "{image}" already present on machine', fpath))
                        events.append(("Normal", "Created", f"Created container: {cname}", fpath))
                        events.append(("Normal", "Started", f"Started container {cname}", fpath))
                    for _ in range(max(1, restarts - prev.get("restartCount", 0))):  # one per restart
                        events.append(("Warning", "BackOff",
                                       f"Back-off restarting failed container {cname} in pod {name}_{ns}({uid})",
                                       fpath))
            else:
                run_started = (prev_state.get("running") or {}).get("startedAt") or ts_now
                ready = elapsed >= self.emu.start_delay + self.emu.ready_delay
                if override is not None:
                    ready = override
                cs.update(imageID=image_id, containerID=container_id, started=True, ready=ready,
                          restartCount=prev.get("restartCount", 0), lastState=prev.get("lastState") or {})
                cs["state"] = {"running": {"startedAt": run_started}}
                if "running" not in prev_state:
                    events.append(("Normal", "Pulled", f'Container image "{image}" already present on machine',
                                   fpath))
                    events.append(("Normal", "Created", f"Created container: {cname}", fpath))
                    events.append(("Normal", "Started", f"Started container {cname}", fpath))
            if not cs["ready"]:
                not_ready.append(cname)
            statuses.append(cs)
        status["containerStatuses"] = statuses
        status["phase"] = "Pending" if pending else "Running"
        conds = status.setdefault("conditions", [])
        set_condition(conds, "PodReadyToStartContainers", "True", None, None, ts_now, probe=True)
        set_condition(conds, "Initialized", "True", None, None, ts_now, probe=True)
        if not_ready:
            msg = f"containers with unready status: [{' '.join(not_ready)}]"
            set_condition(conds, "Ready", "False", "ContainersNotReady", msg, ts_now, probe=True)
            set_condition(conds, "ContainersReady", "False", "ContainersNotReady", msg, ts_now, probe=True)
        else:
            set_condition(conds, "Ready", "True", None, None, ts_now, probe=True)
            set_condition(conds, "ContainersReady", "True", None, None, ts_now, probe=True)
        set_condition(conds, "PodScheduled", "True", None, None, ts_now, probe=True)
        order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
        conds.sort(key=lambda c: order.index(c["type"]) if c["type"] in order else len(order))
        saved = self._save(PODS, before, pod)
        for etype, reason, message, fpath in events:
            self._event(PODS, saved, etype, reason, message, "kubelet", host=spec.get("nodeName"),
                        field_path=fpath)

    # -------------------------------------------------------------- PDBs
    def pdb_status(self, pdb: dict) -> dict:
        """The status the disruption controller computes for ``pdb`` now."""
        spec = pdb.get("spec") or {}
        ns = pdb["metadata"]["namespace"]
        match = selector_from_label_selector(spec.get("selector"))
        pods = [p for p in self.store.iter(PODS, ns)
                if is_active(p) and match(p["metadata"].get("labels") or {})]
        expected = len(pods)
        healthy = sum(1 for p in pods if self.pod_ready(p))
        if spec.get("maxUnavailable") is not None:
            desired = max(0, expected - resolve_intstr(spec["maxUnavailable"], expected, True))
        elif spec.get("minAvailable") is not None:
            desired = resolve_intstr(spec["minAvailable"], expected, True)
        else:
            desired = 0
        allowed = max(0, healthy - desired)
        old = pdb.get("status") or {}
        conditions = clone(old.get("conditions") or [])
        ok = allowed > 0
        set_condition(conditions, "DisruptionAllowed", "True" if ok else "False",
                      "SufficientPods" if ok else "InsufficientPods", "", self.ts())
        for c in conditions:
            c["observedGeneration"] = pdb["metadata"].get("generation", 1)
        status = {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": conditions,
        }
        return status

    # -------------------------------------------------------------- HPAs
    def _sync_hpa(self, hpa: dict) -> None:
        before = clone(hpa)
        meta, spec = hpa["metadata"], hpa.get("spec") or {}
        status = hpa.setdefault("status", {})
        status.setdefault("desiredReplicas", 0)
        pinned = self.emu._hpa_pinned.get((meta["namespace"], meta["name"]), set())
        ref = spec.get("scaleTargetRef") or {}
        kinds = {"Deployment": DEPLOYMENTS, "StatefulSet": STATEFULSETS, "ReplicaSet": REPLICASETS}
        target_rt = kinds.get(ref.get("kind"))
        target = self.store.peek(target_rt, meta["namespace"], ref.get("name", "")) if target_rt else None
        now = self.ts()
        conditions = status.setdefault("conditions", [])
        if target is None:
            set_condition(conditions, "AbleToScale", "False", "FailedGetScale",
                          f"the HPA controller was unable to get the target's current scale: "
                          f"{(target_rt.group_resource if target_rt else ref.get('kind', ''))} "
                          f"\"{ref.get('name', '')}\" not found", now)
        else:
            if "currentReplicas" not in pinned:
                status["currentReplicas"] = int((target.get("status") or {}).get("replicas") or 0)
            hpa_ctl = self.emu.hpa_controller
            if hpa_ctl is not None and not pinned & {"desiredReplicas", "conditions"}:
                match = selector_from_label_selector((target.get("spec") or {}).get("selector"))
                pods = [p for p in self.store.iter(PODS, meta["namespace"])
                        if match(p["metadata"].get("labels") or {}) and not is_terminating(p)]
                hpa_ctl.sync(self, hpa, target_rt, target, pods)  # the conditions are its own
            elif "conditions" not in pinned:
                set_condition(conditions, "AbleToScale", "True", "ReadyForNewScale",
                              "recommended size matches current size", now)
                if find_condition(conditions, "ScalingActive") is None:
                    set_condition(conditions, "ScalingActive", "True", "ValidMetricFound",
                                  "the HPA was able to successfully calculate a replica count from "
                                  "external metric", now)
                if find_condition(conditions, "ScalingLimited") is None:
                    set_condition(conditions, "ScalingLimited", "False", "DesiredWithinRange",
                                  "the desired count is within the acceptable range", now)
        status["observedGeneration"] = meta.get("generation", 1)
        self._save(HPAS, before, hpa)
