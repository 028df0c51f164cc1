"""Kubernetes actions: which ones the user may do (SelfSubjectAccessReviews).

:data:`PERMISSIONS` lists what each action needs; :func:`check_permissions`
asks the server once per check and :class:`Permissions` answers "may I?" per
action and namespace (unknown until asked). No UI imports.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ...sources.kube import KubeError, KubeSession, can_i

__all__ = ["KIND_ALTERNATIVE", "PERMISSIONS", "Permissions", "check_permissions"]

# What each action needs, for SelfSubjectAccessReviews: any of the
# alternatives, each a list of (verb, group, resource, subresource, cluster_scoped).
PERMISSIONS: dict[str, list[list[tuple[str, str, str, str, bool]]]] = {
    "scale": [[("patch", "apps", "deployments", "scale", False)], [("patch", "apps", "statefulsets", "scale", False)]],
    "hpa": [[("patch", "autoscaling", "horizontalpodautoscalers", "", False)]],
    "args": [[("patch", "apps", "deployments", "", False)], [("patch", "apps", "statefulsets", "", False)]],
    "restart": [[("patch", "apps", "deployments", "", False)], [("patch", "apps", "statefulsets", "", False)]],
    "delete_pod": [[("delete", "", "pods", "", False)]],
    "drain_pod": [[("patch", "", "pods", "", False), ("delete", "", "pods", "", False)]],
    "cordon": [[("patch", "", "nodes", "", True)]],
    "drain_node": [[("patch", "", "nodes", "", True), ("create", "", "pods", "eviction", True)]],
    "configmap": [[("patch", "", "configmaps", "", False)]],
}
REVIEWS_AT_ONCE = 8  # SelfSubjectAccessReviews in flight together
KIND_ALTERNATIVE = {"Deployment": 0, "StatefulSet": 1}  # which alternative of scale/args/restart a kind needs


class Permissions:
    """Answers of SelfSubjectAccessReviews, per (verb, group, resource, subresource, namespace)."""

    def __init__(self, answers: dict[tuple[str, str, str, str, str], bool] | None = None,
                 namespaces: list[str] | None = None) -> None:
        self.answers = dict(answers or {})
        self.namespaces = list(namespaces or [])

    def _check(self, check: tuple[str, str, str, str, bool], namespace: str | None) -> bool | None:
        verb, group, resource, sub, cluster = check
        if cluster:
            return self.answers.get((verb, group, resource, sub, ""))
        if namespace is not None:
            return self.answers.get((verb, group, resource, sub, namespace))
        vals = [self.answers.get((verb, group, resource, sub, ns)) for ns in self.namespaces]
        if any(v is True for v in vals):
            return True
        return None if any(v is None for v in vals) or not vals else False

    def allows(self, action: str, namespace: str | None = None, kind: str | None = None) -> bool | None:
        """True/False, or None when not known (not asked yet)."""
        alts = PERMISSIONS.get(action)
        if alts is None:
            return True
        if kind is not None and kind in KIND_ALTERNATIVE and len(alts) > 1:
            alts = [alts[KIND_ALTERNATIVE[kind]]]
        unknown = False
        for alt in alts:
            vals = [self._check(c, namespace) for c in alt]
            if all(v is True for v in vals):
                return True
            if any(v is None for v in vals) and not any(v is False for v in vals):
                unknown = True
        return None if unknown else False

    def denied(self, action: str, namespace: str | None = None, kind: str | None = None) -> str | None:
        """Why ``action`` may not run here, as "forbidden: patch deployments/scale in inference"; None if it may."""
        if self.allows(action, namespace, kind) is not False:
            return None
        alts = PERMISSIONS.get(action) or []
        if kind is not None and kind in KIND_ALTERNATIVE and len(alts) > 1:
            alts = [alts[KIND_ALTERNATIVE[kind]]]
        for alt in alts:
            for check in alt:
                if self._check(check, namespace) is False:
                    verb, _group, resource, sub, cluster = check
                    where = "" if cluster else f" in {namespace or ', '.join(self.namespaces)}"
                    return f"forbidden: {verb} {resource}{'/' + sub if sub else ''}{where}"
        return "forbidden"

    def deny(self, action: str, namespace: str | None, kind: str | None = None) -> None:
        """Remember a 403 for ``action`` (the server said no even if a review said yes)."""
        alts = PERMISSIONS.get(action) or []
        if kind is not None and kind in KIND_ALTERNATIVE and len(alts) > 1:
            alts = [alts[KIND_ALTERNATIVE[kind]]]
        for alt in alts:
            for verb, group, resource, sub, cluster in alt:
                self.answers[(verb, group, resource, sub, "" if cluster else (namespace or ""))] = False
                if namespace is None and not cluster:
                    for ns in self.namespaces:
                        self.answers[(verb, group, resource, sub, ns)] = False


def check_permissions(session: KubeSession, namespaces: list[str] | None = None) -> Permissions:
    """Ask the server (SelfSubjectAccessReview) for every check of every action; unknown on errors."""
    nss = list(namespaces or session.namespaces)
    wanted: set[tuple[str, str, str, str, str]] = set()
    for alts in PERMISSIONS.values():
        for alt in alts:
            for verb, group, resource, sub, cluster in alt:
                if cluster:
                    wanted.add((verb, group, resource, sub, ""))
                else:
                    for ns in nss:
                        wanted.add((verb, group, resource, sub, ns))
    # Concurrently: one at a time, a slow API server (3 s a request) kept every action unoffered for
    # 43 s after a reconnect. The client's connection pool is thread-safe; a few at once is polite.
    keys = sorted(wanted)
    with ThreadPoolExecutor(max_workers=max(1, min(REVIEWS_AT_ONCE, len(keys))),
                            thread_name_prefix="kube-can-i") as pool:
        results = list(pool.map(lambda key: _ask(session, key), keys))
    return Permissions({k: v for k, v in zip(keys, results) if v is not None}, nss)


def _ask(session: KubeSession, key: tuple[str, str, str, str, str]) -> bool | None:
    try:
        return can_i(session, *key)
    except KubeError:
        return None  # unknown: the dry run will tell
