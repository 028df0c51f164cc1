"""Container logs as a kubelet keeps them: a bounded ring of timestamped lines per container
instance, the previous instance's log kept across a restart, and ``GET pods/NAME/log`` with
``container``, ``previous``, ``tailLines``, ``timestamps``, ``limitBytes`` and ``follow`` (a
chunked text stream that ends when the container restarts or the pod goes)."""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

from . import errors as E
from . import resources as R
from .emulator_state import EmulatorState

if TYPE_CHECKING:
    from .http_server import Handler

LOG_RING_LINES = 10_000  # per container instance: a kubelet rotates its log files, this drops the oldest


def format_nano(t: float) -> str:
    """RFC 3339 with nanoseconds, as the kubelet prefixes a line with ``timestamps=true``."""
    whole = int(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((t - whole) * 1e9):09d}Z"


class ContainerLog:
    """One container's log: the current instance and the one before the last restart."""

    def __init__(self, max_lines: int = LOG_RING_LINES) -> None:
        self.current: deque[tuple[int, float, str]] = deque(maxlen=max_lines)  # (seq, time, line)
        self.previous: deque[tuple[int, float, str]] | None = None
        self.instance = 0  # grows at each restart: a follower of the old instance ends
        self.written = 0  # lines ever written to this container (each line's seq)

    def write(self, at: float, line: str) -> None:
        self.written += 1
        self.current.append((self.written, at, line if line.endswith("\n") else line + "\n"))

    def rotate(self) -> None:
        self.previous, self.current = self.current, deque(maxlen=self.current.maxlen)
        self.instance += 1


