"""YAML configuration: the typed sections, and loading a file into them.

The schema is the dataclasses below; config_build.py walks PyYAML's node tree
(which keeps line numbers) against their type hints, so an unknown key, a
wrong type or a bad value is reported as one line::

    /home/me/.config/infertop/config.yaml:7: engines[1].url: expected a string, got 8000

The YAML itself is read with limits (config_load.py); numbers must be finite,
and a field declared with ``bounded`` must lie in its range — the same
check the command-line flags use (``config_build.check_value``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .config_build import bounded, bounds_errors, build
from .config_load import ConfigError, compose, read_bytes, to_bytes
from .sources.prometheus.fleet_query import DEFAULT_QUEUE_PROMQL, check_label_name
from .sources.sanitize import plain_text, redact_url
from .gateway.config import GatewayConfig  # the `gateway:` section (infertop gateway)


@dataclass
class EngineConfig:
    """A vLLM engine to watch."""

    url: str
    name: str = ""
    max_num_seqs: int | None = bounded(None, 1, 1_000_000)  # enables running ÷ max_num_seqs
    timeout_s: float = bounded(2.0, 0.05, 600)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        if not self.url.startswith(("http://", "https://")):
            errs.append(("url", f"must start with http:// or https://, got {redact_url(self.url)!r}"))
        return errs


@dataclass
class SloConfig:
    """Latency targets (seconds) one engine's histograms are held to. An engine's histograms mix every
    class it serves, so each default is the budget (PRODUCT.md, P99/P95) of the class that sets that
    signal: TTFT and queue time are interactive chat's (2 s, 1 s: what users wait on); ITL p95 is
    100 ms, the batch class's TPOT budget, because a step that carries a chunked prefill (~80 ms for
    2048 tokens of an 8B model on an H100) delays every decoder in it, and chat's 40 ms is a mean per
    request, not a per-token p95; E2E p99 is 60 s, batch's total, because E2E grows with the answer's
    length, which the client asks for (chat's 5 s holds for ~100-token answers only)."""

    ttft_p99_s: float = bounded(2.0, 0, 3600, lo_open=True)
    itl_p95_s: float = bounded(0.100, 0, 60, lo_open=True)
    e2e_p99_s: float = bounded(60.0, 0, 86400, lo_open=True)
    queue_p99_s: float = bounded(1.0, 0, 3600, lo_open=True)
    kv_cache_pct: float = bounded(90.0, 0, 100, lo_open=True)

    def validate(self) -> list[tuple[str, str]]:
        return bounds_errors(self)


SLO_STAGES = ("queue", "ttft", "e2e")  # the per-request histograms an objective can count requests by


@dataclass
class SloClassConfig:
    """One workload class (PRODUCT.md: interactive chat, code completion, batch): a target per latency
    stage at the percentile infertop reads (queue, TTFT and E2E at P99; TPOT/ITL at P95), an objective
    ("99.9 % of requests within the E2E target over 30 days") and which engines it holds: shell-style
    patterns (``*chat*``) per rule — ``match`` on an engine's name or model, and the rules below."""

    queue_p99_s: float = bounded(1.0, 0, 3600, lo_open=True)
    ttft_p99_s: float = bounded(2.0, 0, 3600, lo_open=True)
    tpot_p95_s: float = bounded(0.040, 0, 60, lo_open=True)
    e2e_p99_s: float = bounded(5.0, 0, 86400, lo_open=True)
    objective_pct: float = bounded(99.9, 50, 100, lo_open=False)  # of requests within objective_stage's target
    objective_stage: str = "e2e"  # queue, ttft or e2e: the histogram a request is counted good or bad by
    objective_days: float = bounded(30.0, 0, 366, lo_open=True)
    match: list[str] = field(default_factory=list)
    # Assignment rules, each a list of shell-style patterns; the first rule to name an engine wins, in this
    # order: engines (its name) > deployments ("namespace/name") > models > gateway_classes (a gateway's
    # class, an endpoint picker's band, an InferenceObjective's name) > fitted from its healthy history
    engines: list[str] = field(default_factory=list)
    deployments: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    gateway_classes: list[str] = field(default_factory=list)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        for key in ("engines", "deployments", "models", "gateway_classes"):
            for i, pat in enumerate(getattr(self, key)):
                if not isinstance(pat, str) or not pat.strip():
                    errs.append((f"{key}[{i}]", "an empty pattern matches nothing"))
                elif key == "deployments" and (pat.count("/") != 1 or "" in pat.split("/")):
                    errs.append((f"{key}[{i}]", f"a Deployment is namespace/name, got {pat!r}"))
        if self.objective_stage not in SLO_STAGES:
            errs.append(("objective_stage", f"must be one of {', '.join(SLO_STAGES)}, got {self.objective_stage!r}"))
        if self.objective_pct >= 100:
            errs.append(("objective_pct", "must be < 100 (a 100 % objective has no error budget)"))
        for i, pat in enumerate(self.match):
            if not pat.strip():
                errs.append((f"match[{i}]", "an empty pattern matches nothing"))
        return errs


def default_slo_classes() -> dict[str, SloClassConfig]:
    """PRODUCT.md's budgets (P99 / P95): chat — queue 1 s, TTFT 2 s, TPOT 40 ms, total 5 s; code completion —
    200 ms, 500 ms, 20 ms, 1 s; batch — 30 s, 10 s, 100 ms, 60 s. Batch counts requests by TTFT (its E2E
    grows with the answer the client asks for), the others by E2E."""
    return {
        "chat": SloClassConfig(1.0, 2.0, 0.040, 5.0, 99.9, "e2e", 30.0, ["*chat*"]),
        "code": SloClassConfig(0.2, 0.5, 0.020, 1.0, 99.9, "e2e", 30.0, ["*code*", "*coder*"]),
        "batch": SloClassConfig(30.0, 10.0, 0.100, 60.0, 99.0, "ttft", 30.0, ["*batch*"]),
    }


@dataclass
class SloClassesConfig:
    """The ``slo_classes:`` section: the workload classes, the capacity headroom, the price of a GPU-hour."""

    classes: dict[str, SloClassConfig] = field(default_factory=default_slo_classes)
    headroom_pct: float = bounded(30.0, 0, 400)  # Little's law concurrency plus this (PRODUCT.md: 30–50 %)
    gpu_hour_price: float | None = bounded(None, 0, 1_000_000, lo_open=True)  # currency units per GPU-hour
    currency: str = "$"
    idle_util_pct: float = bounded(10.0, 0, 100)  # a GPU under this utilisation is idle
    fast_burn: float = bounded(14.4, 1, 1000)  # burn rate over the fast pair (1 h and 5 min) that is a verdict
    week_budget_pct: float = bounded(80.0, 1, 1000)  # of a week's error budget used: a verdict
    # burn verdicts need this much history behind them: a burn "scaled" to 26 s of a demo is noise (the
    # SRE pair is 1 h and 5 min; the short window is the least that means anything)
    min_burn_history_s: float = bounded(300.0, 0, 604800)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        if not self.classes:
            errs.append(("classes", "must name at least one class (or leave the key out for the defaults)"))
        for name in self.classes:
            if not name.strip() or len(name) > 40:
                errs.append((f"classes.{name}", "a class name is 1 to 40 characters"))
        return errs


@dataclass
class PrometheusConfig:
    url: str | None = None
    timeout_s: float = bounded(5.0, 0.05, 600)
    token_file: str | None = None
    # Engines from Prometheus instead of scraping each one: None (auto) when no engines are listed
    engines: bool | None = None
    interval_s: float = bounded(2.0, 0.1, 3600)  # one refresh (a fixed handful of queries) per interval
    latency_interval_s: float = bounded(15.0, 0.1, 3600)  # the quantile queries (the costly ones) at most this often
    window_s: float = bounded(60.0, 1, 86400)  # rate() and histogram_quantile() window
    selector: str = ""  # extra matchers for every vLLM series, e.g. job="vllm"
    queue_promql: str = DEFAULT_QUEUE_PROMQL  # queue depth, one series per queue; {SEL}: the selector
    target_labels: list[str] = field(default_factory=lambda: ["namespace", "pod", "instance"])
    engine_label: str = "engine"  # vLLM V1's engine index within one server ("" to merge them)
    model_label: str = "model_name"
    name_labels: list[str] = field(default_factory=lambda: ["pod", "instance"])  # first non-empty names an engine
    stale_after_s: float = bounded(30.0, 1, 86400)  # an engine's newest sample older than this is stale
    slow_after_s: float = bounded(1.0, 0.01, 600)  # a refresh slower than this is reported slow
    backfill_points: int = bounded(120, 0, 100_000)  # sparkline points read with range queries at start

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        for name in ("target_labels", "name_labels"):
            for i, label in enumerate(getattr(self, name)):
                why = check_label_name(label)
                if why:
                    errs.append((f"{name}[{i}]", why))
        for name in ("engine_label", "model_label"):
            label = getattr(self, name)
            why = check_label_name(label) if label else None
            if why:
                errs.append((name, why))
        if not self.target_labels:
            errs.append(("target_labels", "must name at least one label (e.g. instance)"))
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            errs.append(("url", f"must start with http:// or https://, got {self.url!r}"))
        return errs

    @property
    def by(self) -> tuple[str, ...]:
        """The labels that identify one engine, in query order."""
        out = list(dict.fromkeys(self.target_labels))
        for extra in (self.engine_label, self.model_label):
            if extra and extra not in out:
                out.append(extra)
        return tuple(out)


@dataclass
class KubeConfig:
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)
    selector: str = ""
    vllm_container: str = ""
    enabled: bool | None = None  # None: on when kubeconfig, context or namespaces is set
    # the engines' /metrics port on each pod (default: first containerPort)
    metrics_port: int | None = bounded(None, 1, 65535)
    timeout_s: float = bounded(10.0, 0.05, 600)  # per API request
    watch: bool = True  # informers (list + watch); false: list everything every refresh_s
    refresh_s: float = bounded(2.0, 0.1, 3600)  # how often the Cluster pane repaints (and polls, without watch)
    configmap: str = ""  # the ConfigMap `M` offers first (e.g. the gateway's priority weights)
    drain_then: str = "delete"  # after an inference-aware pod drain: delete or scale-down
    drain_timeout_s: float = bounded(600.0, 1, 86400)
    node_drain_timeout_s: float = bounded(900.0, 1, 86400)
    rollout_timeout_s: float = bounded(900.0, 1, 86400)
    # a rollout blocked this long (ImagePullBackOff, no GPU…) is reported stuck
    stuck_after_s: float = bounded(30.0, 1, 86400)
    eviction_retry_s: float = bounded(5.0, 0.1, 3600)  # wait after a 429 from a PodDisruptionBudget
    follow_poll_s: float = bounded(0.5, 0.05, 60)  # how often a running action re-reads what it follows
    wva_metrics_url: str = ""  # /metrics URL or Prometheus base URL with llm-d's wva_desired_replicas

    @property
    def configured(self) -> bool:
        if self.enabled is not None:
            return self.enabled
        return bool(self.kubeconfig or self.context or self.namespaces)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        if self.drain_then not in ("delete", "scale-down"):
            errs.append(("drain_then", "must be delete or scale-down"))
        return errs


