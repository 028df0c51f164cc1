"""The Engines table: one row per engine, cells updated only when their text changes."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text


from ...domain.engine import DEGRADED, DOWN, UP, EngineStats
from ...format import age_short, count_human, pct_human, rate_human, ratio_human, seconds_human
from ...state.fleet import FRESH, FleetState, Freshness
from ...text import plain
from .lean import LeanTable

Cell = Callable[[EngineStats], str]

# (key, header, formatter, sort key). Most important first: at 80 columns the
# table scrolls horizontally and the left columns stay visible.
COLUMNS: tuple[tuple[str, str, Cell, Callable[[EngineStats], float | str]], ...] = (
    ("name", "Engine", lambda s: plain(s.name, 60), lambda s: s.name),
    ("state", "State", lambda s: s.state, lambda s: s.state),
    ("run", "Run", lambda s: count_human(s.running), lambda s: s.running or 0),
    ("wait", "Wait", lambda s: count_human(s.waiting), lambda s: s.waiting or 0),
    ("runmax", "Run/Max", lambda s: ratio_human(s.running, s.max_num_seqs), lambda s: s.running_ratio or 0),
    ("kv", "KV%", lambda s: pct_human(s.kv_cache_pct), lambda s: s.kv_cache_pct or 0),
    ("ttft99", "TTFT99", lambda s: seconds_human(s.ttft_p99_s), lambda s: s.ttft_p99_s or 0),
    ("itl95", "ITL95", lambda s: seconds_human(s.itl_p95_s), lambda s: s.itl_p95_s or 0),
    ("gen", "Gen t/s", lambda s: rate_human(s.generation_tokens_per_s), lambda s: s.generation_tokens_per_s or 0),
    ("prompt", "Pr t/s", lambda s: rate_human(s.prompt_tokens_per_s), lambda s: s.prompt_tokens_per_s or 0),
    ("rps", "Req/s", lambda s: rate_human(s.requests_per_s), lambda s: s.requests_per_s or 0),
    ("e2e99", "E2E99", lambda s: seconds_human(s.e2e_p99_s), lambda s: s.e2e_p99_s or 0),
    ("queue99", "Queue99", lambda s: seconds_human(s.queue_p99_s), lambda s: s.queue_p99_s or 0),
    ("ttft50", "TTFT50", lambda s: seconds_human(s.ttft_p50_s), lambda s: s.ttft_p50_s or 0),
    ("itl50", "ITL50", lambda s: seconds_human(s.itl_p50_s), lambda s: s.itl_p50_s or 0),
    ("e2e95", "E2E95", lambda s: seconds_human(s.e2e_p95_s), lambda s: s.e2e_p95_s or 0),
    ("prefix", "Prefix%", lambda s: pct_human(s.prefix_cache_hit_pct), lambda s: s.prefix_cache_hit_pct or 0),
    ("preempt", "Preempt/s", lambda s: rate_human(s.preemptions_per_s), lambda s: s.preemptions_per_s or 0),
    ("model", "Model", lambda s: plain(s.model or "—", 80), lambda s: s.model or ""),
)
SORTABLE = [c[0] for c in COLUMNS]


def pressure(s: EngineStats) -> tuple:
    """Sort key: broken engines first, then the most queued, then the slowest."""
    return (s.state == UP, -(s.waiting or 0), -(s.ttft_p99_s or 0), -(s.running_ratio or 0), s.name)
_STATE_STYLE = {UP: "green", DOWN: "bold red", DEGRADED: "yellow"}




class EnginesTable(LeanTable):
    """DataTable of engines. ``update_rows`` touches only cells whose text changed."""

    DEFAULT_CSS = """
    EnginesTable { height: 1fr; scrollbar-size-horizontal: 0; }
    """

    def __init__(self, slo=None, columns: tuple[str, ...] | None = None, limit: int | None = None,
                 sort_key: str = "name", resort_every_s: float = 0.0, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.slo = slo
        self.cols = [c for c in COLUMNS if columns is None or c[0] in columns]
        self.limit = limit
        self._shown: dict[str, dict[str, str]] = {}
        self._fresh: dict[str, Freshness] = {}
        self.filter_text = ""
        self.sort_key = sort_key
        self._order: list[str] = []
        # Re-sorting moves whole rows (a full repaint); a table sorted by a live
        # value re-sorts at most this often.
        self.resort_every_s = resort_every_s
        self._sorted_at = -1e9

    def on_mount(self) -> None:
        for key, header, _, _ in self.cols:
            self.add_column(header, key=key)

    def _text(self, key: str, fmt: Cell, s: EngineStats) -> str:
        f = self._fresh.get(s.name)
        if key == "state" and f is not None and f.status != FRESH and f.age_s is not None:
            return f"{s.state} {age_short(f.age_s)}"  # stale values: how old they are
        return fmt(s)

    def _style(self, key: str, s: EngineStats, text: str) -> Text | str:
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
        return text

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
        now = time.monotonic()
        if self._order and now - self._sorted_at < self.resort_every_s:
            rank = {name: i for i, name in enumerate(self._order)}
            kept = [s for s in wanted if s.name in rank]
            if len(kept) == len(self._order):
                kept.sort(key=lambda s: rank[s.name])
                wanted = kept
                self._apply(wanted)
                return
        self._sorted_at = now
        if self.sort_key == "pressure":
            wanted.sort(key=pressure)
        else:
            sort = next(c[3] for c in COLUMNS if c[0] == self.sort_key)
            wanted.sort(key=sort, reverse=self.sort_key not in ("name", "state", "model"))
        if self.limit is not None:
            wanted = wanted[: self.limit]
        self._apply(wanted)

    def _apply(self, wanted: list[EngineStats]) -> None:
        order = [s.name for s in wanted]
        if order != self._order:
            # Membership or order changed: rebuild (rare: engines come and go, sort key changes).
            selected = self._selected_name()
            self.clear()
            self._shown.clear()
            for s in wanted:
                texts = {key: self._text(key, fmt, s) for key, _, fmt, _ in self.cols}
                self.add_row(*(self._style(k, s, texts[k]) for k, _, _, _ in self.cols), key=s.name)
                self._shown[s.name] = texts | {"__fresh": self._fresh_key(s.name)}
            self._order = order
            if selected in order:
                self.move_cursor(row=order.index(selected))
            return
        for s in wanted:
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
        """Show at most ``limit`` rows; the next update rebuilds when it changed."""
        if limit != self.limit:
            self.limit = limit
            self._order = []
            self._sorted_at = -1e9

    def cycle_sort(self) -> str:
        i = SORTABLE.index(self.sort_key)
        self.sort_key = SORTABLE[(i + 1) % len(SORTABLE)]
        self._order = []  # force a rebuild in the new order
        self._sorted_at = -1e9
        return self.sort_key
