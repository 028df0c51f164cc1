"""YAML configuration: typed sections, and errors that name file, line and field.

The schema is the dataclasses below; the loader walks PyYAML's node tree
(which keeps line numbers) against their type hints, so an unknown key, a
wrong type or a bad value is reported as one line::

    /home/me/.config/infertop/config.yaml:7: engines[1].url: expected a string, got 8000
"""

from __future__ import annotations

import os
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

import yaml


class ConfigError(Exception):
    """A configuration problem, printable as one line."""

    def __init__(self, path: str, line: int | None, field_path: str, message: str) -> None:
        self.path, self.line, self.field_path, self.message = path, line, field_path, message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {field_path + ': ' if field_path else ''}{message}")


@dataclass
class EngineConfig:
    """A vLLM engine to watch."""

    url: str
    name: str = ""
    max_num_seqs: int | None = None  # enables running ÷ max_num_seqs
    timeout_s: float = 2.0

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if not self.url.startswith(("http://", "https://")):
            errs.append(("url", f"must start with http:// or https://, got {self.url!r}"))
        if self.timeout_s <= 0:
            errs.append(("timeout_s", "must be > 0"))
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            errs.append(("max_num_seqs", "must be >= 1"))
        return errs


@dataclass
class SloConfig:
    """Latency targets (seconds); interactive-chat budgets by default."""

    ttft_p99_s: float = 2.0
    itl_p95_s: float = 0.040
    e2e_p99_s: float = 5.0
    queue_p99_s: float = 1.0
    kv_cache_pct: float = 90.0


@dataclass
class PrometheusConfig:
    url: str | None = None
    timeout_s: float = 5.0
    token_file: str | None = None


@dataclass
class KubeConfig:
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)
    selector: str = ""
    vllm_container: str = ""
    enabled: bool | None = None  # None: on when kubeconfig, context or namespaces is set
    metrics_port: int | None = None  # the engines' /metrics port on each pod (default: first containerPort)
    timeout_s: float = 10.0  # per API request
    watch: bool = True  # informers (list + watch); false: list everything every refresh_s
    refresh_s: float = 2.0  # how often the Cluster pane repaints (and polls, without watch)
    configmap: str = ""  # the ConfigMap `M` offers first (e.g. the gateway's priority weights)
    drain_then: str = "delete"  # after an inference-aware pod drain: delete or scale-down
    drain_timeout_s: float = 600.0
    node_drain_timeout_s: float = 900.0
    rollout_timeout_s: float = 900.0
    stuck_after_s: float = 30.0  # a rollout blocked this long (ImagePullBackOff, no GPU…) is reported stuck
    eviction_retry_s: float = 5.0  # wait after a 429 from a PodDisruptionBudget
    follow_poll_s: float = 0.5  # how often a running action re-reads what it follows (2 API calls)

    @property
    def configured(self) -> bool:
        if self.enabled is not None:
            return self.enabled
        return bool(self.kubeconfig or self.context or self.namespaces)

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if self.drain_then not in ("delete", "scale-down"):
            errs.append(("drain_then", "must be delete or scale-down"))
        for name in ("timeout_s", "refresh_s", "drain_timeout_s", "node_drain_timeout_s", "rollout_timeout_s",
                     "eviction_retry_s", "follow_poll_s"):
            if getattr(self, name) <= 0:
                errs.append((name, "must be > 0"))
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            errs.append(("metrics_port", "must be 1..65535"))
        return errs


@dataclass
class GatewayConfig:
    url: str | None = None
    token_file: str | None = None


@dataclass
class GpuConfig:
    nvml: bool = True
    dcgm: list[str] = field(default_factory=list)


@dataclass
class ProfileConfig:
    """How to launch a local vLLM engine."""

    model: str
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    scheduling_policy: str | None = None
    enable_prefix_caching: bool | None = None
    shutdown_timeout: float | None = None
    tensor_parallel_size: int | None = None
    dtype: str | None = None
    enforce_eager: bool | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    start_timeout_s: float = 300.0
    stop_grace_s: float = 30.0

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if not 1 <= self.port <= 65535:
            errs.append(("port", "must be 1..65535"))
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            errs.append(("max_num_seqs", "must be >= 1"))
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            errs.append(("gpu_memory_utilization", "must be in (0, 1]"))
        if self.scheduling_policy not in (None, "fcfs", "priority"):
            errs.append(("scheduling_policy", "must be fcfs or priority"))
        return errs


