"""The Engines table: one row per engine, cells updated only when their text changes."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.widgets.data_table import ColumnKey, RowKey

from ...domain.engine import DEGRADED, DOWN, UP, EngineStats
from ...format import age_short, count_human, pct_human, rate_human, ratio_human, seconds_human
from ...state.fleet import FRESH, FleetState, Freshness
from ...text import plain
from .lean import LeanTable

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
    ("ttft99", "TTFT99", lambda s: seconds_human(s.ttft_p99_s), lambda s: s.ttft_p99_s),
    ("itl95", "ITL95", lambda s: seconds_human(s.itl_p95_s), lambda s: s.itl_p95_s),
    ("gen", "Gen t/s", lambda s: rate_human(s.generation_tokens_per_s), lambda s: s.generation_tokens_per_s),
    ("prompt", "Pr t/s", lambda s: rate_human(s.prompt_tokens_per_s), lambda s: s.prompt_tokens_per_s),
    ("rps", "Req/s", lambda s: rate_human(s.requests_per_s), lambda s: s.requests_per_s),
    ("e2e99", "E2E99", lambda s: seconds_human(s.e2e_p99_s), lambda s: s.e2e_p99_s),
    ("queue99", "Queue99", lambda s: seconds_human(s.queue_p99_s), lambda s: s.queue_p99_s),
    ("ttft50", "TTFT50", lambda s: seconds_human(s.ttft_p50_s), lambda s: s.ttft_p50_s),
    ("itl50", "ITL50", lambda s: seconds_human(s.itl_p50_s), lambda s: s.itl_p50_s),
    ("e2e95", "E2E95", lambda s: seconds_human(s.e2e_p95_s), lambda s: s.e2e_p95_s),
    ("prefix", "Prefix%", lambda s: pct_human(s.prefix_cache_hit_pct), lambda s: s.prefix_cache_hit_pct),
    ("preempt", "Preempt/s", lambda s: rate_human(s.preemptions_per_s), lambda s: s.preemptions_per_s),
    ("model", "Model", lambda s: plain(s.model or "—", 80), lambda s: s.model),
)
SORTABLE = [c[0] for c in COLUMNS]
HEADERS = {c[0]: c[1] for c in COLUMNS}
ASCENDING_FIRST = ("name", "state", "model")  # text sorts A→Z first; numbers largest first
PRESSURE = "pressure"
RESORT_EVERY_S = 5.0  # a table sorted by a live value moves its rows at most this often


def pressure(s: EngineStats) -> tuple:
    """Sort key: broken engines first, then the most queued, then the slowest."""
    return (s.state == UP, -(s.waiting or 0), -(s.ttft_p99_s or 0), -(s.running_ratio or 0), s.name)


def sort_engines(stats: list[EngineStats], key: str, descending: bool) -> list[EngineStats]:
    """``stats`` ordered by column ``key`` (ties by name); engines without a value last."""
    rows = sorted(stats, key=lambda s: s.name)
    if key == PRESSURE:
        return sorted(rows, key=pressure)
    value = next(c[3] for c in COLUMNS if c[0] == key)
    present = [s for s in rows if value(s) is not None]
    present.sort(key=value, reverse=descending)  # stable: equal values stay in name order
    return present + [s for s in rows if value(s) is None]


_STATE_STYLE = {UP: "green", DOWN: "bold red", DEGRADED: "yellow"}


class EnginesTable(LeanTable):
    """DataTable of engines. ``update_rows`` touches only cells whose text changed.

    The Engine column is pinned when the table scrolls right, and the
    horizontal scrollbar shows that more columns exist. Rows sorted by a live
    value move at most every ``resort_every_s`` (or on a sort key), and the
    cursor follows the selected engine, so an action key never hits a row
    that just moved under it.
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
        self._shown: dict[str, dict[str, str]] = {}
        self._fresh: dict[str, Freshness] = {}
        self.filter_text = ""
        self.sort_key = sort_key
        self.descending = sort_key not in ASCENDING_FIRST if descending is None else descending
        self._order: list[str] = []
        self.resort_every_s = resort_every_s
        self.clock = clock
        self._sorted_at = -1e9

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

    def _text(self, key: str, fmt: Cell, s: EngineStats) -> str:
        f = self._fresh.get(s.name)
        if key == "state" and f is not None and f.status != FRESH and f.age_s is not None:
            return f"{s.state} {age_short(f.age_s)}"  # stale values: how old they are
        return fmt(s)

    def _style(self, key: str, s: EngineStats, text: str) -> Text:
        if key == "state":
            return Text(text, style=_STATE_STYLE.get(s.state, "dim"))
        f = self._fresh.get(s.name)
        if f is not None and f.status != FRESH:
            return Text(text, style="dim")  # the last good value, not a current one
        slo = self.slo
        if slo is not None:
            limits = {"ttft99": (s.ttft_p99_s, slo.ttft_p99_s), "itl95": (s.itl_p95_s, slo.itl_p95_s),
                      "e2e99": (s.e2e_p99_s, slo.e2e_p99_s), "queue99": (s.queue_p99_s, slo.queue_p99_s),
                      "kv": (s.kv_cache_pct, slo.kv_cache_pct)}
            if key in limits:
                v, lim = limits[key]
                if v is not None and v > lim:
                    return Text(text, style="bold red")
        if key == "wait" and s.waiting:
            return Text(text, style="yellow")
        return Text(text)  # a str cell is parsed as markup by DataTable; names and models are label values

    def matches(self, s: EngineStats) -> bool:
        f = self.filter_text.lower()
        return not f or f in s.name.lower() or f in (s.model or "").lower()

    def update_state(self, state: FleetState) -> None:
        """Rows of the state's engines; values that are not fresh are dimmed, with their age."""
        self._fresh = {e.name: e.freshness for e in state.engines}
        self.update_rows(list(state.engine_stats))

    def update_rows(self, stats: list[EngineStats]) -> None:
        """Bring the table in line with ``stats`` with as few cell writes as possible."""
        wanted = [s for s in stats if self.matches(s)]
        now = self.clock()
        if self._order and now - self._sorted_at < self.resort_every_s:
            rank = {name: i for i, name in enumerate(self._order)}
            kept = [s for s in wanted if s.name in rank]
            full = len(kept) == len(wanted) or (self.limit is not None and len(kept) >= self.limit)
            if len(kept) == len(self._order) and full:  # same engines: keep their places until the next re-sort
                kept.sort(key=lambda s: rank[s.name])
                self._apply(kept)
                return
        self._sorted_at = now
        wanted = sort_engines(wanted, self.sort_key, self.descending)
        if self.limit is not None:
            wanted = wanted[: self.limit]
        self._apply(wanted)

    def _apply(self, wanted: list[EngineStats]) -> None:
        order = [s.name for s in wanted]
        selected = self._selected_name()
        present = set(self._order)
        keep = set(order)
        for name in self._order:
            if name not in keep:  # an engine left (or was filtered out)
                self.remove_row(name)
                self._shown.pop(name, None)
        for s in wanted:
            if s.name not in present:
                texts = {key: self._text(key, fmt, s) for key, _, fmt, _ in self.cols}
                self.add_row(*(self._style(k, s, texts[k]) for k, _, _, _ in self.cols), key=s.name)
                self._shown[s.name] = texts | {"__fresh": self._fresh_key(s.name)}
                continue
            self._update_cells(s)
        if [row.key.value for row in self.ordered_rows] != order:
            self._reorder(order)
        self._order = order
        if selected in order and self.cursor_row != order.index(selected):
            self.move_cursor(row=order.index(selected))  # the cursor stays on the engine, not the row number

    def _reorder(self, order: list[str]) -> None:
        """Move rows into ``order`` in place: no rebuild, so the horizontal scroll stays."""
        self._row_locations = type(self._row_locations)({RowKey(name): i for i, name in enumerate(order)})
        self._update_count += 1  # as DataTable.sort: invalidates the cached row order and renders
        self.refresh()

    def _update_cells(self, s: EngineStats) -> None:
        shown = self._shown[s.name]
        restyle = shown.get("__fresh") != self._fresh_key(s.name)
        shown["__fresh"] = self._fresh_key(s.name)
        changed = {}
        for key, _, fmt, _ in self.cols:
            text = self._text(key, fmt, s)
            if shown.get(key) == text and not restyle:
                continue
            shown[key] = text
            changed[key] = self._style(key, s, text)
        if changed:
            self.set_cells(s.name, changed)

    def _fresh_key(self, name: str) -> str:
        f = self._fresh.get(name)
        return FRESH if f is None else f.status

    def _selected_name(self) -> str | None:
        if not self._order or self.cursor_row is None or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    @property
    def selected_engine(self) -> str | None:
        return self._selected_name()

    def set_limit(self, limit: int | None) -> None:
        """Show at most ``limit`` rows; the next update re-sorts when it changed."""
        if limit != self.limit:
            self.limit = limit
            self._sorted_at = -1e9
