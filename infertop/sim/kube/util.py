"""Small helpers shared by the API layer and the controllers."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

# the alphabet of Kubernetes generated name suffixes (no vowels, no 0/1/3)
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def format_time(t: float) -> str:
    """RFC 3339 in UTC with second precision, like metav1.Time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    import calendar

    text = text.replace("+00:00", "Z")
    base = text[:19]
    try:
        return float(calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _canonical(value: Any) -> Any:
    """Drop nulls and empty maps/lists so that equivalent templates compare equal
    whichever client serialised them."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = _canonical(v)
            if v is None or v == {} or v == []:
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"))


def template_hash(template: Any) -> str:
    """A stable pod-template-hash (10 characters of the name alphabet)."""
    digest = int.from_bytes(hashlib.sha256(canonical_json(template).encode()).digest()[:8], "big")
    chars = []
    for _ in range(10):
        digest, idx = divmod(digest, len(NAME_ALPHABET))
        chars.append(NAME_ALPHABET[idx])
    return "".join(chars)


def random_suffix(rng, n: int = 5) -> str:
    return "".join(rng.choice(NAME_ALPHABET) for _ in range(n))


def get_path(obj: Any, path: str, default: Any = None) -> Any:
    node = obj
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def find_condition(conditions: list | None, ctype: str) -> dict | None:
    for c in conditions or []:
        if c.get("type") == ctype:
            return c
    return None


def set_condition(conditions: list, ctype: str, status: str, reason: str | None, message: str | None,
                  now: str, *, probe: bool = False, update_time: bool = False) -> dict:
    """Set a condition in place, keeping lastTransitionTime when the status
    does not change (and lastUpdateTime when nothing changes); returns it."""
    cur = find_condition(conditions, ctype)
    if cur is None:
        cur = {"type": ctype}
        conditions.append(cur)
        cur["lastTransitionTime"] = now
    elif cur.get("status") != status:
        cur["lastTransitionTime"] = now
    changed = cur.get("status") != status or cur.get("reason") != reason or cur.get("message") != message
    cur["status"] = status
    if reason is not None:
        cur["reason"] = reason
    else:
        cur.pop("reason", None)
    if message is not None:
        cur["message"] = message
    else:
        cur.pop("message", None)
    if probe:
        cur.setdefault("lastProbeTime", None)
    if update_time and (changed or "lastUpdateTime" not in cur):
        cur["lastUpdateTime"] = now
    return cur


def bool_param(value: str | None) -> bool:
    """A boolean query parameter (``watch=true``, ``force=1``)."""
    return value in ("true", "True", "1")
