"""InferenceObjective ``spec.priority`` through the Kubernetes custom-objects API.

The resource lives in ``inference.networking.x-k8s.io/v1alpha2`` (Gateway API
Inference Extension) or ``llm-d.ai/v1alpha2`` (newer llm-d);
:func:`find_objectives` says which one the cluster serves and whether this
user may patch it — the action is absent when neither is installed or the
patch is not permitted. :class:`ObjectivePriority` is a kind of the one action
pipeline: fresh read → diff → server dry run → read again just before the
write: a priority changed since is a conflict (nothing sent: plan again), else
a merge patch of ``spec.priority`` carrying *that* read's resourceVersion (a
409 from a change elsewhere in the object reads and checks again) → read back.
Blocking (thread workers).
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass
from typing import Any


from ..sources.kube.perms import can_i
from ..sources.kube.session import KubeError, KubeSession
from ..sources.sanitize import plain_text
from .pipeline import ActionRefused, Outcome, Preflight, Progress, ProgressFn, Review

GROUPS = (("inference.networking.x-k8s.io", "v1alpha2"), ("llm-d.ai", "v1alpha2"))
PLURAL = "inferenceobjectives"
MERGE = "application/merge-patch+json"
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
WRITE_TRIES = 5


def _shown(priority: Any) -> str:
    return "unset" if priority is None else plain_text(priority, 20)


@dataclass(frozen=True)
class ObjectiveApi:
    """Where InferenceObjectives are served on this cluster."""

    group: str
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@dataclass(frozen=True)
class Objective:
    namespace: str
    name: str
    priority: int | None
    pool: str | None


def find_objectives(session: KubeSession, namespace: str) -> tuple[ObjectiveApi | None, str]:
    """(the API, "") when InferenceObjectives are served and patchable in ``namespace``; else (None, why)."""
    custom = _custom_objects_api(session.api_client)
    served = None
    for group, version in GROUPS:
        try:
            doc = session.raw(custom.get_api_resources, group, version)
        except KubeError as e:
            if e.status == 404:
                continue
            return None, f"cannot ask the cluster for InferenceObjectives: {e}"
        if any(isinstance(r, dict) and r.get("name") == PLURAL for r in doc.get("resources") or []):
            served = ObjectiveApi(group, version)
            break
    if served is None:
        return None, "the InferenceObjective resource type is not installed on this cluster"
    try:
        allowed = can_i(session, "patch", served.group, PLURAL, "", namespace)
    except KubeError as e:
        return None, f"cannot check the permission to patch InferenceObjectives: {e}"
    if not allowed:
        return None, f"not permitted to patch InferenceObjectives in namespace {namespace}"
    return served, ""


def _objective(doc: dict, namespace: str) -> Objective:
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    p = spec.get("priority")
    pool = (spec.get("poolRef") or {}).get("name") if isinstance(spec.get("poolRef"), dict) else None
    return Objective(plain_text(meta.get("namespace") or namespace), plain_text(meta.get("name") or "?"),
                     p if isinstance(p, int) and not isinstance(p, bool) else None,
                     plain_text(pool) if isinstance(pool, str) else None)


def list_objectives(session: KubeSession, api: ObjectiveApi, namespace: str) -> list[Objective]:
    custom = _custom_objects_api(session.api_client)
    doc = session.raw(custom.list_namespaced_custom_object, api.group, api.version, namespace, PLURAL)
    return sorted((_objective(o, namespace) for o in doc.get("items") or [] if isinstance(o, dict)),
                  key=lambda o: (-(o.priority or 0), o.name))


class ObjectivePriority:
    """Set one InferenceObjective's ``spec.priority``."""

    abortable = False
    timeout_s: float | None = 30.0

    def __init__(self, session: KubeSession, api: ObjectiveApi, namespace: str, name: str, priority: int) -> None:
        lo, hi = PRIORITY_RANGE
        if not lo <= priority <= hi:
            raise ActionRefused(f"priority must be an integer from {lo} to {hi}")
        self.session, self.api, self.namespace, self.name, self.priority = session, api, namespace, name, priority
        self.custom = _custom_objects_api(session.api_client)
        self.action = "kube.objective_priority"
        self.target = f"InferenceObjective {namespace}/{name}"
        self.object_key = f"objective:{namespace}/{name}"
        self.old: int | None = None
        self.raw_old: Any = None  # spec.priority exactly as read: the write is refused if it changed since
        self.resource_version: str | None = None

    def _read(self) -> dict:
        try:
            return self.session.raw(self.custom.get_namespaced_custom_object, self.api.group, self.api.version,
                                    self.namespace, PLURAL, self.name)
        except KubeError as e:
            raise ActionRefused(str(e), e.status) from None

    def _patch(self, *, dry_run: bool, resource_version: str | None = None) -> dict:
        body: dict[str, Any] = {"spec": {"priority": self.priority}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        kw: dict[str, Any] = {"_content_type": MERGE}
        if dry_run:
            kw["dry_run"] = "All"
        return self.session.raw(self.custom.patch_namespaced_custom_object, self.api.group, self.api.version,
                                self.namespace, PLURAL, self.name, body, **kw)

    def plan(self) -> Review:
        doc = self._read()
        obj = _objective(doc, self.namespace)
        self.resource_version = (doc.get("metadata") or {}).get("resourceVersion")
        self.raw_old = (doc.get("spec") or {}).get("priority")
        self.old = obj.priority
        if self.old == self.priority:
            raise ActionRefused(f"{self.target} already has priority {self.priority}: nothing to change")
        old = "unset (0)" if self.old is None else str(self.old)
        diff = "\n".join(difflib.unified_diff([f"spec.priority: {old}"], [f"spec.priority: {self.priority}"],
                                              f"{self.name} (now)", f"{self.name} (after)", lineterm=""))
        notes = [f"{self.api.api_version}, pool {obj.pool or '—'}",
                 "requests naming this objective are queued in its new priority band (higher is served first)"]
        return Review(f"Priority of InferenceObjective {self.namespace}/{self.name}", f"priority {old} → {self.priority}",
                      diff, tuple(notes))

    def preflight(self) -> Preflight:
        try:
            self._patch(dry_run=True)
        except KubeError as e:
            return Preflight(False, str(e), e.status)
        return Preflight(True, "the API server accepts the change (dry run)")

    def _write(self) -> Outcome | None:
        """The guarded write; an Outcome when it did not happen."""
        err: KubeError | None = None
        for _ in range(WRITE_TRIES):
            try:
                live = self._read()
            except ActionRefused as e:
                return Outcome("failed", f"nothing was sent: {e}", e.status)
            now = (live.get("spec") or {}).get("priority")
            if now != self.raw_old:
                return Outcome("conflict", f"{self.target} changed since it was read (spec.priority "
                                           f"{_shown(self.raw_old)} → {_shown(now)}): nothing was sent", 409)
            try:
                self._patch(dry_run=False, resource_version=(live.get("metadata") or {}).get("resourceVersion"))
                return None
            except KubeError as e:
                if e.status != 409:
                    return Outcome("failed", str(e), e.status)
                err = e  # changed elsewhere between the read and the write: read and check again
        assert err is not None
        return Outcome("conflict", str(err), err.status)

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        failed = self._write()
        if failed is not None:
            return failed
        progress(Progress("patched; reading it back…", 0.5))
        try:
            got = _objective(self._read(), self.namespace).priority
        except ActionRefused as e:
            return Outcome("failed", f"patched; reading it back failed: {e}", e.status)
        if got != self.priority:
            return Outcome("failed", f"the API server reports priority {got} after the patch")
        return Outcome("ok", f"priority {self.old if self.old is not None else 'unset'} → {got}")

    def audit_details(self) -> dict[str, Any]:
        return {"old": {"priority": self.old}, "new": {"priority": self.priority},
                "summary": f"priority {self.old} → {self.priority}", "server": self.session.server,
                "context": self.session.context}


def _custom_objects_api(api_client: Any) -> Any:
    from kubernetes.client import CustomObjectsApi  # the client is imported when a cluster is used

    return CustomObjectsApi(api_client)
