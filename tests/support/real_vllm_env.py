"""What every real vLLM engine in the tests runs with: the served model name and the environment
(offline, no usage stats, 1 GiB of KV cache on CPU)."""

SERVED_NAME = "tiny"

ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
