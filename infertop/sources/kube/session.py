"""Kubernetes reads, the connection: a kubeconfig context, its API client, one-line errors.

:class:`KubeSession` makes every request (``raw``: JSON dicts, counted) and
:func:`list_all` pages through a list. Every failure becomes a
:class:`KubeError` whose text is one line (:func:`describe_api_error`).
Blocking, like the official client. This module never imports textual or rich.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import urllib3

from ...config import KubeConfig

__all__ = [
    "ALL_NAMESPACES",
    "CUSTOM_KINDS",
    "CUSTOM_KIND_NAMES",
    "INFERENCE_KINDS",
    "MAX_BODY_BYTES",
    "MAX_WATCH_LINE_BYTES",
    "NAMESPACED_KINDS",
    "TOO_LARGE",
    "KubeError",
    "KubeSession",
    "LogFollow",
    "as_kube_error",
    "describe_api_error",
    "iter_lines_capped",
    "kube_contexts",
    "list_all",
    "read_capped",
    "session_for",
]

NAMESPACED_KINDS = ("deployments", "statefulsets", "pods", "hpas", "events",
                    # the objects a rollout depends on (issue 28 item 3)
                    "replicasets", "services", "endpointslices", "pdbs", "configmaps")
# An informer's or a list's namespace that means every namespace (list_*_for_all_namespaces)
ALL_NAMESPACES = "*"
# Custom resources read through the custom-objects API, when discovery finds them: kind → (group, version, plural)
CUSTOM_KINDS = {
    "scaledobjects": ("keda.sh", "v1alpha1", "scaledobjects"),  # KEDA
    "variantautoscalings": ("llmd.ai", "v1alpha1", "variantautoscalings"),  # llm-d workload variant autoscaler
    # Gateway API Inference Extension: the pools behind an endpoint picker, and the requests' priorities
    "inferencepools": ("inference.networking.k8s.io", "v1", "inferencepools"),
    "inferenceobjectives": ("inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives"),
}
# the custom kinds of the Cluster pane's Pools view: absent ones are named there ("not served"), not hidden
INFERENCE_KINDS = ("inferencepools", "inferenceobjectives")
# their Kind → the CUSTOM_KINDS entry (describe / YAML read them through the custom-objects API)
CUSTOM_KIND_NAMES = {"InferencePool": "inferencepools", "InferenceObjective": "inferenceobjectives"}
# What one answer may weigh, enforced while reading: a list page of 500 objects is a few MB, a
# watch event one object (etcd keeps objects under 1.5 MB); beyond that it is not a cluster talking.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_WATCH_LINE_BYTES = 16 * 1024 * 1024
_READ_BYTES = 64 * 1024
FOLLOW_READ_TIMEOUT_S = 24 * 3600.0  # a followed log waits this long for a line (the client wants a number)
TOO_LARGE = "TooLarge"  # KubeError.reason of an answer refused for its size


class KubeError(Exception):
    """A Kubernetes problem, printable as one line; ``status`` is the HTTP code (0: no answer)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


# ------------------------------------------------------- the client, imported when a cluster is

def _kubernetes() -> Any:
    """The kubernetes client, imported on first use: ~0.4 s of import (most of a console's start-up)
    that a console without a cluster never needs."""
    import kubernetes
    import kubernetes.client
    import kubernetes.config

    return kubernetes


def _config_exception() -> type[BaseException]:
    from kubernetes.config.config_exception import ConfigException

    return ConfigException


def _is_api_exception(exc: BaseException) -> bool:
    rest = sys.modules.get("kubernetes.client.rest")  # not imported yet: nothing can have raised one
    return rest is not None and isinstance(exc, rest.ApiException)


def _is_config_exception(exc: BaseException) -> bool:
    mod = sys.modules.get("kubernetes.config.config_exception")
    return mod is not None and isinstance(exc, mod.ConfigException)


# ----------------------------------------------------------------- errors

