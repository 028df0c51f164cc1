"""PromQL for the Prometheus fleet source: a fixed set of queries per
refresh, whatever the number of engines.

Every per-engine value is one sub-expression aggregated ``by`` the labels
that identify an engine, tagged with the field it fills through
``label_replace(…, "infertop_field", "<field>", …)``; sub-expressions are
joined with ``or`` into a few queries (the gauges and rates in one, the
quantiles of each histogram in one). V0/V1 renames are ``or`` fallbacks
inside a sub-expression (the first name wins per engine). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...domain.engine import QUANTILES as ENGINE_QUANTILES

FIELD_LABEL = "infertop_field"

#: vLLM histograms (V1 name first, then the V0 / older names)
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds_bucket",),
    "itl": ("vllm:inter_token_latency_seconds_bucket", "vllm:time_per_output_token_seconds_bucket"),
    "e2e": ("vllm:e2e_request_latency_seconds_bucket",),
    "queue": ("vllm:request_queue_time_seconds_bucket", "vllm:time_in_queue_requests_bucket"),
}
#: (histogram, quantile, EngineStats field) — the very quantiles of a direct scrape
QUANTILES = ENGINE_QUANTILES
#: fleet-wide quantiles (FleetView fields)
FLEET_QUANTILES = (
    ("ttft", 0.50, "ttft_p50_s"),
    ("ttft", 0.99, "ttft_p99_s"),
    ("itl", 0.95, "itl_p95_s"),
    ("e2e", 0.99, "e2e_p99_s"),
)
GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
}
#: counters whose per-second rate fills a field
RATES: dict[str, tuple[str, ...]] = {
    "prompt_tokens_per_s": ("vllm:prompt_tokens_total",),
    "generation_tokens_per_s": ("vllm:generation_tokens_total",),
    "requests_per_s": ("vllm:request_success_total",),  # summed over finished_reason
    "preemptions_per_s": ("vllm:num_preemptions_total",),
}
KV_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_NAMES = (("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
                ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"))
PREFIX_V0_GAUGE = "vllm:gpu_prefix_cache_hit_rate"
#: the sample time of this gauge says how old an engine's series are
CLOCK_METRIC = "vllm:num_requests_running"

#: the series of the queue query carry ``infertop_queue="<kind>"``: which queue a series is
QUEUE_LABEL = "infertop_queue"
#: the queues a Deployment may have in front of it, the one nearest the client first: the
#: infertop gateway's, the endpoint picker's flow control, the engines' own waiting queues
QUEUE_KINDS = ("gateway", "epp", "vllm")
#: labels kept on every queue series: a Deployment named outright (a relabel rule can add them)
_NAMED = "namespace, deployment, workload"


def _queue_tag(expr: str, kind: str) -> str:
    return f'label_replace({expr}, "{QUEUE_LABEL}", "{kind}", "{QUEUE_LABEL}", "")'


#: the default queue depth: one series per queue, tagged with its kind and keeping the labels that
#: say whose it is — the gateway's per scrape target, the endpoint picker's per pool and model (llm-d
#: name first: ``or`` keeps it where both generations give the same label set; not ``by pod``: that
#: is the picker's own pod), vLLM's waiting per pod (and scrape target). {SEL}: the selector.
DEFAULT_QUEUE_PROMQL = " or ".join([
    _queue_tag(f"sum by ({_NAMED}, job, instance) (infertop_gateway_queue_size)", "gateway"),
    *(_queue_tag(f"sum by ({_NAMED}, inference_pool, model_name, target_model_name) ({name})", "epp")
      for name in ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size")),
    _queue_tag(f"sum by ({_NAMED}, pod, instance) (vllm:num_requests_waiting{{SEL}})", "vllm"),
])

#: fields of the "engines" query (cheap: one gauge or rate per engine) …
FAST_FIELDS = tuple(GAUGES) + ("kv_cache_pct",) + tuple(RATES) + ("prefix_cache_hit_pct", "sample_ts")
#: … and of the latency queries, one per histogram (each quantile re-reads every bucket series of
#: the window: at 500 engines these are most of Prometheus' work, so they run in parallel, less often)
LATENCY_FIELDS = {hist: tuple(f for h, _, f in QUANTILES if h == hist) for hist in HISTOGRAMS}
ENGINE_FIELDS = FAST_FIELDS + tuple(f for fs in LATENCY_FIELDS.values() for f in fs)

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_label_name(name: str) -> str | None:
    """Why ``name`` is not a Prometheus label name (None when it is)."""
    if not _LABEL_NAME.match(name) or name.startswith("__"):
        return f"not a label name: {name!r}"
    return None


def tag(expr: str, field: str) -> str:
    """``expr`` with every series labelled ``infertop_field="<field>"``."""
    return f'label_replace({expr}, "{FIELD_LABEL}", "{field}", "{FIELD_LABEL}", "")'


@dataclass(frozen=True)
class FleetQueries:
    """The PromQL of one refresh.

    ``selector``: extra matchers for every vLLM series (``job="vllm"``);
    ``by``: the labels that identify one engine (target labels, the V1
    ``engine`` index, the model); ``window_s``: the rate / quantile window.
    """

    selector: str = ""
    by: tuple[str, ...] = ("namespace", "pod", "instance", "engine", "model_name")
    window_s: float = 60.0
    queue_promql: str = DEFAULT_QUEUE_PROMQL

    @property
    def window(self) -> str:
        return f"{max(1, round(self.window_s))}s"

    def sel(self, name: str) -> str:
        return f"{name}{{{self.selector}}}" if self.selector else name

    def _by(self, extra: str = "") -> str:
        labels = ([extra] if extra else []) + list(self.by)
        return f"by ({', '.join(labels)})"

    def _rate_sum(self, name: str, extra: str = "") -> str:
        return f"sum {self._by(extra)} (rate({self.sel(name)}[{self.window}]))"

    def _first(self, exprs: list[str]) -> str:
        return exprs[0] if len(exprs) == 1 else "(" + " or ".join(exprs) + ")"

    # -- per-engine values ---------------------------------------------------
    def field_expr(self, field: str) -> str:
        """The untagged expression of one EngineStats field (one series per engine)."""
        if field in GAUGES:
            return self._first([f"sum {self._by()} ({self.sel(n)})" for n in GAUGES[field]])
        if field == "kv_cache_pct":
            return "100 * " + self._first([f"max {self._by()} ({self.sel(n)})" for n in KV_NAMES])
        if field in RATES:
            return self._first([self._rate_sum(n) for n in RATES[field]])
        if field == "prefix_cache_hit_pct":
            # 0/0 (no lookups in the window) is NaN: "no data", as a direct scrape says
            ratios = [f"{self._rate_sum(h)} / {self._rate_sum(q)}" for h, q in PREFIX_NAMES]
            ratios.append(f"max {self._by()} ({self.sel(PREFIX_V0_GAUGE)} >= 0)")
            return "100 * " + self._first([f"({r})" for r in ratios])
        if field == "sample_ts":
            return f"max {self._by()} (timestamp({self.sel(CLOCK_METRIC)}))"
        for hist, q, name in QUANTILES:
            if name == field:
                return self.quantile_expr(hist, q, self._by("le"))
        raise KeyError(field)

    def quantile_expr(self, hist: str, q: float, by: str) -> str:
        """histogram_quantile over the summed bucket rates, V1 name first."""
        sums = [f"sum {by} (rate({self.sel(n)}[{self.window}]))" for n in HISTOGRAMS[hist]]
        return f"histogram_quantile({q:g}, {self._first(sums)})"

    def engine_values(self, fields: tuple[str, ...] = ENGINE_FIELDS) -> str:
        """ONE query for every per-engine field, each series tagged with its field."""
        return " or ".join(tag(self.field_expr(f), f) for f in fields)

    # -- the rest ---------------------------------------------------------------
    def up(self) -> str:
        """Scrape health of every target (up == 0: the last scrape failed)."""
        return self.sel("up")

    def fleet_values(self, fields: tuple[str, ...] | None = None) -> str:
        """Fleet-wide quantiles over every engine's buckets (``by (le)`` only); ``fields``: a subset."""
        return " or ".join(tag(self.quantile_expr(h, q, "by (le)"), f) for h, q, f in FLEET_QUANTILES
                           if fields is None or f in fields)

    def queue(self) -> str:
        """The configured queue-depth PromQL (``{SEL}`` stands for the selector): one series per queue."""
        return self.queue_promql.replace("{SEL}", "{" + self.selector + "}" if self.selector else "")

    def fast(self) -> dict[str, str]:
        """name → PromQL read every refresh: target health, gauges and rates, queue depth."""
        return {"up": self.up(), "engines": self.engine_values(FAST_FIELDS), "queue": self.queue()}

    def latency(self) -> dict[str, str]:
        """name → PromQL of the quantiles: one query per histogram, and the fleet-wide ones."""
        out = {f"latency_{h}": self.engine_values(fields) for h, fields in LATENCY_FIELDS.items()}
        out["fleet"] = self.fleet_values()
        return out

    def refresh(self) -> dict[str, str]:
        """Every query of a full refresh (the GPU query is the GPU source's own): a fixed set."""
        return {**self.fast(), **self.latency()}
