"""What the emulated kubelets make of a pod beyond the spec: failure modes (an image
that never pulls, args that crash), the endpoint a pod answers on, readiness overrides,
and container logs (``logs.py``). :class:`PodRuntime` is a base of the emulator."""

from __future__ import annotations

import fnmatch
from typing import Callable

from . import errors as E
from . import resources as R
from .logs import PodLogs
from .store import clone

WAIT = "wait"  # an endpoint allocator's "nothing free for this pod yet"


class PodRuntime(PodLogs):
    """Pod failure modes, endpoints, readiness and logs, as methods of the emulator."""

    def fail_image(self, pattern: str, reason: str = "ImagePullBackOff") -> None:
        """Containers whose image matches ``pattern`` (fnmatch) never start:
        pod Pending, container waiting with ``reason`` (ImagePullBackOff or ErrImagePull)."""
        self._image_failures.append((pattern, reason))
        self._poke()

    def fail_args(self, match: str | Callable[[list[str]], bool], reason: str = "CrashLoopBackOff",
                  exit_code: int = 1, termination_reason: str = "Error") -> None:
        """Containers whose command+args contain ``match`` (a substring of the
        joined command line, or a predicate over the list) crash-loop:
        waiting ``reason``, restartCount growing every ``crash_period`` s,
        lastState.terminated with ``exit_code`` and ``termination_reason`` (``"OOMKilled"``, 137); each
        crashed instance's log ends in a line naming how it ended (``previous=true`` reads it)."""
        self._args_failures.append((match, reason, exit_code, termination_reason))
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

    def _args_failure(self, container: dict) -> tuple[str, int, str] | None:
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        for match, reason, code, ended in self._args_failures:
            if (callable(match) and match(argv)) or (isinstance(match, str) and match in " ".join(argv)):
                return reason, code, ended
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

    def set_endpoint_allocator(self, allocate: Callable[[str, str], tuple[str, int | None] | str | None] | None) -> None:
        """``allocate(namespace, pod_name)`` is asked first when the kubelet gives a pod its IP (under the
        store lock: be quick, make no API request); ``(ip, port)`` points the pod there, None: as usual,
        ``WAIT``: nothing for it yet — the pod stays ContainerCreating, without an IP, and is asked again
        each pass. One call per pod, whatever the number of pods (``set_pod_endpoint`` patterns are scanned
        per pod)."""
        self._allocator = allocate

    def _endpoint_for(self, namespace: str, name: str) -> tuple[str, int | None] | str | None:
        allocate = self._allocator
        if allocate is not None:
            got = allocate(namespace, name)
            if got is not None:
                return got  # an endpoint, or WAIT
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
            if isinstance(mapped, tuple) and mapped[1] is not None:  # not None, not WAIT
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
