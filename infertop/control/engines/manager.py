"""The :class:`EngineManager`: one object for local engines, composed of the package's parts. No UI imports."""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...config import ProfileConfig
from ...private_fs import default_state_dir
from ..audit import AuditLog
from ..pipeline import execute_audited
from .actions import Actions
from .call import EngineCall
from .command import DEFAULT_MODULE
from .lifecycle import Lifecycle, Timings
from .progress import Progress
from .queries import Queries
from .reconfigure import Reconfigure
from .state import EngineRecord, SetResult, StopResult
from .store import EngineStore


class EngineManager:
    """Starts, stops, restarts and re-configures local engines.

    Blocking; thread-safe (one action per engine at a time, also across
    infertop processes, through a lock file).  ``module`` replaces vLLM's
    api_server module (tests use a fake engine); ``poll_interval_s`` paces
    health and group polling.  ``http_close_s``: once vLLM logs that its
    engine has drained and stopped, how long its HTTP server may keep
    waiting for clients' connections to close before SIGKILL (vLLM 0.32's
    server otherwise waits for them without limit while clients stay
    connected).

    Composed of plain parts, each given what it needs: the ``store`` (state
    files, identity, history, locks), the ``lifecycle`` (spawn, stop), the
    ``actions`` (start, stop, restart, forget), ``reconfigure`` (set_args)
    and the ``queries``.  The action methods here run the action through the
    one pipeline (:class:`~.call.EngineCall`), which writes its audit lines to
    ``audit``; the console's :class:`~.kind.EngineAction` hands the parts the
    pipeline's intent writer itself.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike | None = None,
        audit: AuditLog | None = None,
        *,
        module: str = DEFAULT_MODULE,
        poll_interval_s: float = 0.5,
        kill_wait_s: float = 10.0,
        failure_grace_s: float = 5.0,
        metrics_interval_s: float = 1.0,
        http_close_s: float = 2.0,
        observe_timeout_s: float = 5.0,
        orphan_grace_s: float = 3.0,
        profiles: Mapping[str, ProfileConfig] | None = None,
        adopt: bool = True,
    ) -> None:
        self.audit = audit if audit is not None else AuditLog()
        self.module = module
        self.profiles: Mapping[str, ProfileConfig] = profiles if profiles is not None else {}
        self.timings = Timings(poll_interval_s, kill_wait_s, failure_grace_s, metrics_interval_s, http_close_s,
                               observe_timeout_s, orphan_grace_s)
        self.store = EngineStore(Path(state_dir) if state_dir is not None else default_state_dir())
        self.lifecycle = Lifecycle(self.store, self.timings, module)
        self.actions = Actions(self.store, self.lifecycle, self.profiles, self.audit)
        self.reconfigure = Reconfigure(self.store, self.lifecycle, self.actions)
        self.queries = Queries(self.store)
        if adopt:
            self.adopt()

    # -- where things live

    @property
    def state_dir(self) -> Path:
        return self.store.state_dir

    @property
    def engines_dir(self) -> Path:
        return self.store.engines_dir

    def state_path(self, name: str) -> Path:
        return self.store.state_path(name)

    def log_path(self, name: str) -> Path:
        return self.store.log_path(name)

    def history_path(self, name: str) -> Path:
        return self.store.history_path(name)

    def lock_path(self, name: str) -> Path:
        return self.store.lock_path(name)

    # -- actions, through the pipeline

    def call(self, verb: str, name: str, *args: Any, unaudited: bool = False, **kw: Any) -> EngineCall:
        """The action ``verb`` (start, stop, restart, set, forget) as the pipeline runs it for a caller
        that has decided (``infertop engine``): arguments as for the method of that name."""
        verbs: dict[str, Callable[..., Any]] = {
            "start": self.actions.start, "stop": self.actions.stop, "restart": self.actions.restart,
            "set": self.reconfigure.set_args, "forget": self.actions.forget}
        do = verbs[verb]
        return EngineCall(verb, name, lambda notes: do(name, *args, notes=notes, **kw), unaudited=unaudited)

    def _run(self, kind: EngineCall) -> Any:
        execute_audited(kind, self.audit, lambda p: None, threading.Event(), unaudited=kind.unaudited)
        return kind.returned()

    def start(self, name: str, profile: ProfileConfig, progress: Progress | None = None, *,
              unaudited: bool = False, **kw: Any) -> EngineRecord:
        """:meth:`.actions.Actions.start` (``overrides``, ``profile_name``, ``timeout_s``, ``abort``), audited."""
        return self._run(self.call("start", name, profile, progress, unaudited=unaudited, **kw))

    def stop(self, name: str, grace_s: float | None = None, progress: Progress | None = None, *,
             unaudited: bool = False, **kw: Any) -> StopResult:
        """:meth:`.actions.Actions.stop` (``abort``, ``gateway``), audited."""
        return self._run(self.call("stop", name, grace_s, progress, unaudited=unaudited, **kw))

    def restart(self, name: str, overrides: Mapping[str, Any] | None = None, *, unaudited: bool = False,
                **kw: Any) -> EngineRecord:
        """:meth:`.actions.Actions.restart` (``profile``, ``progress``, ``grace_s``, ``timeout_s``, ``abort``,
        ``gateway``), audited."""
        return self._run(self.call("restart", name, overrides, unaudited=unaudited, **kw))

    def set_args(self, name: str, changes: Mapping[str, Any], progress: Progress | None = None, *,
                 unaudited: bool = False, **kw: Any) -> SetResult:
        """:meth:`.reconfigure.Reconfigure.set_args` (``check``, ``grace_s``, ``timeout_s``, ``rollback``,
        ``stats``, ``profile``, ``abort``, ``gateway``), audited."""
        return self._run(self.call("set", name, changes, progress, unaudited=unaudited, **kw))

    def forget(self, name: str) -> bool:
        """:meth:`.actions.Actions.forget`, audited."""
        return bool(self._run(self.call("forget", name)))

    # -- queries

    def managed(self, name: str | None) -> EngineRecord | None:
        return self.queries.managed(name)

    def adopt(self) -> builtins.list[str]:
        return self.queries.adopt()

    def status(self, name: str) -> EngineRecord | None:
        return self.queries.status(name)

    def list(self) -> builtins.list[EngineRecord]:  # noqa: A003 — the manager's natural verb
        return self.queries.list()

    def tail_log(self, name: str, n: int = 50) -> builtins.list[str]:
        return self.queries.tail_log(name, n)

    def history(self, name: str, n: int = 50) -> builtins.list[dict]:
        return self.queries.history(name, n)

    def health(self, name: str, timeout_s: float = 1.0) -> bool:
        return self.queries.health(name, timeout_s)

    def verify(self, name: str) -> EngineRecord:
        return self.queries.verify(name)

    # -- for tests: one action's lock, the grace of a recorded state

    def _operation(self, name: str) -> Any:
        return self.store.operation(name)

    def _default_grace(self, st: Mapping[str, Any]) -> float:
        return self.lifecycle.default_grace(st)
