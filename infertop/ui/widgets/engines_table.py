"""The Engines table: one row per engine, cells updated only when their text changes."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.widgets import DataTable

from ...domain.engine import DEGRADED, DOWN, UP, EngineStats
from ...format import count_human, pct_human, rate_human, ratio_human, seconds_human

Cell = Callable[[EngineStats], str]

# (key, header, formatter, sort key). Most important first: at 80 columns the
# table scrolls horizontally and the left columns stay visible.
COLUMNS: tuple[tuple[str, str, Cell, Callable[[EngineStats], float | str]], ...] = (
    ("name", "Engine", lambda s: s.name, lambda s: s.name),
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
    ("model", "Model", lambda s: s.model or "—", lambda s: s.model or ""),
)
SORTABLE = [c[0] for c in COLUMNS]
_STATE_STYLE = {UP: "green", DOWN: "bold red", DEGRADED: "yellow"}


class EnginesTable(DataTable):
    """DataTable of engines. ``update_rows`` touches only cells whose text changed."""

    DEFAULT_CSS = """
    EnginesTable { height: 1fr; }
    """

    def __init__(self, slo=None, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.slo = slo
        self._shown: dict[str, dict[str, str]] = {}
        self.filter_text = ""
        self.sort_key = "name"
        self._order: list[str] = []

    def on_mount(self) -> None:
        for key, header, _, _ in COLUMNS:
            self.add_column(header, key=key)

    def _style(self, key: str, s: EngineStats, text: str) -> Text | str:
        if key == "state":
            return Text(text, style=_STATE_STYLE.get(s.state, "dim"))
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

    def update_rows(self, stats: list[EngineStats]) -> None:
        """Bring the table in line with ``stats`` with as few cell writes as possible."""
        wanted = [s for s in stats if self.matches(s)]
        sort = next(c[3] for c in COLUMNS if c[0] == self.sort_key)
        reverse = self.sort_key not in ("name", "state", "model")
        wanted.sort(key=sort, reverse=reverse)
        order = [s.name for s in wanted]
        if order != self._order:
            # Membership or order changed: rebuild (rare: engines come and go, sort key changes).
            selected = self._selected_name()
            self.clear()
            self._shown.clear()
            for s in wanted:
                texts = {key: fmt(s) for key, _, fmt, _ in COLUMNS}
                self.add_row(*(self._style(k, s, texts[k]) for k, _, _, _ in COLUMNS), key=s.name)
                self._shown[s.name] = texts
            self._order = order
            if selected in order:
                self.move_cursor(row=order.index(selected))
            return
        for s in wanted:
            shown = self._shown[s.name]
            for key, _, fmt, _ in COLUMNS:
                text = fmt(s)
                if shown.get(key) != text:
                    shown[key] = text
                    self.update_cell(s.name, key, self._style(key, s, text))

    def _selected_name(self) -> str | None:
        if not self._order or self.cursor_row is None or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    @property
    def selected_engine(self) -> str | None:
        return self._selected_name()

    def cycle_sort(self) -> str:
        i = SORTABLE.index(self.sort_key)
        self.sort_key = SORTABLE[(i + 1) % len(SORTABLE)]
        self._order = []  # force a rebuild in the new order
        return self.sort_key