def _status_message(exc: Any) -> tuple[str, str, dict]:
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
    if _is_api_exception(exc):
        status = getattr(exc, "status", None) or 0  # (the client is imported lazily: no static type)
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
    if _is_config_exception(exc):
        return _one_line(f"kubeconfig: {exc}")
    return _one_line(f"{type(exc).__name__}: {exc}")


def as_kube_error(exc: BaseException, timeout_s: float | None = None) -> KubeError:
    if isinstance(exc, KubeError):
        return exc
    api = _is_api_exception(exc)
    status = getattr(exc, "status", None) if api else 0
    reason = _status_message(exc)[1] if api else ""
    return KubeError(describe_api_error(exc, timeout_s), status or 0, reason)


# ------------------------------------------------------------ bounded reads

def _mib(n: int) -> str:
    return f"{n / 1048576:g} MiB" if n >= 1048576 else f"{n} bytes"


def _abandon(resp: Any) -> None:
    """Drop a half-read connection (returning it to the pool would hand the rest to the next request)."""
    try:
        resp.close()
    except Exception:  # noqa: BLE001
        pass


def read_capped(resp: Any, limit: int) -> bytes:
    """The body of a streamed (``_preload_content=False``) response, refused past ``limit`` bytes."""
    declared = resp.headers.get("Content-Length") if getattr(resp, "headers", None) is not None else None
    if declared and declared.isdigit() and int(declared) > limit:
        _abandon(resp)
        raise KubeError(f"the API server's answer is {_mib(int(declared))}, over the {_mib(limit)} limit: refused",
                        reason=TOO_LARGE)
    out = bytearray()
    for chunk in resp.stream(_READ_BYTES):  # at most this much per read, even from one huge HTTP chunk
        out += chunk
        if len(out) > limit:
            _abandon(resp)
            raise KubeError(f"the API server's answer is over the {_mib(limit)} limit: refused while reading",
                            reason=TOO_LARGE)
    return bytes(out)


def iter_lines_capped(resp: Any, limit: int) -> Iterator[bytes]:
    """Newline-delimited lines of a watch stream; a line longer than ``limit`` bytes is refused."""
    buf = bytearray()
    for chunk in resp.stream(_READ_BYTES):
        buf += chunk
        start = 0
        while (end := buf.find(b"\n", start)) != -1:
            yield bytes(buf[start:end])
            start = end + 1
        del buf[:start]
        if len(buf) > limit:
            _abandon(resp)
            raise KubeError(f"a watch event over the {_mib(limit)} limit: refused while reading",
                            reason=TOO_LARGE)
    if buf.strip():
        yield bytes(buf)


# ---------------------------------------------------------------- session

def kube_contexts(kubeconfig: str | None = None) -> tuple[list[str], str | None]:
    """Context names in the kubeconfig and the current one."""
    kubernetes = _kubernetes()
    try:
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
    except (_config_exception(), OSError) as e:
        raise KubeError(describe_api_error(e)) from None
    return [c["name"] for c in contexts or []], (active or {}).get("name")


