"""The API-keys file ({key: class}) and the weights file ({class: {weight, max_wait_s}}),
and a cheap change check for both (a mounted ConfigMap swaps a symlink: stat follows it)."""

from __future__ import annotations

import math
import os

from ..config_load import ConfigError, Limits, read_file

MAX_FILE_BYTES = 1024 * 1024
# A keys file of 50 000 keys is 100 000 nodes; an alias bomb expands past the cap and is refused.
FILE_LIMITS = Limits(max_bytes=MAX_FILE_BYTES, max_nodes=1_000_000)
WEIGHT_KEYS = ("weight", "max_wait_s")


def _read_yaml(path: str) -> object:
    """The file's data, read with limits; ValueError with one line naming file and line."""
    try:
        return read_file(path, FILE_LIMITS)
    except ConfigError as e:
        if e.message.startswith("invalid"):  # the parser's words can quote the text: never a key
            where = f":{e.line}" if e.line else ""
            raise ValueError(f"{e.path}{where}: not valid YAML") from None
        raise ValueError(str(e)) from None


def load_api_keys(path: str) -> dict[str, str]:
    """{API key: class}. Raises ValueError with a one-line reason (never quoting a key)."""
    doc = _read_yaml(path)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping of API key to class")
    out = {}
    for i, (k, v) in enumerate(doc.items()):
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"{path}: entry {i + 1}: key and class must be strings")
        out[k] = v
    return out


def load_weights(path: str, classes: set[str]) -> dict[str, dict[str, float]]:
    """{class: {weight?, max_wait_s?}} checked against the known classes; raises ValueError."""
    doc = _read_yaml(path)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping of class to {{weight, max_wait_s}}")
    out: dict[str, dict[str, float]] = {}
    for name, spec in doc.items():
        if name not in classes:
            raise ValueError(f"{path}: unknown class {str(name)[:60]!r} (classes: {', '.join(sorted(classes))})")
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: {name}: expected a mapping with weight and/or max_wait_s")
        for key, v in spec.items():
            if key not in WEIGHT_KEYS:
                raise ValueError(f"{path}: {name}: unknown key {str(key)[:60]!r} (allowed: weight, max_wait_s)")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
                raise ValueError(f"{path}: {name}.{key}: must be a number > 0")
        out[name] = {k: float(v) for k, v in spec.items()}
    return out


class FileWatch:
    """``changed()`` is True the first time and whenever the file's identity, size or mtime moves."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._sig: tuple | None = None

    def changed(self) -> bool:
        try:
            st = os.stat(self.path)
            sig: tuple = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            sig = ("missing",)
        if sig == self._sig:
            return False
        self._sig = sig
        return True
