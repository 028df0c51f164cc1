"""The Engines table: one row per engine (optionally under group rows with
totals), cells updated only when their text or style changes.

Made for hundreds of engines: DataTable renders only the rows on view, and an
update costs a text comparison per cell and a write per changed cell. An
engine that leaves the rows shown (a filter, the top-N table) hands its row to
one that arrives — a row keeps its place and only its changed cells are
written — so the table's size, and the screen's layout, change only when the
number of rows does.
"""

from __future__ import annotations

import time
from typing import Any, cast
from collections.abc import Callable

from rich.text import Text
from textual.widgets.data_table import ColumnKey

from ...domain.engine import DEGRADED, DOWN, UP, EngineStats
from ...format import (DASH, age_short, count_human, pct_human, percentile_human, rate_human, ratio_human,
                       seconds_human)
from ...state.engine_groups import GROUP_BY, engine_groups
from ...state.fleet_types import FRESH, FleetState, Freshness
from ...text import plain
from ..fastpaint.lean import LeanTable
from .triage import affected, mark_text

Cell = Callable[[EngineStats], str]

# (key, header, formatter, sort value). Most important first: at 80 columns the
# table scrolls horizontally; the Engine column stays pinned on the left.
# A sort value of None (no data) sorts last in either direction.
COLUMNS: tuple[tuple[str, str, Cell, Callable[[EngineStats], float | str | None]], ...] = (
    ("name", "Engine", lambda s: plain(s.name, 60), lambda s: s.name),
    ("state", "State", lambda s: s.state, lambda s: s.state),
    ("run", "Run", lambda s: count_human(s.running), lambda s: s.running),
    ("wait", "Wait", lambda s: count_human(s.waiting), lambda s: s.waiting),
    ("runmax", "Run/Max", lambda s: ratio_human(s.running, s.max_num_seqs), lambda s: s.running_ratio),
    ("kv", "KV%", lambda s: pct_human(s.kv_cache_pct), lambda s: s.kv_cache_pct),
    ("ttft99", "TTFT99", lambda s: percentile_human(s, "ttft_p99_s"), lambda s: s.ttft_p99_s),
    ("itl95", "ITL95", lambda s: percentile_human(s, "itl_p95_s"), lambda s: s.itl_p95_s),
    ("gen", "Gen t/s", lambda s: rate_human(s.generation_tokens_per_s), lambda s: s.generation_tokens_per_s),
    ("prompt", "Pr t/s", lambda s: rate_human(s.prompt_tokens_per_s), lambda s: s.prompt_tokens_per_s),
    ("rps", "Req/s", lambda s: rate_human(s.requests_per_s), lambda s: s.requests_per_s),
    ("e2e99", "E2E99", lambda s: percentile_human(s, "e2e_p99_s"), lambda s: s.e2e_p99_s),
    ("queue99", "Queue99", lambda s: percentile_human(s, "queue_p99_s"), lambda s: s.queue_p99_s),
    ("ttft50", "TTFT50", lambda s: percentile_human(s, "ttft_p50_s"), lambda s: s.ttft_p50_s),
    ("itl50", "ITL50", lambda s: percentile_human(s, "itl_p50_s"), lambda s: s.itl_p50_s),
    ("e2e95", "E2E95", lambda s: percentile_human(s, "e2e_p95_s"), lambda s: s.e2e_p95_s),
    ("prefix", "Prefix%", lambda s: pct_human(s.prefix_cache_hit_pct), lambda s: s.prefix_cache_hit_pct),
    ("preempt", "Preempt/s", lambda s: rate_human(s.preemptions_per_s), lambda s: s.preemptions_per_s),
    ("model", "Model", lambda s: plain(s.model or "—", 80), lambda s: s.model),
)
SORTABLE = [c[0] for c in COLUMNS]
HEADERS = {c[0]: c[1] for c in COLUMNS}
ASCENDING_FIRST = ("name", "state", "model")  # text sorts A→Z first; numbers largest first
PRESSURE = "pressure"
RESORT_EVERY_S = 5.0  # a table sorted by a live value moves its rows at most this often


def slo_breach(s: EngineStats, slo) -> float:
    """How far the engine's worst latency is over its SLO target (1.6 = 60 % over); 0 within every target."""
    if slo is None:
        return 0.0
    worst = 0.0
    for attr in ("ttft_p99_s", "itl_p95_s", "e2e_p99_s"):
        v, target = getattr(s, attr), getattr(slo, attr)
        if v is not None and target and v > target:
            worst = max(worst, v / target)
    return worst


