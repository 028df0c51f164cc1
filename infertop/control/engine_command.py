"""Engine command lines: build them from a profile, read them back, check overrides.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..config import ProfileConfig
from .engine_errors import InvalidArgsError

DEFAULT_MODULE = "vllm.entrypoints.openai.api_server"

#: ProfileConfig fields that become api_server flags, in command-line order
#: (after ``--model``).
FLAG_FIELDS: tuple[str, ...] = (
    "served_model_name",
    "host",
    "port",
    "max_num_seqs",
    "max_model_len",
    "gpu_memory_utilization",
    "scheduling_policy",
    "enable_prefix_caching",
    "shutdown_timeout",
    "tensor_parallel_size",
    "dtype",
    "enforce_eager",
)
#: Keys :meth:`EngineManager.set_args` / overrides accept with a known type.
ARG_TYPES: dict[str, type] = {
    "model": str,
    "served_model_name": str,
    "host": str,
    "port": int,
    "max_num_seqs": int,
    "max_model_len": int,
    "gpu_memory_utilization": float,
    "scheduling_policy": str,
    "enable_prefix_caching": bool,
    "shutdown_timeout": float,
    "tensor_parallel_size": int,
    "dtype": str,
    "enforce_eager": bool,
}
#: Profile fields that are not launch arguments (cannot be overridden).
NOT_ARGS = ("extra_args", "env", "python", "start_timeout_s", "stop_grace_s")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def entry_argv(module: str) -> list[str]:
    """``-m module``, or a script path when ``module`` ends with ``.py``."""
    if module.endswith(".py") or "/" in module:
        return [module]
    return ["-m", module]


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _fmt(key: str, value: Any) -> str:
    if key == "shutdown_timeout":  # vLLM parses it as int
        return str(int(math.ceil(float(value))))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def effective_args(profile: ProfileConfig, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The launch arguments after overrides (``model``, flag fields, extra keys); unset ones left out."""
    args: dict[str, Any] = {"model": profile.model}
    for key in FLAG_FIELDS:
        args[key] = getattr(profile, key)
    args.update(overrides or {})
    return {k: v for k, v in args.items() if v is not None}


def build_command(
    profile: ProfileConfig,
    overrides: Mapping[str, Any] | None = None,
    *,
    module: str = DEFAULT_MODULE,
) -> list[str]:
    """``<python> -m vllm.entrypoints.openai.api_server --model … …``.

    Profile fields set to ``None`` are left to vLLM's defaults; booleans
    become ``--flag`` / ``--no-flag``.  ``profile.extra_args`` follow the
    profile's flags; overridden keys (and override keys that are not
    profile fields, e.g. ``max_num_batched_tokens``) come last, so they win
    over anything in ``extra_args``.
    """
    overrides = dict(overrides or {})
    args = effective_args(profile, overrides)
    cmd = [profile.python, *entry_argv(module)]

    def add(key: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bool):
            cmd.append(_flag(key) if value else "--no-" + key.replace("_", "-"))
        else:
            cmd.extend((_flag(key), _fmt(key, value)))

    for key in ("model", *FLAG_FIELDS):
        if key not in overrides:
            add(key, args.get(key))
    cmd.extend(str(a) for a in profile.extra_args)
    for key, value in overrides.items():
        add(key, value)
    return cmd


def cmdline_value(cmd: list[str] | tuple[str, ...], key: str) -> str | None:
    """The value the last ``--key`` on ``cmd`` sets (as argparse sees it).

    Booleans read back as ``"true"``/``"false"``; ``None`` when absent.
    """
    flag, neg = _flag(key), "--no-" + key.replace("_", "-")
    value = None
    for i, tok in enumerate(cmd):
        if tok == flag:
            nxt = cmd[i + 1] if i + 1 < len(cmd) else None
            value = nxt if nxt is not None and not nxt.startswith("--") else "true"
        elif tok.startswith(flag + "="):
            value = tok[len(flag) + 1:]
        elif tok == neg:
            value = "false"
    return value


def expected_value(key: str, value: Any) -> str | None:
    """How ``value`` for ``key`` appears on the command line (see :func:`cmdline_value`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return _fmt(key, value)


def parse_value(text: str) -> Any:
    """``"8"`` → 8, ``"0.9"`` → 0.9, ``"true"`` → True, ``"none"`` → None, else the text."""
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null", "default"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``["max_num_seqs=8", "dtype=float32"]`` → ``{"max_num_seqs": 8, "dtype": "float32"}``."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgsError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip().lstrip("-").replace("-", "_")] = parse_value(value)
    return out


def _coerce(key: str, value: Any) -> Any:
    typ = ARG_TYPES.get(key)
    if value is None or typ is None:
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        raise InvalidArgsError(f"{key}: unsupported value {value!r}")
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and isinstance(parse_value(value), bool):
            return parse_value(value)
        if value in (0, 1):
            return bool(value)
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return int(value)
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return float(value)
    elif typ is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    kind = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[typ]
    raise InvalidArgsError(f"{key}: expected {kind}, got {value!r}")


def normalize_overrides(profile: ProfileConfig, changes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check and coerce override keys/values; validates the resulting profile."""
    out: dict[str, Any] = {}
    for raw_key, value in (changes or {}).items():
        key = str(raw_key).strip().lstrip("-").replace("-", "_")
        if key in NOT_ARGS:
            raise InvalidArgsError(f"{key}: not a launch argument (edit the profile instead)")
        if not _KEY_RE.match(key):
            raise InvalidArgsError(f"{raw_key!r}: not an argument name")
        out[key] = _coerce(key, value)
    known = {k: v for k, v in out.items() if k in ARG_TYPES}
    if "port" in known and known["port"] is None:
        raise InvalidArgsError("port: required")
    if "model" in known and not known["model"]:
        raise InvalidArgsError("model: required")
    for fname, msg in replace(profile, **known).validate():
        raise InvalidArgsError(f"{fname}: {msg}")
    return out


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: ours without Python path settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def connect_host(host: str) -> str:
    """Where to reach a server bound to ``host`` (wildcards → loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def _shell_quote(arg: str) -> str:
    if arg and re.fullmatch(r"[A-Za-z0-9_./:=@%+,-]+", arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def _kv(d: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _safe_args(profile: ProfileConfig, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        return effective_args(profile, overrides)
    except Exception:  # noqa: BLE001
        return {}
