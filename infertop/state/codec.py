"""Frozen dataclasses <-> plain JSON-able documents, for `snapshot --json`,
the flight recorder and replay.

Non-finite floats become ``None`` (JSON has no NaN/Infinity); tuples become
lists and come back as tuples, nested dataclasses are rebuilt from their type
hints, and unknown keys in a document (written by a newer infertop) are ignored.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import lru_cache
from typing import Any


def to_doc(value: Any) -> Any:
    """Plain data: dicts, lists, str, int, finite float, bool, None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_doc(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [to_doc(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_doc(v) for k, v in value.items()}
    return value


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_doc(tp: Any, doc: Any) -> Any:
    """Rebuild a value of type ``tp`` (a dataclass or a typing form) from :func:`to_doc`'s output."""
    if doc is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        for a in args:
            try:
                return from_doc(a, doc)
            except (TypeError, ValueError, AttributeError):
                continue
        return doc
    if dataclasses.is_dataclass(tp):
        if not isinstance(doc, dict):
            raise TypeError(f"{tp.__name__}: expected a mapping")
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in doc and f.init:
                kwargs[f.name] = from_doc(hints.get(f.name, Any), doc[f.name])
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return tuple(from_doc(inner, v) for v in doc)
    if origin is list:
        args = typing.get_args(tp)
        return [from_doc(args[0] if args else Any, v) for v in doc]
    if origin is dict:
        args = typing.get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        return {k: from_doc(inner, v) for k, v in doc.items()}
    if tp is float and isinstance(doc, int) and not isinstance(doc, bool):
        return float(doc)
    return doc
