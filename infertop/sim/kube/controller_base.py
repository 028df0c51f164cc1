"""What every controller shares: the resource types they touch, ownership and pod
predicates, and :class:`ControllerBase` (the clock, store writes, Events, pod
readiness, pod creation and deletion)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from .quantities import parse_quantity
from .resources import resource_type
from .store import clone
from .util import find_condition, format_time, parse_time

if TYPE_CHECKING:
    from .server import KubeEmulator

PODS = resource_type("pods")
NODES = resource_type("nodes")
NAMESPACES = resource_type("namespaces")
DEPLOYMENTS = resource_type("deployments")
REPLICASETS = resource_type("replicasets")
STATEFULSETS = resource_type("statefulsets")
PDBS = resource_type("poddisruptionbudgets")
SERVICES = resource_type("services")
ENDPOINTSLICES = resource_type("endpointslices")
HPAS = resource_type("horizontalpodautoscalers")

GPU = "nvidia.com/gpu"


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


def omit_zero(status: dict, *keys: str) -> dict:
    for k in keys:
        if not status.get(k):
            status.pop(k, None)
    return status


class ControllerBase:
    """One controller's view of the emulator: its store, API, clock and event recorder."""

    def __init__(self, emu: "KubeEmulator"):
        self.emu = emu
        self.store = emu.store
        self.api = emu.api

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
        assert cond is not None  # pod_ready found it
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
        self.api.events.record(rt, obj, etype, reason, message, component, **kw)

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
