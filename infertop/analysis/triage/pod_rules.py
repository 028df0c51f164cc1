"""A crash loop as Kubernetes sees it: the engine's pod in CrashLoopBackOff, its restarts and how its
last container ended (OOMKilled) — joined to the engine the pod serves, so the engine's own down/up
"crash-loop" and the pod's are one verdict with the pod's evidence, not two unlinked facts."""

from __future__ import annotations

from .types import CRITICAL, Evidence, Finding, Remedy

LOOPING_RESTARTS = 3  # restarts with the container waiting in CrashLoopBackOff (kubernetes-mixin's is 15 min)
BACKOFF = "CrashLoopBackOff"


def pod_crash_loops(state, active) -> list[Finding]:
    snap = state.cluster.snapshot if state.cluster is not None else None
    if snap is None:
        return []
    by_url = {(e.stats.url or "").rstrip("/"): e.name for e in state.engines if e.stats.url}
    names = {e.name for e in state.engines}
    out = []
    for pod in snap.pods:
        if pod.terminating:
            continue
        subject = _subject(pod, by_url, names)
        backoff = BACKOFF in (pod.status, pod.waiting_reason)
        looping = backoff and pod.restarts >= LOOPING_RESTARTS
        # between back-offs the container runs a few seconds: a raised verdict holds while it is not ready
        still = active("crash-loop", subject) and pod.restarts >= 1 and not pod.ready
        if not (looping or still):
            continue
        engine = subject if subject in names else None
        reason = pod.last_termination_reason or "unknown"
        ev = [Evidence("pod", f"{pod.namespace}/{pod.name} {pod.status}", "Running, ready"),
              Evidence("restarts", str(pod.restarts), f"< {LOOPING_RESTARTS}"),
              Evidence("last termination", reason, "—")]
        if pod.waiting_message:
            ev.append(Evidence("waiting", pod.waiting_message, "—"))
        # p: the log of the container that ended (as p on the pod in the Cluster pane), to its last line
        remedies = [Remedy(f"the previous container's log of pod {pod.name}, to where it ended ({reason})", "p",
                           f"{pod.namespace}/Pod/{pod.name}")]
        if reason == "OOMKilled":
            remedies.insert(0, Remedy("it ran out of memory: lower gpu_memory_utilization or max_num_seqs, or raise "
                                      "the container's memory limit (A: its vLLM args)", "A", _workload(pod)))
        else:
            remedies.append(Remedy("what changed in its args or image before the loop began (R: roll back by "
                                   "restarting with the old spec)", "R", _workload(pod)))
        who = f"{engine} (pod {pod.name})" if engine else f"pod {pod.namespace}/{pod.name}"
        out.append(Finding(
            "crash-loop", subject, CRITICAL,
            f"{who} is crash-looping: {pod.restarts} restarts, the last container ended {reason}"
            + (", back-off before the next start" if backoff else "") + ".",
            tuple(ev), tuple(remedies)))
    return out


def engine_of_pod(pod, by_url: dict[str, str], names: set[str]) -> str | None:
    """The engine a pod serves: by its URL (``by_url``: engine URL → name), else an engine named as the pod
    (the advisor's join, state.advisor.workload_engines; analysis sits below state)."""
    return by_url.get((getattr(pod, "engine_url", None) or "").rstrip("/")) or (pod.name if pod.name in names else None)


def _subject(pod, by_url: dict[str, str], names: set[str]) -> str:
    """The engine the pod serves, else the pod itself."""
    return engine_of_pod(pod, by_url, names) or f"{pod.namespace}/Pod/{pod.name}"


def _workload(pod) -> str:
    return f"{pod.namespace}/{pod.owner_kind}/{pod.owner_name}" if pod.owner_kind and pod.owner_name else ""
