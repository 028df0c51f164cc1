"""The infertop Textual app: every pane paints the one fleet state of the current tick."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, OptionList, RichLog, TabbedContent, TabPane

from ..config import Config
from ..private_fs import default_state_dir
from ..domain.engine import FleetSnapshot
from ..sources.gpu import GpuCollector
from ..sources.queues.collector import QueueFleet
from ..sources.vllm import EngineEndpoint
from ..state.fleet_join import FleetJoiner
from ..state.fleet_types import FleetState
from ..state.service import Fleet
from ..state.history import HistoryStore
from ..state.recording.state_log import BUNDLE_S, StateLog
from ..text import plain
from .actions import ACTIONS, bindings, footer_panes, key_display
from .controllers.changes import ChangeLog
from .controllers.collection import Collection
from .controllers.navigation import PANES, Navigation
from .controllers.paint import PaneHooks, Painter
from .controllers.engines import ENGINE_ACTIONS, EngineController
from .controllers.actions import ActionsController
from .controllers.kube import KUBE_ACTIONS, KubeController
from .controllers.queues import QUEUE_ACTIONS, QueueController
from .controllers.advisor import ADVISOR_ACTIONS, AdvisorController
from ..state.changes import ChangeRecords
from ..control.audit import AuditLog
from ..control.pipeline import ActionKind, Outcome
from ..analysis.triage import Triage, Verdict
from .controllers.remedies import Remedies, RemedyTargets
from .controllers.bundle import BundleController
from .controllers.replay import ReplayController
from .commands import InfertopCommands
from . import fastpaint
from .screens.help import HelpScreen
from .themes import load_themes
from ..control.engines import EngineManager, EngineRecord
from ..state.advisor.core import Advisor
from .widgets.autoscaler import AutoscalerPane
from .widgets.cluster import ClusterPane
from .widgets.engines_table import RESORT_EVERY_S, EnginesTable
from .widgets.gpus import GpusPane
from .widgets.hot_table import HotTable
from .widgets.log_view import LogView
from .widgets.overview import Overview
from .widgets.panels import LineStatic, QuietStatic, Trend
from .widgets.queue import QueuePane
from .widgets.triage import TriagePane
from .widgets.slo import SloPane

__all__ = ["InfertopApp", "PaneScreen", "Settings"]
MUTATING = {a.action.split("(")[0] for a in ACTIONS if a.mutating}
REPLAY_ACTIONS = {"replay_toggle", "replay_step", "replay_speed", "replay_seek"}
# Keys that read or connect to the live world: none of them belongs in a replay.
LIVE_ONLY = {"save_bundle", "kube_context", "kube_namespace", "refresh_now", "advisor_mode"}
# Keys of one pane (not the engine actions: they also act on an open engine detail).
PANE_KEYS = ({"next_pane", "previous_pane"} | set(footer_panes())) - ENGINE_ACTIONS


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
    wall_clock: Callable[[], float] = time.time  # the clock of the ticks (snapshot tests pin it)
    record_path: str | None = None  # --record FILE: append every tick to a flight recording
    replay: Any = None  # a state.replay.Player: the panes show a recording instead of live sources
    replay_path: str | None = None
    prometheus: bool = False  # engines from cfg.prometheus (PromFleetSource) instead of scraping each
    no_auto: bool = False  # --no-auto: the scaling advisor never applies by itself


class InfertopApp(App[None]):
    TITLE = "infertop"
    COMMANDS = App.COMMANDS | {InfertopCommands}
    CSS = """
    Screen { layout: vertical; }
    #topbar-row { height: 1; background: $panel; }
    #topbar { height: 1; width: 1fr; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    #clock { height: 1; width: 10; padding: 0 1; text-style: bold; }
    #clock.replay { width: 21; }
    #statusbar { height: 1; background: $panel; padding: 0 1; }
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    #engine-trends { height: 3; }
    PaneScreen.narrow Tab { padding: 0 0 0 1; }
    #filter { display: none; height: 3; }
    #filter.visible { display: block; }
    """
    BINDINGS = bindings()  # the one action table


    def __init__(self, settings: Settings, *, poll: bool = True, gpu_collector: GpuCollector | None = None) -> None:
        self.settings = settings
        super().__init__()
        fastpaint.install(self)  # Textual's internals checked; only changed cells go to the terminal
        cfg = settings.config
        # the one composition root (state/service.py), as snapshot and the recorder build it
        self.fleet = Fleet(cfg, endpoints=settings.endpoints, mode=settings.mode, engine_pods=settings.engine_pods,
                           dcgm_urls=settings.dcgm_urls, prometheus=settings.prometheus,
                           advisor=None if settings.replay is not None else "console",
                           allow_auto=not (settings.no_auto or settings.read_only),
                           queues=settings.replay is None, gpu=gpu_collector, backfill_step_s=cfg.refresh_s,
                           wall=settings.wall_clock)
        self.history = HistoryStore(max(2, int(cfg.history_s / cfg.refresh_s)))
        if settings.prometheus:
            from ..sources.prometheus.fleet import seed_history

            self.collector.on_backfill = lambda series: seed_history(self.history, series)
        self.poll = poll
        # the running actions (the one pipeline's console side) and Kubernetes: plain controllers
        self.actions_ctl = ActionsController(
            self, settings, changed=self.fleet.changes.add, log_event=self.log_event,
            context=lambda: getattr(self.kube_ctl.connection.session, "context", None))
        self.kube_ctl = KubeController(
            self, settings, self.actions_ctl, collector=lambda: self.fleet.collector, state=lambda: self.state,
            joiner=lambda: self.fleet.joiner, replay=settings.replay is not None, on_triage=lambda: self.on_triage(), show_pane=self.action_show_pane)
        self.advisor_ctl = AdvisorController(
            self, None if settings.replay is not None else self.fleet.advisor, settings,  # a replay shows decisions
            pane=lambda: self.main.query_one(AutoscalerPane), kube=lambda: self.kube_ctl.connection.control,
            perms=lambda: self.kube_ctl.connection.perms, board=self.actions_ctl.board,
            actions_changed=self.actions_ctl.changed, refresh_kube=self.kube_ctl.refresh_after,
            pane_on_view=lambda: self.current_pane if self.screen is self.main else None)
        self.queue_ctl = QueueController(
            self, settings, self.fleet.queues, pane=lambda: self.main.query_one(QueuePane),
            session=lambda: self.kube_ctl.connection.session,
            pane_on_view=lambda: self.current_pane if self.screen is self.main else None,
            replay=settings.replay is not None)
        self.player = settings.replay
        if self.player is not None:
            self.poll = False
        # the last minutes of state (incident bundles) and, with --record, every tick on disk
        # its packed ticks go to an unlinked file in the state dir when it exists (a disk), else the temp dir
        self.state_log = StateLog(settings.record_path, refresh_s=cfg.refresh_s,
                                  spill_dir=str(settings.state_dir or default_state_dir()))
        self.log_lines: deque[str] = deque(maxlen=2000)
        # each tick's state built and painted; the other controllers' parts in it are theirs (hooks)
        self.painter = Painter(self, fleet=self.fleet, settings=settings, history=self.history,
                               state_log=self.state_log, player=self.player, hooks=PaneHooks(
                                   join_cluster=lambda: self.kube_ctl.join_cluster(), after_tick=lambda: self.advisor_ctl.after_tick(),
                                   discover=lambda: self.engines_ctl.discover(),
                                   note_changes=lambda old, new: self.changes_ctl.note_changes(old, new),
                                   probe_objectives=lambda: self.queue_ctl.probe_objectives(),
                                   render_autoscaler=lambda st: self.advisor_ctl.render(st),
                                   show_triage=lambda st: self.remedies.show(st), managed=self.managed,
                                   detail_files=lambda name: self.engines_ctl.detail_files(name)))
        self.navigation = Navigation(self, self.history, render_snapshot=self.render_snapshot,
                                     show_detail=self.painter.show_detail, has_state=lambda: self.state is not None,
                                     triage_engine=lambda: self.remedies.engine())
        self.engines_ctl = EngineController(
            self, settings, self.fleet.collector, local=self.fleet.joiner.local, board=self.actions_ctl.board,
            selected=lambda: self.selected_engine_name(), snapshot=lambda: self.snapshot,
            unfinished=self.actions_ctl.unfinished_actions, report_unfinished=self.actions_ctl.report_unfinished,
            replay=settings.replay is not None)
        self.collection = Collection(self, self.fleet, tick=self.tick, engine_manager=lambda: self.engine_manager)
        self.changes_ctl = ChangeLog(
            self, clear_log=self._clear_log, local=self.fleet.joiner.local,
            state_changed=self.engines_ctl.state_changed,
            save_bundle=lambda because: self.bundle_ctl.save(because=because),
            recorded_ticks=lambda: len(self.state_log.window(BUNDLE_S)), replay=settings.replay is not None)
        self.replay_ctl = ReplayController(
            self, self.player, self.history, refresh_s=cfg.refresh_s, show_state=self.show_state,
            render_top=self.painter.render_top, note_replayed=self.changes_ctl.note_replayed, state=lambda: self.state,
            running=lambda: self.is_running)
        self.bundle_ctl = BundleController(self, settings, self.state_log, lambda: list(self.log_lines))
        self.remedies = Remedies(self, settings, self.history, RemedyTargets(
            set_seqs=lambda name, value: self.engines_ctl.set_seqs(name, value),
            restart=lambda name: self.engines_ctl.restart(name), engine_denied=self._engine_denied,
            engine_detail=self.action_engine_detail, show_pane=self.action_show_pane,
            kube_refused=lambda action, ns, kind: self.kube_ctl.refused(action, ns, kind),
            kube_snapshot=lambda: self.kube_ctl.connection.snapshot,
            open_pod_read=lambda target, key: self.kube_ctl.reads.open_pod_read(target, key),
            scale=lambda w, replicas: self.kube_ctl.open_scale(w, replicas),
            drain_node=lambda node: self.kube_ctl.open_drain_node(node)),
            replay=settings.replay is not None, state=lambda: self.state, current_pane=lambda: self.current_pane)

    # ----- layout -------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="topbar-row"):
            yield QuietStatic(id="topbar")
            # The tick's time in a widget of its own: a new second repaints its 8 cells, not the header.
            yield LineStatic(id="clock", classes="replay" if self.player is not None else "")
        with TabbedContent(id="panes", initial="overview"):
            with TabPane("1 Overview", id="overview"):
                yield Overview(self.settings.config.slo, id="overview-pane")
            with TabPane("2 Engines", id="engines"):
                with Vertical():
                    yield Input(placeholder="filter engines by name or model (Esc clears)", id="filter")
                    yield EnginesTable(slo=self.settings.config.slo, resort_every_s=RESORT_EVERY_S,
                                       id="engines-table")
                    with Horizontal(id="engine-trends"):
                        yield Trend("Selected: running", id="e-running")
                        yield Trend("Selected: TTFT p99", id="e-ttft")
            with TabPane("3 Log", id="log"):
                yield LogView(id="log-view", max_lines=2000, markup=True, wrap=True)
            with TabPane("4 GPUs", id="gpus"):
                yield GpusPane(self.history, id="gpus-pane")
            with TabPane("5 Cluster", id="cluster"):
                yield ClusterPane(id="cluster-pane")
            with TabPane("6 Queue", id="queues"):
                yield QueuePane(id="queue-pane")
            with TabPane("7 Autoscaler", id="autoscaler"):
                yield AutoscalerPane(id="autoscaler-pane")
            with TabPane("8 Triage", id="triage"):
                yield TriagePane(id="triage-pane")
            with TabPane("9 SLO", id="slo"):
                yield SloPane(id="slo-pane")
        yield QuietStatic(id="statusbar")
        # Compact, without ^P (in help): at 80 columns the pane's keys and "q Quit" must all fit.
        yield Footer(show_command_palette=False, compact=True)

    def get_default_screen(self) -> Screen:
        return PaneScreen(id="_default")

    def get_key_display(self, binding: Binding) -> str:
        return binding.key_display or key_display(binding.key)

    def refresh_bindings(self) -> None:
        """Refresh the key line, unless the app is shutting down: a row highlighted while the screens are
        being torn down must not raise ScreenStackError (seen under load in a kube freshness test)."""
        try:
            self.screen  # noqa: B018 — raises when no screen is left
        except Exception:  # noqa: BLE001 — ScreenStackError / UnknownModeError while exiting
            return
        super().refresh_bindings()

    def on_mount(self) -> None:
        themes, problems = load_themes()
        for t in themes:
            self.register_theme(t)
        wanted = self.settings.config.theme
        names = {t.name for t in themes}
        self.theme = wanted if wanted in names or wanted in self.available_themes else "textual-dark"
        for p in problems:
            self.log_event(Text(plain(p, 400), style="yellow"))  # a path or value from outside: text, not markup
        for note in self.settings.notes:
            self.log_event(Text(note))  # notes carry paths, URLs and bundle log lines: text, not markup
        self.painter.render_top()
        if self.player is not None:
            self.set_interval(0.25, self.replay_ctl.tick)
            self.call_after_refresh(self.replay_ctl.open)  # --at: the Log of the minutes before it too
        elif self.poll:  # tests drive ticks themselves (poll_now), so their screens are deterministic
            self.set_interval(self.settings.config.refresh_s, self.tick)
        if self.player is None:
            self._init_engines()
            self.kube_ctl.connection.setup()
        if self.poll:
            self.call_after_refresh(_freeze_startup_objects)
            self.collection.start()

    @work(thread=True, exclusive=True, group="engines-init", exit_on_error=False)
    def _init_engines(self) -> None:
        """Re-adopt local engines started earlier (reads state files and /proc)."""
        try:
            records = self.engines_ctl.init()
        except Exception as e:  # noqa: BLE001 — the rest of infertop works without it
            self.call_from_thread(self.log_event, f"[yellow]local engine control unavailable: {e}[/yellow]")
            return
        self.call_from_thread(self.engines_ctl.adopt, records)
        self.call_from_thread(self.refresh_bindings)

    # The fleet's parts, by the names the controllers use (each is the Fleet's own object).
    @property
    def collector(self) -> Any:
        return self.fleet.collector

    @property
    def joiner(self) -> FleetJoiner:
        return self.fleet.joiner

    @property
    def gpu_collector(self) -> GpuCollector:
        return self.fleet.gpu

    @property
    def queue_fleet(self) -> QueueFleet:
        return self.fleet.queues

    @property
    def change_records(self) -> ChangeRecords:
        return self.fleet.changes

    @property
    def triage(self) -> Triage:
        return self.fleet.triage

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """The verdicts on screen (the Log told each once)."""
        return self.changes_ctl.verdicts

    def log_event(self, text: str | Text) -> None:
        """A line in the Log pane. A ``str`` is infertop's own markup; anything that
        comes from outside (names, labels, errors) must be passed as a ``Text``."""
        # in a replay, the time of the recorded tick (not today's clock)
        state = self.state
        at = self.changes_ctl.log_at or (state.taken_at if self.player is not None and state is not None else None)
        line = Text(time.strftime("%H:%M:%S", time.localtime(at)) + " ", style="dim")
        line.append(text if isinstance(text, Text) else Text.from_markup(text))
        self.log_lines.append(line.plain)
        self.main.query_one("#log-view", RichLog).write(line)

    # ----- collecting (controllers/collection.py)
    async def poll_now(self) -> None:
        """Poll every engine (and queue source) once and render a new tick (tests and Ctrl+R)."""
        await self.collection.poll_now()

    async def poll_gpus_now(self) -> None:
        """Poll the GPU sources once and render a new tick."""
        await self.collection.poll_gpus_now()

    async def action_refresh_now(self) -> None:
        if self.player is None:
            self.run_worker(self.kube_ctl.connection.refresh_now(), group="kube-refresh-now", exclusive=True, exit_on_error=False)
        await self.collection.refresh_now(lambda: self.state)

    def _clear_log(self) -> None:
        self.main.query_one("#log-view", RichLog).clear()
        self.log_lines.clear()

    @property
    def engine_manager(self) -> EngineManager | None:
        """The manager of the engines infertop started (None until it read their state files)."""
        return self.engines_ctl.manager

    def managed(self, name: str | None) -> EngineRecord | None:
        """The live record of an engine infertop started, or None."""
        return self.engines_ctl.managed(name)

    @property
    def advisor(self) -> Advisor | None:
        """The scaling advisor this console runs (None in a replay)."""
        return self.advisor_ctl.advisor

    @property
    def main(self):
        """The screen with the panes. ``App.query_one`` searches the active
        screen, which is a dialog while one is open; timers must not."""
        return self.screen_stack[0]

    @property
    def snapshot(self) -> FleetSnapshot | None:
        """The fresh engines of the state on screen (what actions act on)."""
        return self.painter.snapshot

    # ----- painting and moving (controllers/paint.py, navigation.py)
    @property
    def state(self) -> FleetState | None:
        """The fleet state on screen."""
        return self.painter.state

    def tick(self) -> None:
        """Build this tick's fleet state and show it everywhere."""
        self.painter.tick()

    def show_state(self, state: FleetState) -> None:
        """Paint every pane from ``state`` (a live tick's or a replayed one)."""
        self.painter.show_state(state)

    def render_snapshot(self, force: bool = False) -> None:
        """Repaint the state on screen (a filter or sort changed); no new tick."""
        self.painter.render_snapshot(force)

    @property
    def current_pane(self) -> str:
        return self.navigation.current_pane

    def selected_engine_name(self) -> str | None:
        """The engine an engine action acts on (see Navigation.selected_engine_name)."""
        return self.navigation.selected_engine_name()

    def action_show_pane(self, pane: str) -> None:
        self.navigation.show_pane(pane)

    def action_next_pane(self) -> None:
        self.navigation.step_pane(1)

    def action_previous_pane(self) -> None:
        self.navigation.step_pane(-1)

    def action_filter(self) -> None:
        self.navigation.open_filter()

    def action_clear_filter(self) -> None:
        self.navigation.clear_filter()

    def action_sort_pick(self) -> None:
        self.navigation.sort_pick()

    def action_group_engines(self) -> None:
        self.navigation.group_engines()

    def action_engine_detail(self, name: str | None = None) -> None:
        self.navigation.engine_detail(name)

    def action_gpu_detail(self) -> None:
        self.navigation.gpu_detail()

    def action_triage_open(self) -> None:
        self.remedies.open_selected()

    def on_triage(self) -> bool:
        """The Triage pane is on view and nothing covers it (a key there means its selected verdict)."""
        return self.remedies.on_triage()

    def remedy_key(self, key: str) -> bool:
        """On the Triage pane, ``key`` opens the selected verdict's remedy of that key (True: handled)."""
        return self.remedies.key(key)

    # ----- what the remedies and the fleet join ask of the engines and the cluster
    def _engine_denied(self, name: str) -> str | None:
        """Why an engine action cannot act on ``name`` (the same words as its key in the Engines pane)."""
        if self.engine_manager is None:
            return "local engine control is not ready"
        if self.managed(name) is None:
            return f"{name} was not started by infertop: it can be watched, not stopped or changed"
        return None

    # ----- actions (named in ui/actions.py) -------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide actions that would change something when running read-only (or replaying)."""
        if self.player is not None and (action in MUTATING or action in LIVE_ONLY):
            return False  # a replay changes nothing, and reads nothing live (K read ~/.kube/config)
        if self.settings.read_only and action in MUTATING:
            return False  # not offered at all; pressed, it says why (action_denied_reason)
        if action in REPLAY_ACTIONS:
            return self.player is not None  # hidden outside a replay
        if action in ENGINE_ACTIONS:
            return self.engines_ctl.action_state(action)
        if action in KUBE_ACTIONS:
            return self.kube_ctl.action_state(action)
        if action in QUEUE_ACTIONS:
            return self.queue_ctl.action_state(action)
        if action in ADVISOR_ACTIONS:
            return self.advisor_ctl.action_state(action)
        if action == "triage_open":  # Enter means "open the verdict / remedy" only on the Triage pane
            return self.screen is self.main and self.current_pane == "triage"
        if action == "gpu_detail":  # Enter means "GPU detail" only on the GPUs pane
            tabs = self.screen.query("#panes")
            return bool(tabs) and tabs.first(TabbedContent).active == "gpus"
        if action in PANE_KEYS and self.screen is not self.main:
            # Pane keys belong to the panes: in a dialog Tab moves between its fields,
            # and a detail screen's footer does not offer another pane's keys.
            return False
        return True

    def action_denied_reason(self, action: str) -> str | None:
        """Read-only comes first: a key that would change something says so, whatever else is missing."""
        if self.settings.read_only and action in MUTATING:
            return "read-only mode: nothing can be changed"
        if self.player is not None and action in MUTATING:
            return "replay: nothing can be changed"
        return (self.queue_ctl.denied_reason(action) or self.engines_ctl.denied_reason(action)
                or self.kube_ctl.denied_reason(action))

    async def run_action(self, action: Any, default_namespace: Any = None, namespaces: Any = None) -> bool:
        """A key (or palette entry) that cannot act here says why when pressed (action_denied_reason)."""
        handled = await super().run_action(action, default_namespace, namespaces)
        if not handled and isinstance(action, str) and (default_namespace is None or default_namespace is self):
            why = self.action_denied_reason(action.split("(")[0])
            if why:
                self.notify(why, severity="warning", timeout=5, markup=False)
                return True
        return handled

    # ----- the panes' messages ------------------------------------------
    # Textual collects @on handlers only from its own classes (App, Widget): they stay here, the work
    # is the controllers'.
    @on(TabbedContent.TabActivated, "#panes")
    def _pane_activated(self) -> None:
        self.refresh_bindings()  # the footer shows the keys of the pane on view (a click on a tab too)
        self.render_snapshot()  # a pane is painted only while on view: bring it to the state on screen
        self.kube_ctl.connection.pane_shown()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.navigation.filter_changed(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.navigation.filter_done()

    @on(EnginesTable.RowSelected)
    def _row_selected(self, event: EnginesTable.RowSelected) -> None:
        table = event.data_table
        self.action_engine_detail(table.selected_engine if isinstance(table, EnginesTable) else None)

    @on(HotTable.EngineClicked)
    def _hot_row_clicked(self, event: HotTable.EngineClicked) -> None:
        self.action_engine_detail(event.name)

    @on(OptionList.OptionSelected, "#triage-list")
    def _triage_selected(self) -> None:
        self.action_triage_open()  # Enter (or a click) on a verdict or a remedy line

    # On the Triage pane a remedy's key opens the selected verdict's remedy (pre-filled); elsewhere it is the
    # key of its own pane. Both go through the same pipeline (controllers/remedies.py).
    def action_engine_new(self) -> None:
        self.engines_ctl.new()

    def action_engine_stop(self) -> None:
        self.engines_ctl.stop()

    def action_engine_set_seqs(self) -> None:
        if not self.remedy_key("m"):
            self.engines_ctl.set_seqs(self.selected_engine_name())

    def action_engine_restart(self) -> None:
        if not self.remedy_key("r"):
            self.engines_ctl.restart(self.selected_engine_name())

    # ----- the Cluster pane's keys (controllers/kube.py); S, N, e and p are remedies on the Triage pane
    def action_kube_scale(self) -> None:
        if not self.remedy_key("S"):
            self.kube_ctl.scale()

    def action_kube_drain_node(self) -> None:
        if not self.remedy_key("N"):
            self.kube_ctl.drain_node()

    def action_kube_events(self) -> None:
        if not (self.on_triage() and self.remedy_key("e")):
            self.kube_ctl.reads.events()

    def action_kube_logs_previous(self) -> None:
        if not (self.on_triage() and self.remedy_key("p")):
            self.kube_ctl.reads.logs(previous=True)

    def action_kube_logs(self) -> None:
        self.kube_ctl.reads.logs()

    def action_kube_describe(self) -> None:
        self.kube_ctl.reads.describe()

    def action_kube_yaml(self) -> None:
        self.kube_ctl.reads.yaml()

    def action_kube_hpa(self) -> None:
        self.kube_ctl.hpa()

    def action_kube_args(self) -> None:
        self.kube_ctl.args()

    def action_kube_restart(self) -> None:
        self.kube_ctl.restart()

    def action_kube_delete_pod(self) -> None:
        self.kube_ctl.delete_pod()

    def action_kube_drain_pod(self) -> None:
        self.kube_ctl.drain_pod()

    def action_kube_cordon(self) -> None:
        self.kube_ctl.cordon()

    def action_kube_configmap(self) -> None:
        self.kube_ctl.configmap()

    def action_kube_context(self) -> None:
        self.kube_ctl.context()

    def action_kube_namespace(self) -> None:
        self.kube_ctl.namespace()

    def action_cluster_view(self) -> None:
        self.kube_ctl.cluster_view()

    def action_cluster_filter(self) -> None:
        self.kube_ctl.reads.filter()

    def action_cluster_sort(self) -> None:
        self.kube_ctl.reads.sort()

    def action_cluster_all_namespaces(self) -> None:
        self.kube_ctl.scope.toggle()

    def on_data_table_row_highlighted(self, _event: Any) -> None:
        """Another object selected: what may run (engine managed? RBAC of its kind/namespace) changes."""
        self.kube_ctl.row_highlighted()

    # ----- the running actions (controllers/actions.py)
    def action_actions_list(self) -> None:
        self.actions_ctl.actions_list()

    async def action_quit(self) -> None:
        await self.actions_ctl.quit()

    def start_action(self, kind: ActionKind, *, on_done: Callable[[Outcome], None] | None = None,
                     on_forbidden: Callable[[], None] | None = None, preflight_name: str = "check") -> bool:
        """ConsoleHost: the controllers' actions go through the one pipeline (ActionsController)."""
        return self.actions_ctl.start_action(kind, on_done=on_done, on_forbidden=on_forbidden,
                                             preflight_name=preflight_name)

    def audit_log(self) -> AuditLog:
        """ConsoleHost: the one audit log."""
        return self.actions_ctl.audit_log()

    @on(GpusPane.DetailRequested)
    def _gpu_detail_requested(self, event: GpusPane.DetailRequested) -> None:
        self.navigation.gpu_detail(event.gpu_id)

    async def on_unmount(self) -> None:
        gc.unfreeze()  # what this app froze can be collected once it is gone (tests run many apps)
        self.kube_ctl.connection.shutdown()
        await self.gpu_collector.aclose()
        await asyncio.to_thread(self.state_log.close)

    # ----- replay and bundles (controllers/replay.py, bundle.py)
    def action_replay_toggle(self) -> None:
        self.replay_ctl.toggle()

    def action_replay_step(self, ticks: int) -> None:
        self.replay_ctl.step(ticks)

    def action_replay_speed(self, faster: bool) -> None:
        self.replay_ctl.speed(faster)

    def action_replay_seek(self) -> None:
        self.replay_ctl.seek()

    def action_save_bundle(self) -> None:
        """Write the last minutes of state, the Log pane, the audit lines and the redacted config to one file."""
        self.bundle_ctl.save()

    # ----- the Queue pane's keys (controllers/queues.py)
    def action_queue_switch(self) -> None:
        self.queue_ctl.switch()

    def action_queue_edit(self) -> None:
        self.queue_ctl.edit()

    def action_queue_drain(self) -> None:
        self.queue_ctl.drain()

    def action_queue_objective(self) -> None:
        self.queue_ctl.objective()

    # ----- the advisor's keys (controllers/advisor.py)
    def action_advisor_apply(self) -> None:
        self.advisor_ctl.apply()

    def action_advisor_mode(self) -> None:
        self.advisor_ctl.mode()

    def action_advisor_kill(self) -> None:
        self.advisor_ctl.kill()

    def action_advisor_targets(self) -> None:
        self.advisor_ctl.targets()

    def action_toggle_dark(self) -> None:
        want = "infertop-light" if self.current_theme.dark else "infertop-dark"
        if want not in self.available_themes:  # its file is missing or broken (said in the Log at start)
            want = "textual-light" if self.current_theme.dark else "textual-dark"
        self.theme = want
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.settings.read_only))