class KubeSession:
    """One kubeconfig context: an API client, who we are, which namespaces."""

    def __init__(self, api_client: Any, context: str, user: str, namespaces: list[str], *,
                 timeout_s: float = 10.0, kubeconfig: str | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES, max_watch_line_bytes: int = MAX_WATCH_LINE_BYTES) -> None:
        self.api_client = api_client
        self.max_body_bytes = max_body_bytes
        self.max_watch_line_bytes = max_watch_line_bytes
        self.context = context
        self.user = user
        self.namespaces = list(namespaces)
        self.timeout_s = timeout_s
        self.kubeconfig = kubeconfig
        self.server = str(api_client.configuration.host)
        kubernetes = _kubernetes()
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.autoscaling = kubernetes.client.AutoscalingV2Api(api_client)
        self.authz = kubernetes.client.AuthorizationV1Api(api_client)
        self.policy = kubernetes.client.PolicyV1Api(api_client)
        self.discovery = kubernetes.client.DiscoveryV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self._calls = 0
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None,
                namespaces: Iterable[str] = (), *, timeout_s: float = 10.0) -> "KubeSession":
        """Load the kubeconfig (no request is made); raises KubeError."""
        kubernetes, config_exception = _kubernetes(), _config_exception()
        try:
            contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
        except (config_exception, OSError) as e:
            where = kubeconfig or kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION
            raise KubeError(f"no usable kubeconfig at {where}: {_one_line(str(e), 160)}") from None
        by_name = {c["name"]: c for c in contexts or []}
        name = context or (active or {}).get("name")
        if name is None or name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise KubeError(f"context {name!r} is not in the kubeconfig (contexts: {known})")
        ctx = by_name[name].get("context") or {}
        try:
            conf = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(config_file=kubeconfig, context=name, client_configuration=conf,
                                               persist_config=False)
        except (config_exception, OSError, ValueError) as e:
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
        """Call a client method and return the JSON body as plain data; raises KubeError.

        The body is read in chunks and refused past ``max_body_bytes``. (An error answer's
        body is read by the client itself, whole, to build its ApiException.)"""
        t = timeout_s or self.timeout_s
        self.count()
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=t, **kw)
            try:
                data = read_capped(resp, self.max_body_bytes)
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

    def list_call(self, kind: str, namespace: str | None) -> tuple[Callable[..., Any], tuple, bool]:
        """(callable, its positional args, uses the label selector?) to list or watch ``kind`` in
        ``namespace`` — ``ALL_NAMESPACES``: across every namespace; None: a cluster-scoped kind."""
        if namespace == ALL_NAMESPACES:
            fn, selective = self.list_all_namespaces_fn(kind)
            return fn, (), selective
        fn, namespaced, selective = self.list_fn(kind)
        return fn, ((namespace,) if namespaced else ()), selective

    def list_all_namespaces_fn(self, kind: str) -> tuple[Callable[..., Any], bool]:
        """The list-across-all-namespaces function of a namespaced kind (and whether it takes a selector)."""
        if kind in CUSTOM_KINDS:
            group, version, plural = CUSTOM_KINDS[kind]

            def list_custom_all(**kw: Any) -> Any:
                return self.custom.list_cluster_custom_object(group, version, plural, **kw)
            return list_custom_all, False
        return {
            "deployments": (self.apps.list_deployment_for_all_namespaces, True),
            "statefulsets": (self.apps.list_stateful_set_for_all_namespaces, True),
            "pods": (self.core.list_pod_for_all_namespaces, True),
            "hpas": (self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces, False),
            "events": (self.core.list_event_for_all_namespaces, False),
            "replicasets": (self.apps.list_replica_set_for_all_namespaces, True),
            "services": (self.core.list_service_for_all_namespaces, False),
            "endpointslices": (self.discovery.list_endpoint_slice_for_all_namespaces, False),
            "pdbs": (self.policy.list_pod_disruption_budget_for_all_namespaces, False),
            "configmaps": (self.core.list_config_map_for_all_namespaces, False),
        }[kind]

    # the list functions per resource, each (callable, namespaced?, uses the label selector?)
    def list_fn(self, kind: str) -> tuple[Callable[..., Any], bool, bool]:
        if kind in CUSTOM_KINDS:
            group, version, plural = CUSTOM_KINDS[kind]

            def list_custom(namespace: str, **kw: Any) -> Any:
                return self.custom.list_namespaced_custom_object(group, version, namespace, plural, **kw)
            return list_custom, True, False
        return {
            "deployments": (self.apps.list_namespaced_deployment, True, True),
            "statefulsets": (self.apps.list_namespaced_stateful_set, True, True),
            "pods": (self.core.list_namespaced_pod, True, True),
            "hpas": (self.autoscaling.list_namespaced_horizontal_pod_autoscaler, True, False),
            "events": (self.core.list_namespaced_event, True, False),
            "replicasets": (self.apps.list_namespaced_replica_set, True, True),
            "services": (self.core.list_namespaced_service, True, False),
            "endpointslices": (self.discovery.list_namespaced_endpoint_slice, True, False),
            "pdbs": (self.policy.list_namespaced_pod_disruption_budget, True, False),
            "configmaps": (self.core.list_namespaced_config_map, True, False),
            "nodes": (self.core.list_node, False, False),
        }[kind]


    # ----- one object, its events, its container's log (the Cluster pane's describe / YAML / logs)
    def read_fn(self, kind: str) -> tuple[Callable[..., Any], bool]:
        """The read (get) function of a kind (``Pod``, ``Deployment``…) and whether it is namespaced."""
        fns = {
            "Pod": (self.core.read_namespaced_pod, True), "Node": (self.core.read_node, False),
            "Service": (self.core.read_namespaced_service, True),
            "ConfigMap": (self.core.read_namespaced_config_map, True),
            "Deployment": (self.apps.read_namespaced_deployment, True),
            "StatefulSet": (self.apps.read_namespaced_stateful_set, True),
            "ReplicaSet": (self.apps.read_namespaced_replica_set, True),
            "HorizontalPodAutoscaler": (self.autoscaling.read_namespaced_horizontal_pod_autoscaler, True),
            "PodDisruptionBudget": (self.policy.read_namespaced_pod_disruption_budget, True),
        }
        if kind in CUSTOM_KIND_NAMES:
            group, version, plural = CUSTOM_KINDS[CUSTOM_KIND_NAMES[kind]]

            def read_custom(name: str, namespace: str, **kw: Any) -> Any:
                return self.custom.get_namespaced_custom_object(group, version, namespace, plural, name, **kw)
            return read_custom, True
        if kind not in fns:
            raise KubeError(f"{kind}: not a kind infertop reads")
        return fns[kind]

    def read_object(self, kind: str, namespace: str | None, name: str) -> dict:
        """One object as the API returns it (JSON); raises KubeError."""
        fn, namespaced = self.read_fn(kind)
        return self.raw(fn, name, namespace) if namespaced else self.raw(fn, name)

    def events_of(self, kind: str, namespace: str | None, name: str, limit: int = 200) -> list[dict]:
        """The events whose involvedObject is this object, newest last (a field selector: the server filters).
        A node's events are in the session's namespaces (and default), where the kubelet records them."""
        where = [namespace] if namespace else list(dict.fromkeys([*self.namespaces, "default"]))
        sel = f"involvedObject.kind={kind},involvedObject.name={name}"
        out: list[dict] = []
        for ns in where:
            body = self.raw(self.core.list_namespaced_event, ns, field_selector=sel, limit=limit)
            out.extend(body.get("items") or [])
        return out

    def pods_on_node(self, node: str) -> tuple[list[dict], str | None]:
        """The pods bound to ``node``: across namespaces when that may be listed, else in the session's
        (and a note saying so)."""
        sel = f"spec.nodeName={node}"
        try:
            return self.raw(self.core.list_pod_for_all_namespaces, field_selector=sel).get("items") or [], None
        except KubeError as e:
            if e.status != 403:
                raise
        out: list[dict] = []
        for ns in self.namespaces:
            out.extend(self.raw(self.core.list_namespaced_pod, ns, field_selector=sel).get("items") or [])
        return out, f"pods of namespaces other than {', '.join(self.namespaces)} may not be listed: not counted"

    def pod_log(self, namespace: str, name: str, *, container: str | None = None, previous: bool = False,
                tail_lines: int | None = None, timestamps: bool = False, limit_bytes: int | None = None) -> str:
        """A container's log (``previous``: the instance before the last restart); at most ``max_body_bytes``."""
        kw: dict[str, Any] = {"previous": previous, "timestamps": timestamps}
        if container:
            kw["container"] = container
        if tail_lines is not None:
            kw["tail_lines"] = tail_lines
        if limit_bytes is not None:
            kw["limit_bytes"] = limit_bytes
        t = self.timeout_s
        self.count()
        try:
            resp = self.core.read_namespaced_pod_log(name, namespace, _preload_content=False, _request_timeout=t, **kw)
            try:
                data = read_capped(resp, self.max_body_bytes)
            finally:
                resp.release_conn()
        except Exception as e:  # noqa: BLE001
            raise as_kube_error(e, t) from None
        return data.decode("utf-8", "replace")

    def follow_pod_log(self, namespace: str, name: str, *, container: str | None = None,
                       tail_lines: int | None = None, timestamps: bool = False) -> "LogFollow":
        """``follow=true``: the lines so far (``tail_lines``), then each new one; iterate, :meth:`LogFollow.close`."""
        kw: dict[str, Any] = {"follow": True, "timestamps": timestamps}
        if container:
            kw["container"] = container
        if tail_lines is not None:
            kw["tail_lines"] = tail_lines
        self.count()
        try:  # a long read timeout: a quiet container writes nothing for hours; close() cuts the stream
            resp = self.core.read_namespaced_pod_log(name, namespace, _preload_content=False,
                                                     _request_timeout=(self.timeout_s, FOLLOW_READ_TIMEOUT_S), **kw)
        except Exception as e:  # noqa: BLE001
            raise as_kube_error(e, self.timeout_s) from None
        return LogFollow(resp, self.max_watch_line_bytes)


