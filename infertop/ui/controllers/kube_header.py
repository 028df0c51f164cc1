"""The Cluster pane's header: context, scope, user, counts, freshness (watching / polling / stale), the
Ctrl+R note, read-only, and the ▶ line of the Kubernetes actions running — else the first problem."""

from __future__ import annotations

import time

from rich.text import Text

from ...domain.kube import ClusterSnapshot
from ...sources.kube import KubeSession


def cluster_header(snap: ClusterSnapshot, session: KubeSession, *, stale: tuple[float, str] | None,
                   all_namespaces: bool, watching: bool, relist_note: str, read_only: bool, error: str | None,
                   running_text: str) -> tuple[Text, list[str]]:
    """The pane's header (context, scope, counts, freshness, the ▶ line or the first problem) and the
    problems it knows of."""
    not_ready = sum(1 for p in snap.pods if not p.ready and not p.terminating)
    gpus = sum(n.gpu_allocatable or 0 for n in snap.nodes)
    header = Text()
    header.append("⎈ ", style="bold")
    header.append(f"{session.context}", style="bold")
    if all_namespaces:
        header.append(" · ")
        header.append("all namespaces", style="bold cyan")
        header.append(f" ({len(snap.namespaces)} with objects) · {session.user or '?'} · ")
    else:
        header.append(f" · ns {', '.join(session.namespaces)} · {session.user or '?'} · ")
    header.append(f"{len(snap.workloads)} workloads, {len(snap.pods)} pods")
    if not_ready:
        header.append(f" ({not_ready} not ready)", style="yellow")
    if "nodes" in snap.absent:  # not "0 nodes/0 GPUs": none could be read
        header.append(f", nodes {snap.absent['nodes']}", style="yellow")
    else:
        header.append(f", {len(snap.nodes)} nodes/{gpus} GPUs")
    if stale is not None:
        header.append(" · stale", style="bold red")
    else:
        header.append(" · watching" if watching else " · polling", style="dim")
    if relist_note:
        header.append(f" · {relist_note}", style="dim")
    if read_only:
        header.append(" · read-only", style="bold yellow")
    problems = list(snap.errors) + ([error] if error else [])
    if stale is not None:
        since = time.strftime("%H:%M:%S", time.localtime(stale[0]))
        problems.insert(0, f"stale since {since}: {stale[1]}")
    if running_text:
        header.append(f"\n▶ {running_text}", style="bold cyan")
    elif problems:
        header.append(f"\n✗ {problems[0]}", style="bold red")
    return header, problems
