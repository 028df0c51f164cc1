"""The infertop Textual app: panes over the latest fleet snapshot."""

from __future__ import annotations

import asyncio
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
from ..domain.gpu import classify
from ..format import age_human, count_human, seconds_human
from ..sources.gpu import GpuCollector, assign_pod_engines
from ..sources.vllm import EngineEndpoint, FleetCollector
from .actions import ACTIONS, bindings
from .engine_actions import ENGINE_ACTIONS, EngineActions
from .kube_actions import KUBE_ACTIONS, KubeActions
from .commands import InfertopCommands
from .screens.engine_detail import EngineDetailScreen
from .screens.gpu_detail import GpuDetailScreen
from .screens.help import HelpScreen
from .themes import load_themes
from .widgets.cluster import ClusterPane
from .widgets.engines_table import EnginesTable
from .widgets.gpus import GpusPane, GpusTable, engine_refs, gpu_status_parts, record_history, flatten, summarize
from .widgets.overview import FLEET, Overview
from .widgets.panels import QuietStatic, Trend

PANES = ("overview", "engines", "log", "gpus", "cluster")
MUTATING = {a.action.split("(")[0] for a in ACTIONS if a.mutating}
SPARK_EVERY_S = 5.0  # sparklines repaint every 5 s: a scrolling chart costs bytes on SSH
GPU_REFRESH_MIN_S = 2.0  # GPUs are polled on their own schedule, at most this often
GPU_THROTTLE_LOG_EVERY_S = 60.0


@dataclass
class Settings:
    """Everything the app needs, resolved from config + command line."""

    config: Config = field(default_factory=Config)
    endpoints: list[EngineEndpoint] = field(default_factory=list)
    read_only: bool = False
    mode: str = "local"  # "local" or "demo"
    notes: list[str] = field(default_factory=list)  # shown once in the log at start
    dcgm_urls: list[str] = field(default_factory=list)  # dcgm-exporter URLs besides config gpu.dcgm (--dcgm, --demo)
    state_dir: str | None = None  # local engines' state, logs and audit log (default: XDG state dir)
    engine_module: str | None = None  # what `python -m` runs for a local engine (tests use a fake)
    engine_pods: dict[str, str] = field(default_factory=dict)  # pod name → engine name (GPU → pod → engine)


