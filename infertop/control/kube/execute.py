"""Executing a Kubernetes action: :class:`KubeControl` (dry run, guarded write, follow, audit) and
:class:`KubeAction`, its kind in the one pipeline. No UI imports."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ...config import KubeConfig
from ...sources.kube import KubeError, KubeSession, pod_view, selector_text
from ..audit import AuditLog
from ..pipeline import Review, run_audited
from .follow import InformerCache, KubeFollower, _new_revision, _rv_int
from .plan import (
    MERGE,
    DryRun,
    Outcome,
    SpecChanged,
    Plan,
    PlanError,
    Progress,
    ProgressFn,
    _meta,
    guard_changes,
    plan_args,
    plan_configmap,
    plan_hpa,
    plan_restart,
    plan_scale,
    replica_owners,
)
from .evictions import (
    plan_cordon,
    plan_delete_pod,
    plan_drain_node,
    plan_drain_pod,
    with_gateway,
)


WRITE_TRIES = 5  # guarded writes: a 409 from a change elsewhere in the object (status) reads and checks again


def _with_rv(body: dict, rv: str | None) -> dict:
    """``body`` with ``metadata.resourceVersion`` (the patch applies only to exactly that version)."""
    out = dict(body)
    if rv:
        out["metadata"] = dict(out.get("metadata") or {}) | {"resourceVersion": rv}
    return out


class KubeControl(KubeFollower):
    """Reads, dry-runs, executes and follows :class:`Plan` s against one session."""

    def __init__(self, session: KubeSession, audit: AuditLog | None = None, cfg: KubeConfig | None = None, *,
                 poll_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, watcher: Any = None) -> None:
        self.session = session
        self.cache = InformerCache(watcher) if watcher is not None else None
        self.audit = audit
        self.cfg = cfg or KubeConfig()
        self.poll_s = self.cfg.follow_poll_s if poll_s is None else poll_s
        self.clock = clock
        self.wall = wall

    # ----- reads
    def _fn(self, verb: str, kind: str, subresource: str = "") -> Callable[..., Any]:
        s = self.session
        table: dict[tuple[str, str, str], Callable[..., Any]] = {
            ("read", "Deployment", ""): s.apps.read_namespaced_deployment,
            ("read", "StatefulSet", ""): s.apps.read_namespaced_stateful_set,
            ("read", "HorizontalPodAutoscaler", ""): s.autoscaling.read_namespaced_horizontal_pod_autoscaler,
            ("read", "Pod", ""): s.core.read_namespaced_pod,
            ("read", "Node", ""): s.core.read_node,
            ("read", "ConfigMap", ""): s.core.read_namespaced_config_map,
            ("patch", "Deployment", ""): s.apps.patch_namespaced_deployment,
            ("patch", "Deployment", "scale"): s.apps.patch_namespaced_deployment_scale,
            ("patch", "StatefulSet", ""): s.apps.patch_namespaced_stateful_set,
            ("patch", "StatefulSet", "scale"): s.apps.patch_namespaced_stateful_set_scale,
            ("patch", "HorizontalPodAutoscaler", ""): s.autoscaling.patch_namespaced_horizontal_pod_autoscaler,
            ("patch", "Pod", ""): s.core.patch_namespaced_pod,
            ("patch", "Node", ""): s.core.patch_node,
            ("patch", "ConfigMap", ""): s.core.patch_namespaced_config_map,
            ("delete", "Pod", ""): s.core.delete_namespaced_pod,
        }
        return table[(verb, kind, subresource)]

    def read(self, kind: str, namespace: str | None, name: str) -> dict:
        fn = self._fn("read", kind)
        return self.session.raw(fn, name, namespace) if namespace is not None else self.session.raw(fn, name)

    def _list(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> list[dict]:
        return list(self.session.raw(fn, *args, **kw).get("items") or [])

    def pods_of(self, kind: str, workload: dict) -> list[dict]:
        ns = _meta(workload).get("namespace")
        sel = selector_text((workload.get("spec") or {}).get("selector"))
        return self._list(self.session.core.list_namespaced_pod, ns, label_selector=sel)

    def services(self, namespace: str) -> list[dict]:
        return self._list(self.session.core.list_namespaced_service, namespace)

    def configmaps(self, namespace: str) -> list[str]:
        return sorted(n for o in self._list(self.session.core.list_namespaced_config_map, namespace)
                      if isinstance(n := _meta(o).get("name"), str))

    def pods_on_node(self, node: str) -> list[dict]:
        try:
            return self._list(self.session.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")
        except KubeError as e:
            if e.status != 403:
                raise
        out = []  # only namespaced rights: the namespaces infertop watches
        for ns in self.session.namespaces:
            out += self._list(self.session.core.list_namespaced_pod, ns, field_selector=f"spec.nodeName={node}")
        return out

    def pdbs_of(self, pods: list[dict]) -> tuple[list[dict] | None, str]:
        """The PodDisruptionBudgets of the namespaces of ``pods``; (None, why) when one cannot be listed."""
        out: list[dict] = []
        namespaces = {_meta(p).get("namespace") for p in pods}
        for ns in sorted(n for n in namespaces if isinstance(n, str) and n):
            try:
                out += self._list(self.session.policy.list_namespaced_pod_disruption_budget, ns)
            except KubeError as e:
                why = f"forbidden: list poddisruptionbudgets in {ns}" if e.status == 403 else str(e)
                return None, why
        return out, ""

    def replica_owners(self, kind: str, namespace: str | None, name: str) -> list[str]:
        """The HPAs and KEDA ScaledObjects that own this workload's replica count (a list that cannot be
        read counts as none: the scale itself is still checked by the dry run)."""
        hpas: list[dict] = []
        sos: list[dict] = []
        try:
            hpas = self._list(self.session.autoscaling.list_namespaced_horizontal_pod_autoscaler, namespace)
        except KubeError:
            pass
        try:
            fn, _namespaced, _selective = self.session.list_fn("scaledobjects")
            sos = self._list(fn, namespace)
        except KubeError:
            pass  # KEDA not installed (404) or not readable
        return replica_owners(kind, name, hpas, sos)

    # ----- prepare: fresh read + pure plan
    def prepare(self, action: str, kind: str, namespace: str | None, name: str, **params: Any) -> Plan:
        """Read the object now and plan ``action`` on it; raises KubeError or PlanError."""
        if action == "scale":
            obj = self.read(kind, namespace, name)
            return plan_scale(kind, obj, int(params["replicas"]), self.replica_owners(kind, namespace, name))
        if action == "hpa":
            return plan_hpa(self.read("HorizontalPodAutoscaler", namespace, name), params.get("min_replicas"),
                            params.get("max_replicas"))
        if action == "args":
            return plan_args(kind, self.read(kind, namespace, name), params["changes"],
                             params.get("container") or self.cfg.vllm_container)
        if action == "restart":
            return plan_restart(kind, self.read(kind, namespace, name), self.wall())
        if action == "delete_pod":
            return plan_delete_pod(self.read("Pod", namespace, name))
        if action == "drain_pod":
            pod = self.read("Pod", namespace, name)
            view = pod_view(pod)
            owner = None
            if view.owner_kind in ("Deployment", "StatefulSet") and view.owner_name:
                try:
                    owner = self.read(view.owner_kind, namespace, view.owner_name)
                except KubeError as e:
                    if e.status != 404:
                        raise
            plan = plan_drain_pod(pod, self.services(namespace or "default"), owner,
                                  view.owner_kind if owner else None, params.get("then") or self.cfg.drain_then)
            find = params.get("gateway")  # url → (GatewayDrain | None, warnings): the gateway fronting the engine
            if find is None:
                return plan
            engine_url = pod_view(pod, self.cfg.vllm_container, self.cfg.metrics_port).engine_url
            gateway, warnings = find(engine_url)
            return with_gateway(plan, gateway, getattr(gateway, "label", None), warnings)
        if action in ("cordon", "uncordon"):
            return plan_cordon(self.read("Node", None, name), action == "cordon")
        if action == "drain_node":
            pods = self.pods_on_node(name)
            return plan_drain_node(self.read("Node", None, name), pods, *self.pdbs_of(pods))
        if action == "configmap":
            return plan_configmap(self.read("ConfigMap", namespace, name), params["key"], params["value"])
        raise PlanError(f"unknown action {action!r}")

    # ----- requests
    def _patch(self, plan: Plan, body: Any, *, dry_run: bool = False) -> dict:
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        fn = self._fn("patch", plan.kind, plan.subresource)
        if plan.content_type == MERGE:
            kw["_content_type"] = MERGE
        if plan.namespace is not None:
            return self.session.raw(fn, plan.name, plan.namespace, body, **kw)
        return self.session.raw(fn, plan.name, body, **kw)

    def _write(self, plan: Plan) -> dict:
        """Send ``plan.body`` for real, guarded (see the module's docstring).

        Raises :class:`SpecChanged` (nothing sent) when a field the plan was made
        from changed since; a KubeError 409 only when the object kept changing
        through every try.
        """
        err: KubeError | None = None
        for _ in range(WRITE_TRIES):
            live = self.read(plan.kind, plan.namespace, plan.name)
            changed = guard_changes(plan, live)
            if changed:
                raise SpecChanged(f"{plan.kind} {plan.name} changed since it was read ({'; '.join(changed)}): "
                                  "nothing was sent")
            try:
                return self._patch(plan, _with_rv(plan.body, _meta(live).get("resourceVersion")))
            except KubeError as e:
                if e.status != 409:
                    raise
                err = e  # changed between the read and the write: read and check again
        assert err is not None
        raise err

    def _send(self, plan: Plan, *, dry_run: bool) -> dict:
        if plan.action in ("scale", "hpa", "args", "restart", "configmap", "cordon", "uncordon"):
            return self._patch(plan, plan.body, dry_run=True) if dry_run else self._write(plan)
        if plan.action == "delete_pod":
            return self._delete_pod(plan.namespace, plan.name, plan.params.get("uid"), dry_run=dry_run)
        raise PlanError(f"{plan.action} is not a single request")

    def _delete_pod(self, namespace: str | None, name: str, uid: str | None, *, dry_run: bool = False) -> dict:
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        body = V1DeleteOptions(preconditions=V1Preconditions(uid=uid)) if uid else None
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return self.session.raw(self._fn("delete", "Pod"), name, namespace, body=body, **kw)

    def _evict(self, namespace: str, name: str, *, dry_run: bool = False) -> dict:
        from kubernetes.client import V1Eviction, V1ObjectMeta

        body = V1Eviction(metadata=V1ObjectMeta(name=name, namespace=namespace))
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return self.session.raw(self.session.core.create_namespaced_pod_eviction, name, namespace, body, **kw)

    def dry_run(self, plan: Plan) -> DryRun:
        """Send the change with dryRun=All: server-side validation, admission and authorization, no effect."""
        try:
            if plan.action == "drain_pod":
                if plan.body is not None:
                    self._send_patch_pod(plan, plan.body, dry_run=True)
                if plan.params.get("then") == "scale-down":
                    owner = self.read(plan.params["owner_kind"], plan.namespace, plan.params["owner"])
                    n = (owner.get("spec") or {}).get("replicas", 1)
                    fn = self._fn("patch", plan.params["owner_kind"], "scale")
                    self.session.raw(fn, plan.params["owner"], plan.namespace, {"spec": {"replicas": n - 1}},
                                     dry_run="All", _content_type=MERGE)
                self._delete_pod(plan.namespace, plan.name, plan.params.get("uid"), dry_run=True)
                warnings: tuple[str, ...] = ()
                load = self.pod_load(self.read("Pod", plan.namespace, plan.name))
                if load.in_flight is None:
                    warnings = (f"the pod's in-flight requests cannot be read now ({load.error}): the drain takes "
                                f"it out of service, then waits up to {self.cfg.drain_timeout_s:g} s for a "
                                "readable 0; if it never reads 0 it times out and puts the labels back — "
                                "nothing is deleted",)
                    return DryRun(True, "the server accepts the label patch and the deletion (dry run); "
                                        "in flight: unreadable", warnings=warnings)
                return DryRun(True, f"the server accepts the label patch and the deletion (dry run); in flight "
                                    f"now: {load.in_flight:g}")
            if plan.action == "drain_node":
                if plan.body is not None:
                    self.session.raw(self._fn("patch", "Node"), plan.name, plan.body, dry_run="All")
                blocked = []
                for ns, name, _ in plan.params.get("pods") or []:
                    try:
                        self._evict(ns, name, dry_run=True)
                    except KubeError as e:
                        if e.status == 429:
                            blocked.append(f"{ns}/{name} is blocked now: {e}")
                        elif e.status != 404:
                            raise
                msg = "the server accepts the cordon and the evictions (dry run)"
                if plan.params.get("pdb_refusals"):  # each passes alone; counted together they do not
                    msg = ("the server accepts the cordon and each eviction alone (dry run); together they break "
                           "a PodDisruptionBudget: the drain will wait and retry")
                if blocked:
                    msg = (f"dry run: {len(blocked)} eviction(s) blocked by a PodDisruptionBudget for now; "
                           "the drain will wait and retry")
                return DryRun(True, msg, warnings=tuple(blocked))
            self._send(plan, dry_run=True)
            return DryRun(True, "the server accepts the change (dry run)")
        except KubeError as e:
            return DryRun(False, str(e), e.status)

    def _send_patch_pod(self, plan: Plan, body: dict, *, dry_run: bool = False) -> dict:
        kw: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return self.session.raw(self._fn("patch", "Pod"), plan.name, plan.namespace, body, **kw)

    # ----- audit
    def audit_details(self, plan: Plan, dry: DryRun | None = None) -> dict[str, Any]:
        """Who, what, the diff and the dry-run result: the intent line, written before any request."""
        out: dict[str, Any] = {"old": plan.old, "new": plan.new, "diff": plan.diff, "summary": plan.summary,
                               "context": self.session.context, "kube_user": self.session.user,
                               "server": self.session.server}
        if dry is not None:
            out["dry_run_result"] = dry.message
        return out

    def record(self, plan: Plan, outcome: Outcome, *, dry_run: bool = False, **extra: Any) -> None:
        """A one-shot entry (a failed dry run: nothing was sent, so there is no intent)."""
        if self.audit is None:
            return
        self.audit.record(f"kube.{plan.action}", plan.target, outcome.result, old=plan.old, new=plan.new,
                          diff=plan.diff, reason=None if outcome.ok else outcome.message, dry_run=dry_run,
                          summary=plan.summary, message=outcome.message, context=self.session.context,
                          kube_user=self.session.user, server=self.session.server, **extra)

    def record_dry_run_failure(self, plan: Plan, result: DryRun) -> None:
        self.record(plan, Outcome("failed", result.message, result.status), dry_run=True)

    # ----- execute
    def execute(self, plan: Plan, progress: ProgressFn | None = None,
                abort: threading.Event | None = None, dry: DryRun | None = None, *, audited: bool = True) -> Outcome:
        """Audit the intent, do it, follow it, audit the outcome (``audited=False``: the pipeline audits).

        The intent line is on disk before the first request; an audit log that
        cannot be written refuses the action (nothing is sent). A field the plan
        was made from that changed meanwhile (or an object that kept changing)
        returns ``Outcome("conflict")``: re-read, re-plan, re-confirm.
        """
        progress = progress or (lambda p: None)
        abort = abort or threading.Event()

        def run() -> Outcome:
            try:
                return self._execute(plan, progress, abort)
            except KubeError as e:
                return Outcome("conflict" if e.status == 409 else "failed", str(e), e.status)
            except SpecChanged as e:
                return Outcome("conflict", str(e), 409)
            except PlanError as e:
                return Outcome("failed", str(e))

        if not audited:
            return run()
        return run_audited(self.audit, f"kube.{plan.action}", plan.target, self.audit_details(plan, dry), run)

    def _execute(self, plan: Plan, progress: ProgressFn, abort: threading.Event) -> Outcome:
        a = plan.action
        if a == "drain_pod":
            return self._drain_pod(plan, progress, abort)
        if a == "drain_node":
            return self._drain_node(plan, progress, abort)
        before: set[str | None] = set()
        if a == "scale":  # the pods there were: problems of new ones tell why a scale-up is stuck
            before = {_meta(p).get("uid") for p in self.pods_of(plan.kind, self.read(plan.kind, plan.namespace,
                                                                                     plan.name))}
        progress(Progress("sending the change…", 0.0))
        result = self._send(plan, dry_run=False)
        written = _rv_int(result)  # the follow reads nothing older than its own write
        if a in ("scale",):
            return self._follow_workload(plan, progress, abort, rollout=False, min_rv=written,
                                         is_new=lambda p: _meta(p).get("uid") not in before)
        if a in ("args", "restart"):
            gen = (_meta(result).get("generation")) or 0
            return self._follow_workload(plan, progress, abort, rollout=True, generation=gen, min_rv=written,
                                         is_new=lambda p: _new_revision(plan, p))
        if a == "delete_pod":
            return self._follow_pod_gone(plan, progress, abort)
        if a == "hpa":
            return Outcome("ok", f"{plan.summary}; the autoscaler applies it at its next sync")
        if a == "configmap":
            return Outcome("ok", f"{plan.summary}")
        if a in ("cordon", "uncordon"):
            return Outcome("ok", f"node {plan.name} " + ("cordoned" if a == "cordon" else "uncordoned"))
        return Outcome("ok", plan.summary)


# ---------------------------------------------------------------- the pipeline's kind

class KubeAction:
    """A Kubernetes action as the pipeline runs it (:class:`~infertop.control.pipeline.ActionKind`).

    ``plan`` reads the object now and plans (pure diff), ``preflight`` is the
    server dry run, ``execute`` sends and follows; the pipeline (control/runner.py) writes the audit:
    the intent before the first request, the outcome, a failed dry run (nothing was sent).
    """


    def __init__(self, control: KubeControl, action: str, kind: str, namespace: str | None, name: str,
                 **params: Any) -> None:
        self.control, self.kind, self.namespace, self.name = control, kind, namespace, name
        self.verb = action
        self.params = params
        self.action = f"kube.{action}"
        self.target = f"{kind.lower()} {namespace + '/' if namespace else ''}{name}"
        self.object_key = f"kube:{control.session.context}:{kind}/{namespace or ''}/{name}"
        self.abortable = action in ("args", "restart", "delete_pod", "drain_pod", "drain_node", "scale")
        cfg = control.cfg
        self.timeout_s: float | None = {
            "drain_pod": cfg.drain_timeout_s + cfg.rollout_timeout_s, "drain_node": cfg.node_drain_timeout_s,
            "hpa": None, "configmap": None, "cordon": None, "uncordon": None,
        }.get(action, cfg.rollout_timeout_s)
        self.current: Plan | None = None
        self.dry: DryRun | None = None

    def plan(self) -> Review:
        plan = self.control.prepare(self.verb, self.kind, self.namespace, self.name, **self.params)
        self.current, self.dry = plan, None
        s = self.control.session
        notes = list(plan.steps) + [f"! {w}" for w in plan.warnings]
        notes.append(f"context {s.context}, user {s.user or '?'}")
        return Review(plan.title, plan.summary, plan.diff, tuple(notes))

    def preflight(self) -> DryRun:
        assert self.current is not None, "plan() first"
        dry = self.control.dry_run(self.current)
        self.dry = dry
        return dry

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        assert self.current is not None, "plan() first"
        return self.control.execute(self.current, progress, abort, self.dry, audited=False)

    def audit_details(self) -> dict[str, Any]:
        return self.control.audit_details(self.current, self.dry) if self.current is not None else {}