class LogFollow:
    """A followed container log: iterate for its lines (text, without the newline); ``close`` ends it
    from any thread. A line longer than ``max_line_bytes`` ends it with a KubeError."""

    def __init__(self, resp: Any, max_line_bytes: int) -> None:
        self.resp = resp
        self.max_line_bytes = max_line_bytes
        self.closed = False

    def __iter__(self) -> Iterator[str]:
        try:
            for line in iter_lines_capped(self.resp, self.max_line_bytes):
                yield line.decode("utf-8", "replace").rstrip("\r")
        except KubeError:
            raise
        except Exception as e:  # noqa: BLE001
            if not self.closed:
                raise as_kube_error(e) from None
        finally:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        conn = getattr(self.resp, "connection", None)
        sock = getattr(conn, "sock", None) if conn else None
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _abandon(self.resp)


CONNECT_DEADLINE_S = 30.0  # loading the kubeconfig runs its exec credential plugin, which has no timeout


def session_for(cfg: KubeConfig, context: str | None = None, namespaces: Iterable[str] | None = None,
                *, deadline_s: float = CONNECT_DEADLINE_S) -> KubeSession:
    """Connect with a deadline: the kubeconfig is loaded in a daemon thread, so an exec credential
    plugin that never returns costs ``deadline_s`` and one line ("connecting…" forever before, and
    ``q``/``snapshot`` waited on the thread), never a process that cannot exit."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def connect() -> None:
        try:
            box["session"] = KubeSession.connect(cfg.kubeconfig, context or cfg.context,
                                                 cfg.namespaces if namespaces is None else namespaces,
                                                 timeout_s=cfg.timeout_s)
        except BaseException as e:  # noqa: BLE001 — handed to the caller's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=connect, name="kube-connect", daemon=True).start()
    if not done.wait(deadline_s):
        raise KubeError(f"no credentials within {deadline_s:.0f} s: the kubeconfig's exec credential plugin "
                        "did not return")
    if "error" in box:
        raise box["error"]
    return box["session"]


# -------------------------------------------------------------- paged list

def list_all(session: KubeSession, kind: str, namespace: str | None, selector: str = "",
             page: int = 500) -> tuple[list[dict], str]:
    """Every object of ``kind`` (paged), and the list's resourceVersion; ``namespace`` may be ALL_NAMESPACES."""
    fn, args, selective = session.list_call(kind, namespace)
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
