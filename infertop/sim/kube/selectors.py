"""Label selectors and field selectors, parsed from query strings.

Label selector grammar (as ``k8s.io/apimachinery/pkg/labels``): comma
separated requirements, each one of ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists), ``!k`` (does not
exist), ``k>n``/``k<n``. Field selectors: ``f=v``, ``f==v``, ``f!=v``
joined by commas, over a per-kind set of supported fields.
"""

from __future__ import annotations

import re
from typing import Callable

from .resources import ResourceType


class SelectorError(ValueError):
    pass


_KEY_RE = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unable to parse requirement: unbalanced parenthesis in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise SelectorError(f"unable to parse requirement: unbalanced parenthesis in {text!r}")
    parts.append("".join(cur))
    return parts


def _check_key(key: str) -> str:
    if not _KEY_RE.match(key):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise SelectorError(f"unable to parse requirement: invalid label value {value!r}")
    return value


Matcher = Callable[[dict], bool]

_SET_RE = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^=!<>\s]+)\s*(==|!=|=|>|<)\s*(\S*)\s*$")


def parse_label_selector(text: str | None) -> Matcher:
    """Return a predicate over a labels dict."""
    if not text or not text.strip():
        return lambda labels: True
    reqs: list[Callable[..., bool]] = []  # matchers with their operands bound as defaults
    for raw in _split_top(text):
        term = raw.strip()
        if not term:
            raise SelectorError(f"unable to parse requirement: empty term in {text!r}")
        m = _SET_RE.match(term)
        if m:
            key = _check_key(m.group(1))
            values = {_check_value(v.strip()) for v in m.group(3).split(",")}
            if m.group(2) == "in":
                reqs.append(lambda l, k=key, vs=values: l.get(k) in vs)
            else:
                reqs.append(lambda l, k=key, vs=values: l.get(k) not in vs)
            continue
        if term.startswith("!"):
            key = _check_key(term[1:].strip())
            reqs.append(lambda l, k=key: k not in l)
            continue
        m = _OP_RE.match(term)
        if m:
            key, op, value = _check_key(m.group(1)), m.group(2), m.group(3)
            if op in ("=", "=="):
                value = _check_value(value)
                reqs.append(lambda l, k=key, v=value: l.get(k) == v)
            elif op == "!=":
                value = _check_value(value)
                reqs.append(lambda l, k=key, v=value: l.get(k) != v)
            else:
                try:
                    bound = int(value)
                except ValueError:
                    raise SelectorError(
                        "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer"
                    ) from None

                def cmp(l, k=key, b=bound, gt=(op == ">")):
                    try:
                        n = int(l[k])
                    except (KeyError, ValueError):
                        return False
                    return n > b if gt else n < b

                reqs.append(cmp)
            continue
        key = _check_key(term)
        reqs.append(lambda l, k=key: k in l)
    return lambda labels: all(r(labels or {}) for r in reqs)


def selector_from_label_selector(selector: dict | None) -> Matcher:
    """A predicate for a ``metav1.LabelSelector`` (matchLabels + matchExpressions).

    An empty selector matches everything; ``None`` matches nothing (as for
    a PDB or a Service without a selector)."""
    if selector is None:
        return lambda labels: False
    match_labels = dict(selector.get("matchLabels") or {})
    exprs = list(selector.get("matchExpressions") or [])

    def pred(labels: dict) -> bool:
        labels = labels or {}
        for k, v in match_labels.items():
            if labels.get(k) != v:
                return False
        for e in exprs:
            key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
            if op == "In" and labels.get(key) not in values:
                return False
            if op == "NotIn" and key in labels and labels[key] in values:
                return False
            if op == "Exists" and key not in labels:
                return False
            if op == "DoesNotExist" and key in labels:
                return False
        return True

    return pred


def format_label_selector(selector: dict | None) -> str:
    """``metav1.FormatLabelSelector``: the string form used by Scale.status.selector."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), sorted(e.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def _field_value(obj: dict, path: str) -> str:
    if path == "source":  # events: source is the component
        node = (obj.get("source") or {}).get("component")
    else:
        node = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def parse_field_selector(text: str | None, rt: ResourceType) -> Callable[[dict], bool]:
    """Return a predicate over whole objects; unsupported fields raise."""
    if not text or not text.strip():
        return lambda obj: True
    allowed = {"metadata.name", "metadata.namespace", *rt.field_labels}
    reqs = []
    for raw in _split_top(text):
        term = raw.strip()
        m = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", term)
        if not m:
            raise SelectorError(f"invalid selector: {text!r}; can't understand {term!r}")
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in allowed:
            raise SelectorError(f'field label not supported: {field}')
        if op == "!=":
            reqs.append(lambda o, f=field, v=value: _field_value(o, f) != v)
        else:
            reqs.append(lambda o, f=field, v=value: _field_value(o, f) == v)
    return lambda obj: all(r(obj) for r in reqs)
