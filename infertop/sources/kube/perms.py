"""Kubernetes reads: what the user may do (SelfSubjectAccessReview) and see (namespaces).

This module never imports textual or rich.
"""

from __future__ import annotations

from typing import Any

from .session import KubeSession

__all__ = [
    "can_i",
    "namespaces_list",
]


def can_i(session: KubeSession, verb: str, group: str, resource: str, subresource: str = "",
          namespace: str = "") -> bool:
    """One SelfSubjectAccessReview ("kubectl auth can-i"); raises KubeError when it cannot be asked."""
    attrs: dict[str, Any] = {"verb": verb, "group": group, "resource": resource}
    if subresource:
        attrs["subresource"] = subresource
    if namespace:
        attrs["namespace"] = namespace
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}
    doc = session.raw(session.authz.create_self_subject_access_review, body)
    return bool((doc.get("status") or {}).get("allowed"))


def namespaces_list(session: KubeSession) -> list[str]:
    """Namespace names the user may list (KubeError when forbidden)."""
    body = session.raw(session.core.list_namespace)
    return sorted(str((o.get("metadata") or {}).get("name")) for o in body.get("items") or [])
