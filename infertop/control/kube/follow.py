"""Kubernetes actions: following a change to its end.

Rollouts and scales (ready pods, stuck pods, timeouts), deleted pods going
away, the inference-aware pod drain (out of the Service, wait for 0 requests
in flight, then delete or scale down) and the node drain (cordon, evict with
retries while a PodDisruptionBudget says no, wait for the pods to go).
:class:`KubeFollower` is mixed into :class:`infertop.control.kube.execute.KubeControl`,
which provides the session, the config, the clock and the requests. No UI imports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...config import KubeConfig
from ...sources.kube import RESTARTED_AT, KubeError, KubeSession, PodLoad, fetch_pod_load, pod_view, rollout_status
from ..gateway.drain import GatewayError
from .plan import DRAINED_FROM, MERGE, Outcome, Plan, Progress, ProgressFn, _meta

__all__ = ["InformerCache", "KubeFollower"]

_PLURAL = {"Deployment": "deployments", "StatefulSet": "statefulsets", "Pod": "pods"}


def _rv_int(obj: dict | None) -> int | None:
    rv = _meta(obj or {}).get("resourceVersion")
    return int(rv) if isinstance(rv, str) and rv.isdigit() else None


class InformerCache:
    """What a follow reads, from the informers that already watch the cluster (no request).

    Answers only what it knows for sure: the informer of that kind and
    namespace is synced and its watch is up, and (for "gone" and pod lists)
    it watches without a label selector. Otherwise ``None``: the follower
    falls back to a GET. ``watcher`` is a :class:`~infertop.sources.kube.ClusterWatcher`
    (anything with ``informers``).
    """

    def __init__(self, watcher: Any) -> None:
        self.watcher = watcher

    def _informer(self, kind: str, namespace: str | None) -> Any:
        plural = _PLURAL.get(kind)
        for inf in getattr(self.watcher, "informers", ()):
            if inf.kind == plural and inf.namespace == namespace:
                if inf.synced.is_set() and not inf.error and not inf._stop.is_set():
                    return inf
                return None
        return None

    def get(self, kind: str, namespace: str | None, name: str, min_rv: int | None = None
            ) -> tuple[bool, dict | None]:
        """(known, object): known False means "ask the server"; (True, None) means it is gone."""
        inf = self._informer(kind, namespace)
        if inf is None:
            return False, None
        obj = inf.items.get(f"{namespace or ''}/{name}")
        if obj is None:
            return (not inf.selector), None
        if min_rv is not None:
            rv = _rv_int(obj)
            if rv is None or rv < min_rv:
                return False, None  # older than our own write: the watch has not caught up yet
        return True, obj

    def pods(self, namespace: str | None, selector: dict | None) -> list[dict] | None:
        """The pods a workload selects, or None when only the server can say."""
        inf = self._informer("Pod", namespace)
        sel = selector or {}
        if inf is None or inf.selector or sel.get("matchExpressions"):
            return None
        want = sel.get("matchLabels") or {}
        if not want:
            return None
        return [p for p in inf.objects()
                if all((_meta(p).get("labels") or {}).get(k) == v for k, v in want.items())]


#: HTTP statuses that say the API server is not answering now (0: no answer at all), not that a request is wrong
UNREACHABLE_STATUSES = frozenset({0, 429, 500, 502, 503, 504})


def api_unreachable(e: KubeError) -> bool:
    """A read failed because the API server is down or overloaded (retry later), not because of the object."""
    return e.status in UNREACHABLE_STATUSES


def _new_revision(plan: Plan, pod: dict) -> bool:
    """Is ``pod`` made from the template this plan wrote (new args / new restartedAt)?"""
    if plan.action == "args":
        containers = (pod.get("spec") or {}).get("containers") or []
        c = next((c for c in containers if c.get("name") == plan.params.get("container")), None)
        return c is not None and [str(a) for a in c.get("args") or []] == list(plan.params.get("args") or [])
    if plan.action == "restart":
        return (_meta(pod).get("annotations") or {}).get(RESTARTED_AT) == plan.params.get("restarted_at")
    return True


class KubeFollower:
    """The following half of :class:`~infertop.control.kube.execute.KubeControl` (rollouts, pod and node drains).

    Uses from the class it is mixed into: ``session``, ``cfg``, ``poll_s``,
    ``clock``, ``read``, ``pods_of``, ``_fn``, ``_send_patch_pod``, ``_write``
    (the guarded write of a plan's body), ``_delete_pod`` and ``_evict``.
    """

    session: KubeSession
    cfg: KubeConfig
    poll_s: float
    clock: Callable[[], float]
    read: Callable[..., dict]
    pods_of: Callable[..., list[dict]]
    _fn: Callable[..., Callable[..., Any]]
    _send_patch_pod: Callable[..., dict]
    _write: Callable[..., dict]
    _delete_pod: Callable[..., dict]
    _evict: Callable[..., dict]
    cache: InformerCache | None = None

    # ----- reads: the informers' cache while the watch is up, else GET
    def _observe(self, kind: str, namespace: str | None, name: str, min_rv: int | None = None) -> dict:
        if self.cache is not None:
            known, obj = self.cache.get(kind, namespace, name, min_rv)
            if known:
                if obj is None:
                    raise KubeError(f"{kind.lower()} {name} not found (watch)", 404)
                return obj
        return self.read(kind, namespace, name)

    def _observe_pods(self, kind: str, workload: dict) -> list[dict]:
        if self.cache is not None:
            pods = self.cache.pods(_meta(workload).get("namespace"), (workload.get("spec") or {}).get("selector"))
            if pods is not None:
                return pods
        return self.pods_of(kind, workload)

    # ----- following
    def _wait(self, abort: threading.Event, seconds: float | None = None) -> bool:
        """Sleep until the next poll; True when aborted."""
        return abort.wait(self.poll_s if seconds is None else seconds)

    def _pod_problems(self, pods: list[dict]) -> list[str]:
        out = []
        for p in pods:
            v = pod_view(p, self.cfg.vllm_container)
            if v.problem and not v.terminating:
                out.append(f"pod {v.name} {v.problem}")
        return out

    def _follow_workload(self, plan: Plan, progress: ProgressFn, abort: threading.Event, *, rollout: bool,
                         generation: int = 0, is_new: Callable[[dict], bool] = lambda p: True,
                         min_rv: int | None = None) -> Outcome:
        kind, ns, name = plan.kind, plan.namespace, plan.name
        deadline = self.clock() + self.cfg.rollout_timeout_s
        stuck_since: float | None = None
        start_ready: int | None = None
        start_pods: int | None = None
        outage_since: float | None = None
        while True:
            try:
                obj = self._observe(kind, ns, name, min_rv)
                pods = [p for p in self._observe_pods(kind, obj) if not _meta(p).get("deletionTimestamp")]
            except KubeError as e:
                if not api_unreachable(e):
                    raise
                # the change was sent: an API outage says nothing about it, so keep re-checking until the deadline
                outage_since = self.clock() if outage_since is None else outage_since
                unknown = f"outcome unknown — re-checking: the API server does not answer ({e})"
                progress(Progress(unknown, None, countdown_s=deadline - self.clock()))
                if self.clock() >= deadline:
                    return Outcome("unknown", f"{plan.summary}: outcome unknown — the change was sent, then the "
                                              f"API server did not answer for {self.clock() - outage_since:.0f} s "
                                              f"({e})")
                if self._wait(abort):
                    return Outcome("aborted", f"stopped following: {plan.summary}, outcome unknown (the API "
                                              "server does not answer; the change was sent)")
                continue
            outage_since = None
            meta, spec, st = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
            desired = spec.get("replicas", 1)
            if plan.action == "scale" and desired != plan.new:  # read after our write: someone set it back
                by = ", ".join(plan.params.get("owners") or ()) or "someone else (an autoscaler or another client)"
                progress(Progress(f"undone: replicas set back to {desired}", 1.0))
                return Outcome("undone", f"{plan.summary}: undone — replicas set back to {desired} by {by}")
            ready = int(st.get("readyReplicas") or 0)
            if start_ready is None:
                start_ready, start_pods = ready, len(pods)
            state, detail = rollout_status(kind, obj)
            observed = (st.get("observedGeneration") or 0) >= max(generation, meta.get("generation") or 0)
            if rollout:
                updated = int(st.get("updatedReplicas") or 0)
                frac = (min(updated, desired) + min(ready, desired)) / (2 * desired) if desired else 1.0
                text = f"rollout: {detail}"
                done = observed and state == "complete"
            else:
                up = desired >= start_ready
                now_n = ready if up else len(pods)
                start_n = start_ready if up else (start_pods if start_pods is not None else len(pods))
                frac = 1.0 if desired == start_n else (now_n - start_n) / (desired - start_n)
                text = f"{ready}/{desired} ready, {len(pods)} pod(s)"
                done = observed and ready >= desired and len(pods) == desired and int(st.get("replicas") or 0) == desired
            if done:
                progress(Progress(f"done: {detail}" if rollout else f"done: {ready}/{desired} ready", 1.0))
                owners = plan.params.get("owners") or ()
                return Outcome("ok", f"{plan.summary}: " + (f"rollout complete ({detail})" if rollout
                                                            else f"{ready}/{desired} ready")
                               + (f"; {owners[0]} owns the replica count and may set it back" if owners else ""))
            problems = self._pod_problems([p for p in pods if is_new(p)])
            if state == "stuck":
                problems = [detail] + problems
            if problems:
                stuck_since = stuck_since if stuck_since is not None else self.clock()
                text += f" — {problems[0]}"
                if state == "stuck" or self.clock() - stuck_since >= self.cfg.stuck_after_s:
                    progress(Progress(f"stuck: {problems[0]}", max(0.0, min(1.0, frac))))
                    return Outcome("stuck", f"{plan.summary}: stuck — {problems[0]}")
            else:
                stuck_since = None
            progress(Progress(text, max(0.0, min(0.95, frac)), countdown_s=deadline - self.clock()))  # 1.0: done
            if self.clock() >= deadline:
                return Outcome("timeout", f"{plan.summary}: not done after {self.cfg.rollout_timeout_s:g} s ({text})")
            if self._wait(abort):
                return Outcome("aborted", f"stopped following: {text} (the change itself stays applied)")

    def _pod_gone(self, namespace: str | None, name: str, uid: str | None) -> bool:
        try:
            pod = self._observe("Pod", namespace, name)
        except KubeError as e:
            if e.status == 404:
                return True
            raise
        return bool(uid) and _meta(pod).get("uid") != uid

    def _follow_pod_gone(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        deadline = self.clock() + self.cfg.rollout_timeout_s
        while not self._pod_gone(plan.namespace, plan.name, plan.params.get("uid")):
            progress(Progress(f"pod {plan.name} terminating…", 0.5, countdown_s=deadline - self.clock()))
            if self.clock() >= deadline:
                return Outcome("timeout", f"pod {plan.name} still terminating after {self.cfg.rollout_timeout_s:g} s")
            if self._wait(abort):
                return Outcome("aborted", f"stopped following: pod {plan.name} is terminating")
        progress(Progress(f"pod {plan.name} is gone", 1.0))
        return Outcome("ok", f"pod {plan.name} deleted")

    # ----- inference-aware pod drain
    def pod_load(self, pod: dict) -> PodLoad:
        view = pod_view(pod, self.cfg.vllm_container, self.cfg.metrics_port)
        if not view.engine_url:
            return PodLoad(error="the pod has no IP/port to read /metrics from")
        return fetch_pod_load(view.engine_url, min(2.0, self.cfg.timeout_s))

    def _undrain_gateway(self, plan: Plan) -> str:
        """Undrain the engine at the gateway the drain drained it at (a replacement pod's engine behind the
        same gateway entry must get traffic again): the text to append to the outcome."""
        gw = plan.params.get("gateway")
        if gw is None or not plan.params.get("gateway_drained"):
            return ""
        try:
            gw.undrain()
        except GatewayError as e:
            return f"; undraining engine {gw.engine} at {gw.label} FAILED: {e} — it stays drained there"
        plan.params["gateway_drained"] = False
        return f"; engine {gw.engine} undrained at {gw.label}"

    def _restore_labels(self, plan: Plan) -> str:
        removed = plan.params.get("removed") or {}
        if not removed:
            return self._undrain_gateway(plan)
        body = {"metadata": {"labels": dict(removed), "annotations": {DRAINED_FROM: None}}}
        try:
            self._send_patch_pod(plan, body)
        except KubeError as e:
            return f"; restoring the labels FAILED: {e}" + self._undrain_gateway(plan)
        return (f"; labels restored ({', '.join(f'{k}={v}' for k, v in removed.items())}): back in service"
                + self._undrain_gateway(plan))

    def _drain_pod(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        ns, name = plan.namespace, plan.name
        removed = plan.params.get("removed") or {}
        if plan.body is not None:
            progress(Progress("taking the pod out of its Service(s)…", 0.0))
            self._write(plan)  # labels changed since the plan: nothing changed yet, re-confirm
        gw = plan.params.get("gateway")
        if gw is not None:  # the other path traffic takes: the gateway in front of the engine
            progress(Progress(f"draining engine {gw.engine} at {gw.label}…", 0.0))
            try:
                gw.drain()
            except GatewayError as e:
                return Outcome("failed", f"drain of {name}: {e}; nothing deleted{self._restore_labels(plan)}")
            plan.params["gateway_drained"] = True
        deadline = self.clock() + self.cfg.drain_timeout_s
        initial: float | None = None
        zeros = 0
        last = ""
        while True:
            if abort.is_set():
                return Outcome("aborted", f"drain of {name} aborted{self._restore_labels(plan)}")
            try:
                pod = self._observe("Pod", ns, name)
            except KubeError as e:
                if e.status == 404:
                    return Outcome("failed", f"pod {name} disappeared during the drain{self._undrain_gateway(plan)}")
                raise
            if _meta(pod).get("uid") != plan.params.get("uid"):
                return Outcome("failed", f"pod {name} was replaced during the drain{self._undrain_gateway(plan)}")
            load = self.pod_load(pod)
            if load.in_flight is None:
                last = f"cannot read the engine's in-flight requests: {load.error}"
                zeros = 0
            else:
                n = load.in_flight
                initial = n if initial is None else max(initial, n)
                zeros = zeros + 1 if n == 0 else 0
                last = f"in flight: {n:g} (running {load.running or 0:g}, waiting {load.waiting or 0:g})"
                frac = 1.0 if not initial else max(0.0, 1.0 - n / initial)
                if zeros >= 2:
                    progress(Progress("in flight: 0 — the engine is idle", 0.9))
                    break
                progress(Progress(last, frac * 0.9, countdown_s=deadline - self.clock()))
            if load.in_flight is None:
                progress(Progress(last, None, countdown_s=deadline - self.clock()))
            if self.clock() >= deadline:
                return Outcome("timeout", f"drain of {name} timed out after {self.cfg.drain_timeout_s:g} s "
                                          f"({last}){self._restore_labels(plan)}")
            if self._wait(abort):
                return Outcome("aborted", f"drain of {name} aborted ({last}){self._restore_labels(plan)}")
        # in-flight reached 0: remove it
        then = plan.params.get("then") or "delete"
        if then == "scale-down":
            kind, owner = plan.params["owner_kind"], plan.params["owner"]
            wl = self.read(kind, ns, owner)
            n = (wl.get("spec") or {}).get("replicas", 1)
            if kind == "Deployment":
                # delete first (a replacement, if the controller makes one, is the newest and not ready:
                # the ReplicaSet removes it first when the scale-down lands)
                self._delete_pod(ns, name, plan.params.get("uid"))
            fn = self._fn("patch", kind, "scale")
            self.session.raw(fn, owner, ns, {"spec": {"replicas": max(0, n - 1)}}, _content_type=MERGE)
            progress(Progress(f"scaled {kind} {owner} {n} → {n - 1}; waiting for pod {name} to go", 0.95))
        else:
            self._delete_pod(ns, name, plan.params.get("uid"))
            progress(Progress(f"pod {name} deleted; waiting for it to terminate", 0.95))
        deadline = self.clock() + self.cfg.rollout_timeout_s
        while not self._pod_gone(ns, name, plan.params.get("uid")):
            if self.clock() >= deadline:
                return Outcome("timeout", f"pod {name} drained but still terminating")
            if self._wait(abort):
                return Outcome("aborted", f"pod {name} drained and deleted; stopped waiting for it to terminate")
        progress(Progress(f"pod {name} drained and gone", 1.0))
        tail = f", {plan.params['owner_kind']} {plan.params['owner']} scaled down" if then == "scale-down" else ""
        covered = ([", ".join(plan.params.get("services") or [])] if removed else []) + (
            [str(plan.params.get("gateway_label"))] if gw is not None else [])
        return Outcome("ok", f"pod {name} drained (0 in flight) and deleted{tail}"
                       + (f"; it had been taken out of {' and '.join(covered)}" if covered else "")
                       + self._undrain_gateway(plan))

    # ----- node drain
    def _drain_node(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        node = plan.name
        if plan.body is not None:
            progress(Progress(f"cordoning {node}…", 0.0))
            self._write(plan)  # guarded: a cordon the node's status updates never fail
        pods = list(plan.params.get("pods") or [])
        total = len(pods) or 1
        deadline = self.clock() + self.cfg.node_drain_timeout_s
        pending = list(pods)
        evicted: list[tuple[str, str, str]] = []
        retries = 0
        while pending:
            blocked: list[tuple[tuple[str, str, str], str]] = []
            for ns, name, uid in list(pending):
                if abort.is_set():
                    return Outcome("aborted", f"drain of node {node} aborted: {len(evicted)} evicted, "
                                              f"{len(pending)} left; the node stays cordoned")
                try:
                    self._evict(ns, name)
                    evicted.append((ns, name, uid))
                    pending.remove((ns, name, uid))
                    progress(Progress(f"evicted {ns}/{name}", len(evicted) / total * 0.8))
                except KubeError as e:
                    if e.status == 404:
                        pending.remove((ns, name, uid))
                        evicted.append((ns, name, uid))
                    elif e.status == 429:
                        blocked.append(((ns, name, uid), str(e)))
                    else:
                        return Outcome("failed", f"evicting {ns}/{name}: {e}; {len(evicted)} evicted, the node "
                                                 "stays cordoned", e.status)
            if not pending:
                break
            retries += 1
            wait = self.cfg.eviction_retry_s
            (ns, name, _), why = blocked[0]
            end = self.clock() + wait
            while True:
                left = end - self.clock()
                if left <= 0:
                    break
                if self.clock() >= deadline:
                    return Outcome("timeout", f"drain of node {node} timed out after "
                                              f"{self.cfg.node_drain_timeout_s:g} s: {len(pending)} pod(s) blocked "
                                              f"({ns}/{name}: {why}); the node stays cordoned")
                progress(Progress(f"{len(pending)} pod(s) blocked by a disruption budget ({ns}/{name}: {why}); "
                                  f"retry {retries} in {left:.0f} s", len(evicted) / total * 0.8,
                                  countdown_s=deadline - self.clock()))
                if abort.wait(min(1.0, left)):
                    return Outcome("aborted", f"drain of node {node} aborted: {len(evicted)} evicted, "
                                              f"{len(pending)} left; the node stays cordoned")
        # wait until the evicted pods are gone
        while True:
            terminating = [f"{ns}/{name}" for ns, name, uid in evicted if not self._pod_gone(ns, name, uid)]
            if not terminating:
                break
            progress(Progress(f"waiting for {len(terminating)} pod(s) to terminate: {', '.join(terminating[:3])}",
                              0.8 + 0.2 * (1 - len(terminating) / total), countdown_s=deadline - self.clock()))
            if self.clock() >= deadline:
                return Outcome("timeout", f"drain of node {node}: {len(terminating)} pod(s) still terminating")
            if self._wait(abort):
                return Outcome("aborted", f"drain of node {node}: evictions done, stopped waiting for "
                                          f"{len(terminating)} pod(s) to terminate")
        progress(Progress(f"node {node} drained", 1.0))
        extra = f" after {retries} retr{'y' if retries == 1 else 'ies'} on disruption budgets" if retries else ""
        return Outcome("ok", f"node {node} cordoned and drained: {len(evicted)} pod(s) evicted{extra}")
