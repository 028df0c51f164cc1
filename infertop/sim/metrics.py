"""Prometheus exposition of a simulated engine, shaped exactly like vLLM 0.32.

:func:`render_metrics` returns the text a real vLLM 0.32 server answers on
``/metrics``: the same families in the same order, the same ``# HELP`` and
``# TYPE`` lines, label names sorted as prometheus_client writes them, the
same histogram buckets, ``*_created`` gauge families, and values formatted
as prometheus_client does (``floatToGoString``).

With ``metrics_version="v0"`` on the engine config it renders the legacy
names instead (``vllm:gpu_cache_usage_perc``,
``vllm:time_per_output_token_seconds``, ``vllm:gpu_prefix_cache_*``, only a
``model_name`` label, no ``_created`` samples), for testing fallbacks.

Rendering is cheap: the static text (HELP/TYPE lines, label sets, created
timestamps) is laid out once per engine layout and cached; a render only
formats the current values.
"""

from __future__ import annotations

import math
import threading
import time
from itertools import accumulate
from typing import Callable, Iterable

from .model import EngineModel, Histogram

__all__ = ["render_metrics", "format_value", "HttpStats", "CONTENT_TYPE", "escape_label_value"]

#: Content type vLLM (prometheus_client) answers ``/metrics`` with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_INF = math.inf


def format_value(d: float) -> str:
    """prometheus_client's ``floatToGoString``."""
    d = float(d)
    if 0.0 <= d < 1e6:
        return repr(d)
    if d == _INF:
        return "+Inf"
    if d == -_INF:
        return "-Inf"
    if d != d:
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def escape_label_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labelstr(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in sorted(labels.items())) + "}"


def _help(doc: str) -> str:
    return doc.replace("\\", r"\\").replace("\n", r"\n")


def _hist_values(h: Histogram) -> list[float]:
    vals = list(accumulate(h.counts))
    vals.append(vals[-1])
    vals.append(h.sum)
    return vals


# ---------------------------------------------------------------------------
# Layout: static text + value slots


class _Layout:
    __slots__ = ("prefixes", "tail", "getters", "key")

    def __init__(self, prefixes: list[str], tail: str, getters: list[Callable[[], Iterable[float]]], key) -> None:
        self.prefixes = prefixes
        self.tail = tail
        self.getters = getters
        self.key = key

    def render(self) -> str:
        vals: list[float] = []
        ext = vals.extend
        for g in self.getters:
            ext(g())
        if len(vals) != len(self.prefixes):  # pragma: no cover - programming error
            raise RuntimeError(f"metrics layout has {len(self.prefixes)} slots but {len(vals)} values")
        fmt = format_value
        return "".join([p + fmt(v) for p, v in zip(self.prefixes, vals)]) + self.tail


