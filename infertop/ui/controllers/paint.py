"""Painting the fleet state: each tick's state goes to the header, the status bar and the pane on view."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.text import Text
from textual.widgets import TabbedContent

from ...domain.engine import FleetSnapshot
from ...domain.source import SourceHealth
from ...format import count_human, seconds_human
from ...state.fleet_types import FleetState
from ...state.fleet_history import record_state
from ..fastpaint.direct_lines import one_frame
from ..screens.engine_detail import EngineDetailScreen
from ..screens.gpu_detail import GpuDetailScreen
from ..screens.verdict_detail import VerdictDetailScreen
from ..status import status_line
from ..widgets.cluster import ClusterPane
from ..widgets.engines_table import EnginesTable
from ..widgets.gpus import GpusPane, flatten, gpu_status_parts, record_history, summarize
from ..widgets.overview import Overview
from ..widgets.panels import LineStatic, QuietStatic, Trend
from ..widgets.queue import QueuePane
from ..widgets.slo import SloPane, record_slo
from ..widgets.triage import affected

GPU_KINDS = ("nvml", "dcgm", "prometheus", "gpu")


class PaintHost(Protocol):
    """What the painter asks of the console: its screens, whether it runs, and the Log."""

    @property
    def main(self) -> Any: ...

    @property
    def screen(self) -> Any: ...

    @property
    def is_running(self) -> bool: ...

    def log_event(self, text: str | Text) -> None: ...


@dataclass(frozen=True)
class PaneHooks:
    """What the other controllers do on a tick or a paint (each a callable: the painter owns none of them)."""

    join_cluster: Callable[[], None]  # hand the cluster's latest read to the joiner, before a build
    after_tick: Callable[[], None]  # the advisor's turn after a tick
    discover: Callable[[], None]  # the engine discovery's turn
    note_changes: Callable[[FleetState | None, FleetState], None]  # the Log's changes between two states
    probe_objectives: Callable[[], None]  # the Queue pane's InferenceObjective probe
    render_autoscaler: Callable[[FleetState], None]
    show_triage: Callable[[FleetState], None]
    managed: Callable[[str], Any]  # the record of an engine infertop started, or None
    detail_files: Callable[[str], tuple[list[dict], list[str]]]  # its restart history and log tail, as last read


class Painter:
    """Builds a tick's fleet state (``fleet.build()`` live, the joiner's in a replay) and paints it; owns
    the state on screen. A pane out of view is painted when it is shown (``render_snapshot``)."""

    def __init__(self, host: PaintHost, *, fleet: Any, settings: Any, history: Any, state_log: Any,
                 player: Any, hooks: PaneHooks) -> None:
        self.host, self.fleet, self.settings, self.history = host, fleet, settings, history
        self.state_log, self.player, self.hooks = state_log, player, hooks
        self.state: FleetState | None = None  # the state on screen
        self._top_key: tuple | None = None  # what the header's text was written from (see render_top)

    @property
    def snapshot(self) -> FleetSnapshot | None:
        """The fresh engines of the state on screen (what actions act on)."""
        st = self.state
        if st is None:
            return None
        return FleetSnapshot(taken_at=st.taken_at, engines=tuple(e.stats for e in st.engines if e.fresh))

    def tick(self) -> None:
        """Build this tick's fleet state and show it everywhere."""
        if not self.host.is_running:  # the interval can still tick while the app tears its widgets down
            return
        with one_frame(self.host.main):  # the frame is rendered when the tick ends, not on a later wake-up
            self.hooks.join_cluster()
            self.show_state(self.fleet.build() if self.player is None else self.fleet.joiner.build())
        self.hooks.after_tick()
        self.hooks.discover()

    def render_snapshot(self, force: bool = False) -> None:
        """Repaint the state on screen (a filter or sort changed); no new tick."""
        if self.state is not None and self.host.is_running:
            self.paint(self.state)

    def show_state(self, state: FleetState) -> None:
        """Record ``state`` in the sparkline history and paint every pane from it.
        Every number on screen then comes from this one tick."""
        previous, self.state = self.state, state
        if self.player is None:
            self.state_log.add(state.taken_at, state)
            news = self.state_log.record_news
            while news:  # "rec failing: …" / "recording again", from the recorder thread
                self.host.log_event(Text(news.pop(0)))
        record_state(self.history, state)
        record_slo(self.history, state)
        record_history(self.history, flatten(state.gpus))
        self.hooks.note_changes(previous, state)
        self.paint(state)

    def paint(self, state: FleetState) -> None:
        """The header, the status bar and the pane on view, all from ``state``. A pane
        out of view is painted from the state on screen when it is shown."""
        main, screen = self.host.main, self.host.screen
        self.render_top()
        gpu_health = [_health(src, state.taken_at) for src in state.sources if src.kind in GPU_KINDS]
        main.query_one("#statusbar", QuietStatic).show(status_line(state, gpu_status_parts(gpu_health, state.taken_at)))
        pane = main.query_one("#panes", TabbedContent).active
        if pane == "overview":
            overview = main.query_one("#overview-pane", Overview)  # by id: a cached lookup, not a walk
            overview.show_state(state, self.history)
            overview.show_gpus(summarize(list(state.gpus)), configured=state.gpus_configured)
        elif pane == "engines":
            main.query_one("#engines-table", EnginesTable).update_state(state)
            self._render_engine_trends(state)
        elif pane == "queues":
            main.query_one(QueuePane).show_state(state)
            self.hooks.probe_objectives()
        if pane == "gpus" or isinstance(screen, GpuDetailScreen):
            self._render_gpus(state)
        if pane == "autoscaler":
            self.hooks.render_autoscaler(state)
        elif pane == "triage":
            self.hooks.show_triage(state)
        elif pane == "slo":
            main.query_one("#slo-pane", SloPane).show(state, self.history)
        if self.player is not None:
            self._render_recorded_cluster(state)
        if isinstance(screen, EngineDetailScreen):
            self.show_detail(screen)
        elif isinstance(screen, VerdictDetailScreen):
            screen.show(state, self.history)

    def _render_recorded_cluster(self, state: FleetState) -> None:
        """In replay the Cluster pane shows the recorded cluster read."""
        pane = self.host.main.query_one(ClusterPane)
        c = state.cluster
        if c is None or c.snapshot is None:
            pane.show_message("Kubernetes: not part of this recording" if c is None
                              else f"Kubernetes: {c.freshness.reason or 'no data'} (recorded)")
            return
        f = c.freshness
        header = Text(f"recorded · context {c.snapshot.context}")
        if f.status != "fresh":
            header.append(f" · stale: {f.reason}", style="yellow")
        pane.show(c.snapshot, header)

    def show_detail(self, screen: EngineDetailScreen) -> None:
        """Paint an engine's detail screen from the state on screen and its local record."""
        name = screen.engine_name
        e = self.state.engine(name) if self.state is not None else None
        screen.show(e.stats if e is not None else None, e.freshness if e is not None else None)
        rec = self.hooks.managed(name)
        history, log = self.hooks.detail_files(name) if rec else ([], [])
        screen.show_local(rec, history, log, list(e.gpus) if e is not None else [])

    def _render_engine_trends(self, state: FleetState) -> None:
        main, hist, n = self.host.main, self.history, 120
        name = main.query_one("#engines-table", EnginesTable).selected_engine
        e = state.engine(name) if name is not None else None
        if e is not None and name is not None:
            s = e.stats
            main.query_one("#e-running", Trend).show(hist.series(name, "running", n),
                                                     f"{name}: {count_human(s.running)}")
            main.query_one("#e-ttft", Trend).show(hist.series(name, "ttft_p99_s", n), seconds_human(s.ttft_p99_s))

    def _render_gpus(self, state: FleetState) -> None:
        """GPU pane and an open GPU detail, from the state's GPUs."""
        rows = list(state.gpus)
        health = [_health(src, state.taken_at) for src in state.sources if src.kind in GPU_KINDS]
        pane = self.host.main.query_one(GpusPane)
        pane.show(rows, health, trends=True, marks=affected(state)[1])
        screen = self.host.screen
        if isinstance(screen, GpuDetailScreen):
            r = pane.gpu(screen.gpu_id)
            screen.show(r.gpu if r is not None else None)

    def render_top(self) -> None:
        """The header (mode, engines, config, recording) and the clock."""
        s, state, main = self.settings, self.state, self.host.main
        # what the fleet state holds (engines scaled away have left it), not the endpoints watched:
        # before the first tick there is no state, so no count
        n = len(state.engines) if state is not None else None
        if self.player is None and state is not None:
            # live, the header's text is made of these: a tick that changes none of them writes the clock
            # only (building the header each tick was 2 % of it)
            key = (n, s.mode, s.read_only, s.config.source, s.record_path, self.state_log.error is None,
                   self.state_log.record_error)
            if key == self._top_key:
                main.query_one("#clock", LineStatic).show(time.strftime('%H:%M:%S', time.localtime(state.taken_at)))
                return
            self._top_key = key
        mode = s.mode + (" · read-only" if s.read_only else "")
        src = s.config.source or "no config file"
        engines = "— engines" if n is None else f"{n} engine{'s' if n != 1 else ''}"
        text = Text()
        text.append("infertop", style="bold")
        text.append(f" · {mode} · {engines} · {src}")
        clock = ""
        if self.player is not None:
            p = self.player
            text = Text()
            text.append("infertop replay", style="bold")
            text.append(f" · {Path(s.replay_path or '').name} · ")
            word = "end of recording" if p.at_end else ("paused" if p.paused else f"×{p.speed:g}")
            text.append(word, style="bold yellow")
            if state is not None:
                clock = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(state.taken_at))
        elif state is not None:
            clock = time.strftime('%H:%M:%S', time.localtime(state.taken_at))
            if s.record_path:
                failing = self.state_log.record_error
                if failing is not None:  # not "● rec" while nothing is written
                    text.append(f" · rec failing: {failing}", style="bold yellow")
                else:
                    text.append(" · ● rec", style="red" if self.state_log.error is None else "yellow")
        main.query_one("#topbar", QuietStatic).show(text)
        main.query_one("#clock", LineStatic).show(clock)


def _health(src: Any, now_wall: float) -> SourceHealth:
    """A GPU source of the fleet state as the GPUs pane reads it (times on the wall clock)."""
    return SourceHealth(name=src.name, kind=src.kind, ok=src.ok, last_ok_at=src.last_ok_at,
                        last_error=src.error if not src.ok else src.warning, last_error_at=src.since,
                        latency_s=src.latency_s)
