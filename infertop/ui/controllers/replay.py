"""Replay's controller: recorded fleet states fed through the same ``show_state`` as live ticks, and
the keys that move in the recording (pause, step, speed, seek)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rich.text import Text

from ...sources.sanitize import plain_text
from ...state.fleet_types import FleetState
from ...state.fleet_history import record_state
from ...state.recording.replay import MAX_REPLAY_ITEMS
from ..widgets.slo import record_slo
from .host import ConsoleHost

LOG_HISTORY_S = 600.0  # after a seek the Log shows the changes of this much recording before the new position


class ReplayController:
    """Plays ``player`` (a :class:`~infertop.state.recording.replay.Player`) into the console.

    ``show_state`` paints a state as a live tick would; ``render_top`` repaints the header (paused,
    speed); ``note_replayed(states, fresh=…)`` writes their changes to the Log; ``state`` is the state
    on screen; ``running`` whether the console is up (a timer can fire while it shuts down)."""

    def __init__(self, host: ConsoleHost, player: Any, history: Any, *, refresh_s: float,
                 show_state: Callable[[FleetState], None], render_top: Callable[[], None],
                 note_replayed: Callable[..., None], state: Callable[[], FleetState | None],
                 running: Callable[[], bool]) -> None:
        self.host, self.player, self.history, self.refresh_s = host, player, history, refresh_s
        self._show_state, self._render_top, self._note_replayed = show_state, render_top, note_replayed
        self._state, self._running = state, running
        self.error: str | None = None  # the damaged block that stopped playback, as said
        self._end_said = False
        self._truncated_said: set[tuple[str, Any]] = set()

    def tick(self) -> None:
        """Show the recorded ticks that became due (the last one is the state on screen)."""
        if not self._running() or self.player is None or self.error:
            return
        try:
            ticks = self.player.due()
            states = [FleetState.from_doc(doc) for _, doc in ticks]
        except Exception as e:  # noqa: BLE001 — a damaged later block: said in place, playback stops there
            self._stopped(e)
            return
        self._note_truncated(ticks)
        for st in states[:-1]:
            record_state(self.history, st)  # sparklines keep every tick
        self._note_replayed(states[:-1])  # and the Log every change (×8: a down and up between two frames)
        if states:
            self._show_state(states[-1])
        else:
            self._render_top()
        at_end = self.player.at_end
        if at_end and not self._end_said:
            self.host.log_event(Text("end of recording: g seeks, [ steps back", style="yellow"))
        self._end_said = at_end  # said again after a seek back and a second end

    def _note_truncated(self, ticks: Iterable[tuple[float, dict]]) -> None:
        """Say once per list and count that a tick held more engines/GPUs than replay shows."""
        said = self._truncated_said
        for _, doc in ticks:
            for what, count in (doc.get("truncated") or {}).items():
                if (what, count) not in said and len(said) < 100:
                    said.add((what, count))
                    shown = MAX_REPLAY_ITEMS.get(what, "?")
                    line = plain_text(f"replay: a tick holds {count} {what}, the first {shown} are shown", 200)
                    self.host.log_event(Text(line, style="yellow"))
                    self.host.notify(line, severity="warning", timeout=10)

    def _stopped(self, e: Exception) -> None:
        self.error = plain_text(f"replay stopped: {type(e).__name__}: {e}", 300)
        self.host.log_event(Text(self.error, style="red"))
        self.host.notify(self.error, severity="error", timeout=10)

    def open(self) -> None:
        """The first frame of a replay (``--at`` may start it anywhere): with the Log of the minutes
        before it, after the start-up notes."""
        if self._state() is None:
            self.jump(fresh=False)
        else:  # a seek came first
            self.tick()

    def jump(self, fresh: bool = True) -> None:
        """After a seek or a step (and at the start, ``fresh=False``: the Log keeps the start-up notes):
        rebuild the sparklines and the Log from the ticks before the new position."""
        p = self.player
        pos = p.position()
        if pos is None:
            return
        clear = getattr(self.history, "clear", None)
        if clear is not None:
            clear()
        span = 120 * self.refresh_s
        before = [FleetState.from_doc(doc) for _, doc in list(p.replay.iter(pos - LOG_HISTORY_S, pos))[:-1]]
        for st in before:
            if st.taken_at >= pos - span:
                record_state(self.history, st)
                record_slo(self.history, st)
        # the Log as it stood at the new position: the changes of the minutes before it, with their times
        self._note_replayed(before, fresh=fresh)
        self.tick()

    # ----- the keys
    def toggle(self) -> None:
        paused = self.player.toggle()
        self.host.notify("replay paused" if paused else f"replay playing at ×{self.player.speed:g}", timeout=2)
        self._render_top()

    def step(self, ticks: int) -> None:
        self.player.step(ticks)
        self.jump()

    def speed(self, faster: bool) -> None:
        speed = self.player.faster() if faster else self.player.slower()
        self.host.notify(f"replay speed ×{speed:g}", timeout=2)
        self._render_top()

    def seek(self) -> None:
        from ...flight_cli import parse_at
        from ..screens.seek import SeekScreen

        def done(text: str | None) -> None:
            if not text:
                return
            try:
                ts = parse_at(text, self.player.replay.span())
            except ValueError as e:
                self.host.notify(str(e), severity="warning")
                return
            self.player.seek(ts)
            self.jump()

        self.host.push_screen(SeekScreen(), done)