def _http_url(value: str | None) -> str | None:
    """Why ``value`` is not an http(s) URL (None when it is, or unset)."""
    if value is None or value.startswith(("http://", "https://")):
        return None
    return f"must start with http:// or https://, got {redact_url(value)!r}"


@dataclass
class QueueGatewayConfig:
    """An infertop gateway to watch (and steer, with an admin token)."""

    url: str  # where its /metrics is (its client listen address)
    name: str = ""
    admin_url: str | None = None
    token_env: str | None = None  # the admin token; never logged or shown
    token_file: str | None = None
    timeout_s: float = bounded(2.0, 0.05, 600)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        for name in ("url", "admin_url"):
            why = _http_url(getattr(self, name))
            if why:
                errs.append((name, why))
        if self.token_env and self.token_file:
            errs.append(("token_file", "set token_env or token_file, not both"))
        return errs


@dataclass
class QueueEppConfig:
    """A Gateway API Inference Extension / llm-d endpoint picker's /metrics."""

    url: str
    name: str = ""
    token_file: str | None = None  # bearer token for /metrics, when it needs one
    timeout_s: float = bounded(2.0, 0.05, 600)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        why = _http_url(self.url)
        if why:
            errs.append(("url", why))
        return errs


@dataclass
class QueuePromConfig:
    """Queue series read through the Prometheus of ``prometheus.url`` instead of directly."""

    name: str
    kind: str = "epp"  # epp or gateway: which names to query
    selector: str = ""  # extra PromQL matchers, e.g. job="epp"

    def validate(self) -> list[tuple[str, str]]:
        return [] if self.kind in ("epp", "gateway") else [("kind", "must be epp or gateway")]


