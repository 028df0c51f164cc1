"""The kubelets: pod IPs (or the endpoint a test mapped), container states, readiness
after the start and ready delays, the ImagePullBackOff / CrashLoopBackOff failure
modes, pod conditions, removal of terminated pods, and the kubelet's Events."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from .controller_base import NODES, PODS, ControllerBase, is_terminating
from .pod_runtime import WAIT
from .store import clone
from .util import format_time, parse_time, set_condition

if TYPE_CHECKING:
    from .server import KubeEmulator


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Kubelet(ControllerBase):
    """Runs every node's pods; remembers when each started and when each terminating one goes."""

    def __init__(self, emu: KubeEmulator) -> None:
        super().__init__(emu)
        self.terminating: dict[str, float] = {}  # pod uid -> when the kubelet removes it
        self.started: dict[str, float] = {}  # pod uid -> when its sandbox started (float precision)
        self._ip_counter = 1

    def _alloc_ip(self, pod: dict) -> tuple[str, int | None] | None:
        """(ip, port) for a pod's sandbox; None while the endpoint allocator has nothing free for it."""
        mapped = self.emu._endpoint_for(pod["metadata"]["namespace"], pod["metadata"]["name"])
        if mapped == WAIT:
            return None
        if isinstance(mapped, tuple):
            return mapped
        while True:
            self._ip_counter += 1
            n = self._ip_counter
            a, b, c = (n >> 16) & 255, (n >> 8) & 255, n & 255
            if c not in (0, 255):
                return f"127.{a}.{b}.{c}", None

    def run(self) -> None:
        nodes = {n["metadata"]["name"]: n for n in self.store.iter(NODES)}
        now = self.now
        for pod in list(self.store.iter(PODS)):
            node_name = pod["spec"].get("nodeName")
            if not node_name:
                continue
            uid = pod["metadata"]["uid"]
            if is_terminating(pod):
                if now >= self.terminating.get(uid, 0.0):
                    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                        if "running" in (cs.get("state") or {}):
                            self._event(PODS, pod, "Normal", "Killing", f"Stopping container {cs['name']}",
                                        "kubelet", host=node_name,
                                        field_path=f"spec.containers{{{cs['name']}}}")
                    self.store.remove(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
                    self.terminating.pop(uid, None)
                    self.started.pop(uid, None)
                continue
            node = nodes.get(node_name)
            if node is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            self._sync_pod(pod, node, now)

    def _sync_pod(self, stored: dict, node: dict, now: float) -> None:
        before, pod = stored, clone(stored)  # one copy per pod and pass: the stored object is left untouched
        meta, spec = pod["metadata"], pod["spec"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        status = pod.setdefault("status", {})
        started = self.started.setdefault(uid, parse_time(status.get("startTime")) or now)
        status.setdefault("startTime", format_time(started))
        ts_now = format_time(now)
        got = None if status.get("podIP") else self._alloc_ip(pod)
        sandbox = bool(status.get("podIP")) or got is not None
        if not sandbox:  # no endpoint for it yet: ContainerCreating, and its start counts from the sandbox
            self.started[uid] = started = now
        if got is not None:
            ip, port = got
            status["podIP"] = ip
            status["podIPs"] = [{"ip": ip}]
            if port is not None and spec.get("containers"):
                ports = spec["containers"][0].setdefault("ports", [])
                if ports:
                    ports[0]["containerPort"] = port
                else:
                    ports.append({"name": "http", "containerPort": port, "protocol": "TCP"})
        host_ip = next((a["address"] for a in (node.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"), "127.0.0.1")
        status["hostIP"] = host_ip
        status["hostIPs"] = [{"ip": host_ip}]
        elapsed = now - started
        override = self.emu._ready_overrides.get((ns, name))
        prev_statuses = {cs["name"]: cs for cs in status.get("containerStatuses") or []}
        statuses, pending, not_ready = [], False, []
        events: list[tuple] = []
        for c in spec.get("containers") or []:
            cname, image = c["name"], c.get("image", "")
            prev = prev_statuses.get(cname) or {}
            prev_state = prev.get("state") or {}
            fpath = f"spec.containers{{{cname}}}"
            cs: dict[str, Any] = {"name": cname, "image": image, "imageID": "", "ready": False,
                                  "restartCount": 0, "started": False, "state": {}, "lastState": {}}
            image_failure = self.emu._image_failure(image)
            args_failure = self.emu._args_failure(c)
            image_id = f"docker.io/{image.split(':')[0]}@sha256:{_sha(image)}"
            container_id = f"containerd://{_sha(uid + cname)}"
            if image_failure:
                pending = True
                if image_failure == "ErrImagePull":
                    msg = f'failed to pull and unpack image "{image}": not found'
                else:
                    msg = f'Back-off pulling image "{image}"'
                cs["state"] = {"waiting": {"reason": image_failure, "message": msg}}
                if (prev_state.get("waiting") or {}).get("reason") != image_failure:
                    events.append(("Normal", "Pulling", f'Pulling image "{image}"', fpath))
                    events.append(("Warning", "Failed",
                                   f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to '
                                   f'pull and unpack image "{image}": not found', fpath))
                    events.append(("Normal", "BackOff", f'Back-off pulling image "{image}"', fpath))
            elif not sandbox or elapsed < self.emu.start_delay:
                pending = True
                cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
            elif args_failure:
                reason, exit_code, ended = args_failure
                run_for = now - started - self.emu.start_delay
                restarts = 1 + int(run_for // self.emu.crash_period)
                backoff = min(10 * 2 ** (restarts - 1), 300)
                cs.update(imageID=image_id, containerID=container_id, restartCount=restarts)
                last_start = format_time(started + self.emu.start_delay + (restarts - 1) * self.emu.crash_period)
                cs["state"] = {"waiting": {
                    "reason": reason,
                    "message": f"back-off {backoff}s restarting failed container={cname} pod={name}_{ns}({uid})",
                }}
                cs["lastState"] = {"terminated": {"exitCode": exit_code, "reason": ended,
                                                  "startedAt": last_start, "finishedAt": last_start,
                                                  "containerID": container_id}}
                if prev.get("restartCount", 0) != restarts:
                    if not prev.get("restartCount"):
                        events.append(("Normal", "Pulled",
                                       f'Container image "{image}" already present on machine', fpath))
                        events.append(("Normal", "Created", f"Created container: {cname}", fpath))
                        events.append(("Normal", "Started", f"Started container {cname}", fpath))
                    argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
                    for k in range(prev.get("restartCount", 0), restarts):  # each crashed instance's log
                        at = started + self.emu.start_delay + k * self.emu.crash_period
                        self.emu._rotate_crashed(ns, name, cname, argv, ended, exit_code, at)
                    for _ in range(max(1, restarts - prev.get("restartCount", 0))):  # one per restart
                        events.append(("Warning", "BackOff",
                                       f"Back-off restarting failed container {cname} in pod {name}_{ns}({uid})",
                                       fpath))
            else:
                run_started = (prev_state.get("running") or {}).get("startedAt") or ts_now
                ready = elapsed >= self.emu.start_delay + self.emu.ready_delay
                if override is not None:
                    ready = override
                cs.update(imageID=image_id, containerID=container_id, started=True, ready=ready,
                          restartCount=prev.get("restartCount", 0), lastState=prev.get("lastState") or {})
                cs["state"] = {"running": {"startedAt": run_started}}
                if "running" not in prev_state:
                    events.append(("Normal", "Pulled", f'Container image "{image}" already present on machine',
                                   fpath))
                    events.append(("Normal", "Created", f"Created container: {cname}", fpath))
                    events.append(("Normal", "Started", f"Started container {cname}", fpath))
            if not cs["ready"]:
                not_ready.append(cname)
            statuses.append(cs)
        status["containerStatuses"] = statuses
        status["phase"] = "Pending" if pending else "Running"
        conds = status.setdefault("conditions", [])
        set_condition(conds, "PodReadyToStartContainers", "True", None, None, ts_now, probe=True)
        set_condition(conds, "Initialized", "True", None, None, ts_now, probe=True)
        if not_ready:
            msg = f"containers with unready status: [{' '.join(not_ready)}]"
            set_condition(conds, "Ready", "False", "ContainersNotReady", msg, ts_now, probe=True)
            set_condition(conds, "ContainersReady", "False", "ContainersNotReady", msg, ts_now, probe=True)
        else:
            set_condition(conds, "Ready", "True", None, None, ts_now, probe=True)
            set_condition(conds, "ContainersReady", "True", None, None, ts_now, probe=True)
        set_condition(conds, "PodScheduled", "True", None, None, ts_now, probe=True)
        order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
        conds.sort(key=lambda c: order.index(c["type"]) if c["type"] in order else len(order))
        saved = self._save(PODS, before, pod)
        for etype, reason, message, fpath in events:
            self._event(PODS, saved, etype, reason, message, "kubelet", host=spec.get("nodeName"),
                        field_path=fpath)
