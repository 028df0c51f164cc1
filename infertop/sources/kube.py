"""Kubernetes reads: Deployments, StatefulSets, Pods, Nodes, HPAs, Events.

The official ``kubernetes`` client is blocking, so everything here is
synchronous and meant to run in thread workers (``asyncio.to_thread`` or a
Textual thread worker). Two ways to read:

- :class:`ClusterWatcher` keeps an informer per resource (list once, then
  watch from the list's resourceVersion, with bookmarks; relist on 410 Gone).
  A refresh (:meth:`ClusterWatcher.snapshot`) reads the local cache: no API
  call at all in steady state, one watch event per change.
- :func:`read_cluster` lists every resource once (``infertop snapshot``):
  5 calls per namespace + 1 for nodes, whatever the number of pods.

Responses are read as JSON dicts (``_preload_content=False``): the client's
model deserialisation costs more than the request itself for 50 pods.

This module never imports textual or rich.
"""

from __future__ import annotations

import datetime as _dt
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import kubernetes
import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from ..config import KubeConfig
from ..domain.kube import (
    ClusterSnapshot,
    EventView,
    HpaView,
    KubeCondition,
    MetricView,
    NodeView,
    PodView,
    WorkloadView,
)
from .expfmt import ParseError, Parser

GPU = "nvidia.com/gpu"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
NAMESPACED_KINDS = ("deployments", "statefulsets", "pods", "hpas", "events")


class KubeError(Exception):
    """A Kubernetes problem, printable as one line; ``status`` is the HTTP code (0: no answer)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


# ----------------------------------------------------------------- errors

def _status_message(exc: ApiException) -> tuple[str, str, dict]:
    """(message, reason, details) from a Status body, when there is one."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body.strip().startswith("{"):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return str(doc.get("message") or ""), str(doc.get("reason") or ""), doc.get("details") or {}
    return str(getattr(exc, "reason", "") or ""), "", {}


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_api_error(exc: BaseException, timeout_s: float | None = None) -> str:
    """One short line for any failure of a Kubernetes call."""
    if isinstance(exc, KubeError):
        return str(exc)
    if isinstance(exc, ApiException):
        status = exc.status or 0
        message, reason, details = _status_message(exc)
        causes = [c.get("message") or c.get("reason") for c in (details.get("causes") or []) if isinstance(c, dict)]
        if status == 401:
            return _one_line("401 Unauthorized: the cluster rejected the credentials (expired token?)")
        if status == 403:
            return _one_line(f"403 Forbidden: {message or 'not allowed'}")
        if status == 404:
            return _one_line(f"404 Not found: {message or 'no such object'}")
        if status == 409:
            return _one_line(f"409 Conflict: {message or 'the object was modified'}")
        if status == 410:
            return _one_line(f"410 Gone: {message or 'resource version too old'}")
        if status == 422:
            return _one_line(f"422 Invalid: {message or 'rejected by validation'}")
        if status == 429:
            extra = f" ({causes[0]})" if causes and causes[0] and causes[0] not in message else ""
            return _one_line(f"429 Too many requests: {message or 'try again later'}{extra}")
        if status >= 500:
            return _one_line(f"{status} server error: {message or reason or 'internal error'}")
        if status == 0:
            return _one_line(f"no answer from the API server: {message or reason or exc}")
        return _one_line(f"{status} {reason or 'error'}: {message}")
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        exc = exc.reason or exc
    if isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError, socket.timeout)) and not isinstance(
            exc, urllib3.exceptions.NewConnectionError):  # (a NewConnectionError is a ConnectTimeoutError)
        return f"timeout after {timeout_s:g} s" if timeout_s else "timeout"
    if isinstance(exc, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.NameResolutionError)):
        inner = exc
        text = str(inner).lower()
        if "refused" in text:
            return "cannot reach the API server: connection refused"
        if "name or service" in text or "nodename" in text or "resolve" in text:
            return "cannot reach the API server: unknown host"
        return _one_line(f"cannot reach the API server: {inner}")
    if isinstance(exc, (urllib3.exceptions.ProtocolError, ConnectionError, OSError)):
        return _one_line(f"connection to the API server failed: {exc}")
    if isinstance(exc, ConfigException):
        return _one_line(f"kubeconfig: {exc}")
    return _one_line(f"{type(exc).__name__}: {exc}")


