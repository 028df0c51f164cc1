"""The Autoscaler pane: per workload, what every autoscaler decided, and the advisor's reasons.

It renders the fleet state's ``autoscalers`` slot (state/advisor/core.py), so the
live app, a replay and ``snapshot`` show the same decisions. Top: one row per
workload (current → desired of infertop's advice and of the HPA, bounds, the
rule that holds it, the reason). Below, for the selected workload: every
autoscaler's line, the input sparklines with their targets, cooldown and
stabilisation remaining, and the decision log newest first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable

from ...format import DASH, count_human
from ...text import plain
from .panels import QuietStatic, Trend

COLUMNS = (("workload", "Workload"), ("advice", "infertop"), ("hpa", "HPA"), ("bounds", "Bounds"),
           ("rule", "Held by"), ("left", "Left"), ("reason", "Reason"))
ACTION_STYLE = {"recommended": "bold yellow", "applied": "bold green", "refused": "bold red", "none": "",
                "applying": "yellow", "sent": "bold yellow", "not applied": "bold red"}


def _arrow(cur, desired) -> str:
    return f"{count_human(cur)}→{count_human(desired)}" if cur is not None or desired is not None else DASH


def _left(v: dict) -> float | None:
    latest = v.get("latest") or {}
    return latest.get("hold_left_s") or v.get("cooldown_left_s")


def _secs(s: float | None) -> str:
    return DASH if s is None else f"{s:.0f} s"



def _bounds_suffix(bounds_from: str) -> str:
    """Where the bounds come from, in the table: the config (nothing), an HPA, a KEDA ScaledObject."""
    return "" if bounds_from == "config" else " keda" if bounds_from.startswith("KEDA") else " hpa"

class AutoscalerPane(Vertical):
    """Attributes down: the app calls :meth:`show` with the state's autoscaler views."""

    DEFAULT_CSS = """
    AutoscalerPane { height: 1fr; }
    AutoscalerPane #as-header { height: auto; max-height: 3; padding: 0 1; }
    AutoscalerPane #as-table { height: 1fr; min-height: 4; }
    AutoscalerPane #as-trends { height: 3; }
    AutoscalerPane #as-detail { height: auto; max-height: 14; padding: 0 1; border-top: solid $panel; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.views: list[dict] = []
        self._rows: dict[str, list[str]] = {}
        self.series: Mapping[str, Sequence[tuple]] = {}

    def compose(self) -> ComposeResult:
        yield QuietStatic(id="as-header")
        table: DataTable = DataTable(id="as-table", cursor_type="row", zebra_stripes=False)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table
        with Horizontal(id="as-trends"):
            yield Trend("Queue depth", id="as-queue")
            yield Trend("P99", id="as-p99")
        yield QuietStatic(id="as-detail")

    def on_mount(self) -> None:
        self.show_message("Autoscaler: waiting for the first tick…")

    @property
    def table(self) -> DataTable:
        return self.query_one("#as-table", DataTable)

    @property
    def selected(self) -> dict | None:
        """The view of the workload under the cursor."""
        t = self.table
        if not t.row_count:
            return None
        try:
            key = t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
        except Exception:  # noqa: BLE001 — no row under the cursor
            return None
        return next((v for v in self.views if v["workload"] == key), None)

    def select(self, workload: str) -> bool:
        t = self.table
        for i, v in enumerate(self.views):
            if v["workload"] == workload:
                t.move_cursor(row=i)
                return True
        return False

    def show_message(self, text: str, style: str = "yellow") -> None:
        self.query_one("#as-header", QuietStatic).show(Text(text, style=style))

    def show(self, views: Sequence[dict], header: Text, series: Mapping[str, Sequence[tuple]] | None = None) -> None:
        """Render the views (FleetState.autoscalers); ``series``: workload → (t, queue depth, p99 s) samples."""
        self.views = list(views)
        self.series = series or {}
        self.query_one("#as-header", QuietStatic).show(header)
        t = self.table
        keys = [v["workload"] for v in self.views]
        if list(self._rows) != keys:
            t.clear()
            self._rows = {}
            for v in self.views:
                cells = self._cells(v)
                t.add_row(*cells, key=v["workload"])
                self._rows[v["workload"]] = [c.plain if isinstance(c, Text) else c for c in cells]
        else:
            for v in self.views:
                cells = self._cells(v)
                shown = self._rows[v["workload"]]
                for i, cell in enumerate(cells):
                    txt = cell.plain if isinstance(cell, Text) else cell
                    if shown[i] != txt:
                        shown[i] = txt
                        t.update_cell(v["workload"], COLUMNS[i][0], cell, update_width=True)
        self._render_detail()

    def _cells(self, v: dict) -> list:
        latest = v.get("latest") or {}
        hpa = next((a for a in v.get("autoscalers") or () if a.get("source") == "HPA"), None)
        action = latest.get("action", "")
        advice = Text(_arrow(latest.get("current", v.get("current")), latest.get("desired")) if latest else "off",
                      style=ACTION_STYLE.get(action, ""))
        return [
            Text(plain(f"{v['namespace']}/{v['name']}")),
            advice,
            _arrow(hpa.get("current"), hpa.get("desired")) if hpa else DASH,
            f"{v.get('min_replicas')}-{v.get('max_replicas')}" + _bounds_suffix(v.get("bounds_from") or "config"),
            latest.get("rule") or (action if action in ("recommended", "applied", "applying", "sent", "not applied") else DASH),
            _secs(_left(v)),
            Text(plain(latest.get("reason") or "advisor off", 160)),
        ]

    def _render_detail(self) -> None:
        v = self.selected or (self.views[0] if self.views else None)
        detail = self.query_one("#as-detail", QuietStatic)
        if v is None:
            detail.show(Text("No workload to advise: the advisor follows the Deployments/StatefulSets whose pods "
                             "are watched engines (or advisor.workloads in the config).", style="dim"))
            self.query_one("#as-queue", Trend).show([], DASH)
            self.query_one("#as-p99", Trend).show([], DASH)
            return
        targets = v.get("targets") or {}
        samples = list(self.series.get(v["workload"], ()))
        latest = v.get("latest") or {}
        q_now = next((i.get("value") for i in latest.get("inputs") or () if i.get("name") == "queue depth"), None)
        p_now = next((i.get("value") for i in latest.get("inputs") or () if i.get("unit") == "s"), None)
        q_target, p_target = targets.get("queue_depth"), targets.get("p99_s")
        self.query_one("#as-queue", Trend).show(
            [s[1] for s in samples], f"{'—' if q_now is None else f'{q_now:.1f}'} (target {q_target:g})"
            if q_target is not None else DASH, fmt=lambda x: f"{x:.0f}")
        self.query_one("#as-p99", Trend).show(
            [s[2] for s in samples], f"{'—' if p_now is None else f'{p_now * 1000:.0f} ms'} "
                                     f"(target {p_target * 1000:.0f} ms)" if p_target is not None else DASH,
            fmt=lambda x: f"{x * 1000:.0f} ms")
        out = Text()
        out.append(plain(f"{v['kind']} {v['namespace']}/{v['name']}"), style="bold")
        out.append(f" · engines: {plain(', '.join(v.get('engines') or ()) or DASH)} · ready {v.get('ready')}"
                   f" · bounds {v.get('min_replicas')}-{v.get('max_replicas')} ({plain(v.get('bounds_from'))})")
        src, rest = v.get("queue_source"), v.get("queue_fleet_wide")
        if src:
            out.append(f"\nqueue depth from: {plain(src.get('text'), 160)}")
        if rest and rest.get("series"):  # series no workload owns: shown, never in a workload's depth
            kinds = ", ".join(f"{plain(k)} {d:g}" for k, d in (rest.get("depth_by_queue") or {}).items())
            out.append(f"\nfleet-wide, no workload's: {kinds} ({rest['series']} series)", style="dim")
        w = v.get("windows") or {}
        out.append(f"\ncooldown {_secs(v.get('cooldown_left_s'))} left of {w.get('cooldown_s', 0):g} s · windows: "
                   f"up {w.get('scale_up_s', 0):g} s, down {w.get('scale_down_s', 0):g} s · "
                   f"tolerance ±{w.get('tolerance', 0) * 100:g} %")
        if latest.get("rule") == "stabilisation":
            out.append(f" · stabilisation {_secs(latest.get('hold_left_s'))} left", style="yellow")
        if v.get("last_apply"):
            out.append(f" · last apply: {plain(v['last_apply'])}")
        for a in v.get("autoscalers") or ():
            out.append(f"\n{plain(a.get('source')):<9} {plain(a.get('name')):<22} "
                       f"{_arrow(a.get('current'), a.get('desired')):<7} ")
            out.append(plain(a.get("why") or "", 140), style="dim")
        decisions = v.get("decisions") or ()
        if decisions:
            out.append("\ndecisions, newest first:", style="bold")
        for d in decisions[:6]:
            stamp = time.strftime("%H:%M:%S", time.localtime(d.get("at") or 0))
            repeats = d.get("repeats") or 1
            out.append(f"\n{stamp} ")
            out.append(f"{d.get('action', ''):<12}", style=ACTION_STYLE.get(d.get("action", ""), ""))
            out.append(plain(d.get("reason"), 160))
            if repeats > 1:
                out.append(f"  ×{repeats}", style="dim")
        detail.show(out)

    def on_data_table_row_highlighted(self, _event) -> None:
        self._render_detail()
