"""The three PATCH flavours of the Kubernetes API, on plain JSON values.

* :func:`merge_patch` — JSON Merge Patch, RFC 7386
  (``application/merge-patch+json``): maps merge recursively, ``null``
  deletes a key, every list is replaced wholesale.
* :func:`strategic_merge_patch` — Kubernetes strategic merge patch
  (``application/strategic-merge-patch+json``): like a merge patch, but
  lists with a *merge key* in the Kubernetes schema (containers by
  ``name``, conditions by ``type``, container ports by ``containerPort``
  ...) are merged element by element; ``$patch: delete`` /
  ``$patch: replace`` / ``$deleteFromPrimitiveList/<f>`` /
  ``$retainKeys`` directives are honoured and ``$setElementOrder/<f>``
  is accepted (and ignored).
* :func:`json_patch` — JSON Patch, RFC 6902 (``application/json-patch+json``):
  add/remove/replace/move/copy/test with RFC 6901 pointers, ``-`` appends.

Errors raise :class:`PatchError`; ``test_failed`` tells a failed ``test``
operation apart so the server can answer like the real one.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    def __init__(self, message: str, *, invalid: bool = True):
        super().__init__(message)
        # invalid=True: the patch was well-formed but cannot apply (422);
        # False: the patch document itself is malformed (400).
        self.invalid = invalid


# ---------------------------------------------------------------- RFC 7386

def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch; neither argument is modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ------------------------------------------------- strategic merge patch

# Field name -> merge key, from the ``patchMergeKey`` tags of the Kubernetes
# types. Lists of these fields merge element-wise; other lists are replaced.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "addresses": "type",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "ownerReferences": "uid",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
    "readinessGates": "conditionType",
    "schedulingGates": "name",
    "images": "names",
}
# Lists of scalars with patchStrategy "merge": patched as sets.
MERGE_PRIMITIVE_LISTS = frozenset({"finalizers"})


def _merge_key_for(field: str, items: list) -> str | None:
    if field == "ports":
        # container ports merge on containerPort, service ports on port
        for item in items:
            if isinstance(item, dict):
                if "containerPort" in item:
                    return "containerPort"
                if "port" in item:
                    return "port"
        return "containerPort"
    return MERGE_KEYS.get(field)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch; neither argument is modified."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object", invalid=False)
    return _smp_map(target if isinstance(target, dict) else {}, patch)


def _smp_map(original: dict, patch: dict) -> dict:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return {}
    if directive is not None and directive != "merge":
        raise PatchError(f"unknown patch type: {directive!r}", invalid=False)

    result = copy.deepcopy(original)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            result[key] = _smp_map(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, current if isinstance(current, list) else [], value)
        else:
            result[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(field: str, original: list, patch: list) -> list:
    if field in MERGE_PRIMITIVE_LISTS:
        result = list(original)
        for item in patch:
            if item not in result:
                result.append(copy.deepcopy(item))
        return result

    # an element {"$patch": "replace"} replaces the whole list
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch
                if not (isinstance(p, dict) and p.get("$patch") == "replace")]

    key = _merge_key_for(field, original + patch)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return [_strip_directives(p) for p in patch]

    result = copy.deepcopy(original)
    for item in patch:
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        match = next(
            (i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if match is not None:
                del result[match]
            continue
        if match is None:
            result.append(_strip_directives(item))
        else:
            result[match] = _smp_map(result[match], item)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return copy.deepcopy(value)


# ---------------------------------------------------------------- RFC 6902

def _parse_pointer(pointer: Any) -> list[str]:
    if not isinstance(pointer, str):
        raise PatchError(f"JSON pointer must be a string, got {pointer!r}", invalid=False)
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {pointer!r}", invalid=False)
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _index(token: str, length: int, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index: {token!r}")
    idx = int(token)
    if idx > length or (idx == length and not allow_end):
        raise PatchError(f"array index {idx} out of bounds")
    return idx


def _walk(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"doc is missing path: {pointer!r}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), allow_end=False)]
        else:
            raise PatchError(f"doc is missing path: {pointer!r}")
    return node


def _get(doc: Any, pointer: Any) -> Any:  # pointer: the client's JSON (_parse_pointer checks it)
    return _walk(doc, _parse_pointer(pointer), pointer)


def _add(doc: Any, pointer: Any, value: Any) -> Any:
    tokens = _parse_pointer(pointer)
    if not tokens:
        return copy.deepcopy(value)
    parent = _walk(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), allow_end=True), copy.deepcopy(value))
    else:
        raise PatchError(f"doc is missing path: {pointer!r}")
    return doc


def _remove(doc: Any, pointer: Any) -> tuple[Any, Any]:
    tokens = _parse_pointer(pointer)
    if not tokens:
        raise PatchError("cannot remove the document root")
    parent = _walk(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"unable to remove nonexistent key: {last}: missing value")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(last, len(parent), allow_end=False))
    raise PatchError(f"doc is missing path: {pointer!r}")


def json_patch(target: Any, operations: Any) -> Any:
    """Apply a JSON patch (a list of operations); ``target`` is not modified."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a JSON array of operations", invalid=False)
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError(f"invalid json patch operation: {op!r}", invalid=False)
        kind = op["op"]
        path = op.get("path")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{kind} operation does not contain a value", invalid=False)
        if kind == "add":
            doc = _add(doc, path, op["value"])
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            tokens = _parse_pointer(path)
            if not tokens:
                doc = copy.deepcopy(op["value"])
                continue
            _get(doc, path)  # must exist
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, op["value"])
        elif kind == "move":
            from_path = op.get("from")
            if isinstance(from_path, str) and isinstance(path, str) and path.startswith(from_path + "/"):
                raise PatchError("a value cannot be moved into one of its children")
            doc, value = _remove(doc, from_path)
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, _get(doc, op.get("from")))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"unexpected kind: {kind!r}", invalid=False)
    return doc
