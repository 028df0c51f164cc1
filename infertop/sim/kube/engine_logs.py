"""What a simulated engine's container writes to its log, as vLLM's server does: start-up lines when a pod
takes an engine, then the engine's periodic stats line (vLLM V1's ``loggers.py``) from the engine's own
counters — so ``l`` on a demo pod reads a log that agrees with its metrics."""

from __future__ import annotations

import time
from typing import Any

STATS_EVERY_S = 10.0  # vLLM's default --log-stats interval (VLLM_LOG_STATS_INTERVAL)


def _prefix(at: float, where: str) -> str:
    return f"INFO {time.strftime('%m-%d %H:%M:%S', time.localtime(at))} [{where}]"


def startup_lines(at: float, *, model: str, max_num_seqs: int, port: int) -> str:
    """The lines a vLLM OpenAI server writes as it comes up (abridged to what an operator reads)."""
    p = _prefix
    return (f"{p(at, 'api_server.py:1090')} vLLM API server version 0.9.2\n"
            f"{p(at, 'api_server.py:1091')} args: model='{model}', max_num_seqs={max_num_seqs}, port={port}\n"
            f"{p(at, 'core.py:69')} Initializing a V1 LLM engine (v0.9.2) with config: model='{model}'\n"
            f"{p(at, 'api_server.py:1457')} Starting vLLM API server 0 on http://0.0.0.0:{port}\n"
            f"{p(at, 'launcher.py:29')} Available routes are: /health, /metrics, /v1/models, /v1/completions, "
            "/v1/chat/completions\n"
            f"INFO:     Application startup complete.\n")


class StatsLine:
    """One engine's periodic stats line: throughputs over the interval since the last line."""

    def __init__(self, core: Any, at: float) -> None:
        self._last = self._read(core), at

    @staticmethod
    def _read(core: Any) -> tuple[float, float, float, float]:
        return (float(core.prompt_tokens_total), float(core.generation_tokens_total),
                float(core.prefix_cache_queries_total), float(core.prefix_cache_hits_total))

    def line(self, core: Any, at: float) -> str:
        (prompt0, gen0, queries0, hits0), at0 = self._last
        now = self._read(core)
        self._last = now, at
        span_s = max(at - at0, 1e-9)
        # a restarted engine's counters start again from 0: its delta is what it counted since
        prompt, gen, queries, hits = (b - a if b >= a else b for a, b in zip((prompt0, gen0, queries0, hits0), now))
        hit_pct = 100.0 * hits / queries if queries > 0 else 0.0
        return (f"{_prefix(at, 'loggers.py:122')} Engine 000: Avg prompt throughput: {prompt / span_s:.1f} "
                f"tokens/s, Avg generation throughput: {gen / span_s:.1f} tokens/s, Running: {core.num_running} "
                f"reqs, Waiting: {core.num_waiting} reqs, GPU KV cache usage: {100.0 * core.kv_cache_usage:.1f}%, "
                f"Prefix cache hit rate: {hit_pct:.1f}%\n")
