"""The metric families of a simulated engine: names, HELP texts, labels and value getters.

:func:`_build_v1` lays out what vLLM 0.32 answers on ``/metrics`` (same
families, same order, same HELP text); :func:`_build_v0` the legacy (0.6-0.9)
names. Both add the simulated ``python_*``/``process_*`` families and, given
:class:`HttpStats`, the ``http_*`` ones. :func:`infertop.sim.metrics.render_metrics`
caches the resulting layout.
"""

from __future__ import annotations

from .exposition import _Builder, _hist_values, _Layout
from .http_stats import HttpStats, _add_http
from .model import EngineModel

__all__ = ["cache_config_labels_v1", "cache_config_labels_v0"]


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