class _Builder:
    def __init__(self, created_unix: float | None) -> None:
        self._prefixes: list[str] = []
        self._getters: list[Callable[[], Iterable[float]]] = []
        self._cur: list[str] = []
        self._created = created_unix
        self._created_k = 0

    # low level
    def text(self, s: str) -> None:
        self._cur.append(s)

    def header(self, name: str, typ: str, doc: str) -> None:
        self._cur.append(f"# HELP {name} {_help(doc)}\n# TYPE {name} {typ}\n")

    def slot(self, series: str) -> None:
        self._cur.append(series + " ")
        self._prefixes.append("".join(self._cur))
        self._cur = ["\n"]

    def static_sample(self, series: str, value: float) -> None:
        self._cur.append(f"{series} {format_value(value)}\n")

    def getter(self, g: Callable[[], Iterable[float]]) -> None:
        self._getters.append(g)

    def _next_created(self) -> float:
        self._created_k += 1
        return self._created + self._created_k * 3.1e-05

    # families
    def gauge(self, name: str, doc: str, children: list[dict[str, str]], get: Callable[[], Iterable[float]]) -> None:
        self.header(name, "gauge", doc)
        for labels in children:
            self.slot(name + _labelstr(labels))
        self.getter(get)

    def static_gauge(self, name: str, doc: str, children: list[tuple[dict[str, str], float]]) -> None:
        self.header(name, "gauge", doc)
        for labels, value in children:
            self.static_sample(name + _labelstr(labels), value)

    def counter(self, base: str, doc: str, children: list[dict[str, str]], get: Callable[[], Iterable[float]],
                created: bool = True) -> None:
        self.header(base + "_total", "counter", doc)
        for labels in children:
            self.slot(base + "_total" + _labelstr(labels))
        self.getter(get)
        if created and self._created is not None:
            self.header(base + "_created", "gauge", doc)
            for labels in children:
                self.static_sample(base + "_created" + _labelstr(labels), self._next_created())

    def histogram(self, name: str, doc: str, children: list[tuple[dict[str, str], tuple[float, ...]]],
                  get: Callable[[], Iterable[float]], created: bool = True) -> None:
        """``get`` returns, per child: cumulative buckets (+Inf last), count, sum."""
        self.header(name, "histogram", doc)
        for labels, bounds in children:
            for b in bounds:
                self.slot(name + "_bucket" + _labelstr({**labels, "le": format_value(b)}))
            self.slot(name + "_bucket" + _labelstr({**labels, "le": "+Inf"}))
            self.slot(name + "_count" + _labelstr(labels))
            self.slot(name + "_sum" + _labelstr(labels))
        self.getter(get)
        if created and self._created is not None:
            self.header(name + "_created", "gauge", doc)
            for labels, _ in children:
                self.static_sample(name + "_created" + _labelstr(labels), self._next_created())

    def summary(self, name: str, doc: str, children: list[dict[str, str]], get: Callable[[], Iterable[float]],
                created_times: list[float] | None = None) -> None:
        self.header(name, "summary", doc)
        for labels in children:
            self.slot(name + "_count" + _labelstr(labels))
            self.slot(name + "_sum" + _labelstr(labels))
        self.getter(get)
        if created_times is not None:
            self.header(name + "_created", "gauge", doc)
            for labels, ts in zip(children, created_times):
                self.static_sample(name + "_created" + _labelstr(labels), ts)

    def build(self, key) -> _Layout:
        tail = "".join(self._cur)
        return _Layout(self._prefixes, tail, self._getters, key)


# ---------------------------------------------------------------------------
# HTTP statistics (prometheus_fastapi_instrumentator families)

HTTP_HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
                      5.0, 7.5, 10.0, 30.0, 60.0)
HTTP_DURATION_BUCKETS = (0.1, 0.5, 1.0)
#: vLLM excludes these handlers from the HTTP metrics.
HTTP_EXCLUDED = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})