@dataclass
class Config:
    """The whole file. Every section is optional."""

    engines: list[EngineConfig] = field(default_factory=list)
    refresh_s: float = 1.0
    window_s: float = 60.0
    history_s: float = 3600.0
    theme: str = "infertop-dark"
    read_only: bool = False
    audit_log: str | None = None
    slo: SloConfig = field(default_factory=SloConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    kube: KubeConfig = field(default_factory=KubeConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    profiles: dict[str, ProfileConfig] = field(default_factory=dict)
    # Where it came from: the path, or None when running on defaults.
    source: str | None = field(default=None, metadata={"internal": True})

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if self.refresh_s < 0.1:
            errs.append(("refresh_s", "must be >= 0.1"))
        if self.window_s < 2 * self.refresh_s:
            errs.append(("window_s", "must be at least twice refresh_s"))
        if self.history_s < self.refresh_s:
            errs.append(("history_s", "must be >= refresh_s"))
        names = [e.name for e in self.engines]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            errs.append(("engines", f"duplicate engine name {dupes[0]!r}"))
        return errs


DEFAULT_LOCAL_URL = "http://127.0.0.1:8000"


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "infertop" / "config.yaml"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "infertop"


def engine_name_from_url(url: str) -> str:
    rest = url.split("://", 1)[-1].rstrip("/")
    return rest.replace("127.0.0.1", "local").replace("localhost", "local")


def load_config(path: str | os.PathLike | None = None, *, required: bool = False) -> Config:
    """Load ``path`` (or the default location). Missing default file → defaults."""
    p = Path(path) if path is not None else default_config_path()
    if not p.exists():
        if required or path is not None:
            raise ConfigError(str(p), None, "", "no such file")
        return Config()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(str(p), None, "", f"cannot read: {e}") from None
    cfg = parse_config(text, str(p))
    cfg.source = str(p)
    return cfg


def parse_config(text: str, path: str = "<config>") -> Config:
    """Parse YAML text into a :class:`Config`; raises ConfigError."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(path, line, "", f"invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ConfigError(path, None, "", f"invalid YAML: {e}") from None
    finally:
        loader.dispose()
    if node is None:
        return Config()
    cfg = _build(Config, node, "", path, loader)
    _fill_names(cfg)
    return cfg


def _fill_names(cfg: Config) -> None:
    for e in cfg.engines:
        if not e.name:
            e.name = engine_name_from_url(e.url)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _describe(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return repr(node.value) if node.tag.endswith(":str") else str(node.value)


def _scalar(node: yaml.Node, loader: yaml.SafeLoader):
    return loader.construct_object(node, deep=True)


def _build(tp, node: yaml.Node, fpath: str, path: str, loader: yaml.SafeLoader):
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
            key = str(_scalar(knode, loader))
            out[key] = _build(args[1], vnode, f"{fpath}.{key}" if fpath else key, path, loader)
        return out
    if isinstance(tp, type) and hasattr(tp, "__dataclass_fields__"):
        return _build_dataclass(tp, node, fpath, path, loader)
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(path, _line(node), fpath, f"expected {_type_name(tp)}, got {_describe(node)}")
    value = _scalar(node, loader)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and fpath.startswith("profiles"):
            return str(value)
    raise ConfigError(path, _line(node), fpath, f"expected {_type_name(tp)}, got {_describe(node)}")


def _type_name(tp) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def _build_dataclass(cls, node: yaml.Node, fpath: str, path: str, loader: yaml.SafeLoader):
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(path, _line(node), fpath, f"expected a mapping, got {_describe(node)}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if not f.metadata.get("internal")}
    kwargs = {}
    lines = {}
    for knode, vnode in node.value:
        key = str(_scalar(knode, loader))
        sub = f"{fpath}.{key}" if fpath else key
        if key not in known:
            close = _closest(key, known)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise ConfigError(path, _line(knode), sub, f"unknown key{hint}")
        if key in kwargs:
            raise ConfigError(path, _line(knode), sub, "duplicate key")
        kwargs[key] = _build(hints[key], vnode, sub, path, loader)
        lines[key] = _line(vnode)
    for name, f in known.items():
        if name not in kwargs and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(path, _line(node), f"{fpath}.{name}" if fpath else name, "required")
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if check is not None:
        for fname, msg in check():
            sub = f"{fpath}.{fname}" if fpath else fname
            raise ConfigError(path, lines.get(fname, _line(node)), sub, msg)
    return obj


def _closest(key: str, known) -> str | None:
    import difflib

    got = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return got[0] if got else None
