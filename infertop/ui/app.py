"""The infertop Textual app: panes over the latest fleet snapshot."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input, RichLog, TabbedContent, TabPane

from ..analysis.alerts import engine_alerts
from ..analysis.fleet import fleet_quantile, totals
from ..config import Config
from ..domain.engine import FleetSnapshot
from ..format import age_human, count_human, seconds_human
from ..sources.vllm import EngineEndpoint, FleetCollector
from .actions import ACTIONS, bindings
from .commands import InfertopCommands
from .screens.engine_detail import EngineDetailScreen
from .screens.help import HelpScreen
from .themes import load_themes
from .widgets.engines_table import EnginesTable
from .widgets.overview import FLEET, Overview
from .widgets.panels import QuietStatic, Trend

PANES = ("overview", "engines", "log")
MUTATING = {a.action.split("(")[0] for a in ACTIONS if a.mutating}
SPARK_EVERY_S = 5.0  # sparklines repaint every 5 s: a scrolling chart costs bytes on SSH


@dataclass
class Settings:
    """Everything the app needs, resolved from config + command line."""

    config: Config = field(default_factory=Config)
    endpoints: list[EngineEndpoint] = field(default_factory=list)
    read_only: bool = False
    mode: str = "local"  # "local" or "demo"
    notes: list[str] = field(default_factory=list)  # shown once in the log at start


class InfertopApp(App[None]):
    TITLE = "infertop"
    COMMANDS = App.COMMANDS | {InfertopCommands}
    CSS = """
    Screen { layout: vertical; }
    #topbar { height: 1; background: $panel; padding: 0 1; }
    #statusbar { height: 1; background: $panel; padding: 0 1; }
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    #engine-trends { height: 3; }
    #filter { display: none; height: 3; }
    #filter.visible { display: block; }
    """
    BINDINGS = bindings()  # the one action table


    def __init__(self, settings: Settings, *, poll: bool = True) -> None:
        self.settings = settings
        super().__init__()
        cfg = settings.config
        self.collector = FleetCollector(
            settings.endpoints,
            interval_s=cfg.refresh_s,
            window_s=cfg.window_s,
            history_capacity=max(2, int(cfg.history_s / cfg.refresh_s)),
        )
        self.poll = poll
        self.snapshot: FleetSnapshot | None = None
        self._last_spark = 0.0
        self._rendered_version = -1
        self._version = 0
        self._states: dict[str, str] = {}
        self.collector.on_update = self._on_collected

    # ----- layout -------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield QuietStatic(id="topbar")
        with TabbedContent(id="panes", initial="overview"):
            with TabPane("1 Overview", id="overview"):
                yield Overview(self.settings.config.slo, id="overview-pane")
            with TabPane("2 Engines", id="engines"):
                with Vertical():
                    yield Input(placeholder="filter engines by name or model (Esc clears)", id="filter")
                    yield EnginesTable(slo=self.settings.config.slo, id="engines-table")
                    with Horizontal(id="engine-trends"):
                        yield Trend("Selected: running", id="e-running")
                        yield Trend("Selected: TTFT p99", id="e-ttft")
            with TabPane("3 Log", id="log"):
                yield RichLog(id="log-view", max_lines=2000, markup=True, wrap=True)
        yield QuietStatic(id="statusbar")
        yield Footer()

    def on_mount(self) -> None:
        themes, problems = load_themes()
        for t in themes:
            self.register_theme(t)
        wanted = self.settings.config.theme
        names = {t.name for t in themes}
        self.theme = wanted if wanted in names or wanted in self.available_themes else "textual-dark"
        for p in problems:
            self.log_event(f"[yellow]{p}[/yellow]")
        for note in self.settings.notes:
            self.log_event(note)
        self._render_top()
        self.set_interval(self.settings.config.refresh_s, self.render_snapshot)
        if self.poll:
            self.start_collection()

    @work(exclusive=True, group="collect", exit_on_error=False)
    async def start_collection(self) -> None:
        """Poll loops run as an async worker: never block the UI, never overlap."""
        await self.collector.run()

    async def poll_now(self) -> None:
        """Poll every engine once and render (tests and Ctrl+R)."""
        await self.collector.poll_once()
        self.render_snapshot(force=True)

    def _on_collected(self, snap: FleetSnapshot) -> None:
        self.snapshot = snap
        self._version += 1

    # ----- rendering ----------------------------------------------------
    def render_snapshot(self, force: bool = False) -> None:
        """Repaint from the latest snapshot, at most once per refresh."""
        self._render_status()
        if self.snapshot is None or (self._version == self._rendered_version and not force):
            return
        self._rendered_version = self._version
        snap = self.snapshot
        engines = list(snap.engines)
        self._note_state_changes(engines)
        tot = totals(engines)
        windows = [w for c in self.collector.collectors for w in c.windows.values()]
        ttft50 = fleet_quantile(windows, "ttft", 0.5)
        ttft99 = fleet_quantile(windows, "ttft", 0.99)
        itl95 = fleet_quantile(windows, "itl", 0.95)
        e2e99 = fleet_quantile(windows, "e2e", 0.99)
        hist = self.collector.history
        hist.record(FLEET, "generation_tokens_per_s", tot.generation_tokens_per_s)
        hist.record(FLEET, "running", tot.running)
        hist.record(FLEET, "waiting", tot.waiting)
        hist.record(FLEET, "ttft_p99_s", ttft99)
        overview = self.query_one(Overview)
        overview.show(engines, tot, {"ttft50": ttft50, "ttft99": ttft99, "itl95": itl95, "e2e99": e2e99})
        overview.show_alerts(engine_alerts(engines, self.settings.config.slo))
        self.query_one("#engines-table", EnginesTable).update_rows(engines)
        now = time.monotonic()
        if force or now - self._last_spark >= SPARK_EVERY_S:
            self._last_spark = now
            self._render_trends(tot, ttft99)
        if isinstance(self.screen, EngineDetailScreen):
            self.screen.show(snap.by_name().get(self.screen.engine_name))

    def _render_trends(self, tot, ttft99) -> None:
        hist = self.collector.history
        n = 120
        self.query_one(Overview).show_trends(hist, tot, ttft99, n)
        name = self.query_one("#engines-table", EnginesTable).selected_engine
        if name and self.snapshot is not None:
            s = self.snapshot.by_name().get(name)
            if s is not None:
                self.query_one("#e-running", Trend).show(hist.series(name, "running", n), f"{name}: {count_human(s.running)}")
                self.query_one("#e-ttft", Trend).show(hist.series(name, "ttft_p99_s", n), seconds_human(s.ttft_p99_s))

    def _render_top(self) -> None:
        s = self.settings
        mode = s.mode + (" · read-only" if s.read_only else "")
        src = s.config.source or "no config file"
        self.query_one("#topbar", QuietStatic).show(
            Text.from_markup(f"[b]infertop[/b] · {mode} · {len(s.endpoints)} engine{'s' if len(s.endpoints) != 1 else ''} · {src}")
        )

    def _render_status(self) -> None:
        now = time.monotonic()
        health = self.collector.health()
        bad = [h for h in health if not h.ok and h.last_error]
        stale_after = 3 * self.settings.config.refresh_s + 2
        stale = [h for h in health if h.ok and (h.age_s(now) or 0) > stale_after]
        ok = sum(1 for h in health if h.ok)
        parts = []
        if not health:
            parts.append("[yellow]no engines configured[/] — add one with --engine URL or in the config file")
        else:
            parts.append(f"[green]✓[/] {ok}/{len(health)} sources ok")
        for h in bad[:3]:
            age = age_human(now - h.last_error_at) if h.last_error_at is not None else ""
            parts.append(f"[red]✗ {h.name}[/] down: {h.last_error}, {age} ago")
        if len(bad) > 3:
            parts.append(f"[red]+{len(bad) - 3} more down[/]")
        for h in stale[:2]:
            parts.append(f"[yellow]{h.name}[/] stale {age_human(h.age_s(now))}")
        self.query_one("#statusbar", QuietStatic).show(Text.from_markup("  ".join(parts)))

    def _note_state_changes(self, engines) -> None:
        for e in engines:
            prev = self._states.get(e.name)
            if prev != e.state:
                self._states[e.name] = e.state
                if prev is not None or e.state != "up":
                    why = f": {e.error}" if e.error else ""
                    self.log_event(f"{e.name} {prev or 'new'} → {e.state}{why}")

    def log_event(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self.query_one("#log-view", RichLog).write(f"[dim]{stamp}[/dim] {text}")

    # ----- actions (named in ui/actions.py) -------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide actions that would change something when running read-only."""
        if self.settings.read_only and action in MUTATING:
            return None
        return True

    def action_show_pane(self, pane: str) -> None:
        self.query_one("#panes", TabbedContent).active = pane
        if pane == "engines":
            self.query_one("#engines-table", EnginesTable).focus()

    def _step_pane(self, step: int) -> None:
        tabs = self.query_one("#panes", TabbedContent)
        i = PANES.index(tabs.active) if tabs.active in PANES else 0
        self.action_show_pane(PANES[(i + step) % len(PANES)])

    def action_next_pane(self) -> None:
        self._step_pane(1)

    def action_previous_pane(self) -> None:
        self._step_pane(-1)

    def action_filter(self) -> None:
        self.action_show_pane("engines")
        box = self.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        table = self.query_one("#engines-table", EnginesTable)
        table.filter_text = ""
        table.focus()
        self.render_snapshot(force=True)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one("#engines-table", EnginesTable).filter_text = event.value
        self.render_snapshot(force=True)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one("#engines-table", EnginesTable).focus()

    def action_sort_next(self) -> None:
        key = self.query_one("#engines-table", EnginesTable).cycle_sort()
        self.notify(f"sorted by {key}", timeout=2)
        self.render_snapshot(force=True)

    def action_engine_detail(self) -> None:
        name = self.query_one("#engines-table", EnginesTable).selected_engine
        if name is None:
            return
        screen = EngineDetailScreen(name, self.collector.history)
        self.push_screen(screen)
        if self.snapshot is not None:
            self.call_after_refresh(screen.show, self.snapshot.by_name().get(name))

    @on(EnginesTable.RowSelected)
    def _row_selected(self) -> None:
        self.action_engine_detail()

    async def action_refresh_now(self) -> None:
        await self.poll_now()

    def action_toggle_dark(self) -> None:
        self.theme = "infertop-light" if self.current_theme.dark else "infertop-dark"

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.settings.read_only))
