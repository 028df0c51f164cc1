"""The Log pane's lines: what changed between two ticks, told once each — engines joining, leaving and
changing state, SLO alerts, GPU faults, verdicts raised and cleared."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text

from ...domain.engine import UNKNOWN
from ...domain.gpu import classify
from ...state.fleet_types import FleetState
from ...state.membership import FleetMembership
from ...analysis.triage import Verdict
from ..status import AlertLog
from ..widgets.gpus import flatten
from .bundle import AUTO_BUNDLE_EVERY_S
from .host import ConsoleHost

GPU_THROTTLE_LOG_EVERY_S = 60.0
VERDICT_LINES_PER_TICK = 20  # raised (and cleared) verdicts told one line each per tick, the rest counted
AUTO_BUNDLE_MIN_TICKS = 30  # a critical verdict saves a bundle by itself once this much was recorded
ORPHAN_RECHECK_S = 5.0  # an orphaned engine's record is read again this often


class ChangeLog:
    """What the Log pane says changed, for one console.

    ``log_event`` writes a line (the console's); ``clear_log`` empties the pane (a replay's seek);
    ``local`` the engines whose records are read again now and then (orphans),
    ``state_changed(name)`` reads one again; ``save_bundle(because)`` / ``recorded_ticks()`` the incident
    bundle a critical verdict saves by itself; ``replay`` whether this console replays a recording."""

    def __init__(self, host: ConsoleHost, *, clear_log: Callable[[], None], local: dict,
                 state_changed: Callable[[str], None],
                 save_bundle: Callable[[str], bool], recorded_ticks: Callable[[], int], replay: bool) -> None:
        self.host, self._clear_log, self.local = host, clear_log, local
        self._state_changed, self._save_bundle, self._recorded_ticks = state_changed, save_bundle, recorded_ticks
        self.replay = replay
        self.verdicts: tuple[Verdict, ...] = ()
        self.log_at: float | None = None  # a replayed tick's time while its lines are written
        self._states: dict[str, str] = {}
        self._gpu_states: dict[str, str] = {}
        self._gpu_logged_at: dict[str, float] = {}
        self._membership = FleetMembership()  # engines that joined or left (a rescale)
        self._alert_log: AlertLog | None = None
        self._auto_bundle_at: float | None = None
        self._checked_at: dict[str, float] = {}

    def _auto_bundle(self, v, now: float) -> None:
        """A critical verdict saves an incident bundle by itself: the minutes before it are what the
        post-mortem needs, and the on-call engineer has other things to press. At most one in
        AUTO_BUNDLE_EVERY_S (controllers/bundle.py), one at a time, the oldest beyond a few removed."""
        last = self._auto_bundle_at
        if last is not None and now - last < AUTO_BUNDLE_EVERY_S:
            return
        if self._recorded_ticks() < AUTO_BUNDLE_MIN_TICKS:
            return  # just started (an engine that never answered): no minutes before it to keep
        if self._save_bundle(f"verdict {v.kind} {v.subject}"):
            self._auto_bundle_at = now

    def note_replayed(self, states, *, fresh: bool = False) -> None:
        """Replay: the Log lines of recorded ticks not painted (several came due at once, or the ones
        before a seek), each stamped with its tick's time. ``fresh``: the Log restarts (a seek)."""
        if fresh:
            self._clear_log()
            self._states, self._gpu_states, self._gpu_logged_at = {}, {}, {}
            self._membership, self._alert_log, self.verdicts = FleetMembership(), None, ()
        previous = None
        try:
            for st in states:
                self.log_at = st.taken_at
                self.note_changes(previous, st)
                previous = st
        finally:
            self.log_at = None

    def note_changes(self, previous: FleetState | None, state: FleetState) -> None:
        """Log engines joining or leaving (a rescale), engine state changes, SLO alerts firing and
        clearing, and GPU state changes, once each."""
        for line in self._membership.changes(state):
            self.host.log_event(Text(line))
        names = {e.name for e in state.engines}
        for gone in [n for n in self._states if n not in names]:
            del self._states[gone]  # back later in a new pod: its states start afresh
        self._note_state_changes(state.engines)
        if self._alert_log is None:
            self._alert_log = AlertLog()
        for alert in self._alert_log.changes(state):
            self.host.log_event(alert)
        self._note_gpu_changes(flatten(state.gpus))
        self._note_verdicts(state)

    def _note_verdicts(self, state: FleetState) -> None:
        """A verdict raised: its explanation and first remedy; cleared: one line (each once). The verdicts are the
        state's (show_state evaluates them live; a replay shows those recorded)."""
        before = {v.key: v for v in self.verdicts}
        self.verdicts = state.verdicts  # evaluated live, or as recorded
        now = {v.key for v in self.verdicts}
        raised = [v for v in self.verdicts if v.key not in before]
        critical = [v for v in raised if v.severity == "critical"]
        if critical and not self.replay:
            self._auto_bundle(critical[0], state.taken_at)
        for v in raised[:VERDICT_LINES_PER_TICK]:
            remedy = f" → {v.remedies[0]}" if v.remedies else ""
            self.host.log_event(Text(f"verdict {v.kind} {v.subject}: {v.explanation}{remedy}",
                                style="bold red" if v.severity == "critical" else "yellow"))
        cleared = [v for key, v in before.items() if key not in now]
        for v in cleared[:VERDICT_LINES_PER_TICK]:
            self.host.log_event(Text(f"cleared verdict {v.kind} {v.subject}", style="green"))
        more = max(0, len(raised) - VERDICT_LINES_PER_TICK) + max(0, len(cleared) - VERDICT_LINES_PER_TICK)
        if more:  # a replayed file may hold any number: the Log says how many, the Triage pane lists them
            self.host.log_event(Text(f"… and {more} more verdicts raised or cleared at this tick (8: Triage)", style="dim"))

    def _note_gpu_changes(self, flat: Any) -> None:
        """Log a GPU that fails, throttles or reports an error (and when it recovers)."""
        for r in flat:
            status = classify(r.gpu)
            word = status.split(" ")[0]
            prev = self._gpu_states.get(r.gid)
            self._gpu_states[r.gid] = word
            if prev is not None and prev != word and (word in ("failed", "error", "throttled")
                                                      or prev in ("failed", "error", "throttled")):
                now = time.monotonic()
                serious = {word, prev} & {"failed", "error"}
                if not serious and now - self._gpu_logged_at.get(r.gid, -1e9) < GPU_THROTTLE_LOG_EVERY_S:
                    continue  # a GPU hovering at its thermal limit flips often: log that at most once a minute
                self._gpu_logged_at[r.gid] = now
                why = f": {r.gpu.error}" if r.gpu.error else ""
                self.host.log_event(Text(f"GPU {r.gpu.host or ''}:{r.gpu.label} {prev} → {status}{why}"))

    def _note_state_changes(self, engines) -> None:
        for e in engines:
            s = e.stats
            prev = self._states.get(s.name)
            if prev is None and s.state == UNKNOWN:
                continue  # not polled yet (the first ticks, a pod's engine that just joined): nothing to tell
            if prev == s.state and s.name in self.local:
                # orphaned: read its record again now and then, so the word goes when stop cleaned it up
                # (a restart between two polls is told by the engines' own discovery list)
                now, checked = time.monotonic(), self._checked_at
                if now - checked.get(s.name, 0.0) >= ORPHAN_RECHECK_S:
                    checked[s.name] = now
                    self._state_changed(s.name)
            if prev != s.state:
                self._states[s.name] = s.state
                if prev is not None:
                    self._state_changed(s.name)
                if prev is not None or s.state != "up":
                    why = f": {s.error}" if s.error else ""
                    self.host.log_event(Text(f"{s.name} {prev or 'new'} → {s.state}{why}"))
