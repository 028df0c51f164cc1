"""Kubernetes reads: Deployments, StatefulSets, Pods, Nodes, HPAs, Events.

The official ``kubernetes`` client is blocking, so everything here is
synchronous and meant to run in thread workers (``asyncio.to_thread`` or a
Textual thread worker). Two ways to read:

- :class:`ClusterWatcher` keeps an informer per resource (list once, then
  watch from the list's resourceVersion, with bookmarks; relist whenever that
  resourceVersion is in doubt; stale, with the error, while reads fail).
  A refresh (:meth:`ClusterWatcher.snapshot`) reads the local cache: no API
  call at all in steady state, one watch event per change.
- :func:`read_cluster` lists every resource once (``infertop snapshot``):
  5 calls per namespace + 1 for nodes, whatever the number of pods, plus one
  discovery call per autoscaler API group and one list per namespace for each
  autoscaler type found (KEDA, llm-d's variant autoscaler).

Responses are read as JSON dicts (``_preload_content=False``): the client's
model deserialisation costs more than the request itself for 50 pods. Bodies
are read in chunks and refused past a byte limit (watch events too).

The parts: :mod:`.session` (session, errors, paged lists),
:mod:`.view` (API objects → domain view, pure), :mod:`.watch`
(informers), :mod:`.perms` (access reviews), :mod:`.load` (pods'
requests in flight); and :mod:`.read` (the cluster read once); the package exports their public names.

This package never imports textual or rich.
"""

from __future__ import annotations

from .autoscalers import Discovery, discover_custom_kinds, read_wva_desired
from .load import PodLoad, PodLoadScraper, fetch_pod_load, fetch_pod_loads, pod_load_from_text
from .perms import can_i, namespaces_list
from .session import (
    CUSTOM_KINDS,
    MAX_BODY_BYTES,
    MAX_WATCH_LINE_BYTES,
    NAMESPACED_KINDS,
    TOO_LARGE,
    KubeError,
    KubeSession,
    as_kube_error,
    describe_api_error,
    kube_contexts,
    list_all,
    session_for,
)
from .view import (
    GPU,
    RESTARTED_AT,
    RawCluster,
    build_snapshot,
    event_view,
    hpa_view,
    node_view,
    parse_time,
    pick_container,
    pod_owner,
    pod_view,
    rollout_status,
    selector_text,
    workload_view,
)
from .watch import ClusterWatcher, Informer, absent_kinds, rv_too_large
from .read import read_cluster, read_custom_kinds, cluster_document

__all__ = [
    "CUSTOM_KINDS",
    "Discovery",
    "GPU",
    "MAX_BODY_BYTES",
    "MAX_WATCH_LINE_BYTES",
    "NAMESPACED_KINDS",
    "RESTARTED_AT",
    "ClusterWatcher",
    "Informer",
    "KubeError",
    "KubeSession",
    "PodLoad",
    "RawCluster",
    "as_kube_error",
    "build_snapshot",
    "can_i",
    "cluster_document",
    "describe_api_error",
    "discover_custom_kinds",
    "event_view",
    "fetch_pod_load",
    "fetch_pod_loads",
    "PodLoadScraper",
    "hpa_view",
    "kube_contexts",
    "list_all",
    "namespaces_list",
    "node_view",
    "parse_time",
    "pick_container",
    "pod_load_from_text",
    "pod_owner",
    "pod_view",
    "read_cluster",
    "read_custom_kinds",
    "rollout_status",
    "rv_too_large",
    "selector_text",
    "session_for",
    "workload_view",
]
