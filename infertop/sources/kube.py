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

The parts: :mod:`.kube_session` (session, errors, paged lists),
:mod:`.kube_view` (API objects → domain view, pure), :mod:`.kube_watch`
(informers), :mod:`.kube_perms` (access reviews), :mod:`.kube_load` (pods'
requests in flight); this module reads the cluster once and re-exports them all.

This module never imports textual or rich.
"""

from __future__ import annotations

import time

from ..config import KubeConfig
from ..domain.kube import ClusterSnapshot
from .kube_autoscalers import Discovery, discover_custom_kinds, read_wva_desired
from .kube_load import PodLoad, PodLoadScraper, fetch_pod_load, fetch_pod_loads, pod_load_from_text
from .kube_perms import can_i, namespaces_list
from .kube_session import (
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
from .kube_view import (
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
from .kube_watch import ClusterWatcher, Informer, absent_kinds, rv_too_large

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


# ----------------------------------------------------------- one-shot read

def _refused_everything(raw: RawCluster) -> None:
    """Every read answered 401/403: failing ("unauthorized"), not a fresh, empty cluster."""
    refused = [e for e in raw.errors if "401 Unauthorized" in e or "403 Forbidden" in e]
    pods_and_nodes = any(e.startswith("pods in ") for e in refused) and any(e.startswith("nodes:") for e in refused)
    if pods_and_nodes and len(refused) == len(raw.errors) and not any(raw.items.values()):
        raw.stale_since, raw.stale_error = time.time(), f"unauthorized: every read refused ({refused[0]})"


def read_cluster(session: KubeSession, cfg: KubeConfig | None = None) -> ClusterSnapshot:
    """List everything once: 5 calls per namespace + 1 for nodes (more only past 500 objects a kind).

    What the user may not read becomes ``errors``; an API server that does not answer raises KubeError."""
    cfg = cfg or KubeConfig()
    raw = RawCluster()
    reads: list[tuple[str, int]] = []  # (kind, refusal status or 0): which kinds are absent, and why
    for ns in session.namespaces:
        for kind in NAMESPACED_KINDS:
            try:
                objs, _ = list_all(session, kind, ns, cfg.selector)
            except KubeError as e:
                if e.status == 0 and e.reason != TOO_LARGE:
                    raise  # no answer at all: the next lists would only wait as long again
                if kind != "events" or e.status not in (403,):
                    raw.errors.append(f"{kind} in {ns}: {e}")
                reads.append((kind, e.status if e.status in (403, 404) else 0))
                continue
            reads.append((kind, 0))
            raw.items[kind].extend(objs)
    try:
        raw.items["nodes"], _ = list_all(session, "nodes", None)
        reads.append(("nodes", 0))
    except KubeError as e:
        raw.errors.append(f"nodes: {e}")
        reads.append(("nodes", e.status if e.status in (403, 404) else 0))
    raw.absent = absent_kinds(reads)
    read_custom_kinds(session, raw, cfg)
    _refused_everything(raw)
    return build_snapshot(raw, context=session.context, namespaces=session.namespaces, user=session.user,
                          server=session.server, selector=cfg.selector, container=cfg.vllm_container,
                          metrics_port=cfg.metrics_port)


def read_custom_kinds(session: KubeSession, raw: RawCluster, cfg: KubeConfig) -> None:
    """KEDA ScaledObjects and llm-d VariantAutoscalings, when their types exist (discovery first: an
    absent type costs one GET and is no error), and ``wva_desired_replicas`` when a URL is configured."""
    try:
        found = discover_custom_kinds(session)
    except KubeError as e:
        raw.errors.append(f"autoscaler resources: {e}")
        return
    raw.errors.extend(found.errors)
    for ns in session.namespaces:
        for kind in found.present:
            try:
                raw.items[kind].extend(list_all(session, kind, ns)[0])
            except KubeError as e:
                if e.status != 404:  # removed since discovery: absent, not an error
                    raw.errors.append(f"{kind} in {ns}: {e}")
    if found.present and cfg.wva_metrics_url and "variantautoscalings" in found.present:
        try:
            raw.wva_desired = read_wva_desired(cfg.wva_metrics_url, min(cfg.timeout_s, 5.0))
        except KubeError as e:
            raw.errors.append(str(e))


def cluster_document(cfg: KubeConfig) -> dict:
    """The cluster view as plain data for ``infertop snapshot --json`` (one list per resource);
    a connection problem becomes ``{"error": …}`` rather than an exception."""
    try:
        session = session_for(cfg)
    except KubeError as e:
        return {"context": cfg.context, "error": str(e)}
    try:
        snap = read_cluster(session, cfg)
        doc = snap.to_dict()
        doc["api_calls"] = session.calls
        return doc
    except KubeError as e:
        return {"context": session.context, "error": str(e)}
    finally:
        session.close()
