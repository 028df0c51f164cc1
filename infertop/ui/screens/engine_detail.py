"""Detail view of one engine: every statistic, its history, what it is."""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from ...domain.engine import EngineStats
from ...format import DASH, count_human, pct_human, rate_human, percentile_human, ratio_human, seconds_human
from ...state.history import HistoryStore
from ...text import plain
from ..widgets.panels import QuietStatic, Trend

TRENDS = (
    ("running", "Running", count_human),
    ("waiting", "Waiting", count_human),
    ("kv_cache_pct", "KV cache %", pct_human),
    ("generation_tokens_per_s", "Gen tokens/s", rate_human),
    ("ttft_p99_s", "TTFT p99", seconds_human),
    ("itl_p95_s", "ITL p95", seconds_human),
)


def _text(value: object, limit: int = 160) -> str:
    """Outside text as escaped markup: one plain line."""
    return escape(plain(str(value), limit))


def describe(s: EngineStats, freshness=None) -> str:
    """Multi-line markup of everything known about ``s`` (outside text escaped)."""
    fresh = ""
    if freshness is not None and freshness.status != "fresh":
        age = f", last good values {seconds_human(freshness.age_s)} old" if freshness.age_s is not None else ""
        fresh = f"  [dim]({freshness.status}{age})[/dim]"
    rows = [
        ("URL", escape(plain(s.url))),
        ("State", s.state + (f" — {escape(plain(s.error))}" if s.error else "") + fresh),
        ("Model", escape(plain(s.model or DASH))),
        ("vLLM", f"{escape(plain(s.vllm_version or DASH))} (metrics {s.metrics_version or DASH}"
                 + (f", engine {escape(plain(s.engine_label))}" if s.engine_label else "") + ")"),
        ("max_num_seqs", str(s.max_num_seqs) if s.max_num_seqs else "unknown (set it in the config)"),
        ("Running / waiting", f"{count_human(s.running)} / {count_human(s.waiting)}   "
                              f"({ratio_human(s.running, s.max_num_seqs)} of max)"),
        ("KV cache", pct_human(s.kv_cache_pct)),
        ("Prefix-cache hits", pct_human(s.prefix_cache_hit_pct)),
        ("Tokens/s", f"prompt {rate_human(s.prompt_tokens_per_s)}, generation {rate_human(s.generation_tokens_per_s)}"),
        ("Requests/s", rate_human(s.requests_per_s)),
        ("Preemptions/s", rate_human(s.preemptions_per_s)),
        ("TTFT", f"p50 {percentile_human(s, 'ttft_p50_s')}   p99 {percentile_human(s, 'ttft_p99_s')}"),
        ("Inter-token", f"p50 {percentile_human(s, 'itl_p50_s')}   p95 {percentile_human(s, 'itl_p95_s')}"),
        ("End-to-end", f"p95 {percentile_human(s, 'e2e_p95_s')}   p99 {percentile_human(s, 'e2e_p99_s')}"),
        ("Queue time", f"p99 {percentile_human(s, 'queue_p99_s')}"),
        ("Window", f"{s.window_s:.0f} s of history" if s.window_s else "collecting…"),
    ]
    for k, v in sorted(s.extra.items()):
        rows.append((escape(plain(k)), escape(plain(v))))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"[b]{k.ljust(width)}[/b]  {v}" for k, v in rows)


class EngineDetailScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]
    DEFAULT_CSS = """
    EngineDetailScreen #detail-title { background: $panel; padding: 0 1; text-style: bold; }
    EngineDetailScreen #detail-body, EngineDetailScreen #detail-local { padding: 0 1; height: auto; }
    EngineDetailScreen .trends { height: 3; }
    """

    def __init__(self, engine_name: str, history: HistoryStore) -> None:
        super().__init__()
        self.engine_name = engine_name
        self.history = history

    def compose(self) -> ComposeResult:
        yield Static(Text(f"Engine {plain(self.engine_name)}   (Esc: back)"), id="detail-title")
        with VerticalScroll():
            yield QuietStatic(id="detail-body")
            yield QuietStatic(id="detail-local")
            for i in range(0, len(TRENDS), 2):
                with Horizontal(classes="trends"):
                    for key, title, _ in TRENDS[i : i + 2]:
                        yield Trend(title, id=f"trend-{key}")
        yield Footer()

    def _composed(self) -> bool:
        """A tick may paint this screen in the turn it is pushed (or popped), and the trends sit in
        containers mounted after the text boxes: until the last one is there, nothing to do (painting
        in between raised NoMatches on '#trend-running' and ended the console)."""
        return bool(self.query(f"#trend-{TRENDS[-1][0]}")) and bool(self.query("#detail-local"))

    def show_local(self, rec, history: list[dict], log_tail: list[str], gpus: list[str] | None = None) -> None:
        """Launch arguments, process, GPUs, restart history and log tail of an engine infertop manages."""
        if not self._composed():
            return
        box = self.query_one("#detail-local", QuietStatic)
        gpu_line = f"[b]GPUs[/b] {escape(', '.join(plain(g) for g in gpus)) if gpus else 'none mapped to this engine'}"
        if rec is None:
            if gpus:
                box.show(gpu_line)
                return
            box.show("[dim]Not started by infertop: no launch arguments or log here "
                     "(local engines started with n can be stopped, restarted and re-configured).[/dim]")
            return
        # Arguments, the command, the history file and the log are text from outside: never markup
        # (a model named "foo[/x]" raised MarkupError), never control characters.
        args = " ".join(f"{k}={v}" for k, v in sorted(rec.args.items()))
        lines = [
            "[b]Local engine[/b] (started by infertop" + (", re-adopted" if rec.adopted else "") + ")",
            f"[b]PID[/b] {rec.pid}  [b]uptime[/b] {seconds_human(rec.uptime_s)}  [b]restarts[/b] {rec.restarts}"
            f"  [b]startup[/b] {seconds_human(rec.startup_s)}  [b]profile[/b] {_text(rec.profile_name)}",
            gpu_line,
            f"[b]Arguments[/b] {_text(args, 2000)}",
            f"[b]Command[/b] {_text(rec.command(), 2000)}",
            f"[b]Log[/b] {_text(rec.log_path, 400)}",
        ]
        if history:
            lines.append("[b]History[/b]")
            for ev in history[-5:]:
                when = ev.get("time") or ev.get("at") or ""
                what = ev.get("event") or ev.get("action", "")
                lines.append(f"  {_text(when)} {_text(what)} {_text(ev.get('detail') or ev.get('reason') or '', 400)}")
        lines.append("[b]Log tail[/b]")
        lines.extend("  " + _text(line, 400) for line in log_tail)
        box.show("\n".join(lines))

    def show(self, s: EngineStats | None, freshness=None) -> None:
        if not self._composed():
            return
        body = self.query_one("#detail-body", QuietStatic)
        if s is None:
            body.show(Text(f"{plain(self.engine_name)} is no longer configured."))
            return
        body.show(describe(s, freshness))
        for key, _, fmt in TRENDS:
            for trend in self.query(f"#trend-{key}").results(Trend):  # none while the screen is torn down
                trend.show(self.history.series(s.name, key, 120), fmt(getattr(s, key)))
