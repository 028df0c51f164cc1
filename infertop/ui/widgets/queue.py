"""The Queue pane: per gateway or endpoint picker, its classes (or priority
bands) and the engines behind it.

Classes: depth, oldest wait, wait p50 / p99 over the window against the
class's budget, weight, maximum wait, actual share of dispatches, promotions.
Engines: in flight ÷ cap, saturation, vLLM's own waiting, drain state. A
source that stopped answering keeps its last values, dimmed, with since when
and why in the header; a value nobody exports is "—". Every name and error
comes from outside and is drawn as plain text, never markup.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from ...format import DASH, count_human, pct_human, rate_human, seconds_human, wait_human
from ...state.fleet_types import FRESH, STALE, FleetState
from ...domain.queues import QueueClass, QueueEngine, QueueSource
from ...state.queues import queue_sources
from ...text import plain
from .cluster import KubeTable
from .panels import QuietStatic

SEP = "\x1f"  # joins source and class / engine in a row key
CLASS_COLUMNS = (("source", "Source"), ("class", "Class"), ("prio", "Prio"), ("depth", "Depth"),
                 ("oldest", "Oldest"), ("p50", "Wait p50"), ("p99", "Wait p99 / budget"), ("weight", "Weight"),
                 ("maxwait", "Max wait"), ("share", "Share"), ("rate", "Disp/s"), ("promo", "Promoted"))
ENGINE_COLUMNS = (("source", "Source"), ("engine", "Engine"), ("flight", "In flight/cap"), ("sat", "Saturation"),
                  ("vwait", "vLLM waiting"), ("state", "State"))
NOT_CONFIGURED = ("No gateway or endpoint picker is watched: run with --gateway URL or --epp URL, or add a "
                  "'queues:' (or 'gateway:') section to the config (see README).")
KEYS = "w weight/max wait · d drain/undrain engine · f classes ⇄ engines"


class QueueTable(KubeTable):
    """A keyed table whose rows also repaint when only their style changes (a source going stale dims them).

    Source and class (or engine) stay pinned when the table scrolls right (→), and the horizontal
    scrollbar shows that more columns exist (at 80 columns the classes' Weight, Max wait and Share)."""

    DEFAULT_CSS = """
    QueueTable { scrollbar-size-horizontal: 1; }
    """

    def __init__(self, columns, **kwargs) -> None:
        kwargs.setdefault("fixed_columns", 2)
        super().__init__(columns, **kwargs)
        self._styles: dict[str, tuple] = {}

    def update_rows(self, rows: list[tuple[str, list]]) -> None:
        styles = {k: tuple(c.markup if isinstance(c, Text) else c for c in cells) for k, cells in rows}
        if any(self._styles.get(k) != v for k, v in styles.items()):
            changed = [k for k, v in styles.items() if self._styles.get(k) != v and k in self._shown]
            for k in changed:
                self._shown[k] = [None] * len(self.cols)  # None: no cell equals it
        self._styles = styles
        super().update_rows(rows)


def _num(v: float | None) -> str:
    return DASH if v is None else f"{v:g}"


def class_cells(q: QueueSource, c: QueueClass) -> list:
    dim = "dim" if not q.fresh else ""
    p99 = Text(seconds_human(c.wait_p99_s), style="bold red" if c.over_budget and q.fresh else dim)
    if c.budget_s is not None:
        p99.append(f" / {seconds_human(c.budget_s)}", style="dim")
    promo = count_human(c.promotions)
    return [Text(plain(q.name), style=dim), Text(plain(c.name), style=dim), Text(_num(c.priority), style=dim),
            Text(count_human(c.depth), style=dim), Text(wait_human(c.oldest_wait_s), style=dim),
            Text(seconds_human(c.wait_p50_s), style=dim), p99, Text(_num(c.weight), style=dim),
            Text(seconds_human(c.max_wait_s), style=dim), Text(pct_human(c.share_pct), style=dim),
            Text(rate_human(c.dispatches_per_s), style=dim),
            Text(promo, style="yellow" if c.promotions and q.fresh else dim)]


def engine_state_word(e: QueueEngine) -> tuple[str, str]:
    if e.up is False:
        return "down", "bold red"
    if e.draining:
        return ("drained" if e.in_flight == 0 else "draining"), "yellow"
    if e.draining is False:
        return "serving", ""
    return DASH, ""


def engine_cells(q: QueueSource, e: QueueEngine) -> list:
    dim = "dim" if not q.fresh else ""
    flight = f"{count_human(e.in_flight)}/{count_human(e.cap)}" if e.cap is not None else count_human(e.in_flight)
    word, style = engine_state_word(e)
    sat_bad = e.saturation_pct is not None and e.saturation_pct >= 100 and q.fresh
    name = plain(e.name) + (f" ({plain(e.engine)})" if e.engine and e.engine != e.name else "")
    return [Text(plain(q.name), style=dim), Text(name, style=dim), Text(flight, style=dim),
            Text(pct_human(e.saturation_pct), style="yellow" if sat_bad else dim),
            Text(count_human(e.vllm_waiting), style=dim), Text(word, style=dim or style)]


def header_line(q: QueueSource) -> Text:
    """One line per source: what it is, how fresh, its totals, its admin API."""
    fr = q.freshness
    t = Text()
    t.append(f"{q.kind} ", style="bold")
    t.append(plain(q.name), style="bold")
    via = " via Prometheus" if q.via == "prometheus" else ""
    gen = f" ({q.generation} names)" if q.kind == "epp" and q.generation else ""
    t.append(f" {plain(q.url)}{via}{gen}", style="dim")
    if fr.status == STALE:
        t.append(f" · stale {seconds_human(fr.age_s)}: {plain(fr.reason or '')}", style="yellow")
    elif fr.status != FRESH:
        t.append(f" · no data: {plain(fr.reason or '')}", style="red")
    t.append(f" · queued {count_human(q.queued)} · oldest {wait_human(q.oldest_wait_s)}")
    if q.pool_saturation_pct is not None:
        t.append(f" · pool saturation {pct_human(q.pool_saturation_pct)}",
                 style="yellow" if q.pool_saturation_pct >= 100 else "")
    if q.strict_top:
        t.append(" · strict top class")
    if q.note:
        t.append(f" · {plain(q.note)}", style="yellow")
    if q.admin_error:
        t.append(f" · {plain(q.admin_error)}", style="yellow")
    return t


class QueuePane(Vertical):
    """Attributes down: the app calls :meth:`show_state` with the state of the tick."""

    DEFAULT_CSS = """
    QueuePane { height: 1fr; }
    QueuePane #queue-header { height: auto; max-height: 4; padding: 0 1; }
    QueuePane .queue-title { height: 1; padding: 0 1; text-style: bold; }
    /* the classes take the rows they have (up to half the pane), the engines the rest: a fixed
       split left blank rows under three classes while six engines scrolled */
    QueuePane #queue-classes { height: auto; max-height: 50%; }
    QueuePane #queue-engines { height: 1fr; }
    QueuePane #queue-keys { height: 1; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sources: tuple[QueueSource, ...] = ()
        self.key_hint = KEYS

    def compose(self) -> ComposeResult:
        yield QuietStatic(id="queue-header")
        yield QuietStatic("Classes / priority bands", classes="queue-title")
        yield QueueTable(CLASS_COLUMNS, id="queue-classes")
        yield QuietStatic("Engines behind the gateways", classes="queue-title")
        yield QueueTable(ENGINE_COLUMNS, id="queue-engines")
        yield QuietStatic(id="queue-keys")

    def on_mount(self) -> None:
        self.query_one("#queue-header", QuietStatic).show(Text(NOT_CONFIGURED))
        self.set_keys(self.key_hint)

    @property
    def classes_table(self) -> QueueTable:
        return self.query_one("#queue-classes", QueueTable)

    @property
    def engines_table(self) -> QueueTable:
        return self.query_one("#queue-engines", QueueTable)

    def set_keys(self, hint: str) -> None:
        self.key_hint = hint
        self.query_one("#queue-keys", QuietStatic).show(Text(hint))

    def focus_table(self, engines: bool | None = None) -> None:
        """Focus the classes table (or the engines table); ``None`` keeps the one focused, else classes."""
        if engines is None:
            engines = self.engines_table.has_focus
        (self.engines_table if engines else self.classes_table).focus()

    def switch_table(self) -> None:
        self.focus_table(not self.engines_table.has_focus)

    def show_state(self, state: FleetState) -> None:
        self.show(tuple(queue_sources(state.queues)))

    def show(self, sources: tuple[QueueSource, ...]) -> None:
        self.sources = tuple(sources)
        header = self.query_one("#queue-header", QuietStatic)
        if not sources:
            header.show(Text(NOT_CONFIGURED))
        else:
            header.show(Text("\n").join(header_line(q) for q in sources))
        self.classes_table.update_rows([(f"{q.name}{SEP}{c.name}", class_cells(q, c))
                                        for q in sources for c in q.classes])
        self.engines_table.update_rows([(f"{q.name}{SEP}{e.name}", engine_cells(q, e))
                                        for q in sources for e in q.engines])

    def _split(self, key: str | None) -> tuple[str, str] | None:
        if key is None or SEP not in key:
            return None
        source, _, name = key.partition(SEP)
        return source, name

    @property
    def selected_class(self) -> tuple[str, str] | None:
        """(source, class) under the classes table's cursor."""
        return self._split(self.classes_table.selected_key)

    @property
    def selected_engine(self) -> tuple[str, str] | None:
        """(source, engine) under the engines table's cursor."""
        return self._split(self.engines_table.selected_key)

    def source(self, name: str) -> QueueSource | None:
        return next((q for q in self.sources if q.name == name), None)
