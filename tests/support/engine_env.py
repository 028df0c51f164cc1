"""Local engines in tests: ``Env`` (a state dir, an audit log and EngineManagers running the fake
engine, ``tests/support/fake_engine.py``), ``alive``, ``wait_until``."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from locations import FAKE_ENGINE
from ports import free_port

from infertop.config import ProfileConfig
from infertop.control.audit import AuditLog
from infertop.control.engines import EngineManager, group_members, read_stat


FAKE = str(FAKE_ENGINE)


def alive(pid: int) -> bool:
    st = read_stat(pid)
    return st is not None and st.state not in ("Z", "X")


class Env:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.state_dir = tmp / "state"
        self.audit_path = tmp / "audit.jsonl"
        self.managers: list[EngineManager] = []
        self.profiles: dict[str, ProfileConfig] = {}  # "the config": where restart/set read env values

    def manager(self, **kw) -> EngineManager:
        kw.setdefault("poll_interval_s", 0.1)
        kw.setdefault("failure_grace_s", 2.0)
        kw.setdefault("kill_wait_s", 5.0)
        kw.setdefault("metrics_interval_s", 0.3)
        kw.setdefault("orphan_grace_s", 1.0)
        m = EngineManager(self.state_dir, AuditLog(self.audit_path), module=FAKE, profiles=self.profiles, **kw)
        self.managers.append(m)
        return m

    def profile(self, port: int | None = None, max_num_seqs: int = 4, name: str = "e", **fake) -> ProfileConfig:
        self.profiles[name] = prof = ProfileConfig(
            model="fake-model",
            served_model_name="fake",
            port=port or free_port(),
            max_num_seqs=max_num_seqs,
            python=sys.executable,
            env={f"FAKE_ENGINE_{k.upper()}": str(v) for k, v in fake.items()},
            start_timeout_s=60.0,  # a fake engine starts in well under a second, unless the machine is starved
            stop_grace_s=5.0,
        )
        return prof

    def audit(self) -> list[dict]:
        """Outcome and one-shot audit entries (those with a result); intents: :meth:`intents`."""
        return [e for e in AuditLog(self.audit_path).entries() if "result" in e]

    def intents(self) -> list[dict]:
        return [e for e in AuditLog(self.audit_path).entries() if e.get("phase") == "intent"]

    def cleanup(self) -> None:
        """Kill whatever a failed test left behind (only groups recorded in state files)."""
        for path in (self.state_dir / "engines").glob("*.json"):
            try:
                st = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            for m in group_members(int(st.get("pgid", 0) or 0)):
                if m.session == st.get("sid"):
                    os.kill(m.pid, signal.SIGKILL)


def wait_until(pred, timeout: float = 60.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()
