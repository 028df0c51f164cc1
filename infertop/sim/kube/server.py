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

This module holds the emulator's lifecycle, reconcile loop, request log and generic
object helpers; HTTP is in ``http_server.py``/``routing.py``/``watch.py``, the token and
rules in ``access.py``, the seeding helpers in ``seed_objects.py``/``seed_autoscalers.py``,
pod failure modes, endpoints and logs in ``pod_runtime.py``.
"""


from __future__ import annotations

import builtins
import fnmatch
import json
import random
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

from .access import AccessControl
from .api import JSON_PATCH, MERGE, STRATEGIC, Api
from .controllers import Controllers
from .emulator_state import EndpointAllocator
from .hpa import HpaController
from .http_server import EmulatorHTTPServer, Request
from .pod_runtime import PodRuntime
from .resources import ResourceType, resource_type, withheld_key
from .selectors import parse_label_selector
from .seed_autoscalers import AutoscalerSeeding
from .seed_objects import ObjectSeeding
from .store import Store


class KubeEmulator(AccessControl, ObjectSeeding, AutoscalerSeeding, PodRuntime):
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
        self._args_failures: list[tuple[Any, str, int, str]] = []  # (match, reason, exit code, termination reason)
        self._endpoints: list[tuple[str, str | None, str, int | None]] = []
        self._allocator: EndpointAllocator | None = None
        self._ready_overrides: dict[tuple[str, str], bool] = {}
        self._hpa_pinned: dict[tuple[str, str], set] = {}
        self.hpa_controller: HpaController | None = None  # set_hpa_metrics() turns it on
        self._logs: dict = {}  # (ns, pod, container) -> logs.ContainerLog
        self._logs_changed = threading.Condition()
        self._server: EmulatorHTTPServer | None = None
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
                if withheld_key(rt) not in keys:
                    raise ValueError(f"{kind} is built in, not an installable custom resource")
                keys.discard(withheld_key(rt))  # served again
                continue
            keys.add(rt.key)
        self.installed = frozenset(keys)

    def uninstall(self, *kinds: str) -> None:
        """Stop serving custom resources (their objects stay in the store, unreachable) — or built-in ones,
        as a server without that API (an old one without autoscaling/v2): discovery leaves them out and
        their paths answer 404, until :meth:`install` serves them again."""
        keys = set(self.installed)
        for kind in kinds:
            rt = resource_type(kind)
            if rt.optional:
                keys.discard(rt.key)
            else:
                keys.add(withheld_key(rt))
        self.installed = frozenset(keys)

    # ---------------------------------------------------------- lifecycle
    def start(self) -> "KubeEmulator":
        """Serve (again, after :meth:`stop`: on the same port, so kubeconfigs stay valid)."""
        if self._server is not None:
            return self
        self._stopping = False
        self.store.reopen()
        self._server = EmulatorHTTPServer((self.host, self._port), self)
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
        with self._logs_changed:  # log followers end now
            self._logs_changed.notify_all()
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
               reason: str | None = None) -> builtins.list[dict]:  # list: a method here
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

    def record_event(self, kind: str, name: str, namespace: str | None, etype: str, reason: str, message: str,
                     component: str = "") -> None:
        """Record an Event about an existing object (a controller's words: FailedGetPodsMetric, …)."""
        rt = self._rt(kind)
        with self.store.lock:
            obj = self.api.get_current(rt, self._ns(rt, namespace), name)
            self.api.events.record(rt, obj, etype, reason, message, component)

    def _poke(self) -> None:
        """Wake the reconcile loop (configuration changed, not the store)."""
        with self.store.lock:
            self.store.changed.notify_all()
