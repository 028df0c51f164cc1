"""Replay controls and incident bundles for the app (a mixin of InfertopApp).

Replay feeds recorded fleet states through the same ``show_state`` as live
ticks; a bundle writes the last minutes of state, the Log pane, the audit
lines and the redacted config to one file, in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rich.text import Text

from ..sources.sanitize import plain_text
from ..state.fleet import FleetState
from ..state.fleet_history import record_state
from .widgets.slo import record_slo
from ..state.recording.replay import MAX_REPLAY_ITEMS


MAX_AUTO_BUNDLES = 10  # bundles saved by critical verdicts kept in the state directory (the oldest go)
AUTO_BUNDLE_EVERY_S = 600.0  # at most one saved by itself in this long
LOG_HISTORY_S = 600.0  # after a seek the Log shows the changes of this much recording before the new position


class ReplayActions:
    """Needs ``player``, ``history``, ``settings``, ``state_log``, ``log_lines``, ``show_state``,
    ``_render_top``, ``notify``, ``log_event``, ``push_screen``, ``run_worker``."""

    def replay_tick(self) -> None:
        """Show the recorded ticks that became due (the last one is the state on screen)."""
        if not self.is_running or self.player is None or getattr(self, "replay_error", None):
            return
        try:
            ticks = self.player.due()
            states = [FleetState.from_doc(doc) for _, doc in ticks]
        except Exception as e:  # noqa: BLE001 — a damaged later block: said in place, playback stops there
            self._replay_stopped(e)
            return
        self._note_truncated(ticks)
        for st in states[:-1]:
            record_state(self.history, st)  # sparklines keep every tick
        self.note_replayed(states[:-1])  # and the Log every change (×8: a down and up between two frames)
        if states:
            self.show_state(states[-1])
        else:
            self._render_top()
        at_end = self.player.at_end
        if at_end and not getattr(self, "_end_said", False):
            self.log_event(Text("end of recording: g seeks, [ steps back", style="yellow"))
        self._end_said = at_end  # said again after a seek back and a second end

    def _note_truncated(self, ticks) -> None:
        """Say once per list and count that a tick held more engines/GPUs than replay shows."""
        said = getattr(self, "_truncated_said", None)
        if said is None:
            said = self._truncated_said = set()
        for _, doc in ticks:
            for what, count in (doc.get("truncated") or {}).items():
                if (what, count) not in said and len(said) < 100:
                    said.add((what, count))
                    shown = MAX_REPLAY_ITEMS.get(what, "?")
                    line = plain_text(f"replay: a tick holds {count} {what}, the first {shown} are shown", 200)
                    self.log_event(Text(line, style="yellow"))
                    self.notify(line, severity="warning", timeout=10)

    def _replay_stopped(self, e: Exception) -> None:
        self.replay_error = plain_text(f"replay stopped: {type(e).__name__}: {e}", 300)
        self.log_event(Text(self.replay_error, style="red"))
        self.notify(self.replay_error, severity="error", timeout=10)

    def replay_open(self) -> None:
        """The first frame of a replay (``--at`` may start it anywhere): with the Log of the minutes
        before it, after the start-up notes."""
        if self.state is None:
            self._replay_jump(fresh=False)
        else:  # a seek came first
            self.replay_tick()

    def _replay_jump(self, fresh: bool = True) -> None:
        """After a seek or a step (and at the start, ``fresh=False``: the Log keeps the start-up notes):
        rebuild the sparklines and the Log from the ticks before the new position."""
        p = self.player
        pos = p.position()
        if pos is None:
            return
        clear = getattr(self.history, "clear", None)
        if clear is not None:
            clear()
        span = 120 * self.settings.config.refresh_s
        before = [FleetState.from_doc(doc) for _, doc in list(p.replay.iter(pos - LOG_HISTORY_S, pos))[:-1]]
        for st in before:
            if st.taken_at >= pos - span:
                record_state(self.history, st)
                record_slo(self.history, st)
        # the Log as it stood at the new position: the changes of the minutes before it, with their times
        self.note_replayed(before, fresh=fresh)
        self.replay_tick()

    def action_replay_toggle(self) -> None:
        paused = self.player.toggle()
        self.notify("replay paused" if paused else f"replay playing at ×{self.player.speed:g}", timeout=2)
        self._render_top()

    def action_replay_step(self, ticks: int) -> None:
        self.player.step(ticks)
        self._replay_jump()

    def action_replay_speed(self, faster: bool) -> None:
        speed = self.player.faster() if faster else self.player.slower()
        self.notify(f"replay speed ×{speed:g}", timeout=2)
        self._render_top()

    def action_replay_seek(self) -> None:
        from .screens.seek import SeekScreen

        def done(text: str | None) -> None:
            if not text:
                return
            from ..flight_cli import parse_at

            try:
                ts = parse_at(text, self.player.replay.span())
            except ValueError as e:
                self.notify(str(e), severity="warning")
                return
            self.player.seek(ts)
            self._replay_jump()

        self.push_screen(SeekScreen(), done)

    def action_save_bundle(self) -> None:
        """Write the last minutes of state, the Log pane, the audit lines and the redacted config to one file."""
        self.save_bundle()

    def save_bundle(self, because: str | None = None) -> bool:
        """Save an incident bundle (``because``: a critical verdict saved it by itself — named
        ``incident-auto-…``, the oldest beyond :data:`MAX_AUTO_BUNDLES` removed). One at a time;
        False when nothing was started."""
        from ..config import default_state_dir
        from ..state.recording.state_log import BUNDLE_S

        if getattr(self, "_bundle_running", False):
            if because is None:
                self.notify("an incident bundle is being saved already", severity="warning")
            return False
        states = self.state_log.window(BUNDLE_S)
        if not states:
            if because is None:
                self.notify("nothing to save yet: no tick recorded", severity="warning")
            return False
        s = self.settings
        state_dir = Path(s.state_dir or default_state_dir())
        prefix = "incident-auto-" if because else "incident-"
        path = state_dir / f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}.infertop"
        audit_path = s.config.audit_log or (state_dir / "audit.jsonl")
        config_path = s.config.source
        log_lines = list(self.log_lines)
        start = states[0][0]
        self.notify(f"saving an incident bundle ({len(states)} ticks)…"
                    + (f" — {because}" if because else ""), timeout=2, markup=False)
        self._bundle_running = True

        def work() -> str:
            from ..control.audit import AuditLog
            from ..state.recording.state_log import save_bundle

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
            self._bundle_running = False
            if isinstance(result, BaseException):
                self.notify(f"incident bundle not saved: {result}", severity="error")
                self.log_event(Text(f"incident bundle not saved: {result}"))
            else:
                self.notify(f"incident bundle saved: {result} (infertop replay FILE)", timeout=8)
                why = f" ({because})" if because else ""
                self.log_event(Text(f"incident bundle saved{why}: {result} — {len(states)} ticks; "
                                    f"infertop replay {result}"))

        async def run() -> None:
            try:
                result: object = await asyncio.to_thread(work)
            except Exception as e:  # noqa: BLE001 — one line, never a traceback
                result = e
            finished(result)

        self.run_worker(run(), group="bundle", exit_on_error=False)
        return True
