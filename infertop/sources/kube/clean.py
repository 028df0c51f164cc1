"""Cleaning of Kubernetes views: the cluster's counterpart of :mod:`sanitize`.

Object names, Event messages, condition texts and container args are text
that many tenants influence (a container's termination message), so every
string of a view leaves here as :func:`sanitize.plain_text` (an ESC byte is
shown as ``\\x1b``, never sent to the terminal). Counts above
``MAX_COUNT`` (a 309-digit replica count) are not data: they become the
field's "no data" default.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance  # the stubs' "any dataclass instance" (no runtime module)

from ..sanitize import plain_text

MAX_TEXT_CHARS = 2000  # an Event message or condition message shown in the detail area
MAX_COUNT = 1_000_000  # no replica, restart or GPU count gets near this
MAX_FLOAT = 1e15

T = TypeVar("T", bound="DataclassInstance")  # a view: a frozen dataclass


def _default(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    return None


def _clean_value(v: Any, default: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, str):
        return plain_text(v, MAX_TEXT_CHARS)
    if isinstance(v, int):
        return v if abs(v) <= MAX_COUNT else default
    if isinstance(v, float):
        return v if math.isfinite(v) and abs(v) <= MAX_FLOAT else default
    if isinstance(v, tuple):
        return tuple(_clean_value(x, None) for x in v)
    if isinstance(v, dict):
        return {plain_text(k, MAX_TEXT_CHARS): _clean_value(x, None) for k, x in v.items()}
    if is_dataclass(v) and not isinstance(v, type):  # an instance (a view), not a dataclass itself
        return clean_view(v)
    return v


_SCALARS: dict[str, type | tuple[type, ...]] = {
    "str": str, "str | None": str, "int": int, "int | None": int, "float | None": (int, float),
    "float": (int, float), "bool": bool}


def _typed(v: Any, type_name: str, default: Any) -> Any:
    """``v`` when it has the field's declared type; else the field's "no data" default."""
    want = _SCALARS.get(type_name)
    if want is None or v is None or v is default:
        return v
    if isinstance(v, bool) and want is not bool:
        return default
    return v if isinstance(v, want) else default


def _views_inside(v: Any) -> bool:
    return isinstance(v, tuple) and bool(v) and is_dataclass(v[0])


def clean_view(view: T, *, deep: bool = True) -> T:
    """``view`` with every string made plain text and absurd numbers made "no data".

    ``deep=False`` leaves tuples of views alone (each view was cleaned as it was built).
    """
    changes = {}
    for f in fields(view):
        old = getattr(view, f.name)
        if not deep and _views_inside(old):
            continue
        new = _clean_value(_typed(old, str(f.type), _default(f)), _default(f))
        if new is not old and new != old:
            changes[f.name] = new
    return replace(view, **changes) if changes else view