class InfertopApp(EngineActions, KubeActions, App[None]):
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


    def __init__(self, settings: Settings, *, poll: bool = True, gpu_collector: GpuCollector | None = None) -> None:
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
        # GPUs: NVML (in a thread inside poll), dcgm-exporter URLs, Prometheus. Tests pass their own.
        self.gpu_collector = gpu_collector or GpuCollector(cfg.gpu, cfg.prometheus, dcgm_urls=settings.dcgm_urls)
        self.gpu_rows: list = []
        self.gpu_health: list = []
        self._gpu_version = 0
        self._gpu_rendered_version = -1
        self._last_gpu_spark = 0.0
        self._gpu_states: dict[str, str] = {}
        self._gpu_logged_at: dict[str, float] = {}

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
            with TabPane("4 GPUs", id="gpus"):
                yield GpusPane(self.collector.history, id="gpus-pane")
            with TabPane("5 Cluster", id="cluster"):
                yield ClusterPane(id="cluster-pane")
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
        self._init_engines()
        self.kube_setup()
        if self.poll:
            self.start_collection()
            self.start_gpu_collection()

    @work(exclusive=True, group="collect", exit_on_error=False)
    async def start_collection(self) -> None:
        """Poll loops run as an async worker: never block the UI, never overlap."""
        await self.collector.run()

    @work(exclusive=True, group="gpu", exit_on_error=False)
    async def start_gpu_collection(self) -> None:
        """GPU sources on their own schedule; the next poll starts when the last one finished."""
        interval = max(GPU_REFRESH_MIN_S, self.settings.config.refresh_s)
        while True:
            started = time.monotonic()
            await self.poll_gpus()
            await asyncio.sleep(max(0.2, interval - (time.monotonic() - started)))

    async def poll_gpus(self) -> None:
        """Read every GPU source once (NVML runs in a thread) and keep the rows."""
        try:
            if self.gpu_collector.nvml is not None:  # only NVML lists processes to map to engines
                endpoints = [c.endpoint for c in self.collector.collectors]
                self.gpu_collector.set_engines(await asyncio.to_thread(self._gpu_engine_refs, endpoints))
            rows, health = await self.gpu_collector.poll()
        except Exception as e:  # noqa: BLE001 — a GPU source must never stop the app
            self.log_event(f"[red]GPU collection failed:[/red] {type(e).__name__}: {e}")
            return
        names = {c.endpoint.name for c in self.collector.collectors}
        rows = assign_pod_engines(rows, self.settings.engine_pods, names)
        self.gpu_rows, self.gpu_health = rows, health
        record_history(self.collector.history, flatten(rows))
        self._gpu_version += 1

    def _gpu_engine_refs(self, endpoints: list) -> list:
        """(name, root PID, port) of the engines on this host (a thread: reads engine state files)."""
        mgr = getattr(self, "engine_manager", None)
        pids = {rec.name: rec.pid for rec in mgr.list() if rec.alive} if mgr is not None else {}
        return engine_refs(endpoints, pids)

    async def poll_gpus_now(self) -> None:
        """Poll the GPU sources once and render (tests and Ctrl+R)."""
        await self.poll_gpus()
        self._render_gpus(force=True)
        self._render_status()

    @work(thread=True, exclusive=True, group="engines-init", exit_on_error=False)
    def _init_engines(self) -> None:
        """Re-adopt local engines started earlier (reads state files and /proc)."""
        try:
            records = self.init_engines()
        except Exception as e:  # noqa: BLE001 — the rest of infertop works without it
            self.call_from_thread(self.log_event, f"[yellow]local engine control unavailable: {e}[/yellow]")
            return
        self.call_from_thread(self.adopt_engines, records)
        self.call_from_thread(self.refresh_bindings)

    @property
    def main(self):
        """The screen with the panes. ``App.query_one`` searches the active
        screen, which is a dialog while one is open; timers must not."""
        return self.screen_stack[0]

    def selected_engine_name(self) -> str | None:
        if isinstance(self.screen, EngineDetailScreen):
            return self.screen.engine_name
        return self.main.query_one("#engines-table", EnginesTable).selected_engine

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
        if not self.is_running:  # the interval can still tick while the app tears its widgets down
            return
        self._render_status()
        self._render_gpus(force)
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
        overview = self.main.query_one(Overview)
        overview.show(engines, tot, {"ttft50": ttft50, "ttft99": ttft99, "itl95": itl95, "e2e99": e2e99})
        overview.show_alerts(engine_alerts(engines, self.settings.config.slo))
        self.main.query_one("#engines-table", EnginesTable).update_rows(engines)
        now = time.monotonic()
        if force or now - self._last_spark >= SPARK_EVERY_S:
            self._last_spark = now
            self._render_trends(tot, ttft99)
        if isinstance(self.screen, EngineDetailScreen):
            self._show_detail(self.screen)

    def _show_detail(self, screen: EngineDetailScreen) -> None:
        name = screen.engine_name
        screen.show(self.snapshot.by_name().get(name) if self.snapshot else None)
        rec = self.managed(name)
        mgr = self.engine_manager
        gpus = [f"{g.label} ({g.name})" for g in self.gpu_rows
                if g.engine == name or any(p.engine == name for p in (g.processes or ()))]
        screen.show_local(rec, mgr.history(name, 5) if rec else [], mgr.tail_log(name, 10) if rec else [], gpus)

    def _render_trends(self, tot, ttft99) -> None:
        hist = self.collector.history
        n = 120
        self.main.query_one(Overview).show_trends(hist, tot, ttft99, n)
        name = self.main.query_one("#engines-table", EnginesTable).selected_engine
        if name and self.snapshot is not None:
            s = self.snapshot.by_name().get(name)
            if s is not None:
                self.main.query_one("#e-running", Trend).show(hist.series(name, "running", n), f"{name}: {count_human(s.running)}")
                self.main.query_one("#e-ttft", Trend).show(hist.series(name, "ttft_p99_s", n), seconds_human(s.ttft_p99_s))

    def _render_gpus(self, force: bool = False) -> None:
        """GPU pane, Overview GPU tiles and an open GPU detail, when a new GPU poll arrived."""
        if self._gpu_version == self._gpu_rendered_version and not force:
            return
        self._gpu_rendered_version = self._gpu_version
        rows = self.gpu_rows
        now = time.monotonic()
        trends = force or now - self._last_gpu_spark >= SPARK_EVERY_S
        if trends:
            self._last_gpu_spark = now
        pane = self.main.query_one(GpusPane)
        pane.show(rows, self.gpu_health, trends=trends)
        self.main.query_one(Overview).show_gpus(summarize(rows), configured=bool(self.gpu_health))
        self._note_gpu_changes(pane)
        if isinstance(self.screen, GpuDetailScreen):
            r = pane.gpu(self.screen.gpu_id)
            self.screen.show(r.gpu if r is not None else None)

    def _note_gpu_changes(self, pane: GpusPane) -> None:
        """Log a GPU that fails, throttles or reports an error (and when it recovers)."""
        for r in pane.flat:
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
                self.log_event(f"GPU {r.gpu.host or ''}:{r.gpu.label} {prev} → {status}{why}")

    def _render_top(self) -> None:
        s = self.settings
        mode = s.mode + (" · read-only" if s.read_only else "")
        src = s.config.source or "no config file"
        self.main.query_one("#topbar", QuietStatic).show(
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
        parts.extend(gpu_status_parts(self.gpu_health, now))
        self.main.query_one("#statusbar", QuietStatic).show(Text.from_markup("  ".join(parts)))

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
        self.main.query_one("#log-view", RichLog).write(f"[dim]{stamp}[/dim] {text}")

    # ----- actions (named in ui/actions.py) -------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide actions that would change something when running read-only."""
        if self.settings.read_only and action in MUTATING:
            return None
        if action in ENGINE_ACTIONS:
            return self.engine_action_state(action)
        if action in KUBE_ACTIONS:
            return self.kube_action_state(action)
        if action == "gpu_detail":  # Enter means "GPU detail" only on the GPUs pane
            tabs = self.screen.query("#panes")
            return bool(tabs) and tabs.first(TabbedContent).active == "gpus"
        return True

    def action_show_pane(self, pane: str) -> None:
        self.main.query_one("#panes", TabbedContent).active = pane
        if pane == "engines":
            self.main.query_one("#engines-table", EnginesTable).focus()
        elif pane == "gpus":
            self.main.query_one(GpusTable).focus()
        elif pane == "cluster":
            self.main.query_one(ClusterPane).focus_table()

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

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.main.query_one("#engines-table", EnginesTable).filter_text = event.value
        self.render_snapshot(force=True)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.main.query_one("#engines-table", EnginesTable).focus()

    def action_sort_next(self) -> None:
        key = self.main.query_one("#engines-table", EnginesTable).cycle_sort()
        self.notify(f"sorted by {key}", timeout=2)
        self.render_snapshot(force=True)

    def action_engine_detail(self) -> None:
        name = self.main.query_one("#engines-table", EnginesTable).selected_engine
        if name is None:
            return
        screen = EngineDetailScreen(name, self.collector.history)
        self.push_screen(screen)
        if self.snapshot is not None:
            self.call_after_refresh(self._show_detail, screen)

    @on(EnginesTable.RowSelected)
    def _row_selected(self) -> None:
        self.action_engine_detail()

    def action_gpu_detail(self) -> None:
        pane = self.main.query_one(GpusPane)
        gid = pane.selected_gpu
        if gid is not None:
            self._open_gpu_detail(gid)

    @on(GpusPane.DetailRequested)
    def _gpu_detail_requested(self, event: GpusPane.DetailRequested) -> None:
        self._open_gpu_detail(event.gpu_id)

    def _open_gpu_detail(self, gid: str) -> None:
        r = self.main.query_one(GpusPane).gpu(gid)
        if r is None:
            return
        label = f"{r.gpu.host}:{r.gpu.label}" if r.gpu.host else r.gpu.label
        screen = GpuDetailScreen(gid, label, self.collector.history)
        self.push_screen(screen)
        self.call_after_refresh(screen.show, r.gpu)

    async def on_unmount(self) -> None:
        self.kube_shutdown()
        await self.gpu_collector.aclose()

    async def action_refresh_now(self) -> None:
        self.run_worker(self.kube_refresh_now(), group="kube-refresh-now", exclusive=True, exit_on_error=False)
        await self.poll_now()
        await self.poll_gpus_now()

    def action_toggle_dark(self) -> None:
        self.theme = "infertop-light" if self.current_theme.dark else "infertop-dark"

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.settings.read_only))
