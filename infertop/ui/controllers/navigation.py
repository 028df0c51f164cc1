"""Moving between the panes, and the Engines pane's view: filter, sort, grouping, the detail screens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from textual.widgets import Input, RichLog, TabbedContent

from ...state.engine_groups import GROUP_BY
from ..screens.engine_detail import EngineDetailScreen
from ..screens.gpu_detail import GpuDetailScreen
from ..screens.sort_picker import SortPicker
from ..widgets.autoscaler import AutoscalerPane
from ..widgets.cluster import ClusterPane
from ..widgets.engines_table import HEADERS, PRESSURE, SORTABLE, EnginesTable
from ..widgets.gpus import GpusPane, GpusTable
from ..widgets.queue import QueuePane
from ..widgets.triage import TriagePane

PANES = ("overview", "engines", "log", "gpus", "cluster", "queues", "autoscaler", "triage", "slo")


class NavigationHost(Protocol):
    """What navigation asks of the console: its screens, dialogs, notices and key line."""

    @property
    def main(self) -> Any: ...

    @property
    def screen(self) -> Any: ...

    def push_screen(self, screen: Any, callback: Any = None) -> Any: ...

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any) -> bool: ...

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def refresh_bindings(self) -> None: ...


class Navigation:
    """The pane on view and what the Engines pane shows of the fleet; no state of its own.

    ``render_snapshot(force)`` repaints the state on screen; ``show_detail(screen)`` paints an engine
    detail; ``has_state()`` whether a tick was painted; ``triage_engine()`` the engine of the Triage
    pane's selected verdict."""

    def __init__(self, host: NavigationHost, history: Any, *, render_snapshot: Callable[..., None],
                 show_detail: Callable[[EngineDetailScreen], None], has_state: Callable[[], bool],
                 triage_engine: Callable[[], str | None]) -> None:
        self.host, self.history = host, history
        self._render, self._show_detail, self._has_state = render_snapshot, show_detail, has_state
        self._triage_engine = triage_engine

    @property
    def current_pane(self) -> str:
        return str(self.host.main.query_one("#panes", TabbedContent).active)

    def selected_engine_name(self) -> str | None:
        """The engine an engine action acts on: the open detail's, the Engines pane's selection while
        that pane is on view, or the selected verdict's engine on the Triage pane (never a row the
        operator cannot see)."""
        screen, main = self.host.screen, self.host.main
        if isinstance(screen, EngineDetailScreen):
            return screen.engine_name
        if screen is main and self.current_pane == "triage":
            return self._triage_engine()
        if screen is not main or self.current_pane != "engines":
            return None
        return self._table().selected_engine

    def _table(self) -> EnginesTable:
        return self.host.main.query_one("#engines-table", EnginesTable)

    def show_pane(self, pane: str) -> None:
        """Bring ``pane`` on view, painted from the state on screen, with its table focused."""
        main = self.host.main
        tabs = main.query_one("#panes", TabbedContent)
        if tabs.active != pane:
            tabs.active = pane
            self._render()  # now, so that the first frame of the pane shows the state on screen
        self.host.refresh_bindings()
        if pane == "engines":
            self._table().focus()
        elif pane == "gpus":
            main.query_one(GpusTable).focus()
        elif pane == "cluster":
            main.query_one(ClusterPane).focus_table()
        elif pane == "queues":
            main.query_one(QueuePane).focus_table()
        elif pane == "log":
            main.query_one("#log-view", RichLog).focus()  # arrows scroll the log
        elif pane == "autoscaler":
            main.query_one(AutoscalerPane).table.focus()
        elif pane == "triage":
            main.query_one(TriagePane).options.focus()  # ↑ ↓ move between verdicts and remedies
        else:
            # Nothing of another pane may keep the focus: TabbedContent would switch back to it.
            main.set_focus(None)

    def step_pane(self, step: int) -> None:
        """The next (1) or previous (-1) pane, wrapping around."""
        active = self.current_pane
        i = PANES.index(active) if active in PANES else 0
        self.show_pane(PANES[(i + step) % len(PANES)])

    def open_filter(self) -> None:
        self.show_pane("engines")
        box = self.host.main.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def filter_changed(self, text: str) -> None:
        self._table().filter_text = text
        self._render(force=True)

    def filter_done(self) -> None:
        self._table().focus()

    def clear_filter(self) -> None:
        box = self.host.main.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        table = self._table()
        table.filter_text = ""
        table.focus()
        self._render(force=True)

    def sort_pick(self) -> None:
        """``s``: pick the Engines table's sort column from a list (the same one again reverses)."""
        if self.current_pane != "engines":
            self.show_pane("engines")
        table = self._table()
        columns = [(PRESSURE, "Pressure (down, over an SLO, queued, slowest first)")] + [(k, HEADERS[k]) for k in SORTABLE]
        self.host.push_screen(SortPicker(columns, table.sort_key, table.descending), self._sort_picked)

    def group_engines(self) -> None:
        """``G``: group the Engines table by deployment, then model, then node, then not at all."""
        if self.current_pane != "engines":
            self.show_pane("engines")
        table = self._table()
        cycle = (None, *GROUP_BY)
        table.set_group_by(cycle[(cycle.index(table.group_by) + 1) % len(cycle)])
        self.host.notify(f"engines grouped by {table.group_by}" if table.group_by else "engines not grouped",
                         timeout=2)
        self._render(force=True)

    def _sort_picked(self, key: str | None) -> None:
        if key is None:
            return
        table = self._table()
        table.sort_by(key)
        name = "pressure" if key == PRESSURE else HEADERS[key]
        self.host.notify(f"sorted by {name} {'▼' if table.descending else '▲'}", timeout=2)
        self._render(force=True)

    def engine_detail(self, name: str | None = None) -> None:
        """The detail screen of engine ``name`` (default: the Engines pane's selection)."""
        name = name or self._table().selected_engine
        if name is None:
            return
        screen = EngineDetailScreen(name, self.history)
        self.host.push_screen(screen)
        if self._has_state():
            self.host.call_after_refresh(self._show_detail, screen)

    def gpu_detail(self, gid: str | None = None) -> None:
        """The detail screen of GPU ``gid`` (default: the GPUs pane's selection)."""
        pane = self.host.main.query_one(GpusPane)
        gid = gid if gid is not None else pane.selected_gpu
        r = pane.gpu(gid) if gid is not None else None
        if r is None or gid is None:
            return
        label = f"{r.gpu.host}:{r.gpu.label}" if r.gpu.host else r.gpu.label
        screen = GpuDetailScreen(gid, label, self.history)
        self.host.push_screen(screen)
        self.host.call_after_refresh(screen.show, r.gpu)