def pressure(s: EngineStats, slo=None) -> tuple:
    """Sort key: broken engines first, then those furthest over an SLO target, then the most
    queued, then the slowest."""
    return (s.state == UP, -slo_breach(s, slo), -(s.waiting or 0), -(s.ttft_p99_s or 0), -(s.running_ratio or 0),
            s.name)


def sort_engines(stats: list[EngineStats], key: str, descending: bool, slo=None) -> list[EngineStats]:
    """``stats`` ordered by column ``key`` (ties by name); engines without a value last."""
    rows = sorted(stats, key=lambda s: s.name)
    if key == PRESSURE:
        return sorted(rows, key=lambda s: pressure(s, slo))
    value = next(c[3] for c in COLUMNS if c[0] == key)
    present = [s for s in rows if value(s) is not None]
    present.sort(key=lambda s: cast(Any, value(s)), reverse=descending)  # present: never None  # stable: equal values stay in name order
    return present + [s for s in rows if value(s) is None]


_STATE_STYLE = {UP: "green", DOWN: "bold red", DEGRADED: "yellow"}
WORST_MARK = "↑"  # a group row's latency cell: its worst engine's percentile (help and README say so)
GROUP_PREFIX = "§group:"  # row keys of group rows (never an engine name: § is not in one)
Cells = dict[str, tuple[str, str]]  # column → (text, style)


