"""Engine command lines: build them from a profile, read them back, check overrides.

Part of :mod:`infertop.control.engines`.  No UI imports.
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...config import ProfileConfig
from .errors import InvalidArgsError

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


def flag_key(tok: str) -> tuple[str, bool] | None:
    """``--max-num-seqs``, ``--max_num_seqs=8`` → ("max_num_seqs", False); ``--no-enforce-eager`` →
    ("enforce_eager", True); None for what is not a long option."""
    if not tok.startswith("--") or len(tok) < 3:
        return None
    key = tok[2:].split("=", 1)[0].replace("-", "_")
    if key.startswith("no_") and ARG_TYPES.get(key[3:]) is bool:
        return key[3:], True
    return key, False


def _items(tokens: list[str] | tuple[str, ...]) -> list[tuple[str | None, list[str]]]:
    """Split a command line into (key, tokens) items: ``--k v``, ``--k=v``, ``--flag``, or a lone token."""
    out: list[tuple[str | None, list[str]]] = []
    i = 0
    while i < len(tokens):
        tok = str(tokens[i])
        fk = flag_key(tok)
        if fk is None:
            out.append((None, [tok]))
            i += 1
            continue
        key, neg = fk
        if "=" in tok or neg or ARG_TYPES.get(key) is bool:
            out.append((key, [tok]))
            i += 1
            continue
        nxt = str(tokens[i + 1]) if i + 1 < len(tokens) else None
        if nxt is not None and not nxt.startswith("--"):
            out.append((key, [tok, nxt]))
            i += 2
        else:
            out.append((key, [tok]))
            i += 1
    return out


def _item_value(tokens: list[str]) -> str:
    tok = tokens[0]
    if "=" in tok:
        return tok.split("=", 1)[1]
    fk = flag_key(tok)
    if fk is not None and fk[1]:
        return "false"
    return tokens[1] if len(tokens) > 1 else "true"


def extra_arg_values(extra: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Known launch arguments that ``extra_args`` sets (the last occurrence of each), typed."""
    out: dict[str, Any] = {}
    for key, toks in _items(extra):
        if key is not None and key in ARG_TYPES:
            raw = _item_value(toks)
            try:
                out[key] = _coerce(key, parse_value(raw) if ARG_TYPES[key] is not str else raw)
            except InvalidArgsError:
                out[key] = raw
    return out


def effective_args(profile: ProfileConfig, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The launch arguments after ``extra_args`` and overrides (``model``, flag fields, extra keys);
    unset ones left out.  What the engine runs with: extra_args win over the profile's fields,
    overrides over both."""
    args: dict[str, Any] = {"model": profile.model}
    for key in FLAG_FIELDS:
        args[key] = getattr(profile, key)
    args.update(extra_arg_values(profile.extra_args))
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
    profile fields, e.g. ``max_num_batched_tokens``) come last.  Every
    argument appears once: a profile field that ``extra_args`` also sets is
    left out (extra_args win), and an override removes every occurrence of
    its flag in ``extra_args`` — in any spelling (``--max-num-seqs 8``,
    ``--max-num-seqs=8``, ``--max_num_seqs 8``, ``--max_num_seqs=8``).
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

    extra = _items([str(a) for a in profile.extra_args])
    in_extra = {k for k, _ in extra if k is not None}
    for field in ("model", *FLAG_FIELDS):
        if field not in overrides and field not in in_extra:
            add(field, args.get(field))
    last: dict[str, int] = {}
    for i, (key, _) in enumerate(extra):
        if key is not None and key in ARG_TYPES:
            last[key] = i
    for i, (key, toks) in enumerate(extra):
        if key is not None and (key in overrides or (key in last and last[key] != i)):
            continue  # overridden, or a known argument given again later
        cmd.extend(toks)
    for key, value in overrides.items():
        add(key, value)
    return cmd


def cmdline_value(cmd: list[str] | tuple[str, ...], key: str) -> str | None:
    """The value the last ``--key`` on ``cmd`` sets (as argparse sees it), in any spelling.

    Booleans read back as ``"true"``/``"false"``; ``None`` when absent.
    """
    value = None
    for k, toks in _items(list(cmd)):
        if k == key:
            value = _item_value(toks)
    return value


def flag_count(cmd: list[str] | tuple[str, ...], key: str) -> int:
    """How many times ``cmd`` sets ``key`` (any spelling)."""
    return sum(1 for k, _ in _items(list(cmd)) if k == key)


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


_SUPPORT_CACHE: dict[tuple[str, str], bool] = {}


def supports_shutdown_timeout(python: str, module: str) -> bool:
    """Whether the engine ``python`` would run for ``module`` accepts ``--shutdown-timeout``.

    Read from its source files without running it (starting vLLM's python
    takes seconds): a script module's own text, else ``vllm/engine/arg_utils.py``
    in the site-packages next to ``python``.  Unknown → False (an older vLLM
    would refuse the flag and not start).
    """
    key = (python, module)
    if key in _SUPPORT_CACHE:
        return _SUPPORT_CACHE[key]
    files: list[str] = []
    if module.endswith(".py") or "/" in module:
        files.append(module)
    elif module.split(".")[0] == "vllm":
        exe = python if "/" in python else (shutil.which(python) or python)
        venv = os.path.dirname(os.path.dirname(os.path.abspath(exe)))
        files += glob.glob(os.path.join(glob.escape(venv), "lib", "python3*", "site-packages", "vllm",
                                        "engine", "arg_utils.py"))
    found = False
    for f in files:
        with contextlib.suppress(OSError), open(f, encoding="utf-8", errors="replace") as fh:
            text = fh.read(4 * 1024 * 1024)
            if "--shutdown-timeout" in text or "shutdown_timeout" in text:
                found = True
                break
    _SUPPORT_CACHE[key] = found
    return found


def drain_timeout_for(profile: ProfileConfig, overrides: Mapping[str, Any] | None, module: str) -> int | None:
    """``--shutdown-timeout`` to add when the profile sets none: derived from ``stop_grace_s``.

    vLLM's default (0) aborts every in-flight request on SIGTERM; draining
    for the grace minus 10 s (for the engine's own teardown; at least 1 s)
    lets them finish before infertop escalates.  None when the profile,
    ``extra_args`` or the overrides set it, or the engine does not support it.
    """
    if profile.shutdown_timeout is not None or "shutdown_timeout" in (overrides or {}):
        return None
    if "shutdown_timeout" in extra_arg_values(profile.extra_args):
        return None
    if not supports_shutdown_timeout(profile.python, module):
        return None
    return max(1, int(profile.stop_grace_s) - 10)


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