@dataclass
class QueuesConfig:
    gateways: list[QueueGatewayConfig] = field(default_factory=list)
    epp: list[QueueEppConfig] = field(default_factory=list)
    prometheus: list[QueuePromConfig] = field(default_factory=list)
    # queue P99 budget per class (or priority band number), seconds; added to the defaults
    budgets: dict[str, float] = field(default_factory=dict)
    drain_timeout_s: float = bounded(600.0, 1, 86400)  # how long a drain at the gateway is followed

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        for k, v in self.budgets.items():
            if not (math.isfinite(v) and v > 0):
                errs.append((f"budgets.{k}", f"must be > 0, got {v:g}"))
        return errs


@dataclass
class AdvisorConfig:
    """The scaling advisor (analysis/scaling.py): targets, bounds, windows, mode."""

    mode: str = "recommend"  # off, recommend, auto
    target_queue_depth: float = bounded(5.0, 0, 1e9, lo_open=True)
    target_p99_s: float | None = bounded(None, 0, 86400, lo_open=True)  # None: the SLO's target of p99_metric
    p99_metric: str = "ttft_p99_s"  # ttft_p99_s, e2e_p99_s or queue_p99_s
    min_replicas: int = bounded(1, 0, 100_000)  # when no HPA targets the workload (else the HPA's)
    max_replicas: int = bounded(10, 1, 100_000)
    tolerance: float = bounded(0.10, 0, 10)
    cooldown_s: float = bounded(60.0, 0, 86400)
    scale_up_window_s: float = bounded(30.0, 0, 86400)
    scale_down_window_s: float = bounded(300.0, 0, 86400)
    max_input_age_s: float = bounded(15.0, 0.1, 86400)  # an older input refuses the decision
    workloads: list[str] = field(default_factory=list)  # NAME or NS/NAME; empty: every workload with engines

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        if self.mode not in ("off", "recommend", "auto"):
            errs.append(("mode", f"must be off, recommend or auto, got {self.mode!r}"))
        if self.p99_metric not in ("ttft_p99_s", "e2e_p99_s", "queue_p99_s"):
            errs.append(("p99_metric", f"must be ttft_p99_s, e2e_p99_s or queue_p99_s, got {self.p99_metric!r}"))
        if self.min_replicas > self.max_replicas:
            errs.append(("min_replicas", f"must be <= max_replicas ({self.max_replicas}), got {self.min_replicas}"))
        return errs


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
    port: int = bounded(8000, 1, 65535)
    max_num_seqs: int | None = bounded(None, 1, 1_000_000)
    max_model_len: int | None = bounded(None, 1, 2**31 - 1)
    gpu_memory_utilization: float | None = bounded(None, 0, 1, lo_open=True)
    scheduling_policy: str | None = None
    enable_prefix_caching: bool | None = None
    shutdown_timeout: float | None = bounded(None, 0, 86400)
    tensor_parallel_size: int | None = bounded(None, 1, 1024)
    dtype: str | None = None
    enforce_eager: bool | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    start_timeout_s: float = bounded(300.0, 1, 86400)
    stop_grace_s: float = bounded(30.0, 0, 86400)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        if self.scheduling_policy not in (None, "fcfs", "priority"):
            errs.append(("scheduling_policy", "must be fcfs or priority"))
        return errs


