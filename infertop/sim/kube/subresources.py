"""The subresources and review verbs of the API: ``/scale`` (read and write),
pod eviction (checked against PodDisruptionBudgets) and SelfSubjectAccessReview.

:class:`Subresources` belongs to an :class:`~.api.Api` (``api.subresources``): it uses the Api's
store, ``get_current``, ``now`` and pod deletion."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors as E
from .resources import BY_KIND, ResourceType, resource_type
from .selectors import format_label_selector, selector_from_label_selector
from .store import clone
from .typecheck import go_unmarshal_message, type_errors

if TYPE_CHECKING:
    from .api import Api

PODS = resource_type("pods")
PDBS = resource_type("poddisruptionbudgets")

SCALABLE = ("Deployment", "StatefulSet", "ReplicaSet")


class Subresources:
    """Scale, eviction and access review, on the objects of ``api``."""

    def __init__(self, api: Api) -> None:
        self.api = api

    # -------------------------------------------------------------- scale
    def scale_view(self, rt: ResourceType, obj: dict) -> dict:
        if rt.kind not in SCALABLE:
            raise E.path_not_found()
        meta = obj["metadata"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
            "status": {
                "replicas": int((obj.get("status") or {}).get("replicas") or 0),
                "selector": format_label_selector((obj.get("spec") or {}).get("selector")),
            },
        }

    def update_scale(self, rt: ResourceType, namespace: str | None, name: str, body: dict, *,
                     dry_run: bool = False, patching: bool = False) -> dict:
        if rt.kind not in SCALABLE:
            raise E.path_not_found()
        scale_rt = BY_KIND["HorizontalPodAutoscaler"]  # only for the group in messages
        causes = type_errors("Scale", body)
        if causes:
            if patching:
                raise E.invalid_object(scale_rt, "Scale", name, causes)
            raise E.bad_request(go_unmarshal_message("Scale", "autoscaling/v1", causes[0]))
        with self.api.store.lock:
            current = self.api.get_current(rt, namespace, name)
            meta = body.get("metadata") or {}
            if meta.get("name") not in (None, name):
                raise E.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on "
                                    f"the URL ({name})")
            rv = meta.get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise E.conflict(rt, name)
            replicas = (body.get("spec") or {}).get("replicas", 0)
            if replicas < 0:
                raise E.invalid_object(scale_rt, "Scale", name, [E.invalid(
                    "spec.replicas", replicas, "must be greater than or equal to 0")])
            new = clone(current)
            if new["spec"].get("replicas") != replicas:
                new["spec"]["replicas"] = replicas
                new["metadata"]["generation"] = new["metadata"].get("generation", 1) + 1
                if not dry_run:
                    new = self.api.store.put(rt, new)
            return self.scale_view(rt, new)

    # ----------------------------------------------------------- eviction
    def evict(self, namespace: str, name: str, body: Any, *, dry_run: bool = False) -> dict:
        if not isinstance(body, dict):
            raise E.bad_request("the body of the request does not decode into an Eviction")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise E.bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        with self.api.store.lock:
            pod = self.api.get_current(PODS, namespace, name)
            ok = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
            if pod["metadata"].get("deletionTimestamp"):
                return ok
            labels = pod["metadata"].get("labels") or {}
            pdbs = [p for p in self.api.store.iter(PDBS, namespace)
                    if selector_from_label_selector((p.get("spec") or {}).get("selector"))(labels)]
            if len(pdbs) > 1:
                raise E.ApiError(500, "InternalError",
                                 "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                 "does not support.")
            if pdbs:
                pdb = clone(pdbs[0])
                status = self.api.emu.controllers.pdb_status(pdb)
                ready = self.api.emu.controllers.pod_ready(pod)
                healthy_enough = status["currentHealthy"] >= status["desiredHealthy"]
                if ready or not healthy_enough:
                    if status["disruptionsAllowed"] <= 0:
                        pdb_name = pdb["metadata"]["name"]
                        raise E.ApiError(
                            429, "TooManyRequests",
                            "Cannot evict pod as it would violate the pod's disruption budget.",
                            {"causes": [{
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {pdb_name} needs "
                                           f"{status['desiredHealthy']} healthy pods and has "
                                           f"{status['currentHealthy']} currently",
                            }]},
                        )
                    if not dry_run:
                        status["disruptionsAllowed"] -= 1
                        status.setdefault("disruptedPods", {})[name] = self.api.now()
                        pdb["status"] = status
                        self.api.store.put(PDBS, pdb)
            if not dry_run:
                self.api._delete_pod(pod, options, dry_run=False)
            return ok

    # ------------------------------------------------------ access review
    def access_review(self, body: Any) -> dict:
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise E.invalid_object(BY_KIND["SelfSubjectAccessReview"], "SelfSubjectAccessReview", "",
                                   [E.required("spec")])
        spec = body["spec"]
        attrs = spec.get("resourceAttributes")
        if attrs:
            allowed = self.api.emu.is_allowed(
                attrs.get("verb") or "", attrs.get("group") or "", attrs.get("resource") or "",
                attrs.get("subresource") or "", attrs.get("namespace") or "",
            )
        elif spec.get("nonResourceAttributes"):
            allowed = True
        else:
            raise E.invalid_object(BY_KIND["SelfSubjectAccessReview"], "SelfSubjectAccessReview", "",
                                   [E.invalid("spec.resourceAttributes", None,
                                              "exactly one of nonResourceAttributes or resourceAttributes "
                                              "must be specified")])
        status: dict[str, Any] = {"allowed": allowed}
        status["reason"] = "allowed by the emulator's rules" if allowed else ""
        if not allowed:
            status["denied"] = False  # not allowed by a rule, not explicitly denied (as RBAC)
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
