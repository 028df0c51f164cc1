"""The :class:`EngineManager`: one object for local engines, composed of the package's parts. No UI imports."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from ...config import ProfileConfig, default_state_dir
from ..audit import AuditLog
from ..procfs import boot_id
from .command import DEFAULT_MODULE
from .queries import _QueriesMixin
from .reconfigure import _ReconfigureMixin
from .state import EngineRecord

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

