"""Incident bundles: the last minutes of state, the Log pane, the audit lines and the redacted config
in one file, written in a worker thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text

from ...private_fs import default_state_dir
from .host import ConsoleHost

MAX_AUTO_BUNDLES = 10  # bundles saved by critical verdicts kept in the state directory (the oldest go)
AUTO_BUNDLE_EVERY_S = 600.0  # at most one saved by itself in this long


class BundleController:
    """Saves bundles from ``state_log`` (the recent ticks) and ``log_lines`` (the Log pane's lines)."""

    def __init__(self, host: ConsoleHost, settings: Any, state_log: Any, log_lines: Callable[[], list[str]]) -> None:
        self.host, self.settings, self.state_log, self._log_lines = host, settings, state_log, log_lines
        self.running = False

    def save(self, because: str | None = None) -> bool:
        """Save an incident bundle (``because``: a critical verdict saved it by itself — named
        ``incident-auto-…``, the oldest beyond :data:`MAX_AUTO_BUNDLES` removed). One at a time;
        False when nothing was started."""
        from ...state.recording.state_log import BUNDLE_S

        if self.running:
            if because is None:
                self.host.notify("an incident bundle is being saved already", severity="warning")
            return False
        states = self.state_log.window(BUNDLE_S)
        if not states:
            if because is None:
                self.host.notify("nothing to save yet: no tick recorded", severity="warning")
            return False
        s = self.settings
        state_dir = Path(s.state_dir or default_state_dir())
        prefix = "incident-auto-" if because else "incident-"
        path = state_dir / f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}.infertop"
        audit_path = s.config.audit_log or (state_dir / "audit.jsonl")
        config_path = s.config.source
        log_lines = list(self._log_lines())
        start = states[0][0]
        self.host.notify(f"saving an incident bundle ({len(states)} ticks)…"
                         + (f" — {because}" if because else ""), timeout=2, markup=False)
        self.running = True

        def work() -> str:
            from ...control.audit import AuditLog
            from ...state.recording.state_log import save_bundle

            audit = [e for e in AuditLog(audit_path).entries() if (e.get("ts") or 0) >= start]
            try:
                config_text = Path(config_path).read_text(encoding="utf-8") if config_path else ""
            except OSError:
                config_text = ""
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            saved = save_bundle(str(path), states, log_lines, audit, config_text)
            if because:  # bounded: a flapping fleet cannot fill the disk with bundles
                for old in sorted(state_dir.glob("incident-auto-*.infertop"))[:-MAX_AUTO_BUNDLES]:
                    old.unlink(missing_ok=True)
            return saved

        def finished(result: object) -> None:
            self.running = False
            if isinstance(result, BaseException):
                self.host.notify(f"incident bundle not saved: {result}", severity="error")
                self.host.log_event(Text(f"incident bundle not saved: {result}"))
            else:
                self.host.notify(f"incident bundle saved: {result} (infertop replay FILE)", timeout=8)
                why = f" ({because})" if because else ""
                self.host.log_event(Text(f"incident bundle saved{why}: {result} — {len(states)} ticks; "
                                         f"infertop replay {result}"))

        async def run() -> None:
            try:
                result: object = await asyncio.to_thread(work)
            except Exception as e:  # noqa: BLE001 — one line, never a traceback
                result = e
            finished(result)

        self.host.run_worker(run(), group="bundle", exit_on_error=False)
        return True
