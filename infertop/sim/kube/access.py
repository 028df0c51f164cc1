"""Who may do what: the bearer token every request must carry and the RBAC-like rules
(``KubeEmulator.set_rules``) enforced on every request and answered by
SelfSubjectAccessReviews. :class:`AccessControl` is a base of the emulator."""

from __future__ import annotations

from typing import Any, Iterable

from . import errors as E
from .emulator_state import EmulatorState
from .resources import ResourceType

Rule = tuple  # (verb, group, resource, subresource, namespace); see KubeEmulator.set_rules


def _matches(pattern: Any, value: str) -> bool:
    if pattern is None or pattern == "*":
        return True
    if isinstance(pattern, str):
        return pattern == value
    return "*" in pattern or value in pattern


def _normalize_rule(rule: Any) -> tuple:
    if isinstance(rule, dict):
        rule = (rule.get("verb", rule.get("verbs", "*")), rule.get("group", rule.get("apiGroups", "*")),
                rule.get("resource", rule.get("resources", "*")), rule.get("subresource"),
                rule.get("namespace", rule.get("namespaces", "*")))
    rule = tuple(rule)
    if not 3 <= len(rule) <= 5:
        raise ValueError(f"a rule is (verb, group, resource[, subresource[, namespace]]), got {rule!r}")
    verb, group, resource = rule[:3]
    sub = rule[3] if len(rule) > 3 else None
    namespace = rule[4] if len(rule) > 4 else "*"
    if sub is None:
        if isinstance(resource, str) and "/" in resource:
            resource, sub = resource.split("/", 1)
        else:
            sub = ""
    return (verb, group, resource, sub, namespace)


class AccessControl(EmulatorState):
    """Authentication and authorisation, as methods of the emulator (its ``token``,
    ``username`` and ``_rules``)."""

    def set_token(self, token: str | None) -> None:
        self.token = token

    def _authenticate(self, header: str | None) -> None:
        if self.token is None:
            return
        if header != f"Bearer {self.token}":
            raise E.unauthorized()

    def set_rules(self, rules: Iterable[Any] | None) -> None:
        """Restrict what the client may do; ``None`` allows everything (the default).

        A rule is ``(verb, group, resource[, subresource[, namespace]])``;
        each element is a string, a collection of strings, or ``"*"``/None
        for any. ``resource`` may be ``"deployments/scale"``. A rule without
        a subresource covers the main resource only (as RBAC). The namespace
        defaults to ``"*"``; cluster-scoped requests (and lists across all
        namespaces) have namespace ``""``. Dicts with the same keys are
        accepted. Enforced on every request and answered by
        selfsubjectaccessreviews."""
        self._rules = None if rules is None else [_normalize_rule(r) for r in rules]

    def allow_all(self) -> None:
        self._rules = None

    def is_allowed(self, verb: str, group: str, resource: str, subresource: str = "",
                   namespace: str = "") -> bool:
        if self._rules is None:
            return True
        values = (verb, group, resource, subresource, namespace)
        return any(all(_matches(p, v) for p, v in zip(rule, values)) for rule in self._rules)

    def _authorize(self, verb: str, rt: ResourceType, sub: str, namespace: str | None, name: str | None) -> None:
        if not self.is_allowed(verb, rt.group, rt.plural, sub, namespace or ""):
            raise E.forbidden_request(self.username, verb, rt, sub, namespace, name)
