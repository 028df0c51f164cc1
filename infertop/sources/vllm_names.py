"""vLLM metric names (V1 first, then V0 fallbacks) and extraction of the
values infertop needs from one parsed ``/metrics`` document.

One endpoint can carry several label sets (``model_name``/``engine``), e.g.
a data-parallel server; each becomes its own :class:`EngineSample`. At most
``max_label_sets`` of them are kept (the first ones in the document); the
count of all of them is reported so the UI can say what it left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collections.abc import Callable, Sequence

from .expfmt import Exposition, Layout, picker

# field -> names to try in order (first one present wins).
GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prefix_hit_rate_v0": ("vllm:gpu_prefix_cache_hit_rate",),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "requests": ("vllm:request_success_total",),  # summed over finished_reason
    "preemptions": ("vllm:num_preemptions_total",),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds_bucket",),
    "itl": ("vllm:inter_token_latency_seconds_bucket", "vllm:time_per_output_token_seconds_bucket"),
    "e2e": ("vllm:e2e_request_latency_seconds_bucket",),
    "queue": ("vllm:request_queue_time_seconds_bucket", "vllm:time_in_queue_requests_bucket"),
}
V0_ONLY = ("vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc")
CACHE_CONFIG = "vllm:cache_config_info"
#: Every sample name the extractor reads (V1 and V0), for a ``/metrics?name[]=…`` scrape.
SCRAPE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(
    [n for table in (GAUGES, COUNTERS, HISTOGRAMS) for names in table.values() for n in names]
    + [*V0_ONLY, CACHE_CONFIG]))

Key = tuple[str, str]  # (model_name, engine label) — "" when absent
MAX_LABEL_SETS = 64  # engines per endpoint; more is a broken or hostile exporter


@dataclass(slots=True)
class EngineSample:
    """Raw values of one label set from one scrape."""

    key: Key
    gauges: dict[str, float] = field(default_factory=dict)
    # counters and histogram buckets, flattened: "prompt_tokens", "ttft@0.5", ...
    counters: dict[str, float] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Plan:
    """Sample indices per label set, computed once per document layout."""

    keys: list[Key]
    # (key index, field, position in the values read); counters sum several
    gauges: list[tuple[int, str, int]]
    counters: list[tuple[int, str, list[int]]]
    read: Callable[[Sequence], tuple]  # picks the values read, in position order, from a document's values
    version: str
    cache_config: dict[Key, dict[str, str]]
    total_keys: int  # label sets in the document, including those beyond the cap
    # per label set: its counter fields in insertion order, a picker of one value each (a summed
    # field's first), and the summed fields with all their positions (filled in after, in place)
    counter_picks: list[tuple[tuple[str, ...], Callable[[Sequence], tuple], list[tuple[str, list[int]]]]] = \
        field(default_factory=list)


def _key(labels: dict[str, str]) -> Key:
    return (labels.get("model_name", ""), labels.get("engine", ""))


def _le(text: str | None) -> float | None:
    """A bucket bound, or None when it cannot bound a latency or a token count
    (NaN, negative, -Inf, garbage): that bucket is skipped."""
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if v >= 0.0 else None  # False for NaN too


def _plan(layout: Layout, max_keys: int = MAX_LABEL_SETS) -> _Plan:
    index, labels = layout.index, layout.labels
    keys: dict[Key, int] = {}
    extra: set[Key] = set()

    def kid(lab: dict[str, str]) -> int:
        k = _key(lab)
        got = keys.get(k)
        if got is None:
            if len(keys) >= max_keys:
                extra.add(k)
                return -1
            got = keys[k] = len(keys)
        return got

    # Only label sets that carry engine state define engines.
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        for i in index.get(name, ()):
            kid(labels[i])

    gauges: list[tuple[int, str, int]] = []
    for fld, names in GAUGES.items():
        for name in names:
            if name in index:
                for i in index[name]:
                    k = kid(labels[i])
                    if k >= 0:
                        gauges.append((k, fld, i))
                break
    counters: dict[tuple[int, str], list[int]] = {}
    for fld, names in COUNTERS.items():
        for name in names:
            if name in index:
                for i in index[name]:
                    k = kid(labels[i])
                    if k >= 0:
                        counters.setdefault((k, fld), []).append(i)
                break
    for fld, names in HISTOGRAMS.items():
        for name in names:
            if name in index:
                for i in index[name]:
                    le = _le(labels[i].get("le"))
                    if le is None:
                        continue
                    k = kid(labels[i])
                    if k >= 0:
                        counters.setdefault((k, f"{fld}@{le!r}"), []).append(i)
                break
    cache_config: dict[Key, dict[str, str]] = {}
    for i in index.get(CACHE_CONFIG, ()):
        key = _key(labels[i])
        if key in keys:
            cache_config[key] = labels[i]
    has_engine = any(k[1] for k in keys)
    v0 = any(n in index for n in V0_ONLY) or (keys and not has_engine)
    # only the samples read are converted to numbers (see Exposition.values_at)
    read = sorted({i for _, _, i in gauges} | {i for idx in counters.values() for i in idx})
    pos = {i: p for p, i in enumerate(read)}
    planned = [(k, f, [pos[i] for i in idx]) for (k, f), idx in counters.items()]
    by_key: list[list[tuple[str, list[int]]]] = [[] for _ in keys]
    for k, f, idx in planned:
        by_key[k].append((f, idx))
    picks = [(tuple(f for f, _ in mine), picker([idx[0] for _, idx in mine]),
              [(f, idx) for f, idx in mine if len(idx) > 1]) for mine in by_key]
    return _Plan(
        keys=list(keys),
        gauges=[(k, f, pos[i]) for k, f, i in gauges],
        counters=planned,
        read=picker(read),
        version="v0" if v0 else "v1",
        cache_config=cache_config,
        total_keys=len(keys) + len(extra),
        counter_picks=picks,
    )


class Extractor:
    """Turns an :class:`Exposition` into :class:`EngineSample` per label set.

    The plan is cached per layout object, so while an engine's ``/metrics``
    keeps its shape, extraction is a few list lookups.
    """

    __slots__ = ("_layout", "_plan", "max_label_sets")

    def __init__(self, max_label_sets: int = MAX_LABEL_SETS) -> None:
        self._layout: Layout | None = None
        self._plan: _Plan | None = None
        self.max_label_sets = max_label_sets

    @property
    def total_label_sets(self) -> int:
        """Label sets in the last document, including any beyond ``max_label_sets``."""
        return self._plan.total_keys if self._plan is not None else 0

    def extract(self, exp: Exposition) -> tuple[str, list[EngineSample]]:
        """(metrics version "v1"/"v0", samples per label set)."""
        if exp.layout is not self._layout or self._plan is None:
            self._plan = _plan(exp.layout, self.max_label_sets)
            self._layout = exp.layout
        plan = self._plan
        values = exp.values_at(plan.read)
        out = []
        for k, (names, pick, summed) in zip(plan.keys, plan.counter_picks):
            counters = dict(zip(names, pick(values))) if names else {}
            for fld, idx in summed:  # already in place with its first value: it keeps its position
                counters[fld] = sum(values[i] for i in idx)
            out.append(EngineSample(key=k, counters=counters, cache_config=plan.cache_config.get(k, {})))
        for at, fld, i in plan.gauges:  # at: the engine's place in out
            out[at].gauges[fld] = values[i]
        return plan.version, out
