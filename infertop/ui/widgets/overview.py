"""The Overview pane: fleet tiles, trends, the engines under most pressure, alerts.

Every piece repaints on its own and only when its text changes: over a
slow SSH link the pane costs bytes only for the numbers that moved.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical

from ...analysis.alerts import CRITICAL, Alert
from ...format import count_human, pct_human, rate_human, seconds_human, wait_human
from ...state.fleet_types import FleetState
from ...state.fleet_history import FLEET
from ...state.queues import queue_sources, queue_totals
from ...state.history import HistoryStore
from ...text import plain
from .alert_lines import AlertLines
from .hot_table import HotTable
from .panels import QuietStatic, Trend
from .tiles import TileGrid
from .triage import worst_line

ALERT_LINES = 12  # composed; as many are shown as the height allows
HOT_ROWS_MAX = 15
HOT_COLUMNS = ("name", "state", "run", "wait", "runmax", "kv", "ttft99", "itl95", "gen", "e2e99")


# More fleet trends where the width allows (160 columns and up).
WIDE_TRENDS = (
    ("requests_per_s", "Requests/s", rate_human),
    ("itl_p95_s", "ITL p95", seconds_human),
    ("e2e_p99_s", "E2E p99", seconds_human),
    ("kv_cache_pct_max", "KV max", pct_human),
)


TILES = (
    ("engines", "Engines up"),
    ("running", "Running"),
    ("waiting", "Waiting"),
    ("rps", "Requests/s"),
    ("gen", "Gen tok/s"),
    ("prompt", "Prompt tok/s"),
    ("ttft50", "TTFT p50"),
    ("ttft99", "TTFT p99"),
    ("itl95", "ITL p95"),
    ("e2e99", "E2E p99"),
    ("kv", "KV mean/max"),
    ("preempt", "Preempt/s"),
    # GPUs (filled by show_gpus)
    ("gpus", "GPU ok/thr/✗"),
    ("gpu_util", "GPU util"),
    ("gpu_mem", "GPU memory"),
    ("gpu_temp", "Hottest GPU"),
    ("gpu_power", "GPU power"),
    ("gpu_errors", "GPU errors"),
)
# gateways / endpoint pickers: mounted once one is watched
QUEUE_TILES = (("queued", "GW queued"), ("queue_oldest", "Oldest wait"))


class Overview(Vertical):
    DEFAULT_CSS = """
    Overview #overview-trends { height: 3; }
    Overview #overview-trends > Trend { height: 100%; }
    Overview #overview-trends > .wide { display: none; }
    Overview.wide #overview-trends > .wide { display: block; }
    Overview #hot-title { padding: 0 1; }
    Overview #hot { height: auto; max-height: 17; }
    Overview #verdict-line { height: 1; padding: 0 1; display: none; text-wrap: nowrap; text-overflow: ellipsis; }
    Overview #verdict-line.visible { display: block; }
    """

    def __init__(self, slo, **kwargs) -> None:
        super().__init__(**kwargs)
        self.slo = slo
        self.alert_rows = 2  # alert lines that fit (set by the layout)
        self._engines = 0
        self._queues = False  # a gateway or endpoint picker is watched: its tiles are shown
        self._alerts: list[Alert] = []
        self._alerts_shown: tuple | None = None  # (alerts, lines, width) last laid out
        self._shown: tuple[FleetState, HistoryStore] | None = None  # the tick on screen
        self._verdict_shown = False  # the first line shows the worst triage verdict
        # kept: no query per tick
        self.tiles = TileGrid(TILES, QUEUE_TILES, id="tiles")
        self.alert_lines = AlertLines(ALERT_LINES, rows=self.alert_rows, id="alerts")
        self.verdict_line = QuietStatic(id="verdict-line")

    def compose(self) -> ComposeResult:
        yield self.verdict_line
        yield self.tiles
        with Horizontal(id="overview-trends"):
            yield Trend("Gen tokens/s", id="t-gen")
            yield Trend("Running", id="t-running")
            yield Trend("Waiting", id="t-waiting")
            yield Trend("TTFT p99", id="t-ttft")
            for key, title, _ in WIDE_TRENDS:  # shown on a wide terminal
                yield Trend(title, id=f"t-{key}", classes="wide")
        yield QuietStatic("[b]Under most pressure[/b]", id="hot-title")
        yield HotTable(slo=self.slo, columns=HOT_COLUMNS, limit=5, resort_every_s=5.0, id="hot")
        yield self.alert_lines

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """Lay the pane out for its size: tile columns from the width, then
        trends, rows under pressure and alert lines share the height (80x24:
        3 tile rows, 2-line sparklines, at least 2 alert lines; 200x60: 2 tile
        rows, taller sparklines, up to 15 rows under pressure)."""
        width, height = self.size
        if not width or not height:
            return
        cols = 9 if width >= 135 else 6
        if (width >= 160) != self.has_class("wide"):
            self.set_class(width >= 160, "wide")
            if width >= 160:
                self._show_wide_trends()
        self.tiles.set_columns(cols)
        shown = len(TILES) + (len(QUEUE_TILES) if self._queues else 0)
        tile_lines = 2 * -(-shown // cols)
        trend = 3 if height < 34 else (5 if height < 48 else 7)
        self.query_one("#overview-trends").styles.height = trend
        left = height - tile_lines - trend - 3 - self._verdict_shown  # hot title, hot header, alerts title
        engines = max(1, self._engines)
        alerts = max(2, min(ALERT_LINES, left // 3))
        hot = max(1, min(HOT_ROWS_MAX, engines, left - alerts))
        alerts = max(2, min(ALERT_LINES, left - hot))
        self.query_one("#hot", HotTable).set_limit(hot)
        self.alert_lines.set_rows(alerts)
        if alerts != self.alert_rows:
            self.alert_rows = alerts
            self.show_alerts(self._alerts)

    def show_state(self, state: FleetState, history: HistoryStore) -> None:
        """Tiles, trends, the engines under most pressure and the alerts — all from one tick."""
        f = state.fleet
        if len(state.engines) != self._engines:
            self._engines = len(state.engines)
            self._fit()
        self._show_verdict(state)
        with self.tiles.repaint_batch():
            self._show_tiles(state)
            self._show_queues(state)
        n = 120
        self.query_one("#t-gen", Trend).show(history.series(FLEET, "generation_tokens_per_s", n),
                                             rate_human(f.generation_tokens_per_s), fmt=rate_human)
        self.query_one("#t-running", Trend).show(history.series(FLEET, "running", n), count_human(f.running),
                                                 fmt=count_human)
        self.query_one("#t-waiting", Trend).show(history.series(FLEET, "waiting", n), count_human(f.waiting),
                                                 fmt=count_human)
        self.query_one("#t-ttft", Trend).show(history.series(FLEET, "ttft_p99_s", n), seconds_human(f.ttft_p99_s),
                                              fmt=seconds_human)
        self._shown = (state, history)
        if self.has_class("wide"):  # hidden below 160 columns: drawn when the pane widens (_fit)
            self._show_wide_trends()
        self.query_one("#hot", HotTable).update_state(state)
        self.show_alerts(list(state.alerts))

    def _show_verdict(self, state: FleetState) -> None:
        """The first line: the worst verdict (kind, subject, since) while there is one; no line otherwise."""
        verdicts = state.verdicts
        line = self.verdict_line
        if verdicts:
            line.show(worst_line(verdicts, state.taken_at))
        if bool(verdicts) != self._verdict_shown:
            self._verdict_shown = bool(verdicts)
            line.set_class(self._verdict_shown, "visible")
            self._fit()

    def _show_tiles(self, state: FleetState) -> None:
        slo, f = state.slo, state.fleet
        tile = self.tiles.set_value

        def over(v, target) -> bool:
            return v is not None and v > target

        down = f.engines - f.engines_up
        tile("engines", f"{f.engines_up}/{f.engines}", bad=down > 0)
        tile("running", count_human(f.running))
        tile("waiting", count_human(f.waiting), bad=bool(f.waiting))
        tile("rps", rate_human(f.requests_per_s))
        tile("gen", rate_human(f.generation_tokens_per_s))
        tile("prompt", rate_human(f.prompt_tokens_per_s))
        tile("ttft50", seconds_human(f.ttft_p50_s))
        tile("ttft99", seconds_human(f.ttft_p99_s), over(f.ttft_p99_s, slo.ttft_p99_s), f"≤{target_human(slo.ttft_p99_s)}")
        tile("itl95", seconds_human(f.itl_p95_s), over(f.itl_p95_s, slo.itl_p95_s), f"≤{target_human(slo.itl_p95_s)}")
        tile("e2e99", seconds_human(f.e2e_p99_s), over(f.e2e_p99_s, slo.e2e_p99_s), f"≤{target_human(slo.e2e_p99_s)}")
        tile("kv", f"{pct_human(f.kv_cache_pct_mean)}/{pct_human(f.kv_cache_pct_max)}",
             over(f.kv_cache_pct_max, slo.kv_cache_pct))
        tile("preempt", rate_human(f.preemptions_per_s), bad=bool(f.preemptions_per_s))

    def _show_wide_trends(self) -> None:
        if self._shown is None:
            return
        state, history = self._shown
        for key, _, fmt in WIDE_TRENDS:
            self.query_one(f"#t-{key}", Trend).show(history.series(FLEET, key, 120), fmt(getattr(state.fleet, key)),
                                                   fmt=fmt, percent=fmt is pct_human)

    def _show_queues(self, state: FleetState) -> None:
        """Total queued in the gateways / pickers and the oldest wait (tiles shown only when one is watched)."""
        sources = queue_sources(state.queues)
        watched = bool(sources)
        if watched != self._queues:
            self._queues = watched
            self.tiles.show_extra(watched)
            self._fit()
        if not watched:
            return
        queued, oldest = queue_totals(state.queues)
        worst = max((c.max_wait_s for q in sources if q.fresh for c in q.classes
                     if c.max_wait_s is not None and c.oldest_wait_s is not None and c.oldest_wait_s > c.max_wait_s),
                    default=None)
        self.tiles.set_value("queued", count_human(queued))
        self.tiles.set_value("queue_oldest", wait_human(oldest), bad=worst is not None)

    def show_gpus(self, g, configured: bool = True) -> None:
        """GPU tiles from a :class:`~infertop.ui.widgets.gpus.GpuSummary`."""
        with self.tiles.repaint_batch():
            self._show_gpu_tiles(g, configured)

    def _show_gpu_tiles(self, g, configured: bool) -> None:
        tile = self.tiles.set_value

        if not g.gpus:
            tile("gpus", "none", note="(4: why)" if configured else "")
            for key in ("gpu_util", "gpu_mem", "gpu_temp", "gpu_power", "gpu_errors"):
                tile(key, "—")
            return
        tile("gpus", f"{g.ok}/{g.throttled}/{g.failed}", bad=bool(g.throttled or g.failed))
        tile("gpu_util", pct_human(g.util_mean_pct))
        mem = f"{pct_human(g.mem_pct)} of {g.mem_total_bytes / 1024**3:.0f}G" if g.mem_total_bytes else "—"
        tile("gpu_mem", mem)
        tile("gpu_temp", "—" if g.temp_max_c is None else f"{g.temp_max_c:.0f}°C", bad=g.thermal)
        power = "—" if g.power_w is None else (f"{g.power_w / 1000:.1f}/{g.power_limit_w / 1000:.1f}kW"
                                                if g.power_limit_w else f"{g.power_w / 1000:.1f}kW")
        tile("gpu_power", power)
        tile("gpu_errors", g.errors or "none", bad=g.errors is not None)

    def show_alerts(self, alerts: list[Alert]) -> None:
        """One line per engine with problems, worst first. An engine's alerts that
        do not fit the width end in "+N more"; engines that do not fit the lines
        in "… N more engines"."""
        self._alerts = alerts
        key = (alerts, self.alert_rows, self.size.width)
        if key == self._alerts_shown:
            return  # the same alerts on the same lines: nothing to lay out again
        self._alerts_shown = key
        by_target: dict[str, list[Alert]] = {}
        for a in alerts:
            by_target.setdefault(a.target, []).append(a)
        groups = sorted(by_target.items(), key=lambda kv: (all(a.severity != CRITICAL for a in kv[1]), kv[0]))
        title = Text("Alerts", style="bold")
        if alerts:
            title.append(f" ({len(alerts)} on {len(groups)} engine{'s' if len(groups) != 1 else ''})")
        else:
            title.append(" none", style="green")
            title.append(" — every engine within its SLO targets")
        out = self.alert_lines
        with out.repaint_batch():
            self._show_alert_lines(out, title, groups)

    def _show_alert_lines(self, out: AlertLines, title: Text, groups: list[tuple[str, list[Alert]]]) -> None:
        out.show_title(title)
        rows = self.alert_rows
        width = self.size.width - 2  # the lines' padding
        fits = len(groups) <= rows
        for i in range(rows):
            if i < len(groups) and (fits or i < rows - 1):
                target, group = groups[i]
                out.show_line(i, alert_line(target, group, width))
            elif i == rows - 1 and not fits:
                more = len(groups) - i
                n_alerts = sum(len(g) for _, g in groups[i:])
                out.show_line(i, Text(f"… {more} more engine{'s' if more != 1 else ''} with {n_alerts} alert"
                               f"{'s' if n_alerts != 1 else ''}", style="dim"))
            else:
                out.show_line(i, "")


def alert_line(target: str, group: list[Alert], width: int) -> Text:
    """``● engine — alert · alert`` in ``width`` cells: the alerts that fit, then "+N more"."""
    color = "red" if any(a.severity == CRITICAL for a in group) else "yellow"
    texts = [plain(a.text, 120) for a in group]
    shown = len(texts)
    head = 4 + len(plain(target, 40)) + 3  # "● " + name + " — "
    while shown > 1 and width > 0:
        more = f" · +{len(texts) - shown} more" if shown < len(texts) else ""
        if head + len(" · ".join(texts[:shown])) + len(more) <= width:
            break
        shown -= 1
    text = Text("● ", style=color)
    text.append(plain(target, 40), style="bold")
    text.append(" — " + " · ".join(texts[:shown]))
    if shown < len(texts):
        text.append(f" · +{len(texts) - shown} more", style="dim")
    return text


def target_human(seconds: float) -> str:
    """An SLO target, short enough for a tile at 80 columns: 2s, 40ms, 1.5s."""
    if seconds >= 1:
        return f"{seconds:g}s"
    return f"{seconds * 1000:g}ms"