@dataclass
class Config:
    """The whole file. Every section is optional."""

    engines: list[EngineConfig] = field(default_factory=list)
    refresh_s: float = bounded(1.0, 0.1, 600)
    window_s: float = bounded(60.0, 0.2, 86400)
    history_s: float = bounded(3600.0, 0.1, 86400)
    theme: str = "infertop-dark"
    read_only: bool = False
    audit_log: str | None = None
    slo: SloConfig = field(default_factory=SloConfig)
    slo_classes: SloClassesConfig = field(default_factory=SloClassesConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    kube: KubeConfig = field(default_factory=KubeConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    queues: QueuesConfig = field(default_factory=QueuesConfig)
    advisor: AdvisorConfig = field(default_factory=AdvisorConfig)
    profiles: dict[str, ProfileConfig] = field(default_factory=dict)
    # Where it came from: the path, or None when running on defaults.
    source: str | None = field(default=None, metadata={"internal": True})
    # The top-level sections the file sets (a `gateway:` section means: watch that gateway too).
    sections: tuple[str, ...] = field(default=(), metadata={"internal": True})

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self) + cross_checks(self.refresh_s, self.window_s, self.history_s)
        seen: dict[str, int] = {}  # engine name -> index; linear, 150 000 engines are fine
        for i, e in enumerate(self.engines):
            name = e.name or engine_name_from_url(e.url)
            first = seen.setdefault(name, i)
            if first != i:
                how = "" if e.name else " (derived from its url; set name: on one of them)"
                errs.append((f"engines[{i}]", f"duplicate engine name {name!r}, as engines[{first}]{how}"))
                break
        return errs


def cross_checks(refresh_s: float, window_s: float, history_s: float) -> list[tuple[str, str]]:
    """Checks between fields (each field's own range is checked on its own)."""
    errs = []
    if window_s < 2 * refresh_s:
        errs.append(("window_s", f"must be at least twice refresh_s ({refresh_s:g} s)"))
    if history_s < refresh_s:
        errs.append(("history_s", f"must be >= refresh_s ({refresh_s:g} s)"))
    return errs


DEFAULT_LOCAL_URL = "http://127.0.0.1:8000"


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "infertop" / "config.yaml"


def engine_name_from_url(url: str) -> str:
    rest = redact_url(url).split("://", 1)[-1].rstrip("/")
    return rest.replace("127.0.0.1", "local").replace("localhost", "local")


def load_config(path: str | os.PathLike | None = None, *, required: bool = False) -> Config:
    """Load ``path`` (or the default location). Missing default file → defaults."""
    p = Path(path) if path is not None else default_config_path()
    try:
        data = read_bytes(p)  # with the limits and the FIFO/device refusal every YAML file gets
    except FileNotFoundError:
        if required or path is not None:
            raise ConfigError(str(p), None, "", "no such file") from None
        return Config()
    cfg = parse_config(data, str(p))
    cfg.source = str(p)
    return cfg


def parse_config(text: str | bytes, path: str = "<config>", *, pure_python: bool = False) -> Config:
    """Parse YAML text into a :class:`Config`; raises ConfigError and nothing else.
    ``pure_python``: PyYAML's own parser even where libyaml is available (tests)."""
    node, loader = compose(to_bytes(text, path), path, pure_python=pure_python)
    if node is None:
        return Config()
    try:
        cfg = build(Config, node, path, loader)
    except RecursionError:  # unreachable with the depth limit; never a traceback
        raise ConfigError(path, None, "", "too deeply nested") from None
    if isinstance(node, yaml.MappingNode):
        cfg.sections = tuple(str(k.value) for k, _ in node.value)
    _fill_names(cfg)
    return cfg


def _fill_names(cfg: Config) -> None:
    _redact_urls(cfg)
    for e in cfg.engines:
        # an invisible character (U+200B, U+FEFF…) in a name is shown escaped: 'a' and 'a\u200b' differ
        e.name = plain_text(e.name or engine_name_from_url(e.url))
    for g in cfg.queues.gateways:
        g.name = plain_text(g.name) if g.name else g.name
    for p in cfg.queues.epp:
        p.name = plain_text(p.name) if p.name else p.name


def _redact_urls(cfg: Config) -> None:
    """Every configured URL loses its ``user:password@`` here, at load: names, screens,
    logs, snapshots, recordings and bundles all derive from these fields."""
    for e in cfg.engines:
        e.url = redact_url(e.url)
    cfg.gpu.dcgm = [redact_url(u) for u in cfg.gpu.dcgm]
    if cfg.prometheus.url:
        cfg.prometheus.url = redact_url(cfg.prometheus.url)
    for g in cfg.queues.gateways:
        g.url = redact_url(g.url)
        g.admin_url = redact_url(g.admin_url) if g.admin_url else g.admin_url
    for q in cfg.queues.epp:
        q.url = redact_url(q.url)
    cfg.kube.wva_metrics_url = redact_url(cfg.kube.wva_metrics_url)
