"""A small, deterministic stand-in for kube-controller-manager, the
scheduler and the kubelets.

One :meth:`Controllers.run_pass` runs every controller once, under the
store lock, in this order: namespace termination, garbage collection
(ownerReferences), Deployments (-> ReplicaSets, rolling updates;
``deployments.py``), ReplicaSets (-> Pods; ``replicasets.py``), StatefulSets
(-> Pods; ``statefulsets.py``), the scheduler (nodeName, GPUs, cordons,
taints; ``scheduler.py``), the kubelet (IPs, container states, readiness,
failure modes, termination; ``kubelet.py``), EndpointSlices, PodDisruptionBudgets, HPAs. A
pass writes only what changes, so repeated passes reach a fixed point; the
emulator's ``reconcile()`` runs passes until one writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .controller_base import (DEPLOYMENTS, ENDPOINTSLICES, HPAS, NAMESPACES, NODES, PDBS, PODS, REPLICASETS,
                              SERVICES, STATEFULSETS, ControllerBase, is_active, is_terminating)
from .deployments import DeploymentController
from .kubelet import Kubelet
from .quantities import resolve_intstr
from .replicasets import ReplicaSetController
from .resources import RESOURCE_TYPES
from .scheduler import Scheduler
from .selectors import selector_from_label_selector
from .statefulsets import StatefulSetController
from .store import clone
from .util import find_condition, set_condition

if TYPE_CHECKING:
    from .server import KubeEmulator


class Controllers(ControllerBase):
    """The pass over every controller, and the small ones: namespaces, node taints,
    garbage collection, PodDisruptionBudgets and HPA status."""

    def __init__(self, emu: "KubeEmulator"):
        super().__init__(emu)
        self.deployments = DeploymentController(emu)
        self.replicasets = ReplicaSetController(emu)
        self.statefulsets = StatefulSetController(emu)
        self.scheduler = Scheduler(emu)
        self.kubelet = Kubelet(emu)

    # ------------------------------------------------------------- pass
    def run_pass(self) -> bool:
        with self.store.lock:
            rv0 = self.store.resource_version
            self._namespaces()
            self._nodes()
            self._garbage_collect()
            for d in list(self.store.iter(DEPLOYMENTS)):
                self.deployments.sync(clone(d))
            for rs in list(self.store.iter(REPLICASETS)):
                self.replicasets.sync(clone(rs))
            for sts in list(self.store.iter(STATEFULSETS)):
                self.statefulsets.sync(clone(sts))
            self.scheduler.run()
            self.kubelet.run()
            self._endpoint_slices()
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

    # --------------------------------------------------- EndpointSlices
    def _endpoint_slices(self) -> None:
        """The EndpointSlice controller: one slice ``<service>-slice`` per Service with a selector, an
        endpoint per active pod it selects that has an IP (ready as the pod is), owned by the Service."""
        for svc in list(self.store.iter(SERVICES)):
            meta, spec = svc["metadata"], svc.get("spec") or {}
            selector = spec.get("selector") or {}
            if not selector:
                continue
            ns = meta["namespace"]
            pods = sorted((p for p in self.store.iter(PODS, ns) if is_active(p) and (p.get("status") or {}).get("podIP")
                           and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())),
                          key=lambda p: p["metadata"]["name"])
            endpoints = [{"addresses": [p["status"]["podIP"]],
                          "conditions": {"ready": self.pod_ready(p), "serving": self.pod_ready(p),
                                         "terminating": is_terminating(p)},
                          "nodeName": (p.get("spec") or {}).get("nodeName"),
                          "targetRef": {"kind": "Pod", "namespace": ns, "name": p["metadata"]["name"],
                                        "uid": p["metadata"].get("uid")}} for p in pods]
            ports = [{"name": sp.get("name", ""), "port": sp.get("targetPort", sp.get("port")),
                      "protocol": sp.get("protocol", "TCP")} for sp in spec.get("ports") or []]
            name = f"{meta['name']}-slice"
            live = self.store.peek(ENDPOINTSLICES, ns, name)
            want = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                    "metadata": {"name": name, "namespace": ns,
                                 "labels": {"kubernetes.io/service-name": meta["name"],
                                            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller"},
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": meta["name"],
                                                      "uid": meta.get("uid"), "controller": True}]},
                    "endpoints": endpoints, "ports": ports}
            if live is None:
                self.api.create(ENDPOINTSLICES, ns, want)
            elif (live.get("endpoints"), live.get("ports")) != (endpoints, ports):
                new = clone(live)
                new["endpoints"], new["ports"] = endpoints, ports
                self.store.put(ENDPOINTSLICES, new)

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
        target_rt = kinds.get(ref.get("kind", ""))
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