def as_kube_error(exc: BaseException, timeout_s: float | None = None) -> KubeError:
    if isinstance(exc, KubeError):
        return exc
    status = exc.status if isinstance(exc, ApiException) else 0
    reason = _status_message(exc)[1] if isinstance(exc, ApiException) else ""
    return KubeError(describe_api_error(exc, timeout_s), status or 0, reason)


# ---------------------------------------------------------------- session

def kube_contexts(kubeconfig: str | None = None) -> tuple[list[str], str | None]:
    """Context names in the kubeconfig and the current one."""
    try:
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError) as e:
        raise KubeError(describe_api_error(e)) from None
    return [c["name"] for c in contexts or []], (active or {}).get("name")


class KubeSession:
    """One kubeconfig context: an API client, who we are, which namespaces."""

    def __init__(self, api_client: Any, context: str, user: str, namespaces: list[str], *,
                 timeout_s: float = 10.0, kubeconfig: str | None = None) -> None:
        self.api_client = api_client
        self.context = context
        self.user = user
        self.namespaces = list(namespaces)
        self.timeout_s = timeout_s
        self.kubeconfig = kubeconfig
        self.server = str(api_client.configuration.host)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.autoscaling = kubernetes.client.AutoscalingV2Api(api_client)
        self.authz = kubernetes.client.AuthorizationV1Api(api_client)
        self.policy = kubernetes.client.PolicyV1Api(api_client)
        self._calls = 0
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None,
                namespaces: Iterable[str] = (), *, timeout_s: float = 10.0) -> "KubeSession":
        """Load the kubeconfig (no request is made); raises KubeError."""
        try:
            contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
        except (ConfigException, OSError) as e:
            where = kubeconfig or kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION
            raise KubeError(f"no usable kubeconfig at {where}: {_one_line(str(e), 160)}") from None
        by_name = {c["name"]: c for c in contexts or []}
        name = context or (active or {}).get("name")
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise KubeError(f"context {name!r} is not in the kubeconfig (contexts: {known})")
        ctx = by_name[name].get("context") or {}
        try:
            conf = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(config_file=kubeconfig, context=name, client_configuration=conf,
                                               persist_config=False)
        except (ConfigException, OSError, ValueError) as e:
            raise KubeError(describe_api_error(e)) from None
        conf.retries = 0  # no silent triple wait: informers retry themselves, actions show the error
        api_client = kubernetes.client.ApiClient(configuration=conf)
        ns = [n for n in namespaces if n] or [ctx.get("namespace") or "default"]
        return cls(api_client, name, str(ctx.get("user") or ""), ns, timeout_s=timeout_s, kubeconfig=kubeconfig)

    @property
    def calls(self) -> int:
        """API requests made through this session (lists, gets, watches, writes)."""
        return self._calls

    def count(self, n: int = 1) -> None:
        with self._lock:
            self._calls += n

    def raw(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None, **kw: Any) -> Any:
        """Call a client method and return the JSON body as plain data; raises KubeError."""
        t = timeout_s or self.timeout_s
        self.count()
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=t, **kw)
            try:
                data = resp.data
            finally:
                resp.release_conn()
        except Exception as e:  # noqa: BLE001 — every failure becomes one line
            raise as_kube_error(e, t) from None
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError:
            raise KubeError("the API server answered something that is not JSON") from None

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:  # noqa: BLE001
            pass

    # the list functions per resource, each (callable, namespaced?, uses the label selector?)
    def list_fn(self, kind: str) -> tuple[Callable[..., Any], bool, bool]:
        return {
            "deployments": (self.apps.list_namespaced_deployment, True, True),
            "statefulsets": (self.apps.list_namespaced_stateful_set, True, True),
            "pods": (self.core.list_namespaced_pod, True, True),
            "hpas": (self.autoscaling.list_namespaced_horizontal_pod_autoscaler, True, False),
            "events": (self.core.list_namespaced_event, True, False),
            "nodes": (self.core.list_node, False, False),
        }[kind]


def session_for(cfg: KubeConfig, context: str | None = None, namespaces: Iterable[str] | None = None
                ) -> KubeSession:
    return KubeSession.connect(cfg.kubeconfig, context or cfg.context,
                               cfg.namespaces if namespaces is None else namespaces, timeout_s=cfg.timeout_s)