class PaneScreen(Screen):
    """The screen with the panes: its footer shows the keys of the pane on view
    (``Action.panes`` in the action table); the keys work as bound either way."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        fastpaint.fit_screen(self)  # a tick renders the widgets it changed, not the screen

    def on_resize(self, event) -> None:
        # The eight tabs take 82 columns with a cell on each side of a label: below that, one cell apart,
        # so that all of them stay on view at 80 columns.
        self.set_class(event.size.width < 82, "narrow")

    @property
    def active_bindings(self):
        active = super().active_bindings
        tabs = self.query("#panes")
        pane = tabs.first(TabbedContent).active if tabs else None
        only = footer_panes()
        out = {}
        for key, ab in active.items():
            panes = only.get(ab.binding.action)
            if panes and pane not in panes and ab.binding.show:
                ab = ab._replace(binding=dataclasses.replace(ab.binding, show=False))
            out[key] = ab
        app = self.app
        for a in ACTIONS:  # a focused table's own Enter (select row) does this pane's "Detail": say so
            shadow = out.get(a.keys)
            if (pane in a.panes and a.show_in_footer and shadow is not None and not shadow.binding.show
                    and shadow.node is not app and app.check_action(a.action, ())):
                out[a.keys] = ActiveBinding(app, Binding(a.keys, a.action, a.footer_label or a.title), True)
        return out


YOUNG_GC_OBJECTS = 10_000


def _freeze_startup_objects() -> None:
    """Keep what exists after the first frame (modules, widgets, themes: ~100k objects that live as
    long as the app) out of the cyclic collector's full passes: each full pass scanned them all, a
    sixth of the console's CPU at 6 engines (3.5 ms of a 24 ms tick, gc.callbacks). Garbage is
    collected first, so nothing dead is frozen.

    Then the youngest generation is collected every YOUNG_GC_OBJECTS allocations instead of
    Python's 700: a tick allocates ~700 objects that outlive it (one young pass a second, and
    every tenth promoting them to a pass of the middle one). 4.5 % of the CPU at 6 engines went
    to the collector, 2 % with this; cyclic garbage waits at most ~10k objects (a few MiB)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_OBJECTS, middle, old)
