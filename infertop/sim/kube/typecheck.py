"""Step one of admission: the JSON types of the fields the emulator knows
(``spec.replicas`` must be an integer, label values strings ...).

The real server fails to decode such a body: 400 on create/update (with
:func:`go_unmarshal_message`'s text), 422 on a patch.
"""

from __future__ import annotations

from typing import Any

from .errors import Cause, type_invalid

META = {
    "name": "str", "namespace": "str", "generateName": "str", "resourceVersion": "str",
    "uid": "str", "labels": "map[str]", "annotations": "map[str]", "finalizers": ["str"],
}
CONTAINER = {
    "name": "str", "image": "str", "imagePullPolicy": "str",
    "args": ["str"], "command": ["str"], "workingDir": "str",
    "env": [{"name": "str", "value": "str"}],
    "ports": [{"containerPort": "int", "hostPort": "int", "name": "str", "protocol": "str"}],
    "resources": {"limits": "map[qty]", "requests": "map[qty]"},
}
POD_SPEC = {
    "containers": [CONTAINER], "initContainers": [CONTAINER],
    "nodeName": "str", "nodeSelector": "map[str]", "restartPolicy": "str",
    "terminationGracePeriodSeconds": "int", "serviceAccountName": "str", "schedulerName": "str",
    "tolerations": [{"key": "str", "operator": "str", "value": "str", "effect": "str"}],
}
TEMPLATE = {"metadata": META, "spec": POD_SPEC}
SELECTOR = {
    "matchLabels": "map[str]",
    "matchExpressions": [{"key": "str", "operator": "str", "values": ["str"]}],
}
SCHEMAS: dict[str, dict] = {
    "Pod": {"metadata": META, "spec": POD_SPEC},
    "Deployment": {"metadata": META, "spec": {
        "replicas": "int", "minReadySeconds": "int", "revisionHistoryLimit": "int",
        "progressDeadlineSeconds": "int", "paused": "bool", "selector": SELECTOR,
        "template": TEMPLATE,
        "strategy": {"type": "str", "rollingUpdate": {"maxSurge": "intstr", "maxUnavailable": "intstr"}},
    }},
    "StatefulSet": {"metadata": META, "spec": {
        "replicas": "int", "minReadySeconds": "int", "revisionHistoryLimit": "int",
        "serviceName": "str", "podManagementPolicy": "str", "selector": SELECTOR, "template": TEMPLATE,
        "updateStrategy": {"type": "str", "rollingUpdate": {"partition": "int", "maxUnavailable": "intstr"}},
    }},
    "ReplicaSet": {"metadata": META, "spec": {
        "replicas": "int", "minReadySeconds": "int", "selector": SELECTOR, "template": TEMPLATE,
    }},
    "Service": {"metadata": META, "spec": {
        "selector": "map[str]", "type": "str", "clusterIP": "str",
        "ports": [{"port": "int", "targetPort": "intstr", "nodePort": "int", "name": "str", "protocol": "str"}],
    }},
    "ConfigMap": {"metadata": META, "data": "map[str]"},
    "Namespace": {"metadata": META},
    "Node": {"metadata": META,
             "spec": {"unschedulable": "bool", "taints": [{"key": "str", "value": "str", "effect": "str"}]},
             "status": {"capacity": "map[qty]", "allocatable": "map[qty]"}},
    "Event": {"metadata": META, "reason": "str", "message": "str", "type": "str", "count": "int",
              "involvedObject": {"kind": "str", "name": "str", "namespace": "str", "uid": "str"}},
    "HorizontalPodAutoscaler": {"metadata": META, "spec": {
        "minReplicas": "int", "maxReplicas": "int",
        "scaleTargetRef": {"kind": "str", "name": "str", "apiVersion": "str"},
    }, "status": {"currentReplicas": "int", "desiredReplicas": "int"}},
    "PodDisruptionBudget": {"metadata": META, "spec": {
        "minAvailable": "intstr", "maxUnavailable": "intstr", "selector": SELECTOR,
    }},
    "Scale": {"metadata": META, "spec": {"replicas": "int"}},
    "SelfSubjectAccessReview": {"metadata": META},
    "Eviction": {"metadata": META},
}

_GO_TYPES = {"int": "int32", "str": "string", "bool": "bool", "intstr": "IntOrString", "qty": "Quantity"}
_JSON_TYPES = {"int": "integer", "str": "string", "bool": "boolean"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _leaf_ok(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "intstr":
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    if kind == "qty":
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    raise AssertionError(kind)


def _check(value: Any, schema: Any, path: str, out: list[Cause]) -> None:
    if value is None:
        return
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            out.append(type_invalid(path, _json_type(value), f"{path} in body must be of type object"))
            return
        for key, sub in schema.items():
            if key in value:
                _check(value[key], sub, f"{path}.{key}" if path else key, out)
    elif isinstance(schema, list):
        if not isinstance(value, list):
            out.append(type_invalid(path, _json_type(value), f"{path} in body must be of type array", "array"))
            return
        for i, item in enumerate(value):
            _check(item, schema[0], f"{path}[{i}]", out)
    elif schema.startswith("map["):
        leaf = schema[4:-1]
        if not isinstance(value, dict):
            out.append(type_invalid(path, _json_type(value), f"{path} in body must be of type object"))
            return
        for k, v in value.items():
            if not _leaf_ok(leaf, v):
                out.append(type_invalid(f"{path}.{k}", _json_type(v),
                                        f"{path}.{k} in body must be of type {_JSON_TYPES.get(leaf, 'string')}",
                                        _GO_TYPES[leaf]))
    elif not _leaf_ok(schema, value):
        want = _JSON_TYPES.get(schema, _GO_TYPES[schema])
        out.append(type_invalid(path, _json_type(value), f"{path} in body must be of type {want}",
                                _GO_TYPES[schema]))


def type_errors(kind: str, obj: Any) -> list[Cause]:
    if not isinstance(obj, dict):
        return [type_invalid("", _json_type(obj), "body must be of type object")]
    out: list[Cause] = []
    _check(obj, SCHEMAS.get(kind, {"metadata": META}), "", out)
    return out


def go_unmarshal_message(kind: str, api_version: str, cause: Cause) -> str:
    """The 400 message of a create/update whose body does not decode, e.g.
    ``Deployment in version "v1" cannot be handled as a Deployment: json:
    cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32``."""
    field = cause.field
    parent = field.rsplit(".", 1)[0] if "." in field else ""
    struct = kind + (parent.split(".")[-1].split("[")[0].capitalize() if parent else "")
    got, go_type = cause.got, cause.go_type
    return (f'{kind} in version "{api_version.split("/")[-1]}" cannot be handled as a {kind}: '
            f"json: cannot unmarshal {got} into Go struct field {struct}.{field} of type {go_type}")
