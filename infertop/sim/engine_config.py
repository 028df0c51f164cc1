"""Engine arguments and timing model of a simulated vLLM engine (:class:`EngineConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineConfig"]


@dataclass
class EngineConfig:
    """Engine arguments (``vllm serve`` flags) and the timing model."""

    model_name: str = "meta-llama/Llama-3.1-8B-Instruct"
    #: Value of the V1 ``engine`` label (the data-parallel rank; "0" for a plain server).
    engine_label: str = "0"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 8192
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    scheduling_policy: str = "fcfs"  # or "priority"
    #: ``--max-num-queued-requests``-style admission limit (None: unlimited).
    max_num_queued_reqs: int | None = None
    metrics_version: str = "v1"  # "v1" (vLLM 0.32 names) or "v0" (legacy names)
    # Timing model (seconds); defaults are roughly an 8B model on one H100.
    step_base_s: float = 0.006
    step_per_seq_s: float = 0.00005
    step_per_ctx_token_s: float = 4e-8
    #: ~28.6k prefill tokens/s: an 8B model is ~16 GFLOP a token, an H100 gives ~460 TFLOP/s to a
    #: prefill (~46 % of its dense bf16 peak), so a 2048-token chunk is a ~78 ms step. (5.5e-5 made
    #: every chunked-prefill step ~120 ms: a healthy engine's ITL p95 crossed 100 ms in each burst.)
    prefill_per_token_s: float = 3.5e-5
    step_jitter: float = 0.03
    #: Host-side time per step (scheduling, detokenisation) when the GPU idles.
    step_overhead_s: float = 0.0012
    #: KV bytes per token (for ``cache_config_info`` only).
    kv_bytes_per_token: int = 131072

    def __post_init__(self) -> None:
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduling_policy must be 'fcfs' or 'priority', not {self.scheduling_policy!r}")
        if self.metrics_version not in ("v0", "v1"):
            raise ValueError(f"metrics_version must be 'v0' or 'v1', not {self.metrics_version!r}")
        if self.max_num_seqs < 1 or self.block_size < 1 or self.max_model_len < 2:
            raise ValueError("max_num_seqs, block_size and max_model_len must be positive")
        if self.num_gpu_blocks * self.block_size < self.max_model_len:
            raise ValueError("num_gpu_blocks * block_size must hold at least max_model_len tokens")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs")