def _sum(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _max(values: list[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


# Group totals over the group's fresh engines: sums of counts and rates, the
# mean of percentages, the worst (largest) latency. Medians do not add up: blank.
_GROUP_AGG = {
    "run": (_sum, "running", count_human), "wait": (_sum, "waiting", count_human),
    "kv": (_mean, "kv_cache_pct", pct_human), "ttft99": (_max, "ttft_p99_s", seconds_human),
    "itl95": (_max, "itl_p95_s", seconds_human), "gen": (_sum, "generation_tokens_per_s", rate_human),
    "prompt": (_sum, "prompt_tokens_per_s", rate_human), "rps": (_sum, "requests_per_s", rate_human),
    "e2e99": (_max, "e2e_p99_s", seconds_human), "queue99": (_max, "queue_p99_s", seconds_human),
    "e2e95": (_max, "e2e_p95_s", seconds_human), "prefix": (_mean, "prefix_cache_hit_pct", pct_human),
    "preempt": (_sum, "preemptions_per_s", rate_human),
}


def engine_cell(key: str, fmt: Cell, s: EngineStats, f: Freshness | None, slo) -> tuple[str, str]:
    """(text, style) of column ``key`` for engine ``s``: stale values dimmed (State with their age),
    values over their SLO target bold red, a non-empty queue yellow."""
    stale = f is not None and f.status != FRESH
    if key == "state":
        reason = (f.reason or "") if f is not None and stale else ""
        # orphaned: x cleans it up; connecting: no answer yet at start-up (not down)
        word = next((w for w in ("orphaned", "connecting") if reason.startswith(w)), s.state)
        text = f"{word} {age_short(f.age_s)}" if f is not None and stale and f.age_s is not None else word
        return text, _STATE_STYLE.get(s.state, "dim")  # stale values: how old they are
    text = fmt(s)
    if stale:
        return text, "dim"  # the last good value, not a current one
    if slo is not None and key in _SLO_FIELDS:
        attr, target = _SLO_FIELDS[key]
        v = getattr(s, attr)
        if v is not None and v > getattr(slo, target):
            return text, "bold red"
    if key == "wait" and s.waiting:
        return text, "yellow"
    return text, ""


def kept_or_sorted(stats: list[EngineStats], previous: list[str], sorted_ago_s: float, resort_every_s: float,
                   sort_key: str, descending: bool, limit: int | None, slo=None) -> tuple[list[EngineStats], bool]:
    """The rows to show and whether they were sorted afresh: the engines of ``previous`` keep their
    places while the same engines are shown and the last sort is under ``resort_every_s`` old, so an
    action key never hits a row that just moved; otherwise ``stats`` sorted (at most ``limit``)."""
    if previous and sorted_ago_s < resort_every_s:
        rank = {name: i for i, name in enumerate(previous)}
        kept = [s for s in stats if s.name in rank]
        full = len(kept) == len(stats) or (limit is not None and len(kept) >= limit)
        if len(kept) == len(previous) and full:
            kept.sort(key=lambda s: rank[s.name])
            return kept, False
    rows = sort_engines(stats, sort_key, descending, slo)
    return (rows if limit is None else rows[:limit]), True


class Group:
    """The engines of one deployment, model or node, and their totals."""

    __slots__ = ("value", "members", "fresh", "_agg")

    def __init__(self, value: str, members: list[EngineStats], fresh: list[EngineStats]) -> None:
        self.value, self.members, self.fresh = value, members, fresh
        self._agg: dict[str, float | None] = {}

    @property
    def key(self) -> str:
        return GROUP_PREFIX + self.value

    def total(self, col: str) -> float | None:
        if col not in self._agg:
            if col == "runmax":
                run = _sum([s.running for s in self.fresh])
                seqs = [s.max_num_seqs for s in self.fresh]
                cap = _sum([float(n) for n in seqs if n is not None]) if None not in seqs else None
                self._agg[col] = run / cap if run is not None and cap else None
            elif col in _GROUP_AGG:
                agg, attr, _ = _GROUP_AGG[col]
                self._agg[col] = agg([getattr(s, attr) for s in self.fresh])
            else:
                self._agg[col] = None
        return self._agg[col]

    def cells(self, cols) -> Cells:
        out: Cells = {}
        n = len(self.members)
        for key, _, _, _ in cols:
            if key == "name":
                out[key] = (f"▾ {plain(self.value, 58)} ({n})", "bold")
            elif key == "state":
                up = sum(1 for s in self.members if s.state == UP)
                out[key] = (f"{up}/{n} up", "bold green" if up == n else "bold yellow")
            elif key == "runmax":
                run = _sum([s.running for s in self.fresh])
                seqs = [s.max_num_seqs for s in self.fresh]
                cap = _sum([float(n) for n in seqs if n is not None]) if None not in seqs else None
                out[key] = (ratio_human(run, None if cap is None else int(cap)), "bold")
            elif key == "model":
                models = {s.model for s in self.members if s.model}
                text = plain(next(iter(models)), 80) if len(models) == 1 else f"{len(models)} models"
                out[key] = (text, "bold")
            elif key in _GROUP_AGG:
                agg, _, fmt = _GROUP_AGG[key]
                text = fmt(self.total(key))
                if agg is _max and text != DASH:
                    text = WORST_MARK + text  # the worst engine's percentile, not the group's (the Overview's is the fleet's)
                out[key] = (text, "bold")
            else:
                out[key] = ("", "")
        return out


class EnginesTable(LeanTable):
    """DataTable of engines. ``update_rows`` touches only cells whose text changed.

    The Engine column is pinned when the table scrolls right, and the
    horizontal scrollbar shows that more columns exist. Rows sorted by a live
    value move at most every ``resort_every_s`` (or on a sort key), and the
    cursor follows the selected engine, so an action key never hits a row
    that just moved under it. ``group_by`` (deployment, model or node) puts
    the engines under one row per group with the group's totals.
    """

    DEFAULT_CSS = """
    EnginesTable { height: 1fr; scrollbar-size-horizontal: 1; }
    """

    def __init__(self, slo=None, columns: tuple[str, ...] | None = None, limit: int | None = None,
                 sort_key: str = "name", resort_every_s: float = 0.0, descending: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, fixed_columns=1, **kwargs)
        self.slo = slo
        self.cols = [c for c in COLUMNS if columns is None or c[0] in columns]
        self.limit = limit
        self._shown: dict[str, Cells] = {}  # row key → the cells on screen
        self._shown_src: dict[str, tuple] = {}  # row key → (stats object, freshness) it was drawn from
        self._fresh: dict[str, Freshness] = {}
        self.filter_text = ""
        self.sort_key = sort_key
        self.descending = sort_key not in ASCENDING_FIRST if descending is None else descending
        self._order: list[str] = []  # row keys in table order
        self._engine_order: list[str] = []  # engine names in sort order (kept between re-sorts)
        self.resort_every_s = resort_every_s
        self.clock = clock
        self._sorted_at = -1e9
        self.group_by: str | None = None
        self._groups_of: dict[str, dict[str, str]] = {}
        self._groups_state: object = None
        self._marks: dict[str, str] = {}  # engine → severity of a triage verdict about it (its name is marked)

    def on_mount(self) -> None:
        for key, _, _, _ in self.cols:
            self.add_column(self._header(key), key=key)

    def _header(self, key: str) -> str:
        """The column title, with ▼ (largest / Z first) or ▲ on the sort column."""
        if key != self.sort_key:
            return HEADERS[key]
        return f"{HEADERS[key]} {'▼' if self.descending else '▲'}"

    def _mark_headers(self) -> None:
        """Relabel the headers after the sort changed; a wider label widens its column."""
        for key, _, _, _ in self.cols:
            col = self.columns.get(ColumnKey(key))
            if col is None:
                continue
            label = Text(self._header(key))
            if col.label.plain != label.plain:
                col.label = label
                col.content_width = max(col.content_width, label.cell_len)
                self._require_update_dimensions = True
        self._update_count += 1  # DataTable caches rendered header cells by this count
        self.refresh()

    def sort_by(self, key: str) -> None:
        """Sort by column ``key``; the column already sorted on is reversed. Re-sorts now."""
        if key == self.sort_key:
            self.descending = not self.descending
        else:
            self.sort_key = key
            self.descending = key not in ASCENDING_FIRST
        self._sorted_at = -1e9
        self._mark_headers()

    def set_group_by(self, group_by: str | None) -> None:
        """Group the engines by ``deployment``, ``model`` or ``node`` (None: no groups)."""
        if group_by is not None and group_by not in GROUP_BY:
            raise ValueError(f"cannot group by {group_by!r}")
        self.group_by = group_by
        self._groups_state = None
        self._sorted_at = -1e9

    def group_of(self, name: str) -> str | None:
        """The group value of engine ``name`` while grouped (None otherwise)."""
        if self.group_by is None:
            return None
        return self._groups_of.get(name, {}).get(self.group_by, "?")

    def _cell(self, key: str, fmt: Cell, s: EngineStats) -> tuple[str, str]:
        return engine_cell(key, fmt, s, self._fresh.get(s.name), self.slo)

    def _engine_cells(self, s: EngineStats) -> Cells:
        cells = {key: self._cell(key, fmt, s) for key, _, fmt, _ in self.cols}
        severity = self._marks.get(s.name)
        if severity is not None and "name" in cells:
            cells["name"] = mark_text(cells["name"][0], severity)
        return cells

    def matches(self, s: EngineStats) -> bool:
        f = self.filter_text.lower()
        if not f:
            return True
        group = self.group_of(s.name)
        return f in s.name.lower() or f in (s.model or "").lower() or (group is not None and f in group.lower())

    def update_state(self, state: FleetState) -> None:
        """Rows of the state's engines; values that are not fresh are dimmed, with their age."""
        self._fresh = {e.name: e.freshness for e in state.engines}
        self._marks = affected(state)[0]
        if self.group_by is not None and self._groups_state is not state:
            self._groups_of, self._groups_state = engine_groups(state), state
        self.update_rows(list(state.engine_stats))

    def update_rows(self, stats: list[EngineStats]) -> None:
        """Bring the table in line with ``stats`` with as few cell writes as possible."""
        wanted = [s for s in stats if self.matches(s)]
        now = self.clock()
        wanted, resorted = kept_or_sorted(wanted, self._engine_order, now - self._sorted_at, self.resort_every_s,
                                          self.sort_key, self.descending, self.limit, self.slo)
        if resorted:
            self._sorted_at = now
        self._engine_order = [s.name for s in wanted]
        if self.group_by is None:
            self._apply([(s.name, s) for s in wanted])
        else:
            self._apply(self._grouped(wanted))

    def _grouped(self, engines: list[EngineStats]) -> list[tuple[str, EngineStats | Group]]:
        """Group rows, each followed by its engines (in their sort order)."""
        members: dict[str, list[EngineStats]] = {}
        for s in engines:
            members.setdefault(self.group_of(s.name) or "?", []).append(s)
        groups = [Group(v, m, [s for s in m if self._fresh_key(s.name) == FRESH]) for v, m in members.items()]
        groups.sort(key=lambda g: g.value)
        if self.sort_key not in ("name", "state", "model", PRESSURE):
            # Groups ordered by their total in the sort column, as the engines are; no value last.
            present = [g for g in groups if g.total(self.sort_key) is not None]
            present.sort(key=lambda g: g.total(self.sort_key) or 0.0, reverse=self.descending)
            groups = present + [g for g in groups if g.total(self.sort_key) is None]
        elif self.sort_key == "name" and self.descending:
            groups.reverse()
        rows: list[tuple[str, EngineStats | Group]] = []
        for g in groups:
            rows.append((g.key, g))
            rows.extend((s.name, s) for s in g.members)
        return rows

    def _apply(self, wanted: list[tuple[str, EngineStats | Group]]) -> None:
        order = [key for key, _ in wanted]
        selected = self._selected_name()
        keep = set(order)
        present = set(self._order)
        leaving = [key for key in self._order if key not in keep]
        arriving = [key for key in order if key not in present]
        # A row that leaves is handed to one that arrives: no row removed and added,
        # so no relayout, and only the cells that differ are written.
        for old, new in zip(leaving, arriving):
            self.rename_row(old, new)
            self._shown[new] = self._shown.pop(old)
            self._shown_src.pop(old, None)
        for old in leaving[len(arriving):]:  # an engine left (or was filtered out)
            self.remove_row(old)
            self._shown.pop(old, None)
            self._shown_src.pop(old, None)
        added = set(arriving[len(leaving):])
        for key, item in wanted:
            if key in added:
                cells = self._cells(item)
                self.add_row(*(Text(t, style=st) for t, st in (cells[k] for k, _, _, _ in self.cols)), key=key)
                self._shown[key] = cells
                self._shown_src[key] = self._src(item)
            else:
                self._update_cells(key, item)
        if [row.key.value for row in self.ordered_rows] != order:
            self._reorder(order)
        self._order = order
        if selected in order and self.cursor_row != order.index(selected) and (self.limit is None or self.has_focus):
            # The cursor stays on the engine, not the row number. Not in a top-N table nobody is on:
            # each move is a highlight event, and the app refreshes its key bindings (the footer) on it.
            self.move_cursor(row=order.index(selected))

    def _cells(self, item: EngineStats | Group) -> Cells:
        return item.cells(self.cols) if isinstance(item, Group) else self._engine_cells(item)

    def _src(self, item: EngineStats | Group) -> tuple:
        if isinstance(item, Group):
            return ()
        return (item, self._fresh_key(item.name), self._marks.get(item.name))

    def _reorder(self, order: list[str]) -> None:
        """Move rows into ``order`` in place: no rebuild, so the horizontal scroll stays."""
        self.reorder_rows(order)  # LeanTable's: in place where the fast paint is on

    def _update_cells(self, key: str, item: EngineStats | Group) -> None:
        src = self._src(item)
        prev = self._shown_src.get(key)
        if src and prev and prev[0] is src[0] and prev[1] == src[1] == FRESH and prev[2] == src[2]:
            return  # the very same values as drawn (the engine was not polled since): nothing to compare
        self._shown_src[key] = src
        shown = self._shown[key]
        changed = {}
        for col, cell in self._cells(item).items():
            if shown.get(col) != cell:
                shown[col] = cell
                changed[col] = Text(cell[0], style=cell[1])
        if changed:
            self.set_cells(key, changed)

    def _fresh_key(self, name: str) -> str:
        f = self._fresh.get(name)
        return FRESH if f is None else f.status

    def _selected_name(self) -> str | None:
        """The row key under the cursor (an engine name or a group row's key)."""
        if not self._order or self.cursor_row is None or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    @property
    def selected_engine(self) -> str | None:
        key = self._selected_name()
        return None if key is None or key.startswith(GROUP_PREFIX) else key

    def set_limit(self, limit: int | None) -> None:
        """Show at most ``limit`` rows; the next update re-sorts when it changed."""
        if limit != self.limit:
            self.limit = limit
            self._sorted_at = -1e9


_SLO_FIELDS = {"ttft99": ("ttft_p99_s", "ttft_p99_s"), "itl95": ("itl_p95_s", "itl_p95_s"),
               "e2e99": ("e2e_p99_s", "e2e_p99_s"), "queue99": ("queue_p99_s", "queue_p99_s"),
               "kv": ("kv_cache_pct", "kv_cache_pct")}