# ---------------------------------------------------------- conversions

def parse_time(value: Any) -> float | None:
    """RFC 3339 timestamp → epoch seconds."""
    if not value or not isinstance(value, str):
        return None
    try:
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _conditions(raw: Any) -> tuple[KubeCondition, ...]:
    out = []
    for c in raw or []:
        if isinstance(c, dict) and c.get("type"):
            out.append(KubeCondition(str(c["type"]), str(c.get("status") or "Unknown"), str(c.get("reason") or ""),
                                     str(c.get("message") or ""), c.get("lastTransitionTime")))
    return tuple(out)


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _quantity_int(v: Any) -> int | None:
    """An integer quantity ("8", 8); fractional or suffixed values → None."""
    if v is None:
        return None
    try:
        return int(str(v))
    except ValueError:
        return None


def selector_text(selector: Any) -> str:
    labels = (selector or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def pick_container(containers: list[dict], wanted: str = "") -> dict | None:
    """The vLLM container: the named one, else one whose image or name says vllm, else the first."""
    if not containers:
        return None
    if wanted:
        for c in containers:
            if c.get("name") == wanted:
                return c
    for c in containers:
        if "vllm" in str(c.get("name", "")).lower() or "vllm" in str(c.get("image", "")).lower():
            return c
    return containers[0]


def _first_port(container: dict | None) -> int | None:
    for p in (container or {}).get("ports") or []:
        if p.get("containerPort"):
            return int(p["containerPort"])
    return None


def pod_owner(pod: dict) -> tuple[str | None, str | None]:
    """The workload that owns a pod: a ReplicaSet is mapped to its Deployment."""
    meta = pod.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if not ref:
        return None, None
    kind, name = ref.get("kind"), ref.get("name")
    if kind == "ReplicaSet" and name:
        h = (meta.get("labels") or {}).get("pod-template-hash")
        if h and name.endswith("-" + h):
            return "Deployment", name[: -len(h) - 1]
        if "-" in name:
            return "Deployment", name.rsplit("-", 1)[0]
    return kind, name


def pod_view(pod: dict, container_name: str = "", port_override: int | None = None) -> PodView:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    main = pick_container(containers, container_name)
    statuses = status.get("containerStatuses") or []
    ready_n = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    main_status = next((cs for cs in statuses if main and cs.get("name") == main.get("name")),
                       statuses[0] if statuses else {})
    waiting = ((main_status or {}).get("state") or {}).get("waiting") or {}
    last_term = ((main_status or {}).get("lastState") or {}).get("terminated") or {}
    terminated_now = ((main_status or {}).get("state") or {}).get("terminated") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    ready = (conds.get("Ready") or {}).get("status") == "True"
    sched = conds.get("PodScheduled") or {}
    unsched = sched.get("message") if sched.get("status") == "False" else None
    phase = str(status.get("phase") or "Unknown")
    terminating = bool(meta.get("deletionTimestamp"))
    # kubectl's STATUS column, roughly: the waiting/terminated reason wins over the phase
    text = phase
    for cs in statuses:
        st = cs.get("state") or {}
        if st.get("waiting", {}).get("reason") and st["waiting"]["reason"] != "ContainerCreating" or (
                st.get("waiting") and phase != "Running"):
            text = st["waiting"].get("reason") or text
            break
        if st.get("terminated", {}).get("reason"):
            text = st["terminated"]["reason"]
            break
    if phase == "Pending" and unsched:
        text = "Pending"
    if terminating:
        text = "Terminating"
    gpus = 0
    for c in containers:
        res = c.get("resources") or {}
        gpus += _quantity_int((res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU)) or 0
    owner_kind, owner_name = pod_owner(pod)
    return PodView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        phase=phase,
        status=text,
        ready=ready,
        ready_text=f"{ready_n}/{len(containers)}",
        restarts=restarts,
        node=spec.get("nodeName"),
        created_ts=parse_time(meta.get("creationTimestamp")),
        ip=status.get("podIP"),
        port=port_override or _first_port(main) or (8000 if main else None),
        owner_kind=owner_kind,
        owner_name=owner_name,
        container=(main or {}).get("name"),
        image=(main or {}).get("image"),
        args=tuple(str(a) for a in (main or {}).get("args") or ()),
        waiting_reason=waiting.get("reason"),
        waiting_message=waiting.get("message"),
        last_termination_reason=last_term.get("reason") or terminated_now.get("reason"),
        unschedulable_message=unsched,
        terminating=terminating,
        gpus=gpus,
        labels=dict(meta.get("labels") or {}),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def rollout_status(kind: str, obj: dict) -> tuple[str, str]:
    """(state, detail) as ``kubectl rollout status`` judges it: complete, progressing, stuck, waiting."""
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    desired = spec.get("replicas", 1)
    gen, observed = meta.get("generation") or 0, st.get("observedGeneration") or 0
    if observed < gen:
        return "waiting", "waiting for the controller to see the new spec"
    updated = int(st.get("updatedReplicas") or 0)
    replicas = int(st.get("replicas") or 0)
    ready = int(st.get("readyReplicas") or 0)
    if kind == "Deployment":
        available = int(st.get("availableReplicas") or 0)
        for c in st.get("conditions") or []:
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
                return "stuck", f"progress deadline exceeded: {c.get('message') or ''}".strip()
        if spec.get("paused"):
            return "paused", "rollout paused"
        if updated < desired:
            return "progressing", f"{updated} of {desired} updated"
        if replicas > updated:
            return "progressing", f"{replicas - updated} old replica(s) terminating"
        if available < updated:
            return "progressing", f"{available} of {updated} updated available"
        return "complete", f"{available} of {desired} available"
    # StatefulSet
    if ready < desired:
        return "progressing", f"{ready} of {desired} ready"
    if st.get("updateRevision") and st.get("currentRevision") != st.get("updateRevision"):
        partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition") or 0
        if updated < desired - partition:
            return "progressing", f"{updated} of {desired} updated"
    if replicas > desired:
        return "progressing", f"{replicas - desired} extra replica(s) terminating"
    return "complete", f"{ready} of {desired} ready"


def workload_view(kind: str, obj: dict, container_name: str = "") -> WorkloadView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    tpl_spec = ((spec.get("template") or {}).get("spec") or {})
    main = pick_container(tpl_spec.get("containers") or [], container_name)
    state, detail = rollout_status(kind, obj)
    return WorkloadView(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        desired=_int(spec.get("replicas", 1)),
        current=_int(st.get("replicas") or 0),
        ready=int(st.get("readyReplicas") or 0),
        updated=int(st.get("updatedReplicas") or 0),
        available=int(st.get("availableReplicas") or (st.get("readyReplicas") if kind == "StatefulSet" else 0) or 0),
        generation=_int(meta.get("generation")),
        observed_generation=_int(st.get("observedGeneration")),
        rollout=state,
        rollout_detail=detail,
        conditions=_conditions(st.get("conditions")),
        selector=selector_text(spec.get("selector")),
        container=(main or {}).get("name"),
        image=(main or {}).get("image"),
        args=tuple(str(a) for a in (main or {}).get("args") or ()),
        labels=dict(meta.get("labels") or {}),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _metric_key(m: dict) -> tuple[str, str]:
    t = str(m.get("type") or "")
    body = m.get({"Pods": "pods", "Resource": "resource", "Object": "object", "External": "external",
                  "ContainerResource": "containerResource"}.get(t, ""), {}) or {}
    name = body.get("name") or (body.get("metric") or {}).get("name") or "?"
    return t, str(name)


def _metric_value(v: dict | None, pct_suffix: bool = True) -> str | None:
    if not v:
        return None
    if v.get("averageUtilization") is not None:
        return f"{v['averageUtilization']}%"
    for k in ("averageValue", "value"):
        if v.get(k) is not None:
            return str(v[k])
    return None


def hpa_view(obj: dict) -> HpaView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    current = {_metric_key(m): m for m in st.get("currentMetrics") or [] if isinstance(m, dict)}
    metrics = []
    for m in spec.get("metrics") or []:
        if not isinstance(m, dict):
            continue
        key = _metric_key(m)
        field_name = {"Pods": "pods", "Resource": "resource", "Object": "object", "External": "external",
                      "ContainerResource": "containerResource"}.get(key[0], "")
        target = (m.get(field_name) or {}).get("target")
        cur = (current.get(key, {}).get(field_name) or {}).get("current")
        metrics.append(MetricView(key[1], key[0], _metric_value(cur), _metric_value(target)))
    return HpaView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        target_kind=str(ref.get("kind") or ""),
        target_name=str(ref.get("name") or ""),
        min_replicas=_int(spec.get("minReplicas", 1)),
        max_replicas=_int(spec.get("maxReplicas")),
        current_replicas=_int(st.get("currentReplicas")),
        desired_replicas=_int(st.get("desiredReplicas")),
        metrics=tuple(metrics),
        conditions=_conditions(st.get("conditions")),
        last_scale_time=st.get("lastScaleTime"),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def node_view(obj: dict, gpu_requested: int = 0) -> NodeView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conds = _conditions(st.get("conditions"))
    ready_c = next((c for c in conds if c.type == "Ready"), None)
    taints = tuple(f"{t.get('key')}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect')}"
                   for t in spec.get("taints") or [] if isinstance(t, dict))
    return NodeView(
        name=str(meta.get("name") or ""),
        gpu_capacity=_quantity_int((st.get("capacity") or {}).get(GPU)),
        gpu_allocatable=_quantity_int((st.get("allocatable") or {}).get(GPU)),
        gpu_requested=gpu_requested,
        gpu_product=(meta.get("labels") or {}).get("nvidia.com/gpu.product"),
        cordoned=bool(spec.get("unschedulable")),
        ready=None if ready_c is None else ready_c.status == "True",
        conditions=conds,
        taints=taints,
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def event_view(obj: dict) -> EventView:
    inv = obj.get("involvedObject") or obj.get("regarding") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or (obj.get("series") or {}).get("lastObservedTime") \
        or obj.get("firstTimestamp") or (obj.get("metadata") or {}).get("creationTimestamp")
    return EventView(
        namespace=str((obj.get("metadata") or {}).get("namespace") or inv.get("namespace") or ""),
        type=str(obj.get("type") or "Normal"),
        reason=str(obj.get("reason") or ""),
        message=_one_line(str(obj.get("message") or obj.get("note") or ""), 400),
        kind=str(inv.get("kind") or ""),
        name=str(inv.get("name") or ""),
        count=int(obj.get("count") or (obj.get("series") or {}).get("count") or 1),
        last_seen_ts=parse_time(last),
        component=str((obj.get("source") or {}).get("component") or obj.get("reportingComponent") or ""),
    )


@dataclass
class RawCluster:
    """Objects as the API returned them, per resource kind."""

    items: dict[str, list[dict]] = field(default_factory=lambda: {k: [] for k in (*NAMESPACED_KINDS, "nodes")})
    errors: list[str] = field(default_factory=list)
    synced: bool = True


def build_snapshot(raw: RawCluster, *, context: str, namespaces: Iterable[str], user: str = "", server: str = "",
                   selector: str = "", container: str = "", metrics_port: int | None = None,
                   now: float | None = None, max_events: int = 300) -> ClusterSnapshot:
    """Pure: API objects → the Cluster pane's view."""
    items = raw.items
    workloads = [workload_view("Deployment", o, container) for o in items.get("deployments", [])]
    workloads += [workload_view("StatefulSet", o, container) for o in items.get("statefulsets", [])]
    workloads.sort(key=lambda w: (w.namespace, w.name, w.kind))
    pods = sorted((pod_view(o, container, metrics_port) for o in items.get("pods", [])),
                  key=lambda p: (p.namespace, p.owner_name or "", p.name))
    shown = {(w.kind, w.namespace, w.name) for w in workloads}
    hpas = [hpa_view(o) for o in items.get("hpas", [])]
    if selector:
        hpas = [h for h in hpas if (h.target_kind, h.namespace, h.target_name) in shown]
    hpas.sort(key=lambda h: (h.namespace, h.name))
    gpu_by_node: dict[str, int] = {}
    pod_nodes = set()
    for p in pods:
        if p.node:
            pod_nodes.add(p.node)
            if not p.terminating:
                gpu_by_node[p.node] = gpu_by_node.get(p.node, 0) + p.gpus
    nodes = []
    for o in items.get("nodes", []):
        n = node_view(o, gpu_by_node.get((o.get("metadata") or {}).get("name", ""), 0))
        if n.gpu_capacity or n.name in pod_nodes:
            nodes.append(n)
    nodes.sort(key=lambda n: n.name)
    # events of the objects shown (and of the ReplicaSets behind the Deployments)
    names = {("Pod", p.namespace, p.name) for p in pods}
    names |= {(w.kind, w.namespace, w.name) for w in workloads}
    names |= {("HorizontalPodAutoscaler", h.namespace, h.name) for h in hpas}
    deploy_prefixes = {(w.namespace, w.name + "-") for w in workloads if w.kind == "Deployment"}
    node_names = {n.name for n in nodes}
    events = []
    for o in items.get("events", []):
        e = event_view(o)
        if (e.kind, e.namespace, e.name) in names or (e.kind == "Node" and e.name in node_names) or (
                e.kind == "ReplicaSet" and any(e.namespace == ns and e.name.startswith(pre)
                                               for ns, pre in deploy_prefixes)):
            events.append(e)
    events.sort(key=lambda e: (not e.warning, -(e.last_seen_ts or 0.0)))
    return ClusterSnapshot(
        context=context,
        namespaces=tuple(namespaces),
        taken_at=time.time() if now is None else now,
        user=user,
        server=server,
        workloads=tuple(workloads),
        pods=tuple(pods),
        nodes=tuple(nodes),
        hpas=tuple(hpas),
        events=tuple(events[:max_events]),
        errors=tuple(raw.errors),
        synced=raw.synced,
    )


# ----------------------------------------------------------- one-shot read

def list_all(session: KubeSession, kind: str, namespace: str | None, selector: str = "",
             page: int = 500) -> tuple[list[dict], str]:
    """Every object of ``kind`` (paged), and the list's resourceVersion."""
    fn, namespaced, selective = session.list_fn(kind)
    args = (namespace,) if namespaced else ()
    kw: dict[str, Any] = {"limit": page}
    if selective and selector:
        kw["label_selector"] = selector
    out: list[dict] = []
    rv = ""
    cont = None
    while True:
        if cont:
            kw["_continue"] = cont
        body = session.raw(fn, *args, **kw)
        out.extend(body.get("items") or [])
        meta = body.get("metadata") or {}
        rv = str(meta.get("resourceVersion") or rv)
        cont = meta.get("continue")
        if not cont:
            return out, rv


def read_cluster(session: KubeSession, cfg: KubeConfig | None = None) -> ClusterSnapshot:
    """List everything once: 5 calls per namespace + 1 for nodes (more only past 500 objects a kind)."""
    cfg = cfg or KubeConfig()
    raw = RawCluster()
    for ns in session.namespaces:
        for kind in NAMESPACED_KINDS:
            try:
                objs, _ = list_all(session, kind, ns, cfg.selector)
            except KubeError as e:
                if kind != "events" or e.status not in (403,):
                    raw.errors.append(f"{kind} in {ns}: {e}")
                continue
            raw.items[kind].extend(objs)
    try:
        raw.items["nodes"], _ = list_all(session, "nodes", None)
    except KubeError as e:
        raw.errors.append(f"nodes: {e}")
    return build_snapshot(raw, context=session.context, namespaces=session.namespaces, user=session.user,
                          server=session.server, selector=cfg.selector, container=cfg.vllm_container,
                          metrics_port=cfg.metrics_port)


# --------------------------------------------------------------- informers

class Informer:
    """List once, then watch from the list's resourceVersion; keeps every object in memory.

    Runs in its own daemon thread. A watch that ends (server timeout) resumes
    from the last resourceVersion seen (bookmarks keep it fresh); 410 Gone
    relists; other errors back off (1 s doubling to 30 s) and are reported in
    :attr:`error`.
    """

    def __init__(self, session: KubeSession, kind: str, namespace: str | None, selector: str = "",
                 on_change: Callable[[], None] | None = None, watch_timeout_s: int = 300) -> None:
        self.session = session
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.on_change = on_change or (lambda: None)
        self.watch_timeout_s = watch_timeout_s
        self.items: dict[str, dict] = {}
        self.resource_version: str | None = None
        self.error: str | None = None
        self.status: int = 0
        self.synced = threading.Event()
        self.lists = 0
        self.watches = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"kube-informer-{kind}-{namespace or 'cluster'}",
                                        daemon=True)

    def start(self) -> "Informer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            conn = getattr(resp, "connection", None)
            sock = getattr(conn, "sock", None) if conn else None
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def join(self, timeout: float = 2.0) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def objects(self) -> list[dict]:
        with self._lock:
            return list(self.items.values())

    @staticmethod
    def _key(obj: dict) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._relist()
                self._watch()
                backoff = 1.0
            except KubeError as e:
                if self._stop.is_set():
                    return
                if e.status == 410:
                    self.resource_version = None
                    continue
                self.error, self.status = str(e), e.status
                if e.status in (401, 403, 404):
                    self.synced.set()  # read as far as we are allowed: say so, do not hang
                self._stop.wait(backoff)
                backoff = min(30.0, backoff * 2)
            except Exception as e:  # noqa: BLE001 — a broken stream: resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self.error = describe_api_error(e, self.session.timeout_s)
                self._stop.wait(backoff)
                backoff = min(30.0, backoff * 2)

    def _relist(self) -> None:
        objs, rv = list_all(self.session, self.kind, self.namespace, self.selector)
        self.lists += 1
        with self._lock:
            self.items = {self._key(o): o for o in objs}
            self.resource_version = rv or None
            self.error, self.status = None, 0
        self.synced.set()
        self.on_change()

    def _watch(self) -> None:
        fn, namespaced, selective = self.session.list_fn(self.kind)
        args = (self.namespace,) if namespaced else ()
        kw: dict[str, Any] = {"watch": True, "allow_watch_bookmarks": True, "timeout_seconds": self.watch_timeout_s,
                              "_preload_content": False}
        if self.resource_version:
            kw["resource_version"] = self.resource_version
        if selective and self.selector:
            kw["label_selector"] = self.selector
        self.session.count()
        self.watches += 1
        try:
            resp = fn(*args, _request_timeout=(self.session.timeout_s, self.watch_timeout_s + 30), **kw)
        except Exception as e:  # noqa: BLE001
            raise as_kube_error(e, self.session.timeout_s) from None
        self._resp = resp
        try:
            if self._stop.is_set():
                return
            for line in iter_resp_lines(resp):
                if not line.strip():
                    continue
                ev = json.loads(line)
                etype, obj = ev.get("type"), ev.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code") or 0)
                    if code == 410:
                        self.resource_version = None
                        return
                    raise KubeError(_one_line(f"{code} watch error: {obj.get('message')}"), code)
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "BOOKMARK":
                    if rv:
                        self.resource_version = rv
                    continue
                with self._lock:
                    if etype == "DELETED":
                        self.items.pop(self._key(obj), None)
                    else:
                        self.items[self._key(obj)] = obj
                    if rv:
                        self.resource_version = rv
                    self.error, self.status = None, 0
                self.on_change()
                if self._stop.is_set():
                    return
        finally:
            self._resp = None
            try:
                resp.close()
                resp.release_conn()
            except Exception:  # noqa: BLE001
                pass


class ClusterWatcher:
    """Informers for every resource of the Cluster pane; :meth:`snapshot` reads their caches."""

    def __init__(self, session: KubeSession, cfg: KubeConfig | None = None, *, watch_timeout_s: int = 300) -> None:
        self.session = session
        self.cfg = cfg or KubeConfig()
        self._version = 0
        self._vlock = threading.Lock()
        self._cached: tuple[int, ClusterSnapshot] | None = None
        self.informers: list[Informer] = []
        for ns in session.namespaces:
            for kind in NAMESPACED_KINDS:
                self.informers.append(Informer(session, kind, ns, self.cfg.selector, self._changed, watch_timeout_s))
        self.informers.append(Informer(session, "nodes", None, "", self._changed, watch_timeout_s))

    def _changed(self) -> None:
        with self._vlock:
            self._version += 1

    @property
    def version(self) -> int:
        """Grows with every change seen; a refresh only rebuilds when it moved."""
        return self._version

    def start(self) -> "ClusterWatcher":
        for inf in self.informers:
            inf.start()
        return self

    def stop(self) -> None:
        for inf in self.informers:
            inf.stop()

    def join(self, timeout: float = 2.0) -> None:
        for inf in self.informers:
            inf.join(timeout)

    @property
    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def wait_synced(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        for inf in self.informers:
            if not inf.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def snapshot(self) -> ClusterSnapshot:
        """The current view, from memory (no API call); rebuilt only when something changed."""
        version = self._version
        if self._cached is not None and self._cached[0] == version:
            return self._cached[1]
        raw = RawCluster(synced=self.synced)
        for inf in self.informers:
            raw.items[inf.kind].extend(inf.objects())
            if inf.error and not (inf.kind == "events" and inf.status == 403):
                where = f" in {inf.namespace}" if inf.namespace else ""
                raw.errors.append(f"{inf.kind}{where}: {inf.error}")
        snap = build_snapshot(raw, context=self.session.context, namespaces=self.session.namespaces,
                              user=self.session.user, server=self.session.server, selector=self.cfg.selector,
                              container=self.cfg.vllm_container, metrics_port=self.cfg.metrics_port)
        self._cached = (version, snap)
        return snap


# ------------------------------------------------------------ access review

def can_i(session: KubeSession, verb: str, group: str, resource: str, subresource: str = "",
          namespace: str = "") -> bool:
    """One SelfSubjectAccessReview ("kubectl auth can-i"); raises KubeError when it cannot be asked."""
    attrs: dict[str, Any] = {"verb": verb, "group": group, "resource": resource}
    if subresource:
        attrs["subresource"] = subresource
    if namespace:
        attrs["namespace"] = namespace
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}
    doc = session.raw(session.authz.create_self_subject_access_review, body)
    return bool((doc.get("status") or {}).get("allowed"))


def namespaces_list(session: KubeSession) -> list[str]:
    """Namespace names the user may list (KubeError when forbidden)."""
    body = session.raw(session.core.list_namespace)
    return sorted(str((o.get("metadata") or {}).get("name")) for o in body.get("items") or [])


# -------------------------------------------------------------- pod metrics

@dataclass(frozen=True)
class PodLoad:
    """vLLM's in-flight requests on one pod, read from its /metrics."""

    running: float | None = None
    waiting: float | None = None
    error: str | None = None

    @property
    def in_flight(self) -> float | None:
        if self.running is None and self.waiting is None:
            return None
        return (self.running or 0.0) + (self.waiting or 0.0)


def pod_load_from_text(text: str, parser: Parser | None = None) -> PodLoad:
    try:
        exp = (parser or Parser()).parse(text)
    except ParseError as e:
        return PodLoad(error=f"garbage /metrics ({e})")

    def total(name: str) -> float | None:
        series = exp.series(name)
        return sum(v for _, v in series) if series else None

    running, waiting = total("vllm:num_requests_running"), total("vllm:num_requests_waiting")
    if running is None and waiting is None:
        return PodLoad(error="no vllm:num_requests_* at /metrics")
    return PodLoad(running, waiting)


def fetch_pod_load(url: str, timeout_s: float = 2.0, client: httpx.Client | None = None) -> PodLoad:
    """GET ``url``/metrics (blocking) → running and waiting; errors become ``PodLoad.error``."""
    from .vllm import describe_error

    own = client is None
    c = client or httpx.Client(timeout=timeout_s, trust_env=False)
    try:
        resp = c.get(url.rstrip("/") + "/metrics", timeout=timeout_s)
        if resp.status_code != 200:
            return PodLoad(error=f"HTTP {resp.status_code}")
        return pod_load_from_text(resp.text)
    except Exception as e:  # noqa: BLE001
        return PodLoad(error=describe_error(e, timeout_s))
    finally:
        if own:
            c.close()


async def fetch_pod_loads(urls: dict[str, str], timeout_s: float = 1.5) -> dict[str, PodLoad]:
    """Scrape many pods' /metrics concurrently (async); key → PodLoad."""
    import asyncio

    from .vllm import describe_error, fetch_text

    out: dict[str, PodLoad] = {}
    if not urls:
        return out
    parser = Parser()
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=min(1.0, timeout_s)),
                                 trust_env=False) as client:
        async def one(key: str, url: str) -> None:
            try:
                async with asyncio.timeout(timeout_s):
                    text = await fetch_text(client, url.rstrip("/") + "/metrics")
                out[key] = pod_load_from_text(text, parser)
            except Exception as e:  # noqa: BLE001
                out[key] = PodLoad(error=describe_error(e, timeout_s))

        await asyncio.gather(*(one(k, u) for k, u in urls.items()))
    return out


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