class HttpStats:
    """Per-server request statistics, rendered like prometheus_fastapi_instrumentator."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version = 0
        self.created_unix = time.time()
        self.requests: dict[tuple[str, str, str], list[float]] = {}  # (handler, method, status) -> [n, created]
        self.sizes: dict[str, list[float]] = {}  # handler -> [n, req_sum, resp_sum, created_req, created_resp]
        self.durations: dict[tuple[str, str], list] = {}  # (handler, method) -> [Histogram, created]
        self.highr = Histogram(HTTP_HIGHR_BUCKETS)

    def record(self, handler: str, method: str, status: int, duration_s: float, req_bytes: int,
               resp_bytes: int) -> None:
        if handler in HTTP_EXCLUDED:
            return
        status_s = f"{status // 100}xx"
        now = time.time()
        with self.lock:
            r = self.requests.get((handler, method, status_s))
            if r is None:
                r = self.requests[(handler, method, status_s)] = [0.0, now]
                self.version += 1
            r[0] += 1
            s = self.sizes.get(handler)
            if s is None:
                s = self.sizes[handler] = [0.0, 0.0, 0.0, now, now]
                self.version += 1
            s[0] += 1
            s[1] += req_bytes
            s[2] += resp_bytes
            d = self.durations.get((handler, method))
            if d is None:
                d = self.durations[(handler, method)] = [Histogram(HTTP_DURATION_BUCKETS), now]
                self.version += 1
            d[0].observe(duration_s)
            self.highr.observe(duration_s)


def _add_http(b: _Builder, http: HttpStats, created: bool = True) -> None:
    reqs = sorted(http.requests)
    b.counter("http_requests", "Total number of requests by method, status and handler.",
              [{"handler": h, "method": m, "status": s} for h, m, s in reqs],
              lambda: [http.requests[k][0] for k in reqs], created=False)
    if created:
        b.header("http_requests_created", "gauge", "Total number of requests by method, status and handler.")
        for h, m, s in reqs:
            b.static_sample("http_requests_created" + _labelstr({"handler": h, "method": m, "status": s}),
                            http.requests[(h, m, s)][1])
    handlers = sorted(http.sizes)
    doc = ("Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. "
           "No percentile calculated. ")
    b.summary("http_request_size_bytes", doc, [{"handler": h} for h in handlers],
              lambda: [v for h in handlers for v in (http.sizes[h][0], http.sizes[h][1])],
              [http.sizes[h][3] for h in handlers] if created else None)
    doc = ("Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. "
           "No percentile calculated. ")
    b.summary("http_response_size_bytes", doc, [{"handler": h} for h in handlers],
              lambda: [v for h in handlers for v in (http.sizes[h][0], http.sizes[h][2])],
              [http.sizes[h][4] for h in handlers] if created else None)
    doc = "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. "
    b.histogram("http_request_duration_highr_seconds", doc, [({}, HTTP_HIGHR_BUCKETS)],
                lambda: _hist_values(http.highr), created=False)
    if created:
        b.static_gauge("http_request_duration_highr_seconds_created", doc, [({}, http.created_unix)])
    durs = sorted(http.durations)
    doc = "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. "
    b.histogram("http_request_duration_seconds", doc,
                [({"handler": h, "method": m}, HTTP_DURATION_BUCKETS) for h, m in durs],
                lambda: [v for k in durs for v in _hist_values(http.durations[k][0])], created=False)
    if created:
        b.static_gauge("http_request_duration_seconds_created", doc,
                       [({"handler": h, "method": m}, http.durations[(h, m)][1]) for h, m in durs])


# ---------------------------------------------------------------------------
# process / python families (simulated, deterministic)


def _add_process(b: _Builder, core: EngineModel) -> None:
    def gc_collected():
        up = core.now - core.created_t
        return (float(int(12000 + up * 37)), float(int(3000 + up * 9)), float(int(600 + up * 0.6)))

    def gc_collections():
        up = core.now - core.created_t
        return (float(int(1500 + up * 4.2)), float(int(130 + up * 0.38)), float(int(9 + up * 0.02)))

    gens = [{"generation": g} for g in ("0", "1", "2")]
    b.counter("python_gc_objects_collected", "Objects collected during gc", gens, gc_collected, created=False)
    b.counter("python_gc_objects_uncollectable", "Uncollectable objects found during GC", gens,
              lambda: (0.0, 0.0, 0.0), created=False)
    b.counter("python_gc_collections", "Number of times this generation was collected", gens, gc_collections,
              created=False)
    b.static_gauge("python_info", "Python platform information",
                   [({"implementation": "CPython", "major": "3", "minor": "12", "patchlevel": "11",
                      "version": "3.12.11"}, 1.0)])
    b.static_gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", [({}, 143_257_821_184.0)])
    b.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", [{}],
            lambda: (float(4_215_877_632 + 1_048_576 * len(core.running)),))
    b.static_gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                   [({}, round(core.created_unix - 42.0, 2))])
    b.counter("process_cpu_seconds", "Total user and system CPU time spent in seconds.", [{}],
              lambda: (round(core.busy_time() * 0.4 + (core.now - core.created_t) * 0.06 + 58.0, 2),),
              created=False)
    b.gauge("process_open_fds", "Number of open file descriptors.", [{}],
            lambda: (float(61 + len(core.running)),))
    b.static_gauge("process_max_fds", "Maximum number of open file descriptors.", [({}, 1_048_576.0)])


# ---------------------------------------------------------------------------
# vLLM V1 (0.32)

_MFU_DOC = "Estimated number of {} per GPU (for Model Flops Utilization calculations)."


def cache_config_labels_v1(core: EngineModel) -> dict[str, str]:
    c = core.config
    tokens = c.num_gpu_blocks * c.block_size
    return {
        "_block_size_resolved": "True",
        "block_size": str(c.block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(c.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(bool(c.enable_prefix_caching)),
        "engine": c.engine_label,
        "gpu_memory_utilization": repr(float(c.gpu_memory_utilization)),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": repr(round(tokens / c.max_model_len, 2)),
        "kv_cache_memory_bytes": str(tokens * c.kv_bytes_per_token),
        "kv_cache_size_tokens": str(tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "auto",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(c.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


def _build_v1(core: EngineModel, process: bool, http: HttpStats | None, key) -> _Layout:
    c = core.config
    b = _Builder(core.created_unix)
    L = {"engine": c.engine_label, "model_name": c.model_name}
    one = [L]
    if process:
        _add_process(b, core)
    b.counter("vllm:estimated_flops_per_gpu", _MFU_DOC.format("floating point operations"), one, lambda: (0.0,))
    b.counter("vllm:estimated_read_bytes_per_gpu", _MFU_DOC.format("bytes read from memory"), one, lambda: (0.0,))
    b.counter("vllm:estimated_write_bytes_per_gpu", _MFU_DOC.format("bytes written to memory"), one,
              lambda: (0.0,))
    b.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", one,
            lambda: (float(len(core.running)),))
    b.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", one,
            lambda: (float(core.num_waiting),))
    b.gauge("vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.",
            [{**L, "reason": "capacity"}, {**L, "reason": "deferred"}],
            lambda: (float(core.num_waiting), 0.0))
    b.gauge("vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            [{**L, "sleep_state": s} for s in ("awake", "weights_offloaded", "discard_all")],
            lambda: (float(core.sleep_level == 0), float(core.sleep_level == 1), float(core.sleep_level == 2)))
    b.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", one,
            lambda: (core.kv_cache_usage,))
    b.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", one,
              lambda: (core.prefix_cache_queries_total,))
    b.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", one,
              lambda: (core.prefix_cache_hits_total,))
    b.counter("vllm:external_prefix_cache_queries",
              "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number "
              "of queried tokens.", one, lambda: (0.0,))
    b.counter("vllm:external_prefix_cache_hits",
              "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of "
              "cached tokens.", one, lambda: (0.0,))
    b.counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", one,
              lambda: (0.0,))
    b.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", one,
              lambda: (0.0,))
    b.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", one,
              lambda: (core.num_preemptions_total,))
    b.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", one,
              lambda: (core.prompt_tokens_total,))
    srcs = ("local_compute", "local_cache_hit", "external_kv_transfer")
    b.counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
              [{**L, "source": s} for s in srcs], lambda: [core.prompt_tokens_by_source[s] for s in srcs])
    b.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", one,
              lambda: (core.prompt_tokens_cached_total,))
    tiers = ("device", "host", "p2p", "disk", "external_unspecified")
    b.counter("vllm:prompt_tokens_cached_by_source",
              "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded "
              "to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at "
              "admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
              [{**L, "source": s} for s in tiers], lambda: [core.prompt_tokens_cached_by_source[s] for s in tiers])
    b.counter("vllm:generation_tokens", "Number of generation tokens processed.", one,
              lambda: (core.generation_tokens_total,))
    reasons = ("stop", "length", "abort", "error", "repetition")
    b.counter("vllm:request_success", "Count of successfully processed requests.",
              [{**L, "finished_reason": r} for r in reasons], lambda: [core.request_success[r] for r in reasons])
    rej = ("max_num_queued_reqs", "max_num_queued_tokens")
    b.counter("vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason.",
              [{"model_name": c.model_name, "reason": r} for r in rej],
              lambda: [core.admission_rejections[r] for r in rej])

    def hist(name: str, doc: str, attr: str) -> None:
        bounds = getattr(core, attr).bounds
        b.histogram(name, doc, [(L, bounds)], lambda: _hist_values(getattr(core, attr)))

    hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "h_prompt_tokens")
    hist("vllm:request_generation_tokens", "Number of generation tokens processed.", "h_generation_tokens")
    hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "h_iteration_tokens")
    hist("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
         "h_max_num_generation_tokens")
    hist("vllm:request_params_n", "Histogram of the n request parameter.", "h_params_n")
    hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "h_params_max_tokens")
    hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "h_ttft")
    hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "h_itl")
    hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.",
         "h_request_tpot")
    hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "h_e2e")
    hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "h_queue")
    hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
         "h_inference")
    hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "h_prefill")
    hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "h_decode")
    hist("vllm:request_num_preemptions", "Histogram of the number of times a request was preempted.",
         "h_num_preemptions")
    hist("vllm:request_prefill_kv_computed_tokens",
         "Histogram of new KV tokens computed during prefill (excluding cached tokens).", "h_prefill_kv_computed")
    b.static_gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                   [(cache_config_labels_v1(core), 1.0)])
    if http is not None:
        _add_http(b, http)
    return b.build(key)


# ---------------------------------------------------------------------------
# vLLM V0 (legacy names, 0.6-0.9 era)


def cache_config_labels_v0(core: EngineModel) -> dict[str, str]:
    c = core.config
    return {
        "block_size": str(c.block_size),
        "cache_dtype": "auto",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": str(bool(c.enable_prefix_caching)),
        "gpu_memory_utilization": repr(float(c.gpu_memory_utilization)),
        "is_attention_free": "False",
        "num_cpu_blocks": "2048",
        "num_gpu_blocks": str(c.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": str(4 * 1024**3),
    }


def _build_v0(core: EngineModel, process: bool, http: HttpStats | None, key) -> _Layout:
    c = core.config
    b = _Builder(None)
    L = {"model_name": c.model_name}
    one = [L]
    if process:
        _add_process(b, core)
    b.gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", one,
            lambda: (float(len(core.running)),))
    b.gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", one, lambda: (0.0,))
    b.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", one,
            lambda: (float(core.num_waiting),))
    b.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", one,
            lambda: (core.kv_cache_usage,))
    b.gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", one, lambda: (0.0,))
    b.gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", one, lambda: (-1.0,))
    b.gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", one,
            lambda: ((core.prefix_cache_hits_total / core.prefix_cache_queries_total)
                     if core.prefix_cache_queries_total else -1.0,))
    b.counter("vllm:gpu_prefix_cache_queries", "GPU prefix cache queries, in terms of number of queried tokens.",
              one, lambda: (core.prefix_cache_queries_total,), created=False)
    b.counter("vllm:gpu_prefix_cache_hits", "GPU prefix cache hits, in terms of number of cached tokens.", one,
              lambda: (core.prefix_cache_hits_total,), created=False)
    b.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", one,
              lambda: (core.num_preemptions_total,), created=False)
    b.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", one,
              lambda: (core.prompt_tokens_total,), created=False)
    b.counter("vllm:generation_tokens", "Number of generation tokens processed.", one,
              lambda: (core.generation_tokens_total,), created=False)

    def hist(name: str, doc: str, attr: str) -> None:
        bounds = getattr(core, attr).bounds
        b.histogram(name, doc, [(L, bounds)], lambda: _hist_values(getattr(core, attr)), created=False)

    hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "h_iteration_tokens")
    hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "h_ttft")
    hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", "h_itl")
    hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", "h_e2e")
    hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "h_queue")
    hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
         "h_inference")
    hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "h_prefill")
    hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "h_decode")
    hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "h_prompt_tokens")
    hist("vllm:request_generation_tokens", "Number of generation tokens processed.", "h_generation_tokens")
    hist("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
         "h_max_num_generation_tokens")
    hist("vllm:request_params_n", "Histogram of the n request parameter.", "h_params_n")
    hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "h_params_max_tokens")
    reasons = ("stop", "length", "abort")
    b.counter("vllm:request_success", "Count of successfully processed requests.",
              [{**L, "finished_reason": r} for r in reasons], lambda: [core.request_success[r] for r in reasons],
              created=False)
    b.static_gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                   [(cache_config_labels_v0(core), 1.0)])
    if http is not None:
        _add_http(b, http, created=False)
    return b.build(key)


# ---------------------------------------------------------------------------


def render_metrics(engine, *, http_stats: HttpStats | None = None, process_metrics: bool = True) -> str:
    """The ``/metrics`` text of ``engine`` (an :class:`EngineModel`, or any
    object with a ``core`` attribute holding one, such as a ``SimEngine``).

    ``http_stats`` adds the ``http_*`` families; ``process_metrics`` the
    (simulated) ``python_*``/``process_*`` families. Not thread-safe with
    respect to the engine: hold the engine's lock while rendering.
    """
    core: EngineModel = engine if isinstance(engine, EngineModel) else engine.core
    key = (core.layout_version, core.config.metrics_version, process_metrics,
           None if http_stats is None else (id(http_stats), http_stats.version))
    cache = core.__dict__.get("_render_layout")
    if cache is None or cache.key != key:
        build = _build_v0 if core.config.metrics_version == "v0" else _build_v1
        if http_stats is not None:
            with http_stats.lock:
                cache = build(core, process_metrics, http_stats, key)
        else:
            cache = build(core, process_metrics, None, key)
        core.__dict__["_render_layout"] = cache
    return cache.render()
