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

from .text import plain_text

# A document is a file someone may hand over: its text is cleaned as live data
# is (an ESC shown as the four characters \x1b), numbers are finite and bounded.
_MAX_TEXT_CHARS = 4096  # a log line or a message; labels are cut again where shown
_MAX_INT = 2**63 - 1


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
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        for a in members:
            try:
                return from_doc(a, doc)
            except (TypeError, ValueError, AttributeError):
                continue
        return _clean_leaf(doc)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
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
        return {plain_text(k, _MAX_TEXT_CHARS): from_doc(inner, v) for k, v in doc.items()}
    if tp is float and isinstance(doc, int) and not isinstance(doc, bool):
        return _clean_leaf(float(doc)) if abs(doc) <= _MAX_INT else None
    return _clean_leaf(doc)


def _clean_leaf(doc: Any) -> Any:
    """A leaf of a document made safe: str escaped, float finite, int bounded (else ``None``)."""
    if isinstance(doc, str):
        return plain_text(doc, _MAX_TEXT_CHARS)
    if isinstance(doc, bool):
        return doc
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, int):
        return doc if abs(doc) <= _MAX_INT else None
    if isinstance(doc, list):
        return [_clean_leaf(v) for v in doc]
    if isinstance(doc, dict):
        return {plain_text(k, _MAX_TEXT_CHARS): _clean_leaf(v) for k, v in doc.items()}
    return doc
