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

Every action runs through the one pipeline (:mod:`infertop.control.pipeline`),
which writes its audit *intent* just before the first signal or spawn (the
manager hands it the process it verified then) and its *outcome* once known;
when the audit log cannot be written the action is refused
(:class:`AuditRefusedError`) unless ``unaudited=True``.

Engine names are free text (``local:28400``, ``my engine``); they are
encoded only where they become file names.

Progress callbacks receive :class:`EngineProgress` from the calling
(worker) thread, throttled to a few per second; keep them cheap (a TUI
posts them to its event loop with ``call_from_thread``).  Exceptions in a
callback are ignored.

The package is split by responsibility; its public names are importable
from the package:

- :mod:`.command` — building and reading back command lines, overrides;
- :mod:`.errors` — the exceptions;
- :mod:`.progress` — progress events and /metrics observation;
- :mod:`.state` — records, results, state-file and log helpers;
- :mod:`.store` — :class:`~.store.EngineStore`: identity checks, state files, history, locks;
- :mod:`.lifecycle` / :mod:`.stopping` — :class:`~.lifecycle.Lifecycle`: spawn and wait for /health,
  stop (:class:`~.stopping.StopRun`: SIGTERM, the drain, SIGKILL);
- :mod:`.queries` — :class:`~.queries.Queries`: adopt, status, list, logs, history, health;
- :mod:`.actions` — :class:`~.actions.Actions`: start, stop, restart, forget;
- :mod:`.reconfigure` — :class:`~.reconfigure.Reconfigure`: set_args (change launch arguments, verify,
  roll back);
- :mod:`.gateway` — draining an engine at its gateway around a stop or restart;
- :mod:`.audit` — :class:`~.audit.AuditNotes`: what an action tells the pipeline's audit trail;
- :mod:`.call` / :mod:`.kind` — the actions as the pipeline runs them: for a caller that has decided
  (``infertop engine``, a direct call), for the console (plan, check, confirm);
- :mod:`.manager` — :class:`EngineManager`, composed of the parts above;
- :mod:`.cli` — the ``infertop engine`` command;
- :mod:`infertop.control.procfs` — reading ``/proc`` (stat, command line, process groups, ports);
- :mod:`infertop.control.logtail` — the last lines of a file, read from its end.
"""

from __future__ import annotations

from .command import (
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
from .errors import (
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
from .progress import EngineProgress, Progress, observe_once
from .state import (
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
from ..logtail import tail_file
from ..procfs import (
    ProcStat,
    boot_id,
    group_members,
    port_is_free,
    port_listeners,
    read_cmdline,
    read_stat,
)
from .manager import EngineManager

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
