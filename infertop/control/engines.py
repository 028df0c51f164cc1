"""Local vLLM engines: start, stop, restart, change arguments — safely.

Shared by the TUI (which runs these blocking calls in thread workers) and
the headless ``infertop engine`` command.  No UI imports.

An engine is ``python -m vllm.entrypoints.openai.api_server ...`` built
from a launch profile (:func:`build_command`), spawned in its own process
group with its output in ``<state_dir>/engines/<name>.log``.  For each
running engine a state file ``<state_dir>/engines/<name>.json`` records its
PID, process group, start time (``/proc/<pid>/stat`` field 22), boot id and
exact command line.  Before any signal the live process must match all of
them; otherwise the action is refused ("PID 1234 is no longer the engine
infertop started"): infertop never signals a process it did not start.

A new :class:`EngineManager` re-adopts engines started earlier (by another
infertop, or before a restart of this one) that still run, drops state
files whose processes are all gone, and keeps aside (``<name>.stale-<time>.json``)
those whose PID now runs another program: acting on such an engine is
refused with the reason.

Every process of an engine (vLLM's EngineCore and workers appear after the
API server, and vLLM retitles them) is recorded with its start time, so
``status`` and ``stop`` find them even after the main process died.

Stopping sends SIGTERM to the main (API-server) process only — vLLM then
drains in-flight requests for ``--shutdown-timeout`` seconds (derived from
the profile's ``stop_grace_s`` when the profile sets none) and stops its
own workers — reports "draining (n in flight)" from the engine's live
``/metrics``, and only after the grace period sends SIGKILL to the whole
engine; it returns once no process of it remains.

Every action writes an audit *intent* before its first signal or spawn and
an *outcome* once known; when the audit log cannot be written the action
is refused (:class:`AuditRefusedError`) unless ``unaudited=True``.

Engine names are free text (``local:28400``, ``my engine``); they are
encoded only where they become file names.

Progress callbacks receive :class:`EngineProgress` from the calling
(worker) thread, throttled to a few per second; keep them cheap (a TUI
posts them to its event loop with ``call_from_thread``).  Exceptions in a
callback are ignored.

The code is split by responsibility; every public name stays importable
from here:

- :mod:`.engine_command` — building and reading back command lines, overrides;
- :mod:`.engine_errors` — the exceptions;
- :mod:`.engine_progress` — progress events and /metrics observation;
- :mod:`.engine_state` — records, results, state-file and log helpers;
- :mod:`.procfs` — reading ``/proc`` (stat, command line, process groups, ports);
- :mod:`.engine_store` / :mod:`.engine_lifecycle` — :class:`EngineManager`'s
  identity/state-file and start/stop internals;
- :mod:`.engine_queries` — adopt, status, list, logs, history, health;
- :mod:`.engine_actions` — start, stop, restart, forget;
- :mod:`.engine_reconfigure` — set_args (change launch arguments, verify, roll back);
- :mod:`.engine_audit` — one action's audit trail (intent, outcome);
- :mod:`.logtail` — the last lines of a file, read from its end.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from ..config import ProfileConfig, default_state_dir
from .audit import AuditLog
from .engine_command import (
    ARG_TYPES,
    DEFAULT_MODULE,
    FLAG_FIELDS,
    NOT_ARGS,
    build_command,
    child_env,
    cmdline_value,
    connect_host,
    effective_args,
    entry_argv,
    expected_value,
    normalize_overrides,
    parse_assignments,
    parse_value,
)
from .engine_errors import (
    AuditRefusedError,
    EngineAborted,
    EngineBusyError,
    EngineError,
    EngineNotFound,
    EngineStartError,
    EngineStopError,
    InvalidArgsError,
    NotOurProcessError,
    PortInUseError,
    SetArgsError,
    VerifyError,
)
from .engine_progress import EngineProgress, Progress, observe_once
from .engine_queries import _QueriesMixin
from .engine_reconfigure import _ReconfigureMixin
from .engine_state import (
    ENGINE_ID_ENV,
    LOG_ROTATE_BYTES,
    LOG_TAIL_ON_FAILURE,
    STATE_VERSION,
    EngineRecord,
    SetResult,
    StopResult,
    classify_failure,
    clean_line,
    last_error_line,
)
from .engine_store import _file_stem
from .logtail import tail_file
from .procfs import (
    ProcStat,
    boot_id,
    group_members,
    port_is_free,
    port_listeners,
    read_cmdline,
    read_stat,
)

__all__ = [
    "DEFAULT_MODULE",
    "FLAG_FIELDS",
    "ARG_TYPES",
    "NOT_ARGS",
    "entry_argv",
    "effective_args",
    "build_command",
    "cmdline_value",
    "expected_value",
    "parse_value",
    "parse_assignments",
    "normalize_overrides",
    "child_env",
    "connect_host",
    "EngineError",
    "EngineNotFound",
    "EngineBusyError",
    "AuditRefusedError",
    "InvalidArgsError",
    "PortInUseError",
    "NotOurProcessError",
    "EngineStartError",
    "EngineStopError",
    "EngineAborted",
    "VerifyError",
    "SetArgsError",
    "Progress",
    "EngineProgress",
    "observe_once",
    "ENGINE_ID_ENV",
    "STATE_VERSION",
    "LOG_ROTATE_BYTES",
    "LOG_TAIL_ON_FAILURE",
    "EngineRecord",
    "StopResult",
    "SetResult",
    "clean_line",
    "classify_failure",
    "last_error_line",
    "ProcStat",
    "read_stat",
    "read_cmdline",
    "boot_id",
    "group_members",
    "port_listeners",
    "port_is_free",
    "tail_file",
    "EngineManager",
]


# ----------------------------------------------------------------- manager


class EngineManager(_ReconfigureMixin, _QueriesMixin):
    """Starts, stops, restarts and re-configures local engines.

    Blocking; thread-safe (one action per engine at a time, also across
    infertop processes, through a lock file).  ``module`` replaces vLLM's
    api_server module (tests use a fake engine); ``poll_interval_s`` paces
    health and group polling.  ``http_close_s``: once vLLM logs that its
    engine has drained and stopped, how long its HTTP server may keep
    waiting for clients' connections to close before SIGKILL (vLLM 0.32's
    server otherwise waits for them without limit while clients stay
    connected).
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
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.engines_dir = self.state_dir / "engines"
        self.audit = audit if audit is not None else AuditLog()
        self.module = module
        self.poll_interval_s = poll_interval_s
        self.kill_wait_s = kill_wait_s
        self.failure_grace_s = failure_grace_s
        self.metrics_interval_s = metrics_interval_s
        self.http_close_s = http_close_s
        self.observe_timeout_s = observe_timeout_s
        self.orphan_grace_s = orphan_grace_s
        self.profiles: Mapping[str, ProfileConfig] = profiles if profiles is not None else {}
        self._lock = threading.RLock()
        self._op_locks: dict[str, threading.Lock] = {}
        self._children: dict[int, subprocess.Popen] = {}  # pid → our child
        self._exited: dict[str, EngineRecord] = {}  # exited this session, for display
        self._adopted: set[str] = set()
        self._stale: dict[str, tuple[dict, str, str | None]] = {}  # name → (state, refusal, kept-aside path)
        self._tracked_at: dict[str, float] = {}
        self._boot_id = boot_id()
        if adopt:
            self.adopt()

    # -- paths

    def state_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.json"

    def log_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.log"

    def history_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.history.jsonl"

    def lock_path(self, name: str) -> Path:
        return self.engines_dir / f"{_file_stem(name)}.lock"
