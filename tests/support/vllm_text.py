"""Render small vLLM-shaped /metrics documents for collector tests."""

from __future__ import annotations

TTFT_LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
ITL_LE = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


def _le(x: float) -> str:
    return "+Inf" if x == float("inf") else repr(float(x))


def v1_doc(
    *,
    engines: dict[str, dict] | None = None,
    model: str = "tiny",
) -> str:
    """``engines`` maps engine label -> values: running, waiting, kv, prompt, gen,
    success, preempt, pq, ph (prefix queries/hits), ttft (list of observations)."""
    engines = engines or {"0": {}}
    out = []

    def fam(name, typ, rows):
        out.append(f"# HELP {name} doc")
        out.append(f"# TYPE {name} {typ}")
        out.extend(rows)

    def lab(e, extra=""):
        return f'engine="{e}"{extra},model_name="{model}"'

    fam("vllm:num_requests_running", "gauge", [f"vllm:num_requests_running{{{lab(e)}}} {float(v.get('running', 0))}" for e, v in engines.items()])
    fam("vllm:num_requests_waiting", "gauge", [f"vllm:num_requests_waiting{{{lab(e)}}} {float(v.get('waiting', 0))}" for e, v in engines.items()])
    fam("vllm:kv_cache_usage_perc", "gauge", [f"vllm:kv_cache_usage_perc{{{lab(e)}}} {float(v.get('kv', 0))}" for e, v in engines.items()])
    for key, name in (("prompt", "vllm:prompt_tokens_total"), ("gen", "vllm:generation_tokens_total"),
                      ("preempt", "vllm:num_preemptions_total"), ("pq", "vllm:prefix_cache_queries_total"),
                      ("ph", "vllm:prefix_cache_hits_total")):
        fam(name, "counter", [f"{name}{{{lab(e)}}} {float(v.get(key, 0))}" for e, v in engines.items()])
    rows = []
    for e, v in engines.items():
        ok = float(v.get("success", 0))
        rows.append(f'vllm:request_success_total{{engine="{e}",finished_reason="stop",model_name="{model}"}} {ok}')
        rows.append(f'vllm:request_success_total{{engine="{e}",finished_reason="length",model_name="{model}"}} 1.0')
    fam("vllm:request_success_total", "counter", rows)
    rows = []
    for e, v in engines.items():
        obs = v.get("ttft", [])
        for le in TTFT_LE + (float("inf"),):
            n = float(sum(1 for o in obs if o <= le))
            rows.append(f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="{_le(le)}",model_name="{model}"}} {n}')
        rows.append(f"vllm:time_to_first_token_seconds_count{{{lab(e)}}} {float(len(obs))}")
        rows.append(f"vllm:time_to_first_token_seconds_sum{{{lab(e)}}} {float(sum(obs))}")
    fam("vllm:time_to_first_token_seconds", "histogram", rows)
    return "\n".join(out) + "\n"


def v0_doc(*, running=0, waiting=0, kv=0.0, gen=0.0, tpot=(), model="old") -> str:
    """vLLM 0.8-era V0 names: model_name label only, gpu_cache_usage_perc, TPOT."""
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{model_name="{model}"}} {float(running)}',
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{model_name="{model}"}} {float(waiting)}',
        "# TYPE vllm:num_requests_swapped gauge",
        f'vllm:num_requests_swapped{{model_name="{model}"}} 0.0',
        "# TYPE vllm:gpu_cache_usage_perc gauge",
        f'vllm:gpu_cache_usage_perc{{model_name="{model}"}} {float(kv)}',
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{model_name="{model}"}} {float(gen)}',
        "# TYPE vllm:time_per_output_token_seconds histogram",
    ]
    for le in ITL_LE + (float("inf"),):
        lines.append(f'vllm:time_per_output_token_seconds_bucket{{le="{_le(le)}",model_name="{model}"}} {float(sum(1 for o in tpot if o <= le))}')
    lines.append(f'vllm:time_per_output_token_seconds_count{{model_name="{model}"}} {float(len(tpot))}')
    return "\n".join(lines) + "\n"


def perturb(text: str, k: float) -> str:
    """Same series, new values — what the next scrape of an engine looks like."""
    out = []
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            head, _, v = line.rpartition(" ")
            line = f"{head} {float(v) + k!r}"
        out.append(line)
    return "\n".join(out)
