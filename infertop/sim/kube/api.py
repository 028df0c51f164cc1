"""The object verbs (create, get, list, update, patch, delete), independent of HTTP;
the subresources (scale, eviction, access review) are in ``subresources.py``, Events
in ``events.py``.

Every operation takes the store lock for its whole read-check-write, so a
resourceVersion check and the write that follows are atomic. Operations
raise :class:`~.errors.ApiError`; the HTTP layer turns it into a Status.
"""

from __future__ import annotations

import builtins
import copy
import uuid
from typing import TYPE_CHECKING, Any

from . import errors as E
from .defaults import apply_defaults, initial_status
from .events import EventRecorder
from .patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import BY_KEY, ResourceType, resource_type
from .store import clone
from .subresources import Subresources
from .typecheck import go_unmarshal_message, type_errors
from .util import canonical_json, format_time, random_suffix
from .validation import validate

if TYPE_CHECKING:
    from .server import KubeEmulator

PODS = resource_type("pods")
NAMESPACES = resource_type("namespaces")

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def _strip_rv(obj: dict) -> dict:
    obj = copy.copy(obj)
    obj["metadata"] = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return obj


class Api:
    def __init__(self, emu: "KubeEmulator"):
        self.emu = emu
        self.store = emu.store
        self.subresources = Subresources(self)  # /scale, eviction, access review
        self.events = EventRecorder(self)
        self._cluster_ip = 0

    # ------------------------------------------------------------- helpers
    def now(self) -> str:
        return format_time(self.emu.clock())

    def _remove_present(self, rt: ResourceType, namespace: str, name: str) -> dict:
        """Delete an object the caller has just read under the store lock (so it is there)."""
        gone = self.store.remove(rt, namespace, name)
        assert gone is not None, (rt.key, namespace, name)
        return gone

    def _check_namespace(self, rt: ResourceType, namespace: str, *, creating: bool,
                         name: str = "") -> None:
        if not rt.namespaced:
            return
        ns = self.store.peek(NAMESPACES, "", namespace)
        if ns is None:
            if self.emu.strict_namespaces:
                raise E.namespace_not_found(namespace)
            self.create(NAMESPACES, None, {"metadata": {"name": namespace}})
            return
        if creating and (ns.get("metadata") or {}).get("deletionTimestamp") and rt.kind != "Event":
            details = {"name": name, "kind": rt.plural}
            if rt.group:
                details["group"] = rt.group
            raise E.ApiError(403, "Forbidden",
                             f'{rt.group_resource} "{name}" is forbidden: unable to create new content in '
                             f"namespace {namespace} because it is being terminated", details)

    def _typecheck(self, rt: ResourceType, body: Any, *, patching: bool, name: str = "") -> None:
        causes = type_errors(rt.kind, body)
        if not causes:
            return
        if patching:
            raise E.invalid_object(rt, rt.kind, name, causes)
        raise E.bad_request(go_unmarshal_message(rt.kind, rt.api_version, causes[0]))

    def _validate(self, rt: ResourceType, obj: dict, old: dict | None = None) -> None:
        causes = validate(rt, obj, old)
        if causes:
            raise E.invalid_object(rt, rt.kind, obj.get("metadata", {}).get("name", ""), causes)

    def get_current(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        obj = self.store.get(rt, namespace or "", name)
        if obj is None:
            raise E.not_found(rt, name)
        return obj

    @staticmethod
    def with_type(rt: ResourceType, obj: dict) -> dict:
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version
        return obj

    # -------------------------------------------------------------- create
    def create(self, rt: ResourceType, namespace: str | None, body: Any, *, dry_run: bool = False,
               keep_status: bool = False) -> dict:
        if not isinstance(body, dict):
            raise E.bad_request(f"the body of the request does not decode into a {rt.kind}")
        self._typecheck(rt, body, patching=False)
        obj = clone(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise E.bad_request("metadata must be an object")
        if body.get("kind") not in (None, rt.kind):
            raise E.bad_request(f'the kind of the object ({body.get("kind")}) does not match the kind of the '
                                f"request ({rt.kind})")
        with self.store.lock:
            if rt.namespaced:
                body_ns = meta.get("namespace")
                if namespace and body_ns and body_ns != namespace:
                    raise E.bad_request("the namespace of the provided object does not match the namespace "
                                        "sent on the request")
                namespace = namespace or body_ns or "default"
                meta["namespace"] = namespace
                self._check_namespace(rt, namespace, creating=True, name=meta.get("name") or "")
            else:
                meta.pop("namespace", None)
            if meta.get("resourceVersion"):
                raise E.bad_request("resourceVersion should not be set on objects to be created")
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(100):
                    meta["name"] = meta["generateName"] + random_suffix(self.emu.rng)
                    if self.store.peek(rt, namespace or "", meta["name"]) is None:
                        break
            self.with_type(rt, obj)
            meta["uid"] = str(uuid.UUID(int=self.emu.rng.getrandbits(128), version=4))
            meta["creationTimestamp"] = self.now()
            for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation", "managedFields"):
                meta.pop(k, None)
            if rt.tracks_generation:
                meta["generation"] = 1
            if rt.has_status and not keep_status and rt.kind != "Node":  # a kubelet registers its status
                status = initial_status(rt, obj)
                if status is None:
                    obj.pop("status", None)
                else:
                    obj["status"] = status
            elif rt.kind == "HorizontalPodAutoscaler" and keep_status:
                obj.setdefault("status", initial_status(rt, obj))
            apply_defaults(rt, obj)
            if rt.kind == "Pod" and not keep_status:
                obj["status"] = initial_status(rt, obj)
            if rt.kind == "Service":
                self._allocate_cluster_ip(obj)
            self._validate(rt, obj)
            if self.store.peek(rt, namespace or "", meta["name"]) is not None:
                raise E.already_exists(rt, meta["name"])
            if dry_run:
                return obj
            return self.store.put(rt, obj)

    def _allocate_cluster_ip(self, svc: dict) -> None:
        spec = svc.setdefault("spec", {})
        if spec.get("type") == "ExternalName":
            return
        if not spec.get("clusterIP"):
            self._cluster_ip += 1
            spec["clusterIP"] = f"10.96.{self._cluster_ip // 250}.{self._cluster_ip % 250 + 2}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")

    # ---------------------------------------------------------------- get
    def get(self, rt: ResourceType, namespace: str | None, name: str, subresource: str | None = None) -> dict:
        obj = self.get_current(rt, namespace, name)
        if subresource == "scale":
            return self.subresources.scale_view(rt, obj)
        return self.with_type(rt, obj)

    def list(self, rt: ResourceType, namespace: str | None, label_pred=None, field_pred=None) -> list[dict]:
        with self.store.lock:
            out = []
            for obj in self.store.iter(rt, namespace):
                if label_pred and not label_pred((obj.get("metadata") or {}).get("labels") or {}):
                    continue
                if field_pred and not field_pred(obj):
                    continue
                out.append(clone(obj))
            return out

    # ------------------------------------------------------------- update
    def update(self, rt: ResourceType, namespace: str | None, name: str, body: Any, *,
               subresource: str | None = None, dry_run: bool = False, patching: bool = False,
               current: dict | None = None) -> dict:
        if not isinstance(body, dict):
            raise E.bad_request(f"the body of the request does not decode into a {rt.kind}")
        if subresource == "scale":
            return self.subresources.update_scale(rt, namespace, name, body, dry_run=dry_run, patching=patching)
        self._typecheck(rt, body, patching=patching, name=name)
        with self.store.lock:
            old = current if current is not None else self.get_current(rt, namespace, name)
            new = clone(body)
            meta = new.setdefault("metadata", {})
            if meta.get("name") not in (None, name):
                raise E.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on "
                                    f"the URL ({name})")
            if rt.namespaced and meta.get("namespace") not in (None, "", namespace):
                raise E.bad_request("the namespace of the provided object does not match the namespace sent "
                                    "on the request")
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise E.conflict(rt, name)
            if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
                raise E.conflict(rt, name, f"Precondition failed: UID in precondition: {meta['uid']}, "
                                           f"UID in object meta: {old['metadata']['uid']}")
            meta["name"] = name
            if rt.namespaced:
                meta["namespace"] = namespace
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation"):
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
                else:
                    meta.pop(k, None)
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            self.with_type(rt, new)
            if subresource == "status":
                status = new.get("status")
                new = clone(old)
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            elif rt.has_status:
                if "status" in old:
                    new["status"] = clone(old["status"])
                else:
                    new.pop("status", None)
            apply_defaults(rt, new)
            if rt.kind == "Service":
                spec, ospec = new.setdefault("spec", {}), old.get("spec") or {}
                for k in ("clusterIP", "clusterIPs"):
                    if not spec.get(k) and ospec.get(k):
                        spec[k] = ospec[k]
                self._allocate_cluster_ip(new)
            self._validate(rt, new, old)
            if rt.tracks_generation and canonical_json(new.get("spec")) != canonical_json(old.get("spec")):
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if _strip_rv(new) == _strip_rv(old) or dry_run:
                return new  # a no-op update writes nothing, as the real API server
            return self.store.put(rt, new)

    # -------------------------------------------------------------- patch
    def patch(self, rt: ResourceType, namespace: str | None, name: str, patch_body: Any, content_type: str, *,
              subresource: str | None = None, dry_run: bool = False, field_manager: str | None = None,
              force: bool = False) -> tuple[dict, bool]:
        """Apply a patch; returns (object, created)."""
        with self.store.lock:
            current = self.store.get(rt, namespace or "", name)
            if content_type == APPLY:
                if not field_manager:
                    raise E.invalid_object(rt, rt.kind, name, [E.required(
                        "metadata.managedFields", "is required for apply patch")])
                if current is None:
                    if subresource:
                        raise E.not_found(rt, name)
                    body = clone(patch_body) if isinstance(patch_body, dict) else patch_body
                    if isinstance(body, dict):
                        body.setdefault("metadata", {}).setdefault("name", name)
                    return self.create(rt, namespace, body, dry_run=dry_run), True
            if current is None:
                raise E.not_found(rt, name)
            doc = self.subresources.scale_view(rt, current) if subresource == "scale" else self.with_type(rt, clone(current))
            try:
                if content_type == JSON_PATCH:
                    patched = json_patch(doc, patch_body)
                elif content_type == MERGE:
                    if not isinstance(patch_body, dict):
                        raise PatchError("merge patch must be a JSON object", invalid=False)
                    patched = merge_patch(doc, patch_body)
                elif content_type in (STRATEGIC, APPLY):
                    patched = strategic_merge_patch(doc, patch_body)
                else:
                    raise E.unsupported_media_type(content_type)
            except PatchError as exc:
                if exc.invalid:
                    kind = "Scale" if subresource == "scale" else rt.kind
                    raise E.invalid_object(rt, kind, name, [E.invalid("patch", canonical_json(patch_body),
                                                                      str(exc))]) from None
                raise E.bad_request(str(exc)) from None
            if not isinstance(patched, dict):
                raise E.bad_request("the patch did not produce an object")
            meta = patched.get("metadata")
            rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise E.conflict(rt, name)
            if isinstance(meta, dict) and not rv:
                # a patch that removes resourceVersion is unconditional
                meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            obj = self.update(rt, namespace, name, patched, subresource=subresource, dry_run=dry_run,
                              patching=True, current=current)
            return obj, False

    # ------------------------------------------------------------- delete
    def delete(self, rt: ResourceType, namespace: str | None, name: str, options: dict, *,
               dry_run: bool = False) -> dict:
        """Returns the response body: the object (pods, namespaces, services) or a Status."""
        with self.store.lock:
            current = self.get_current(rt, namespace, name)
            pre = options.get("preconditions") or {}
            if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise E.conflict(rt, name, "Precondition failed: ResourceVersion in precondition: "
                                           f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                           f"{current['metadata']['resourceVersion']}")
            if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
                raise E.conflict(rt, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                           f"UID in object meta: {current['metadata']['uid']}")
            meta = current["metadata"]
            if rt.kind == "Pod":
                return self.with_type(rt, self._delete_pod(current, options, dry_run=dry_run))
            if rt.kind == "Service" and not dry_run:
                # the real API answers a Service delete with the Service, not a Status
                return self.with_type(rt, self._remove_present(rt, namespace or "", name))
            if rt.kind == "Namespace":
                if not meta.get("deletionTimestamp"):
                    meta["deletionTimestamp"] = self.now()
                    meta["deletionGracePeriodSeconds"] = 0
                    current.setdefault("status", {})["phase"] = "Terminating"
                    if not dry_run:
                        current = self.store.put(rt, current)
                return self.with_type(rt, current)
            if dry_run:
                return self._success(rt, current)
            if options.get("propagationPolicy") == "Orphan":
                self._orphan_dependents(meta["uid"], namespace)
            gone = self._remove_present(rt, namespace or "", name)
            return self._success(rt, gone)

    @staticmethod
    def _success(rt: ResourceType, obj: dict) -> dict:
        details = {"name": obj["metadata"]["name"], "kind": rt.plural, "uid": obj["metadata"]["uid"]}
        if rt.group:
            details["group"] = rt.group
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _orphan_dependents(self, uid: str, namespace: str | None) -> None:
        for rt in BY_KEY.values():
            if not rt.namespaced:
                continue
            for obj in list(self.store.iter(rt, namespace)):
                refs = (obj.get("metadata") or {}).get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    obj = clone(obj)
                    obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    if not obj["metadata"]["ownerReferences"]:
                        del obj["metadata"]["ownerReferences"]
                    self.store.put(rt, obj)

    def _delete_pod(self, pod: dict, options: dict, *, dry_run: bool) -> dict:
        meta = pod["metadata"]
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        scheduled = bool((pod.get("spec") or {}).get("nodeName"))
        terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if dry_run:
            return pod
        if grace == 0 or not scheduled or terminal:
            return self._remove_present(PODS, meta["namespace"], meta["name"])
        if meta.get("deletionTimestamp"):
            return pod
        now = self.emu.clock()
        meta["deletionTimestamp"] = format_time(now + grace)
        meta["deletionGracePeriodSeconds"] = grace
        self.emu.controllers.kubelet.terminating[meta["uid"]] = now + self.emu.termination_delay
        return self.store.put(PODS, pod)

    def delete_collection(self, rt: ResourceType, namespace: str | None, label_pred, field_pred,
                          options: dict, *, dry_run: bool = False) -> builtins.list[dict]:  # list: a method here
        with self.store.lock:
            out = []
            for obj in self.list(rt, namespace, label_pred, field_pred):
                meta = obj["metadata"]
                body = self.delete(rt, meta.get("namespace"), meta["name"], options, dry_run=dry_run)
                out.append(body if body.get("kind") != "Status" else obj)
            return out
