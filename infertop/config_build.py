"""Typed YAML: a PyYAML node tree built into dataclasses against their type hints, with errors that
name file, line and field (:class:`~infertop.config_load.ConfigError`), and numeric fields whose range is
declared on the field (:func:`bounded`) and checked for the file and the command-line flags alike."""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import MISSING, field, fields
from typing import Any

import yaml

from .config_load import ConfigError, one_line, scalar_value


def bounded(default, lo: float, hi: float, *, lo_open: bool = False, **kw):
    """A numeric field whose value must lie in [lo, hi] ((lo, hi] with ``lo_open``)."""
    return field(default=default, metadata={"range": (lo, hi, lo_open)}, **kw)


def bounds_errors(obj) -> list[tuple[str, str]]:
    """(field, why) for every bounded field of dataclass ``obj`` whose value is out of bounds."""
    errs = []
    cls: type = type(obj)
    for name, bounds in _bounded_fields(cls):
        value = getattr(obj, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            why = range_error(value, *bounds)
            if why:
                errs.append((name, why))
    return errs


@functools.cache
def _bounded_fields(cls: type) -> tuple[tuple[str, tuple], ...]:
    return tuple((f.name, f.metadata["range"]) for f in fields(cls) if "range" in f.metadata)


def field_range(cls: type, name: str) -> tuple[float, float, bool] | None:
    """(lo, hi, lo_open) of a bounded field, or None."""
    f = getattr(cls, "__dataclass_fields__")[name]
    return f.metadata.get("range")


def range_error(value: float, lo: float, hi: float, lo_open: bool = False) -> str | None:
    """Why ``value`` is not a finite number in [lo, hi] ((lo, hi] with ``lo_open``); None when it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if (value <= lo if lo_open else value < lo) or value > hi:
        return f"must be {'>' if lo_open else '>='} {lo:g} and <= {hi:g}, got {value:g}"
    return None


def check_value(cls: type, name: str, value: float) -> str | None:
    """Why ``value`` is not allowed for field ``name`` of ``cls`` (None when it is).
    Used for the file and for command-line flags alike."""
    bounds = field_range(cls, name)
    if bounds is None:
        return range_error(value, -math.inf, math.inf)  # still finite
    return range_error(value, *bounds)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _describe(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    text = repr(node.value) if node.tag.endswith(":str") else str(node.value)
    return one_line(text, 60)


def _key(knode: yaml.Node, fpath: str, path: str, loader) -> str:
    """A mapping key as text; only scalars are keys (a list as a key is an alias bomb's favourite)."""
    if not isinstance(knode, yaml.ScalarNode):
        raise ConfigError(path, _line(knode), fpath, f"a key must be a plain value, got {_describe(knode)}")
    if knode.tag == "tag:yaml.org,2002:merge":
        raise ConfigError(path, _line(knode), fpath, "merge keys (<<) are not supported: repeat the keys")
    return str(scalar_value(knode, loader, path, fpath))


def _build(tp, node: yaml.Node, fpath: str, path: str, loader):
    """Convert ``node`` to type ``tp`` or raise ConfigError naming ``fpath``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return None
        return _build(inner[0], node, fpath, path, loader)
    if origin is list:
        if not isinstance(node, yaml.SequenceNode):
            raise ConfigError(path, _line(node), fpath, f"expected a list, got {_describe(node)}")
        return [_build(args[0], item, f"{fpath}[{i}]", path, loader) for i, item in enumerate(node.value)]
    if origin is dict:
        if not isinstance(node, yaml.MappingNode):
            raise ConfigError(path, _line(node), fpath, f"expected a mapping, got {_describe(node)}")
        out = {}
        for knode, vnode in node.value:
            key = _key(knode, fpath, path, loader)
            sub = f"{fpath}.{key}" if fpath else key
            if key in out:
                raise ConfigError(path, _line(knode), sub, "duplicate key")
            out[key] = _build(args[1], vnode, sub, path, loader)
        return out
    if isinstance(tp, type) and hasattr(tp, "__dataclass_fields__"):
        return _build_dataclass(tp, node, fpath, path, loader)
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(path, _line(node), fpath, f"expected {_type_name(tp)}, got {_describe(node)}")
    value = scalar_value(node, loader, path, fpath)
    if tp in (int, float) and isinstance(value, str) and not node.style:  # plain, not quoted
        value = _plain_number(node.value, tp)  # YAML 1.1 reads `1e-3` as a string
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise ConfigError(path, _line(node), fpath, f"must be a finite number, got {_describe(node)}")
            return value
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and fpath.startswith("profiles"):
            return node.value  # as written: `env: {X: 010}` stays "010"
    raise ConfigError(path, _line(node), fpath, f"expected {_type_name(tp)}, got {_describe(node)}")


def _plain_number(text: str, tp):
    """``text`` as a number when Python reads it as one (`1e-3`, `1E6`), else ``text``."""
    if len(text) > 40:
        return text
    try:
        return int(text) if tp is int else float(text)
    except ValueError:
        return text


def _type_name(tp) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


_SCHEMA: dict[type, tuple[dict, dict]] = {}


def _schema(cls) -> tuple[dict, dict]:
    """(type hints, settable fields) of a dataclass, computed once (150 000 engines call this)."""
    got = _SCHEMA.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls)
        known = {f.name: f for f in fields(cls) if not f.metadata.get("internal")}
        got = _SCHEMA[cls] = (hints, known)
    return got


def _build_dataclass(cls, node: yaml.Node, fpath: str, path: str, loader):
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(path, _line(node), fpath, f"expected a mapping, got {_describe(node)}")
    hints, known = _schema(cls)
    kwargs = {}
    nodes: dict[str, yaml.Node] = {}
    for knode, vnode in node.value:
        key = _key(knode, fpath, path, loader)
        sub = f"{fpath}.{key}" if fpath else key
        if key not in known:
            close = _closest(key, known)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise ConfigError(path, _line(knode), sub, f"unknown key{hint}")
        if key in kwargs:
            raise ConfigError(path, _line(knode), sub, "duplicate key")
        value = _build(hints[key], vnode, sub, path, loader)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            why = check_value(cls, key, value)
            if why:
                raise ConfigError(path, _line(vnode), sub, why)
        kwargs[key] = value
        nodes[key] = vnode
    for name, f in known.items():
        if name not in kwargs and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(path, _line(node), f"{fpath}.{name}" if fpath else name, "required")
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if check is not None:
        for fname, msg in check():
            sub = f"{fpath}.{fname}" if fpath else fname
            raise ConfigError(path, _line(_locate(nodes, fname) or node), sub, msg)
    return obj


def _locate(nodes: dict[str, yaml.Node], fname: str) -> yaml.Node | None:
    """The node of ``key`` or ``key[i]`` (a list item), for the line of an error."""
    key, _, index = fname.partition("[")
    node = nodes.get(key)
    if node is not None and index and isinstance(node, yaml.SequenceNode):
        i = int(index.rstrip("]"))
        node = node.value[i] if i < len(node.value) else node
    return node


def _closest(key: str, known) -> str | None:
    import difflib

    if len(key) > 64:  # difflib is quadratic; nobody misspells a key that long
        return None
    got = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return got[0] if got else None


def build(cls: type, node: yaml.Node, path: str, loader: Any) -> Any:
    """``node`` (the document's root) as an instance of dataclass ``cls``; raises ConfigError naming
    ``path``, the line and the field."""
    return _build(cls, node, "", path, loader)
