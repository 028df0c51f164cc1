"""The Kubernetes API emulator: a real HTTP server on 127.0.0.1 that the
official ``kubernetes`` client talks to through a kubeconfig.

Usage::

    with KubeEmulator(token="t0ken") as emu:
        emu.add_node("gpu-0", gpus=8)
        emu.add_deployment("default", "vllm", replicas=2, image="vllm/vllm-openai:v0.9.2")
        emu.reconcile()
        api = kubernetes.config.new_client_from_config(config_file=emu.write_kubeconfig(tmp / "kc"))
        kubernetes.client.AppsV1Api(api).read_namespaced_deployment("vllm", "default")

See ``infertop/sim/kube/__init__.py`` for the feature list and what is
not emulated.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import random
import socket
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple
from urllib.parse import parse_qs, urlsplit

from . import errors as E
from . import resources as R
from .api import APPLY, JSON_PATCH, MERGE, STRATEGIC, Api
from .controllers import Controllers
from .errors import ApiError
from .hpa import HpaController, MetricSource
from .resources import BY_PATH, ResourceType, resource_type
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .store import Expired, Store, clone
from .util import format_time, set_condition

PATCH_TYPES = (STRATEGIC, MERGE, JSON_PATCH, APPLY)


class _Text(str):
    """A text/plain answer (pod logs, health checks)."""


class Request(NamedTuple):
    """One logged API request; ``query`` maps each parameter to its first value."""

    method: str
    path: str
    query: dict
    content_type: str


Rule = tuple  # (verb, group, resource, subresource, namespace); see KubeEmulator.set_rules


def _matches(pattern: Any, value: str) -> bool:
    if pattern is None or pattern == "*":
        return True
    if isinstance(pattern, str):
        return pattern == value
    return "*" in pattern or value in pattern


def _normalize_rule(rule: Any) -> tuple:
    if isinstance(rule, dict):
        rule = (rule.get("verb", rule.get("verbs", "*")), rule.get("group", rule.get("apiGroups", "*")),
                rule.get("resource", rule.get("resources", "*")), rule.get("subresource"),
                rule.get("namespace", rule.get("namespaces", "*")))
    rule = tuple(rule)
    if not 3 <= len(rule) <= 5:
        raise ValueError(f"a rule is (verb, group, resource[, subresource[, namespace]]), got {rule!r}")
    verb, group, resource = rule[:3]
    sub = rule[3] if len(rule) > 3 else None
    namespace = rule[4] if len(rule) > 4 else "*"
    if sub is None:
        if isinstance(resource, str) and "/" in resource:
            resource, sub = resource.split("/", 1)
        else:
            sub = ""
    return (verb, group, resource, sub, namespace)


# ----------------------------------------------------------------- HTTP

class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, emu: "KubeEmulator"):
        self.emu = emu
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def finish_request(self, request, client_address):
        with self.connections_lock:
            self.connections.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with self.connections_lock:
                self.connections.discard(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator/1.33"
    sys_version = ""
    server: _HTTPServer

    def setup(self):
        super().setup()
        # headers and body go out in separate writes: without TCP_NODELAY,
        # Nagle + delayed ACKs cost ~40 ms per request
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        emu = self.server.emu
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        emu._log_request(Request(method, url.path, query, ctype))
        try:
            emu._authenticate(self.headers.get("Authorization"))
            result = _Dispatch(emu, self, method, url.path, query, ctype, raw).run()
        except ApiError as exc:
            self.send_json(exc.code, exc.status(), exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the emulator: answer 500 and keep it for the tests
            emu.errors.append(traceback.format_exc())
            err = ApiError(500, "InternalError", f"emulator error: {exc!r}")
            self.send_json(500, err.status())
        else:
            if result is not None:
                self.send_json(*result)

    def send_json(self, code: int, body: Any, headers: dict | None = None) -> None:
        if isinstance(body, _Text):
            data, ctype = body.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(body, separators=(",", ":")).encode(), "application/json"
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-cache, private")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # chunked streaming for watches
    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def write_chunk(self, data: bytes) -> bool:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
            return False

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True


def _bool_param(value: str | None) -> bool:
    return value in ("true", "True", "1")


class _Dispatch:
    """Routes one request to the API layer."""

    def __init__(self, emu: "KubeEmulator", handler: _Handler, method: str, path: str, query: dict,
                 ctype: str, raw: bytes):
        self.emu, self.handler, self.method, self.path = emu, handler, method, path
        self.query, self.ctype, self.raw = query, ctype, raw
        self.api = emu.api

    def body(self) -> Any:
        if not self.raw:
            raise E.bad_request("the request body is empty")
        try:
            return json.loads(self.raw)
        except ValueError as exc:
            raise E.bad_request(f"error decoding the request body: {exc}") from None

    def dry_run(self) -> bool:
        value = self.query.get("dryRun")
        if value is None or value == "":
            return False
        if value != "All":
            raise E.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
        return True

    def run(self):
        parts = [p for p in self.path.split("/") if p]
        method = self.method
        if not parts:
            return 200, {"paths": ["/api", "/api/v1", "/apis", "/version"]
                         + sorted({f"/apis/{g}/{v}" for (g, v, _), rt in BY_PATH.items()
                                   if g and R.served(rt, self.emu.installed)})}
        if parts[0] in ("healthz", "livez", "readyz") and method == "GET":
            return 200, _Text("ok")
        if parts == ["version"]:
            self._only_get()
            return 200, R.version_info()
        if parts[0] == "api":
            if len(parts) == 1:
                self._only_get()
                return 200, R.api_versions(self.emu.address)
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                self._only_get()
                return 200, R.api_group_list(self.emu.installed)
            group = parts[1]
            if len(parts) == 2:
                self._only_get()
                doc = R.api_group(group, self.emu.installed)
                if doc is None:
                    raise E.path_not_found()
                return 200, doc
            version, rest = parts[2], parts[3:]
        else:
            raise E.path_not_found()
        if not rest:
            self._only_get()
            doc = R.api_resource_list(group, version, self.emu.installed)
            if doc is None:
                raise E.path_not_found()
            return 200, doc
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = BY_PATH.get((group, version, rest[2]))
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest:
            raise E.path_not_found()
        rt = BY_PATH.get((group, version, rest[0]))
        if rt is None or len(rest) > 3 or not R.served(rt, self.emu.installed):
            raise E.path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and rt.subresource(sub) is None:
            raise E.path_not_found()
        if name is not None and rt.namespaced and namespace is None:
            raise E.path_not_found()
        watch = watch or _bool_param(self.query.get("watch"))
        return self._resource(rt, namespace, name, sub, watch)

    def _only_get(self) -> None:
        if self.method != "GET":
            raise E.method_not_allowed()

    def _verb(self, name: str | None, watch: bool) -> str:
        return {
            "GET": "watch" if watch else ("get" if name else "list"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[self.method]

    def _selectors(self, rt: ResourceType):
        try:
            return (parse_label_selector(self.query.get("labelSelector")),
                    parse_field_selector(self.query.get("fieldSelector"), rt))
        except SelectorError as exc:
            raise E.bad_request(str(exc)) from None

    def _resource(self, rt: ResourceType, namespace: str | None, name: str | None, sub: str | None,
                  watch: bool):
        api, method = self.api, self.method
        if rt.kind == "SelfSubjectAccessReview":
            if method != "POST" or name is not None:
                raise E.method_not_allowed()
            return 201, api.access_review(self.body())
        verb = self._verb(name, watch)
        if verb not in rt.verbs and not sub:
            raise E.method_not_allowed()
        self.emu._authorize(verb, rt, sub or "", namespace, name)
        if method == "GET":
            if sub == "eviction":
                raise E.method_not_allowed()
            if sub == "log":
                return 200, _Text(self.emu._read_log(namespace, name, self.query))
            label_pred, field_pred = self._selectors(rt)
            if watch:
                if name is not None:
                    by_name = parse_field_selector(f"metadata.name={name}", rt)
                    inner = field_pred
                    field_pred = lambda o: by_name(o) and inner(o)  # noqa: E731
                _Watch(self.emu, self.handler, rt, namespace, label_pred, field_pred, self.query).run()
                return None
            if name is None:
                return 200, self._list(rt, namespace, label_pred, field_pred)
            return 200, api.get(rt, namespace, name, sub)
        if method == "POST":
            if name is None:
                return 201, api.create(rt, namespace, self.body(), dry_run=self.dry_run())
            if sub == "eviction":
                return 201, api.evict(namespace, name, self.body(), dry_run=self.dry_run())
            raise E.method_not_allowed()
        if sub == "log":
            raise E.method_not_allowed()
        if method == "PUT":
            if name is None or sub == "eviction":
                raise E.method_not_allowed()
            return 200, api.update(rt, namespace, name, self.body(), subresource=sub, dry_run=self.dry_run())
        if method == "PATCH":
            if name is None or sub == "eviction":
                raise E.method_not_allowed()
            if self.ctype not in PATCH_TYPES:
                raise E.unsupported_media_type(self.ctype)
            obj, created = api.patch(rt, namespace, name, self.body(), self.ctype, subresource=sub,
                                     dry_run=self.dry_run(), field_manager=self.query.get("fieldManager"),
                                     force=_bool_param(self.query.get("force")))
            return (201 if created else 200), obj
        if method == "DELETE":
            if sub:
                raise E.method_not_allowed()
            options = {}
            if self.raw:
                options = self.body()
                if not isinstance(options, dict):
                    raise E.bad_request("the body of a DELETE must be DeleteOptions")
            if "gracePeriodSeconds" in self.query:
                try:
                    options["gracePeriodSeconds"] = int(self.query["gracePeriodSeconds"])
                except ValueError:
                    raise E.bad_request("gracePeriodSeconds must be an integer") from None
            if "propagationPolicy" in self.query:
                options["propagationPolicy"] = self.query["propagationPolicy"]
            dry_run = self.dry_run() or "All" in (options.get("dryRun") or [])
            if name is None:
                label_pred, field_pred = self._selectors(rt)
                items = api.delete_collection(rt, namespace, label_pred, field_pred, options, dry_run=dry_run)
                return 200, self._list_body(rt, items, {})
            return 200, api.delete(rt, namespace, name, options, dry_run=dry_run)
        raise E.method_not_allowed()

    @staticmethod
    def _list_body(rt: ResourceType, items: list[dict], meta: dict) -> dict:
        for item in items:  # the real API leaves kind/apiVersion out of list items
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}

    def _list(self, rt: ResourceType, namespace: str | None, label_pred, field_pred) -> dict:
        with self.emu.store.lock:
            rv = str(self.emu.store.resource_version)
            items = self.api.list(rt, namespace, label_pred, field_pred)
        meta: dict = {"resourceVersion": rv}
        token = self.query.get("continue")
        if token:
            try:
                start = tuple(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
            except (ValueError, KeyError, TypeError):
                raise E.bad_request("invalid continue token") from None
            items = [i for i in items if (i["metadata"].get("namespace", ""), i["metadata"]["name"]) > start]
        limit = self.query.get("limit")
        if limit:
            try:
                n = int(limit)
            except ValueError:
                raise E.bad_request("limit must be an integer") from None
            if 0 < n < len(items):
                last = items[n - 1]["metadata"]
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                    {"rv": rv, "start": [last.get("namespace", ""), last["name"]]}).encode()).decode()
                meta["remainingItemCount"] = len(items) - n
                items = items[:n]
        return self._list_body(rt, items, meta)


class _Watch:
    """One watch stream: newline-delimited JSON events in HTTP chunks."""

    def __init__(self, emu: "KubeEmulator", handler: _Handler, rt: ResourceType, namespace: str | None,
                 label_pred, field_pred, query: dict):
        self.emu, self.handler, self.rt, self.namespace = emu, handler, rt, namespace
        self.label_pred, self.field_pred, self.query = label_pred, field_pred, query

    def matches(self, obj: dict) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.label_pred(meta.get("labels") or {}) and self.field_pred(obj)

    def transform(self, ev) -> tuple[str, dict] | None:
        new_ok = self.matches(ev.obj)
        if ev.type in ("ADDED", "DELETED"):
            return (ev.type, ev.obj) if new_ok else None
        old_ok = ev.old is not None and self.matches(ev.old)
        if new_ok and old_ok:
            return ("MODIFIED", ev.obj)
        if new_ok:
            return ("ADDED", ev.obj)
        if old_ok:
            return ("DELETED", ev.obj)
        return None

    def send(self, etype: str, obj: dict) -> bool:
        line = json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n"
        return self.handler.write_chunk(line)

    def bookmark(self, rv: int, initial_end: bool = False) -> bool:
        meta: dict = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return self.send("BOOKMARK", {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta})

    def error(self, code: int, reason: str, message: str) -> bool:
        return self.send("ERROR", ApiError(code, reason, message).status())

    def run(self) -> None:
        store, q = self.emu.store, self.query
        try:
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else self.emu.watch_timeout
        except ValueError:
            raise E.bad_request("timeoutSeconds must be an integer") from None
        deadline = time.monotonic() + timeout
        bookmarks = _bool_param(q.get("allowWatchBookmarks"))
        send_initial = _bool_param(q.get("sendInitialEvents"))
        rv_param = q.get("resourceVersion") or ""
        initial: list[dict] = []
        with store.lock:
            if rv_param in ("", "0") or send_initial:
                initial = [clone(o) for o in store.iter(self.rt, self.namespace) if self.matches(o)]
                cursor = store.resource_version
            else:
                try:
                    cursor = int(rv_param)
                except ValueError:
                    raise E.bad_request(f"invalid resource version: {rv_param!r}") from None
                # as the API server's watch cache: wait a little for a resourceVersion from the
                # future, then answer 504 "Too large resource version" (after a restart, a restore)
                store.changed.wait_for(lambda: store.resource_version >= cursor or store.closed,
                                       timeout=self.emu.too_large_rv_wait)
                if cursor > store.resource_version:
                    raise E.too_large_resource_version(cursor, store.resource_version)
        self.handler.start_stream()
        for obj in initial:
            if not self.send("ADDED", obj):
                return
        if send_initial and not self.bookmark(cursor, initial_end=True):
            return
        while True:
            with store.lock:
                remaining = deadline - time.monotonic()
                if store.closed or remaining <= 0:
                    break
                try:
                    events = store.events_after(cursor, self.rt.key)
                except Expired as exc:
                    self.error(410, "Expired", str(exc))
                    self.handler.end_stream()
                    return
                cursor = store.resource_version
                if not events:
                    store.changed.wait(min(remaining, 0.5))
                    continue
            for ev in events:
                out = self.transform(ev)
                if out is not None and not self.send(*out):
                    return
        if bookmarks and not store.closed:
            self.bookmark(cursor)
        self.handler.end_stream()


# ------------------------------------------------------------- emulator

class KubeEmulator:
    """A Kubernetes API server + control plane stand-in on 127.0.0.1.

    :param token: the bearer token every request must carry (401 otherwise);
        ``None`` turns authentication off.
    :param port: 0 picks a free port.
    :param username: the user named in 403 messages.
    :param reconcile_interval: the background reconcile loop reacts to every
        write and wakes at least this often (for time-based transitions);
        ``None``: no background loop, call :meth:`reconcile` yourself.
    :param start_delay: seconds a scheduled pod spends in ContainerCreating.
    :param ready_delay: seconds a started pod stays Running but not Ready.
    :param termination_delay: seconds a deleted (terminating) pod lingers.
    :param crash_period: seconds between two restarts of a CrashLoopBackOff container.
    :param strict_namespaces: creating in a missing namespace answers 404
        (as the real API); False creates the namespace on the fly.
    :param clock: a ``time.time``-like function (timestamps, delays).
    """

    def __init__(
        self,
        token: str | None = "emulator-token",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        username: str = "tester",
        reconcile_interval: float | None = 0.05,
        start_delay: float = 0.0,
        ready_delay: float = 0.0,
        termination_delay: float = 0.0,
        crash_period: float = 10.0,
        history_size: int = 5000,
        watch_timeout: float = 1800.0,
        too_large_rv_wait: float = 0.5,
        strict_namespaces: bool = True,
        namespaces: Iterable[str] = ("default", "kube-system", "kube-public", "kube-node-lease"),
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        custom_resources: Iterable[str] = (),
    ):
        self.token = token
        self.host = host
        self._port = port
        self.username = username
        self.reconcile_interval = reconcile_interval
        self.start_delay = start_delay
        self.ready_delay = ready_delay
        self.termination_delay = termination_delay
        self.crash_period = crash_period
        self.watch_timeout = watch_timeout
        self.too_large_rv_wait = too_large_rv_wait
        self.strict_namespaces = strict_namespaces
        self.clock = clock
        self.rng = random.Random(seed)
        self.store = Store(history_size)
        self.api = Api(self)
        self.controllers = Controllers(self)
        self.errors: list[str] = []  # tracebacks of emulator bugs (500s, reconcile crashes)
        self._requests: list[Request] = []
        self._requests_lock = threading.Lock()
        self._rules: list[tuple] | None = None
        self._image_failures: list[tuple[str, str]] = []
        self._args_failures: list[tuple[Any, str, int]] = []
        self._endpoints: list[tuple[str, str | None, str, int | None]] = []
        self._ready_overrides: dict[tuple[str, str], bool] = {}
        self._hpa_pinned: dict[tuple[str, str], set] = {}
        self.hpa_controller: HpaController | None = None  # set_hpa_metrics() turns it on
        self._logs: dict[tuple[str, str, str], list[str]] = {}  # (ns, pod, container) -> lines
        self._server: _HTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._node_count = 0
        self.installed: frozenset[tuple[str, str]] = frozenset()  # optional custom resources served
        self.install(*custom_resources)
        for ns in namespaces:
            self.add_namespace(ns)

    # ------------------------------------------------ custom resources
    def install(self, *kinds: str) -> None:
        """Serve optional custom resources (``"ScaledObject"``, ``"scaledobjects"``, ``"va"`` …), as if
        their CRD were applied: discovery lists them and their REST paths answer (404 before)."""
        keys = set(self.installed)
        for kind in kinds:
            rt = resource_type(kind)
            if not rt.optional:
                raise ValueError(f"{kind} is built in, not an installable custom resource")
            keys.add(rt.key)
        self.installed = frozenset(keys)

    def uninstall(self, *kinds: str) -> None:
        """Stop serving custom resources (their objects stay in the store, unreachable)."""
        self.installed = frozenset(self.installed - {resource_type(k).key for k in kinds})

    # ---------------------------------------------------------- lifecycle
    def start(self) -> "KubeEmulator":
        """Serve (again, after :meth:`stop`: on the same port, so kubeconfigs stay valid)."""
        if self._server is not None:
            return self
        self._stopping = False
        self.store.reopen()
        self._server = _HTTPServer((self.host, self._port), self)
        self._port = self._server.server_address[1]
        t = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                             name="kube-emulator-http", daemon=True)
        t.start()
        self._threads.append(t)
        if self.reconcile_interval is not None:
            r = threading.Thread(target=self._reconcile_loop, name="kube-emulator-reconcile", daemon=True)
            r.start()
            self._threads.append(r)
        return self

    def stop(self) -> None:
        self._stopping = True
        self.store.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()
        self._server = None

    def restart(self, *, reset_resource_version: bool = False) -> "KubeEmulator":
        """Stop and serve again on the same port; with ``reset_resource_version`` the
        resourceVersion counter starts over (see :meth:`reset_resource_versions`)."""
        self.stop()
        if reset_resource_version:
            self.reset_resource_versions()
        return self.start()

    def reset_resource_versions(self) -> None:
        """Every object is stamped again from resourceVersion 1 and the watch history
        is forgotten: what a client saw before is now unknown to the server."""
        self.store.reset_resource_versions()

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> "KubeEmulator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        return self._server.server_address[1]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def kubeconfig(self, context: str = "emu", namespace: str = "default", user: str = "tester",
                   token: str | None = None) -> dict:
        """The kubeconfig as a dict (for ``new_client_from_config_dict``)."""
        token = token if token is not None else self.token
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": token} if token else {}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": user, "namespace": namespace}}],
            "current-context": context,
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | Path, context: str = "emu", namespace: str = "default",
                         user: str = "tester", token: str | None = None) -> Path:
        """Write a kubeconfig (JSON, which is YAML) pointing at the emulator; returns the path."""
        path = Path(path)
        path.write_text(json.dumps(self.kubeconfig(context, namespace, user, token), indent=2))
        return path

    # -------------------------------------------------------- reconcile
    def reconcile(self, max_passes: int = 100) -> int:
        """Run controller passes until one changes nothing; returns the number of passes."""
        for n in range(1, max_passes + 1):
            try:
                changed = self.controllers.run_pass()
            except Exception:
                self.errors.append(traceback.format_exc())
                raise
            if not changed:
                return n
        return max_passes

    def _reconcile_loop(self) -> None:
        store = self.store
        while not self._stopping:
            try:
                self.reconcile(max_passes=50)
            except Exception:
                pass  # recorded in self.errors
            with store.lock:
                seen = store.resource_version
                if not self._stopping:
                    store.changed.wait_for(lambda: store.resource_version != seen or self._stopping,
                                           timeout=self.reconcile_interval or 0.05)

    def wait_until(self, predicate: Callable[[], Any], timeout: float = 10.0, message: str = "") -> Any:
        """Wait (without sleeping blindly) until ``predicate()`` is truthy: it is
        re-evaluated after every write to the store and at least every 50 ms."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(message or f"condition not met within {timeout}s")
            with self.store.lock:
                seen = self.store.resource_version
                self.store.changed.wait_for(lambda: self.store.resource_version != seen,
                                            timeout=min(remaining, 0.05))

    # ---------------------------------------------------- auth and RBAC
    def set_token(self, token: str | None) -> None:
        self.token = token

    def _authenticate(self, header: str | None) -> None:
        if self.token is None:
            return
        if header != f"Bearer {self.token}":
            raise E.unauthorized()

    def set_rules(self, rules: Iterable[Any] | None) -> None:
        """Restrict what the client may do; ``None`` allows everything (the default).

        A rule is ``(verb, group, resource[, subresource[, namespace]])``;
        each element is a string, a collection of strings, or ``"*"``/None
        for any. ``resource`` may be ``"deployments/scale"``. A rule without
        a subresource covers the main resource only (as RBAC). The namespace
        defaults to ``"*"``; cluster-scoped requests (and lists across all
        namespaces) have namespace ``""``. Dicts with the same keys are
        accepted. Enforced on every request and answered by
        selfsubjectaccessreviews."""
        self._rules = None if rules is None else [_normalize_rule(r) for r in rules]

    def allow_all(self) -> None:
        self._rules = None

    def is_allowed(self, verb: str, group: str, resource: str, subresource: str = "",
                   namespace: str = "") -> bool:
        if self._rules is None:
            return True
        values = (verb, group, resource, subresource, namespace)
        return any(all(_matches(p, v) for p, v in zip(rule, values)) for rule in self._rules)

    def _authorize(self, verb: str, rt: ResourceType, sub: str, namespace: str | None, name: str | None) -> None:
        if not self.is_allowed(verb, rt.group, rt.plural, sub, namespace or ""):
            raise E.forbidden_request(self.username, verb, rt, sub, namespace, name)

    # ------------------------------------------------------ request log
    def _log_request(self, req: Request) -> None:
        with self._requests_lock:
            self._requests.append(req)

    @property
    def requests(self) -> list[Request]:
        """Every request so far: (method, path, query, content_type) tuples."""
        with self._requests_lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._requests_lock:
            self._requests.clear()

    def count_requests(self, method: str | None = None, path: str | None = None,
                       predicate: Callable[[Request], bool] | None = None) -> int:
        """Count logged requests; ``path`` matches exactly or as an fnmatch pattern."""
        return sum(
            1 for r in self.requests
            if (method is None or r.method == method)
            and (path is None or r.path == path or fnmatch.fnmatchcase(r.path, path))
            and (predicate is None or predicate(r))
        )

    # -------------------------------------------------- generic objects
    def _rt(self, kind: str) -> ResourceType:
        return resource_type(kind)

    @staticmethod
    def _ns(rt: ResourceType, namespace: str | None) -> str | None:
        return (namespace or "default") if rt.namespaced else None

    def create(self, obj: dict, *, keep_status: bool = True) -> dict:
        """Create any supported object (kind from ``obj["kind"]``), keeping its status."""
        rt = self._rt(obj["kind"])
        ns = (obj.get("metadata") or {}).get("namespace")
        return self.api.create(rt, ns if rt.namespaced else None, obj, keep_status=keep_status)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        rt = self._rt(kind)
        obj = self.store.get(rt, self._ns(rt, namespace) or "", name)
        return self.api.with_type(rt, obj) if obj else None

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        rt = self._rt(kind)
        pred = parse_label_selector(label_selector)
        return [self.api.with_type(rt, o) for o in self.api.list(rt, namespace, pred)]

    def patch(self, kind: str, name: str, patch: Any, namespace: str | None = None,
              patch_type: str = "strategic") -> dict:
        ctype = {"strategic": STRATEGIC, "merge": MERGE, "json": JSON_PATCH}[patch_type]
        rt = self._rt(kind)
        return self.api.patch(rt, self._ns(rt, namespace), name, patch, ctype)[0]

    def update_status(self, kind: str, name: str, status: dict, namespace: str | None = None) -> dict:
        """Merge ``status`` into an object's status (as a controller would)."""
        rt = self._rt(kind)
        with self.store.lock:
            obj = self.api.get_current(rt, self._ns(rt, namespace), name)
            obj["status"] = {**(obj.get("status") or {}), **status}
            return self.store.put(rt, obj)

    def delete(self, kind: str, name: str, namespace: str | None = None, grace_period_seconds: int | None = None
               ) -> dict:
        rt = self._rt(kind)
        options = {} if grace_period_seconds is None else {"gracePeriodSeconds": grace_period_seconds}
        return self.api.delete(rt, self._ns(rt, namespace), name, options)

    def events(self, namespace: str | None = None, involved_name: str | None = None,
               reason: str | None = None) -> list[dict]:
        out = []
        for ev in self.list("events", namespace):
            if involved_name is not None and ev["involvedObject"].get("name") != involved_name:
                continue
            if reason is not None and ev.get("reason") != reason:
                continue
            out.append(ev)
        return out

    def compact_history(self) -> None:
        """Forget the watch history: a watch from an older resourceVersion gets 410 Gone."""
        self.store.compact()

    # ----------------------------------------------------------- seeding
    def add_namespace(self, name: str, labels: dict | None = None) -> dict:
        existing = self.get("namespaces", name)
        if existing is not None:
            return existing
        return self.api.create(R.BY_KIND["Namespace"], None,
                               {"metadata": {"name": name, "labels": dict(labels or {})}})

    def _ensure_namespace(self, namespace: str) -> None:
        if self.store.peek(R.BY_KIND["Namespace"], "", namespace) is None:
            self.add_namespace(namespace)

    def add_node(self, name: str, gpus: int = 8, *, cpu: str = "64", memory: str = "512Gi",
                 labels: dict | None = None, unschedulable: bool = False, taints: list | None = None,
                 ready: bool = True, gpu_product: str = "NVIDIA-H100-80GB-HBM3",
                 address: str | None = None) -> dict:
        self._node_count += 1
        address = address or f"10.0.0.{10 + self._node_count}"
        now = format_time(self.clock())
        resources = {"cpu": str(cpu), "memory": str(memory), "pods": "110", "ephemeral-storage": "1Ti"}
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if gpus:
            resources["nvidia.com/gpu"] = str(gpus)
            node_labels.update({"nvidia.com/gpu.product": gpu_product, "nvidia.com/gpu.count": str(gpus)})
        node_labels.update(labels or {})
        taints = list(taints or [])
        if unschedulable:
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": now})

        def cond(ctype, status, reason, message):
            return {"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": now, "lastTransitionTime": now}

        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"podCIDR": f"10.244.{self._node_count}.0/24"},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [
                    cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                         "kubelet has sufficient memory available"),
                    cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    cond("Ready", "True" if ready else "False", "KubeletReady" if ready else "KubeletNotReady",
                         "kubelet is posting ready status" if ready else "container runtime is down"),
                ],
                "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": f"{self.rng.getrandbits(128):032x}",
                    "systemUUID": f"{self.rng.getrandbits(128):032x}",
                    "bootID": f"{self.rng.getrandbits(128):032x}",
                    "kernelVersion": "6.8.0-1015-nvidia",
                    "osImage": "Ubuntu 24.04.1 LTS",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": "v1.33.1",
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
            },
        }
        if unschedulable:
            node["spec"]["unschedulable"] = True
        if taints:
            node["spec"]["taints"] = taints
        return self.api.create(R.BY_KIND["Node"], None, node, keep_status=True)

    def _set_node(self, name: str, fn: Callable[[dict], None]) -> dict:
        rt = R.BY_KIND["Node"]
        with self.store.lock:
            node = self.api.get_current(rt, None, name)
            fn(node)
            return self.store.put(rt, node)

    def cordon(self, name: str) -> dict:
        def fn(node):
            node["spec"]["unschedulable"] = True
            taints = node["spec"].setdefault("taints", [])
            if not any(t.get("key") == "node.kubernetes.io/unschedulable" for t in taints):
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                               "timeAdded": format_time(self.clock())})
        return self._set_node(name, fn)

    def uncordon(self, name: str) -> dict:
        def fn(node):
            node["spec"].pop("unschedulable", None)
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != "node.kubernetes.io/unschedulable"]
            if taints:
                node["spec"]["taints"] = taints
            else:
                node["spec"].pop("taints", None)
        return self._set_node(name, fn)

    def set_node_ready(self, name: str, ready: bool) -> dict:
        def fn(node):
            conds = node["status"].setdefault("conditions", [])
            set_condition(conds, "Ready", "True" if ready else "False",
                          "KubeletReady" if ready else "NodeStatusUnknown",
                          "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
                          format_time(self.clock()))
        return self._set_node(name, fn)

    @staticmethod
    def _container(name: str, image: str, args, command, gpus, port, env, resources) -> dict:
        c: dict = {"name": name, "image": image}
        if command:
            c["command"] = list(command)
        if args:
            c["args"] = list(args)
        if port:
            c["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        if env:
            c["env"] = [{"name": k, "value": str(v)} for k, v in env.items()] if isinstance(env, dict) else list(env)
        res = clone(resources) if resources else {}
        if gpus:
            res.setdefault("limits", {})["nvidia.com/gpu"] = str(gpus)
            res.setdefault("requests", {})["nvidia.com/gpu"] = str(gpus)
        if res:
            c["resources"] = res
        return c

    def _workload(self, kind: str, namespace: str, name: str, replicas: int, image: str, args, labels,
                  gpu_per_pod, *, container_name: str, port: int | None, env, command, resources,
                  annotations, template_annotations, extra_spec: dict, selector: dict | None = None) -> dict:
        self._ensure_namespace(namespace)
        labels = dict(labels or {"app": name})
        template: dict = {
            "metadata": {"labels": dict(labels)},
            "spec": {"containers": [self._container(container_name, image, args, command, gpu_per_pod, port, env,
                                                    resources)]},
        }
        if template_annotations:
            template["metadata"]["annotations"] = dict(template_annotations)
        obj = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(selector or labels)}, "template": template,
                     **extra_spec},
        }
        if annotations:
            obj["metadata"]["annotations"] = dict(annotations)
        return self.api.create(resource_type(kind), namespace, obj)

    def add_deployment(self, namespace: str, name: str, replicas: int = 1,
                       image: str = "vllm/vllm-openai:v0.9.2", args: list[str] | None = None,
                       labels: dict | None = None, gpu_per_pod: int = 1, *, container_name: str = "vllm",
                       port: int | None = 8000, env: dict | list | None = None, command: list[str] | None = None,
                       resources: dict | None = None, annotations: dict | None = None,
                       template_annotations: dict | None = None, strategy: dict | None = None,
                       progress_deadline_seconds: int | None = None, min_ready_seconds: int | None = None,
                       selector: dict | None = None) -> dict:
        """Create a Deployment (labels default to ``{"app": name}``, also its selector unless ``selector``)."""
        extra: dict = {}
        if strategy:
            extra["strategy"] = strategy
        if progress_deadline_seconds is not None:
            extra["progressDeadlineSeconds"] = progress_deadline_seconds
        if min_ready_seconds is not None:
            extra["minReadySeconds"] = min_ready_seconds
        return self._workload("Deployment", namespace, name, replicas, image, args, labels, gpu_per_pod,
                              container_name=container_name, port=port, env=env, command=command,
                              resources=resources, annotations=annotations,
                              template_annotations=template_annotations, extra_spec=extra, selector=selector)

    def add_statefulset(self, namespace: str, name: str, replicas: int = 1,
                        image: str = "vllm/vllm-openai:v0.9.2", args: list[str] | None = None,
                        labels: dict | None = None, gpu_per_pod: int = 1, *, container_name: str = "vllm",
                        port: int | None = 8000, env: dict | list | None = None, command: list[str] | None = None,
                        resources: dict | None = None, annotations: dict | None = None,
                        template_annotations: dict | None = None, service_name: str | None = None,
                        pod_management_policy: str | None = None) -> dict:
        extra: dict = {"serviceName": service_name or name}
        if pod_management_policy:
            extra["podManagementPolicy"] = pod_management_policy
        return self._workload("StatefulSet", namespace, name, replicas, image, args, labels, gpu_per_pod,
                              container_name=container_name, port=port, env=env, command=command,
                              resources=resources, annotations=annotations,
                              template_annotations=template_annotations, extra_spec=extra)

    def add_pod(self, namespace: str, name: str, image: str = "vllm/vllm-openai:v0.9.2", *,
                labels: dict | None = None, args: list[str] | None = None, gpus: int = 0,
                node_name: str | None = None, container_name: str = "main", port: int | None = None) -> dict:
        """A bare pod (no controller); the scheduler binds it unless ``node_name`` is given."""
        self._ensure_namespace(namespace)
        spec: dict = {"containers": [self._container(container_name, image, args, None, gpus, port, None, None)]}
        if node_name:
            spec["nodeName"] = node_name
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}
        return self.api.create(R.BY_KIND["Pod"], namespace, pod)

    def add_configmap(self, namespace: str, name: str, data: dict | None = None,
                      labels: dict | None = None) -> dict:
        self._ensure_namespace(namespace)
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
              "data": {k: str(v) for k, v in (data or {}).items()}}
        return self.api.create(R.BY_KIND["ConfigMap"], namespace, cm)

    def add_service(self, namespace: str, name: str, selector: dict | None = None,
                    ports: Iterable[int | dict] = (8000,), *, type: str = "ClusterIP",  # noqa: A002
                    labels: dict | None = None) -> dict:
        self._ensure_namespace(namespace)
        port_list = []
        for p in ports:
            port_list.append(dict(p) if isinstance(p, dict) else {"name": f"port-{p}", "port": p, "targetPort": p})
        if len(port_list) == 1 and port_list[0].get("name", "").startswith("port-"):
            port_list[0]["name"] = "http"
        svc = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
               "spec": {"type": type, "selector": dict(selector if selector is not None else {"app": name}),
                        "ports": port_list}}
        return self.api.create(R.BY_KIND["Service"], namespace, svc)

    def add_pdb(self, namespace: str, name: str, selector: dict, *, min_available: int | str | None = None,
                max_unavailable: int | str | None = None) -> dict:
        """A policy/v1 PodDisruptionBudget over pods with the ``selector`` labels."""
        self._ensure_namespace(namespace)
        spec: dict = {"selector": {"matchLabels": dict(selector)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        obj = self.api.create(R.BY_KIND["PodDisruptionBudget"], namespace, pdb)
        with self.store.lock:  # compute the status right away
            live = self.store.get(R.BY_KIND["PodDisruptionBudget"], namespace, name)
            live["status"] = self.controllers.pdb_status(live)
            obj = self.store.put(R.BY_KIND["PodDisruptionBudget"], live)
        return obj

    def add_hpa(self, namespace: str, name: str, target: str, *, target_kind: str = "Deployment",
                min_replicas: int = 1, max_replicas: int = 10, metrics: list | None = None,
                current_replicas: int | None = None, desired_replicas: int | None = None,
                current_metrics: list | None = None, conditions: list | None = None,
                last_scale_time: float | str | None = None, behavior: dict | None = None,
                owner: dict | None = None, labels: dict | None = None) -> dict:
        """An autoscaling/v2 HPA with a complete status (every field the client
        models declare, so a TUI can render it); explicitly given status
        fields are pinned (the reconcile loop leaves them alone)."""
        self._ensure_namespace(namespace)
        metric_name = "vllm:num_requests_waiting"
        metrics = metrics if metrics is not None else [{
            "type": "Pods",
            "pods": {"metric": {"name": metric_name}, "target": {"type": "AverageValue", "averageValue": "5"}},
        }]
        pinned = {field for field, value in (("currentReplicas", current_replicas),
                                             ("desiredReplicas", desired_replicas),
                                             ("conditions", conditions)) if value is not None}
        target_rt = resource_type(target_kind)
        target_obj = self.store.get(target_rt, namespace, target)
        actual = int(((target_obj or {}).get("status") or {}).get("replicas") or 0)
        if current_replicas is None:
            current = actual or ((target_obj or {}).get("spec") or {}).get("replicas", 0)
        else:
            current = current_replicas
        now = format_time(self.clock())
        if isinstance(last_scale_time, (int, float)):
            last_scale_time = format_time(last_scale_time)
        if current_metrics is None:
            current_metrics = []
            for m in metrics:
                if m.get("type") == "Pods":
                    current_metrics.append({"type": "Pods", "pods": {
                        "metric": m["pods"]["metric"], "current": {"averageValue": "0"}}})
                elif m.get("type") == "Resource":
                    current_metrics.append({"type": "Resource", "resource": {
                        "name": m["resource"]["name"], "current": {"averageUtilization": 0, "averageValue": "0"}}})
        if conditions is None:
            conditions = [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                 "message": "recommended size matches current size", "lastTransitionTime": now},
                {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
                 "message": "the HPA was able to successfully calculate a replica count from pods metric "
                            f"{metric_name}", "lastTransitionTime": now},
                {"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange",
                 "message": "the desired count is within the acceptable range", "lastTransitionTime": now},
            ]
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace, **({"labels": dict(labels)} if labels else {}),
                         **({"ownerReferences": [owner]} if owner else {})},
            "spec": {
                "scaleTargetRef": {"apiVersion": target_rt.api_version, "kind": target_rt.kind, "name": target},
                "minReplicas": min_replicas,
                "maxReplicas": max_replicas,
                "metrics": metrics,
                **({"behavior": behavior} if behavior else {}),
            },
            "status": {
                "currentReplicas": current,
                "desiredReplicas": desired_replicas if desired_replicas is not None else current,
                "currentMetrics": current_metrics,
                "conditions": conditions,
                "lastScaleTime": last_scale_time or now,
            },
        }
        self._hpa_pinned[(namespace, name)] = pinned
        return self.api.create(R.BY_KIND["HorizontalPodAutoscaler"], namespace, hpa, keep_status=True)

    def add_scaled_object(self, namespace: str, name: str, target: str, *, target_kind: str = "Deployment",
                          min_replicas: int = 1, max_replicas: int = 10, triggers: list | None = None,
                          annotations: dict | None = None, fallback: dict | None = None,
                          polling_interval: int = 30, cooldown_period: int = 300, status: dict | None = None,
                          with_hpa: bool = True, hpa_status: dict | None = None) -> dict:
        """A KEDA ScaledObject (install ``ScaledObject`` first) and, as KEDA's operator does, the HPA it
        owns (``keda-hpa-<name>``, one External metric per trigger: ``s<i>-<type>``). ``status`` is
        merged into the default (Ready/Active True, health Happy); ``hpa_status`` pins the HPA's."""
        self._ensure_namespace(namespace)
        triggers = triggers if triggers is not None else [{
            "type": "prometheus", "metadata": {
                "serverAddress": "http://prometheus.monitoring:9090", "threshold": "5",
                "query": f'sum(vllm:num_requests_waiting{{namespace="{namespace}"}})'}}]
        target_rt = resource_type(target_kind)
        metric_names = [f"s{i}-{t.get('type', 'x')}" for i, t in enumerate(triggers)]
        now = format_time(self.clock())
        hpa_name = f"keda-hpa-{name}"
        default_status = {
            "scaleTargetKind": f"{target_rt.api_version}.{target_rt.kind}",
            "scaleTargetGVKR": {"group": target_rt.group, "version": target_rt.version, "kind": target_rt.kind,
                                "resource": target_rt.plural},
            "originalReplicaCount": 1,
            "hpaName": hpa_name,
            "externalMetricNames": metric_names,
            "health": {m: {"numberOfFailures": 0, "status": "Happy"} for m in metric_names},
            "lastActiveTime": now,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
                 "message": "ScaledObject is defined correctly and is ready for scaling"},
                {"type": "Active", "status": "True", "reason": "ScalerActive",
                 "message": "Scaling is performed because triggers are active"},
                {"type": "Fallback", "status": "False", "reason": "NoFallbackFound",
                 "message": "No fallbacks are active on this scaled object"},
                {"type": "Paused", "status": "False", "reason": "ScaledObjectUnpaused",
                 "message": "pause annotation removed for ScaledObject"},
            ],
        }
        obj = {
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": namespace, **({"annotations": dict(annotations)}
                                                                  if annotations else {})},
            "spec": {"scaleTargetRef": {"name": target, "kind": target_kind, "apiVersion": target_rt.api_version},
                     "minReplicaCount": min_replicas, "maxReplicaCount": max_replicas,
                     "pollingInterval": polling_interval, "cooldownPeriod": cooldown_period,
                     "triggers": triggers, **({"fallback": fallback} if fallback else {})},
            "status": {**default_status, **(status or {})},
        }
        created = self.api.create(resource_type("ScaledObject"), namespace, obj, keep_status=True)
        if with_hpa:
            owner = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": name,
                     "uid": created["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
            metrics = [{"type": "External", "external": {
                "metric": {"name": m, "selector": {"matchLabels": {"scaledobject.keda.sh/name": name}}},
                "target": {"type": "AverageValue", "averageValue": str(t.get("metadata", {}).get("threshold", "1"))}}}
                for m, t in zip(metric_names, triggers)]
            hs = dict(hpa_status or {})
            self.add_hpa(namespace, hpa_name, target, target_kind=target_kind, min_replicas=min_replicas,
                         max_replicas=max_replicas, metrics=metrics, owner=owner,
                         labels={"app.kubernetes.io/managed-by": "keda-operator", "scaledobject.keda.sh/name": name},
                         current_replicas=hs.get("currentReplicas"), desired_replicas=hs.get("desiredReplicas"),
                         current_metrics=hs.get("currentMetrics"), conditions=hs.get("conditions"),
                         last_scale_time=hs.get("lastScaleTime"))
        return created

    def add_variant_autoscaling(self, namespace: str, name: str, target: str | None = None, *,
                                model_id: str = "meta-llama/Llama-3.1-8B-Instruct", current_replicas: int = 1,
                                desired_replicas: int | None = None, accelerator: str = "H100",
                                applied: bool | None = True, min_replicas: int | None = None,
                                max_replicas: int | None = None, conditions: list | None = None) -> dict:
        """An llm-d VariantAutoscaling (install ``VariantAutoscaling`` first) with its status:
        currentAlloc, desiredOptimizedAlloc, actuation and conditions (default: all True).
        ``target=None`` leaves out scaleTargetRef, as older versions (the Deployment of the same name)."""
        self._ensure_namespace(namespace)
        now = format_time(self.clock())
        spec: dict = {"modelID": model_id}
        if target is not None:
            spec["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}
        if min_replicas is not None:
            spec["minReplicas"] = min_replicas
        if max_replicas is not None:
            spec["maxReplicas"] = max_replicas
        status: dict = {
            "currentAlloc": {"numReplicas": current_replicas, "accelerator": accelerator},
            "desiredOptimizedAlloc": {"numReplicas": current_replicas if desired_replicas is None
                                      else desired_replicas, "accelerator": accelerator, "lastRunTime": now},
            "conditions": conditions if conditions is not None else [
                {"type": "TargetResolved", "status": "True", "reason": "TargetFound",
                 "message": f"scale target {target or name} found", "lastTransitionTime": now},
                {"type": "MetricsAvailable", "status": "True", "reason": "MetricsFound",
                 "message": "vLLM metrics are available", "lastTransitionTime": now},
            ],
        }
        if applied is not None:
            status["actuation"] = {"applied": applied}
        obj = {"apiVersion": "llmd.ai/v1alpha1", "kind": "VariantAutoscaling",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}
        return self.api.create(resource_type("VariantAutoscaling"), namespace, obj, keep_status=True)

    def set_hpa_metrics(self, source: MetricSource | None, sync_s: float = 15.0, *,
                        seed_current: bool = False) -> None:
        """Turn on the HPA controller (``None``: off): every ``sync_s`` each HPA whose status is not
        pinned is evaluated from ``source`` (see :mod:`.hpa`) and scales its target. ``seed_current``:
        act as a controller that has been running (a first scale-down waits for its window)."""
        self.hpa_controller = None if source is None else HpaController(source, sync_s, seed_current=seed_current)
        self._poke()

    def record_event(self, kind: str, name: str, namespace: str | None, etype: str, reason: str, message: str,
                     component: str = "") -> None:
        """Record an Event about an existing object (a controller's words: FailedGetPodsMetric, …)."""
        rt = self._rt(kind)
        with self.store.lock:
            obj = self.api.get_current(rt, self._ns(rt, namespace), name)
            self.api.events.record(rt, obj, etype, reason, message, component)

    def set_hpa_status(self, namespace: str, name: str, *, desired_replicas: int | None = None,
                       current_replicas: int | None = None, current_metrics: list | None = None,
                       conditions: list | None = None, last_scale_time: float | str | None = None,
                       scale_target: bool = False) -> dict:
        """Set HPA status fields (pinning them). ``scale_target=True`` also acts
        like the HPA controller: scales the target to ``desired_replicas``
        (clamped to min/max), stamps lastScaleTime and records a
        SuccessfulRescale event."""
        rt = R.BY_KIND["HorizontalPodAutoscaler"]
        pinned = self._hpa_pinned.setdefault((namespace, name), set())
        with self.store.lock:
            hpa = self.api.get_current(rt, namespace, name)
            status = hpa.setdefault("status", {"desiredReplicas": 0})
            if desired_replicas is not None:
                status["desiredReplicas"] = desired_replicas
                pinned.add("desiredReplicas")
            if current_replicas is not None:
                status["currentReplicas"] = current_replicas
                pinned.add("currentReplicas")
            if current_metrics is not None:
                status["currentMetrics"] = current_metrics
            if conditions is not None:
                status["conditions"] = conditions
                pinned.add("conditions")
            if last_scale_time is not None:
                status["lastScaleTime"] = (format_time(last_scale_time)
                                           if isinstance(last_scale_time, (int, float)) else last_scale_time)
            if scale_target and desired_replicas is not None:
                spec = hpa["spec"]
                n = max(spec.get("minReplicas", 1), min(spec["maxReplicas"], desired_replicas))
                ref = spec["scaleTargetRef"]
                target_rt = resource_type(ref["kind"])
                target = self.api.get_current(target_rt, namespace, ref["name"])
                old = target["spec"].get("replicas", 1)
                if old != n:
                    self.api.update_scale(target_rt, namespace, ref["name"], {"spec": {"replicas": n}})
                    status["lastScaleTime"] = format_time(self.clock())
                    self.api.events.record(rt, hpa, "Normal", "SuccessfulRescale",
                                           f"New size: {n}; reason: pods metric above target",
                                           "horizontal-pod-autoscaler")
            return self.store.put(rt, hpa)

    # ------------------------------------------------- failure modes etc.
    def fail_image(self, pattern: str, reason: str = "ImagePullBackOff") -> None:
        """Containers whose image matches ``pattern`` (fnmatch) never start:
        pod Pending, container waiting with ``reason`` (ImagePullBackOff or ErrImagePull)."""
        self._image_failures.append((pattern, reason))
        self._poke()

    def fail_args(self, match: str | Callable[[list[str]], bool], reason: str = "CrashLoopBackOff",
                  exit_code: int = 1) -> None:
        """Containers whose command+args contain ``match`` (a substring of the
        joined command line, or a predicate over the list) crash-loop:
        waiting ``reason``, restartCount growing every ``crash_period`` s,
        lastState.terminated with ``exit_code``."""
        self._args_failures.append((match, reason, exit_code))
        self._poke()

    def clear_failures(self) -> None:
        self._image_failures.clear()
        self._args_failures.clear()
        self._poke()

    def _image_failure(self, image: str) -> str | None:
        for pattern, reason in self._image_failures:
            if fnmatch.fnmatchcase(image, pattern):
                return reason
        return None

    def _args_failure(self, container: dict) -> tuple[str, int] | None:
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        for match, reason, code in self._args_failures:
            if (callable(match) and match(argv)) or (isinstance(match, str) and match in " ".join(argv)):
                return reason, code
        return None

    def set_pod_endpoint(self, pattern: str, ip: str = "127.0.0.1", port: int | None = None,
                         namespace: str | None = None) -> None:
        """Pods whose name matches ``pattern`` (fnmatch) get ``status.podIP = ip``;
        with ``port``, their first container's first containerPort becomes
        ``port``, so a client finds a simulated engine at ip:port. Applies to
        pods that get their IP later; existing matching pods are re-pointed now."""
        self._endpoints.insert(0, (pattern, namespace, ip, port))
        with self.store.lock:
            rt = R.BY_KIND["Pod"]
            for pod in list(self.store.iter(rt, namespace)):
                if fnmatch.fnmatchcase(pod["metadata"]["name"], pattern) and (pod.get("status") or {}).get("podIP"):
                    pod = clone(pod)
                    pod["status"]["podIP"] = ip
                    pod["status"]["podIPs"] = [{"ip": ip}]
                    if port is not None and pod["spec"].get("containers"):
                        ports = pod["spec"]["containers"][0].setdefault("ports", [])
                        if ports:
                            ports[0]["containerPort"] = port
                        else:
                            ports.append({"name": "http", "containerPort": port, "protocol": "TCP"})
                    self.store.put(rt, pod)

    def set_endpoint_allocator(self, allocate: Callable[[str, str], tuple[str, int | None] | None] | None) -> None:
        """``allocate(namespace, pod_name)`` is asked first when the kubelet gives a pod its IP (under the
        store lock: be quick, make no API request); ``(ip, port)`` points the pod there, None: as usual.
        One call per pod, whatever the number of pods (``set_pod_endpoint`` patterns are scanned per pod)."""
        self._allocator = allocate

    def _endpoint_for(self, namespace: str, name: str) -> tuple[str, int | None] | None:
        allocate = getattr(self, "_allocator", None)
        if allocate is not None:
            got = allocate(namespace, name)
            if got is not None:
                return got
        for pattern, ns, ip, port in self._endpoints:
            if (ns is None or ns == namespace) and fnmatch.fnmatchcase(name, pattern):
                return ip, port
        return None

    def pod_endpoint(self, pod_name: str, namespace: str | None = None) -> tuple[str, int | None]:
        """(podIP, port) of a pod: the mapped port, else its first containerPort."""
        with self.store.lock:
            pods = [p for p in self.store.iter(R.BY_KIND["Pod"], namespace) if p["metadata"]["name"] == pod_name]
            if not pods:
                raise KeyError(pod_name)
            pod = pods[0]
            ip = (pod.get("status") or {}).get("podIP")
            if ip is None:
                raise LookupError(f"pod {pod_name} has no IP yet (not scheduled/started)")
            mapped = self._endpoint_for(pod["metadata"]["namespace"], pod_name)
            if mapped is not None and mapped[1] is not None:
                return ip, mapped[1]
            for c in pod["spec"].get("containers") or []:
                for p in c.get("ports") or []:
                    return ip, p.get("containerPort")
            return ip, None

    def set_pod_ready(self, pod_name: str, ready: bool | None, namespace: str = "default") -> None:
        """Force a running pod's readiness (``None``: back to the normal rules)."""
        if ready is None:
            self._ready_overrides.pop((namespace, pod_name), None)
        else:
            self._ready_overrides[(namespace, pod_name)] = ready
        self._poke()

    # ------------------------------------------------------------ logs
    def set_pod_log(self, pod_name: str, text: str, namespace: str = "default",
                    container: str | None = None) -> None:
        """What ``GET pods/<name>/log`` answers (replaces earlier text); the
        container defaults to the pod's first."""
        self._logs[(namespace, pod_name, container or "")] = text.splitlines(keepends=True)

    def append_pod_log(self, pod_name: str, text: str, namespace: str = "default",
                       container: str | None = None) -> None:
        self._logs.setdefault((namespace, pod_name, container or ""), []).extend(text.splitlines(keepends=True))

    def _read_log(self, namespace: str, name: str, query: dict) -> str:
        pod = self.api.get_current(R.BY_KIND["Pod"], namespace, name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        container = query.get("container")
        if not container:
            if len(names) > 1:
                raise E.bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                    f"[{' '.join(names)}]")
            container = names[0]
        elif container not in names:
            raise E.bad_request(f"container {container} is not valid for pod {name}")
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if cs.get("name") == container and waiting and waiting.get("reason") != "CrashLoopBackOff":
                detail = ("trying and failing to pull image" if "Image" in (waiting.get("reason") or "")
                          else waiting.get("reason"))
                raise E.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {detail}')
        if not pod["spec"].get("nodeName"):
            raise E.bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        lines = self._logs.get((namespace, name, container))
        if lines is None and container == names[0]:
            lines = self._logs.get((namespace, name, ""), [])
        lines = list(lines or [])
        tail = query.get("tailLines")
        if tail:
            lines = lines[-int(tail):] if int(tail) > 0 else []
        return "".join(lines)

    def _poke(self) -> None:
        """Wake the reconcile loop (configuration changed, not the store)."""
        with self.store.lock:
            self.store.changed.notify_all()
