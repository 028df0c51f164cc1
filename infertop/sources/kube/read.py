"""The cluster read once (``infertop snapshot``, the console's first read): every resource listed, autoscalers discovered."""

from __future__ import annotations

import time

from ...config import KubeConfig
from ...domain.kube import ClusterSnapshot
from .autoscalers import discover_custom_kinds, read_wva_desired
from .session import NAMESPACED_KINDS, TOO_LARGE, KubeError, KubeSession, list_all, session_for
from .view import RawCluster, build_snapshot
from .watch import absent_kinds


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
