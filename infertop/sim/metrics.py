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

# Formatting helpers (exposition), HTTP statistics (http_stats) and the family
# definitions (metric_families) live in sibling modules; their public names
# are re-exported here.
from .exposition import escape_label_value, format_value
from .http_stats import HTTP_DURATION_BUCKETS, HTTP_EXCLUDED, HTTP_HIGHR_BUCKETS, HttpStats
from .metric_families import _build_v0, _build_v1, cache_config_labels_v0, cache_config_labels_v1
from .model import EngineModel

__all__ = ["render_metrics", "format_value", "HttpStats", "CONTENT_TYPE", "escape_label_value",
           "HTTP_HIGHR_BUCKETS", "HTTP_DURATION_BUCKETS", "HTTP_EXCLUDED", "cache_config_labels_v1",
           "cache_config_labels_v0"]

#: Content type vLLM (prometheus_client) answers ``/metrics`` with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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
