"""Tests against real components (a vLLM engine on CPU, Prometheus).

Slow and opt-in: select them with ``-m real_vllm`` / ``-m real_prometheus``.
"""
