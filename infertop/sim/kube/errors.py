"""API errors, answered as ``Status`` objects shaped like the real API's."""

from __future__ import annotations

import json
from typing import Any

from .resources import ResourceType


def go_value(value: Any) -> str:
    """Roughly how the API server prints a value in an error message."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


class Cause:
    """One ``field.Error``: ``reason`` is the StatusCause reason."""

    _PREFIX = {
        "FieldValueRequired": "Required value",
        "FieldValueInvalid": "Invalid value",
        "FieldValueTypeInvalid": "Invalid value",
        "FieldValueForbidden": "Forbidden",
        "FieldValueNotSupported": "Unsupported value",
        "FieldValueDuplicate": "Duplicate value",
        "FieldValueTooLong": "Too long",
    }

    # what a type error decoded and into which Go type (type_invalid sets them): the 400 "cannot unmarshal"
    got: str = "value"
    go_type: str = "object"

    def __init__(self, field: str, reason: str, detail: str = "", value: Any = ...):
        self.field = field
        self.reason = reason
        prefix = self._PREFIX.get(reason, "Invalid value")
        if value is not ...:
            prefix = f"{prefix}: {go_value(value)}"
        self.message = f"{prefix}: {detail}" if detail else prefix

    @property
    def is_type_error(self) -> bool:
        return self.reason == "FieldValueTypeInvalid"

    def as_dict(self) -> dict:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def __repr__(self) -> str:
        return f"Cause({self})"


def required(field: str, detail: str = "") -> Cause:
    return Cause(field, "FieldValueRequired", detail)


def invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause(field, "FieldValueInvalid", detail, value)


def type_invalid(field: str, got: str, detail: str, go_type: str = "object") -> Cause:
    cause = Cause(field, "FieldValueTypeInvalid", detail, got)
    cause.got, cause.go_type = got, go_type  # for the 400 "cannot unmarshal" message
    return cause


def forbidden(field: str, detail: str) -> Cause:
    return Cause(field, "FieldValueForbidden", detail)


def not_supported(field: str, value: Any, supported: list[str]) -> Cause:
    detail = "supported values: " + ", ".join(json.dumps(s) for s in supported)
    return Cause(field, "FieldValueNotSupported", detail, value)


def duplicate(field: str, value: Any) -> Cause:
    return Cause(field, "FieldValueDuplicate", "", value)


class ApiError(Exception):
    """An error answer: ``status()`` is the Status body, ``code`` the HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(rt: ResourceType | None, name: str | None, kind: str | None = None) -> dict:
    d: dict = {}
    if name:
        d["name"] = name
    if rt is not None and rt.group:
        d["group"] = rt.group
    if rt is not None:
        d["kind"] = kind or rt.plural
    return d


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                    {"name": namespace, "kind": "namespaces"})


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
                    _details(rt, name))


def invalid_object(rt: ResourceType | None, kind: str, name: str, causes: list[Cause]) -> ApiError:
    group = rt.group if rt is not None else ""
    qualified = f"{kind}.{group}" if group else kind
    if len(causes) == 1:
        summary = str(causes[0])
    else:
        summary = "[" + ", ".join(str(c) for c in causes) + "]"
    details = {"name": name, "kind": kind, "causes": [c.as_dict() for c in causes]}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """The API server's answer to a resourceVersion it has not reached (504, retry after 1 s)."""
    return ApiError(504, "Timeout", f"Too large resource version: {requested}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                     "retryAfterSeconds": 1}, {"Retry-After": "1"})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
                    {})


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415, "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type}) - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
        "application/strategic-merge-patch+json",
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden_request(user: str, verb: str, rt: ResourceType, subresource: str, namespace: str | None,
                      name: str | None) -> ApiError:
    resource = f"{rt.plural}/{subresource}" if subresource else rt.plural
    subject = f'{rt.group_resource} "{name}"' if name else rt.group_resource
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
               f'in API group "{rt.group}" {scope}')
    return ApiError(403, "Forbidden", message, _details(rt, name))
