"""Which deployment, model and node each engine of a fleet state belongs to.

For grouping hundreds of engines on screen. Everything comes from the one
fleet state: the model from the engine's own metrics; the node from the GPUs
mapped to the engine (their host), else from its Kubernetes pod, else the
host of its URL; the deployment from its Kubernetes pod's owner. What is not
known is said, never guessed ("no deployment").
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .fleet_types import FleetState

GROUP_BY = ("deployment", "model", "node")
NO_DEPLOYMENT = "(no deployment)"
NO_MODEL = "(no model)"


def _host_port(url: str) -> tuple[str, int | None]:
    try:
        parts = urlsplit(url)
        return parts.hostname or "", parts.port
    except ValueError:
        return "", None


def engine_groups(state: FleetState) -> dict[str, dict[str, str]]:
    """engine name → {"deployment": …, "model": …, "node": …} (O(engines + GPUs + pods))."""
    gpu_node: dict[str, str] = {}
    pod_of: dict[str, str] = {}  # engine → pod name (what dcgm-exporter says runs on its GPU)
    for g in state.gpus:
        if g.engine:
            if g.host:
                gpu_node.setdefault(g.engine, g.host)
            if g.pod:
                pod_of.setdefault(g.engine, g.pod)
    pods_by_name: dict[str, object] = {}
    pods_by_addr: dict[tuple[str, int | None], object] = {}
    snap = state.cluster.snapshot if state.cluster is not None else None
    if snap is not None:
        for p in snap.pods:
            pods_by_name[p.name] = p
            if p.ip:
                pods_by_addr[(p.ip, p.port)] = p
                pods_by_addr.setdefault((p.ip, None), p)
    out: dict[str, dict[str, str]] = {}
    for e in state.engines:
        s = e.stats
        host, port = _host_port(s.url)
        pod = pods_by_name.get(pod_of.get(s.name, "")) or pods_by_addr.get((host, port)) \
            or pods_by_addr.get((host, None)) or pods_by_name.get(s.name)
        node = gpu_node.get(s.name) or (getattr(pod, "node", None) if pod is not None else None) or host or "?"
        out[s.name] = {"deployment": _deployment(pod), "model": s.model or NO_MODEL, "node": node}
    return out


def _deployment(pod) -> str:
    if pod is None or not pod.owner_name:
        return NO_DEPLOYMENT
    name = pod.owner_name
    if pod.owner_kind == "ReplicaSet" and "-" in name:
        name = name.rsplit("-", 1)[0]  # a Deployment's ReplicaSet is <deployment>-<template hash>
    return name
