"""Moving between the panes, and the Engines pane's view: filter, sort, grouping, the detail screens.

``NavigationMixin`` is a mixin of :class:`~infertop.ui.app.InfertopApp`; the messages that lead here
(a tab clicked, a row selected, the filter typed) are handled in app.py.
"""

from __future__ import annotations

from textual.widgets import Input, RichLog, TabbedContent

from ..state.engine_groups import GROUP_BY
from .screens.engine_detail import EngineDetailScreen
from .screens.gpu_detail import GpuDetailScreen
from .screens.sort_picker import SortPicker
from .widgets.autoscaler import AutoscalerPane
from .widgets.cluster import ClusterPane
from .widgets.engines_table import HEADERS, PRESSURE, SORTABLE, EnginesTable
from .widgets.gpus import GpusPane, GpusTable
from .widgets.queue import QueuePane
from .widgets.triage import TriagePane

PANES = ("overview", "engines", "log", "gpus", "cluster", "queues", "autoscaler", "triage", "slo")


class NavigationMixin:
    """The pane on view and what the Engines pane shows of the fleet; no state of its own."""

    def selected_engine_name(self) -> str | None:
        """The engine an engine action acts on: the open detail's, the Engines pane's selection while
        that pane is on view, or the selected verdict's engine on the Triage pane (never a row the
        operator cannot see)."""
        if isinstance(self.screen, EngineDetailScreen):
            return self.screen.engine_name
        if self.screen is self.main and self.current_pane == "triage":
            return self.triage_engine()
        if self.screen is not self.main or self.current_pane != "engines":
            return None
        return self.main.query_one("#engines-table", EnginesTable).selected_engine

    @property
    def current_pane(self) -> str:
        return self.main.query_one("#panes", TabbedContent).active

    def action_show_pane(self, pane: str) -> None:
        tabs = self.main.query_one("#panes", TabbedContent)
        if tabs.active != pane:
            tabs.active = pane
            self.render_snapshot()  # now, so that the first frame of the pane shows the state on screen
        self.refresh_bindings()
        if pane == "engines":
            self.main.query_one("#engines-table", EnginesTable).focus()
        elif pane == "gpus":
            self.main.query_one(GpusTable).focus()
        elif pane == "cluster":
            self.main.query_one(ClusterPane).focus_table()
        elif pane == "queues":
            self.main.query_one(QueuePane).focus_table()
        elif pane == "log":
            self.main.query_one("#log-view", RichLog).focus()  # arrows scroll the log
        elif pane == "autoscaler":
            self.main.query_one(AutoscalerPane).table.focus()
        elif pane == "triage":
            self.main.query_one(TriagePane).options.focus()  # ↑ ↓ move between verdicts and remedies
        else:
            # Nothing of another pane may keep the focus: TabbedContent would switch back to it.
            self.main.set_focus(None)

    def _step_pane(self, step: int) -> None:
        tabs = self.main.query_one("#panes", TabbedContent)
        i = PANES.index(tabs.active) if tabs.active in PANES else 0
        self.action_show_pane(PANES[(i + step) % len(PANES)])

    def action_next_pane(self) -> None:
        self._step_pane(1)

    def action_previous_pane(self) -> None:
        self._step_pane(-1)

    def action_filter(self) -> None:
        self.action_show_pane("engines")
        box = self.main.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.main.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        table = self.main.query_one("#engines-table", EnginesTable)
        table.filter_text = ""
        table.focus()
        self.render_snapshot(force=True)

    def action_sort_pick(self) -> None:
        """``s``: pick the Engines table's sort column from a list (the same one again reverses)."""
        if self.current_pane != "engines":
            self.action_show_pane("engines")
        table = self.main.query_one("#engines-table", EnginesTable)
        columns = [(PRESSURE, "Pressure (down, over an SLO, queued, slowest first)")] + [(k, HEADERS[k]) for k in SORTABLE]
        self.push_screen(SortPicker(columns, table.sort_key, table.descending), self._sort_picked)

    def action_group_engines(self) -> None:
        """``G``: group the Engines table by deployment, then model, then node, then not at all."""
        if self.current_pane != "engines":
            self.action_show_pane("engines")
        table = self.main.query_one("#engines-table", EnginesTable)
        cycle = (None, *GROUP_BY)
        table.set_group_by(cycle[(cycle.index(table.group_by) + 1) % len(cycle)])
        self.notify(f"engines grouped by {table.group_by}" if table.group_by else "engines not grouped", timeout=2)
        self.render_snapshot(force=True)

    def _sort_picked(self, key: str | None) -> None:
        if key is None:
            return
        table = self.main.query_one("#engines-table", EnginesTable)
        table.sort_by(key)
        name = "pressure" if key == PRESSURE else HEADERS[key]
        self.notify(f"sorted by {name} {'▼' if table.descending else '▲'}", timeout=2)
        self.render_snapshot(force=True)

    def action_engine_detail(self, name: str | None = None) -> None:
        name = name or self.main.query_one("#engines-table", EnginesTable).selected_engine
        if name is None:
            return
        screen = EngineDetailScreen(name, self.history)
        self.push_screen(screen)
        if self.state is not None:
            self.call_after_refresh(self._show_detail, screen)

    def action_gpu_detail(self) -> None:
        pane = self.main.query_one(GpusPane)
        gid = pane.selected_gpu
        if gid is not None:
            self._open_gpu_detail(gid)

    def _open_gpu_detail(self, gid: str) -> None:
        r = self.main.query_one(GpusPane).gpu(gid)
        if r is None:
            return
        label = f"{r.gpu.host}:{r.gpu.label}" if r.gpu.host else r.gpu.label
        screen = GpuDetailScreen(gid, label, self.history)
        self.push_screen(screen)
        self.call_after_refresh(screen.show, r.gpu)