class PodLogs(EmulatorState):
    """The emulator's container logs (a base of the emulator; ``self._logs``, ``self.clock``)."""

    def _log(self, namespace: str, pod: str, container: str) -> ContainerLog:
        key = (namespace, pod, container)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = ContainerLog(getattr(self, "log_ring_lines", LOG_RING_LINES))
        return log

    def _first_container(self, namespace: str, pod: str) -> str:
        try:
            obj = self.api.get_current(R.BY_KIND["Pod"], namespace, pod)
            return (obj["spec"].get("containers") or [{}])[0].get("name") or ""
        except E.ApiError:
            return ""

    def set_pod_log(self, pod_name: str, text: str, namespace: str = "default",
                    container: str | None = None) -> None:
        """What ``GET pods/<name>/log`` answers (replaces the current instance's text); the
        container defaults to the pod's first."""
        with self._logs_changed:
            log = self._log(namespace, pod_name, container or self._first_container(namespace, pod_name))
            log.current.clear()
        self.append_pod_log(pod_name, text, namespace, container)

    def append_pod_log(self, pod_name: str, text: str, namespace: str = "default",
                       container: str | None = None) -> None:
        """Lines the container writes now (stamped with the emulator's clock); followers get them."""
        now = self.clock()
        with self._logs_changed:
            log = self._log(namespace, pod_name, container or self._first_container(namespace, pod_name))
            for line in text.splitlines(keepends=True):
                log.write(now, line)
            self._logs_changed.notify_all()

    def restart_container(self, pod_name: str, namespace: str = "default", container: str | None = None, *,
                          reason: str = "OOMKilled", exit_code: int = 137, last_line: str | None = None) -> None:
        """The container ends (``reason``, ``exit_code``) and the kubelet starts it again: its log so far
        becomes the previous instance's (ending in ``last_line``, by default one naming the reason),
        restartCount grows and lastState.terminated says how it ended."""
        pods = R.BY_KIND["Pod"]
        name = container or self._first_container(namespace, pod_name)
        self.append_pod_log(pod_name, last_line if last_line is not None else
                            f"container {name} terminated: {reason} (exit code {exit_code})\n", namespace, name)
        with self._logs_changed:
            self._log(namespace, pod_name, name).rotate()
            self._logs_changed.notify_all()
        with self.store.lock:
            pod = self.api.get_current(pods, namespace, pod_name)
            from .store import clone
            from .util import format_time
            pod = clone(pod)
            now = format_time(self.clock())
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                if cs.get("name") == name:
                    started = ((cs.get("state") or {}).get("running") or {}).get("startedAt") or now
                    cs["restartCount"] = int(cs.get("restartCount") or 0) + 1
                    cs["lastState"] = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started,
                                                      "finishedAt": now, "containerID": cs.get("containerID", "")}}
                    cs["state"] = {"running": {"startedAt": now}}
            self.store.put(pods, pod)
        self._poke()

    def _rotate_crashed(self, namespace: str, pod: str, container: str, argv: list[str], reason: str,
                        exit_code: int, at: float) -> None:
        """A crash-looping instance (kubelet): it logged its start and its end, then the next one started."""
        with self._logs_changed:
            log = self._log(namespace, pod, container)
            log.write(at, f"starting {' '.join(argv) or container}\n")
            log.write(at, f"container {container} terminated: {reason} (exit code {exit_code})\n")
            log.rotate()
            self._logs_changed.notify_all()

    # ------------------------------------------------------------ reads
    def _log_target(self, namespace: str, name: str, query: dict) -> tuple[dict, str]:
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
        return pod, container

    def _select(self, namespace: str, name: str, query: dict) -> tuple[ContainerLog, str]:
        pod, container = self._log_target(namespace, name, query)
        previous = query.get("previous") in ("true", "1", "True")
        log = self._logs.get((namespace, name, container))
        if previous:
            if log is None or log.previous is None:
                raise E.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
            return log, container
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if cs.get("name") == container and waiting and waiting.get("reason") != "CrashLoopBackOff":
                detail = ("trying and failing to pull image" if "Image" in (waiting.get("reason") or "")
                          else waiting.get("reason"))
                raise E.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {detail}')
        if not pod["spec"].get("nodeName"):
            raise E.bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        with self._logs_changed:
            return self._log(namespace, name, container), container

    @staticmethod
    def _render(lines, query: dict) -> str:
        stamps = query.get("timestamps") in ("true", "1", "True")
        tail = query.get("tailLines")
        if tail:
            try:
                n = int(tail)
            except ValueError:
                raise E.bad_request("tailLines must be an integer") from None
            lines = lines[-n:] if n > 0 else []
        text = "".join(f"{format_nano(t)} {line}" if stamps else line for _, t, line in lines)
        limit = query.get("limitBytes")
        if limit:
            try:
                text = text.encode()[: max(0, int(limit))].decode("utf-8", "ignore")
            except ValueError:
                raise E.bad_request("limitBytes must be an integer") from None
        return text

    def _read_log(self, namespace: str, name: str, query: dict) -> str:
        log, _ = self._select(namespace, name, query)
        previous = query.get("previous") in ("true", "1", "True")
        with self._logs_changed:
            kept = log.previous if previous else log.current
            assert kept is not None  # _select answered 400 for a previous instance that never was
            lines = list(kept)
        return self._render(lines, query)

    def _follow_log(self, handler: Handler, namespace: str, name: str, query: dict) -> None:
        """``follow=true``: what there is (after ``tailLines``), then each line as it is written, in
        HTTP chunks, until the container restarts, the pod goes, the client leaves or the emulator stops."""
        log, _ = self._select(namespace, name, query)
        if query.get("previous") in ("true", "1", "True"):  # a terminated instance writes nothing more
            handler.send_json(200, _plain(self._read_log(namespace, name, query)))
            return
        with self._logs_changed:
            ring, lines = log.current, list(log.current)  # this instance's ring, also once it is the previous
            seen, instance = log.written, log.instance
        handler.start_stream(content_type="text/plain; charset=utf-8")
        first = self._render(lines, query)
        if first and not handler.write_chunk(first.encode()):
            return
        live = {k: v for k, v in query.items() if k not in ("tailLines", "limitBytes")}
        pods = R.BY_KIND["Pod"]
        while not self._stopping:
            with self._logs_changed:
                self._logs_changed.wait_for(lambda: (ring and ring[-1][0] != seen) or log.instance != instance
                                            or self._stopping, timeout=0.5)
                fresh = [e for e in ring if e[0] > seen]
                seen = ring[-1][0] if ring else seen
                ended = log.instance != instance or self._stopping
            if fresh and not handler.write_chunk(self._render(fresh, live).encode()):
                return
            if ended:  # what the instance wrote up to its end went out above
                break
            if not fresh and self.store.get(pods, namespace, name) is None:
                break  # the pod is gone
        handler.end_stream()


def _plain(text: str):
    from .routing import PlainText

    return PlainText(text)
