"""One verdict's evidence: what it says, the signals behind it, and their trends around its onset.

The trends are the app's history rings (one sample a tick), shown from a little before the onset
to now, so the step that raised the verdict is on screen. Text from a verdict is never markup.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from ...analysis.triage import Verdict
from ...format import count_human, pct_human, rate_human, seconds_human
from ...state.history import HistoryStore
from ...text import plain
from ..widgets.gpus import entity, flatten
from ..widgets.panels import QuietStatic, Trend
from ..widgets.triage import gpu_subject, severity_style, since_human

BEFORE_ONSET_TICKS = 30  # samples shown before the onset, for the step to stand out
MAX_TICKS = 600  # at most this many samples on a trend (the widget buckets them to its width)
# The engine signals that tell each verdict apart (history metric, title, format); others get the default.
ENGINE_SIGNALS = {
    "kv-bound": (("kv_cache_pct", "KV cache %", pct_human), ("running", "Running", count_human),
                 ("itl_p95_s", "ITL p95", seconds_human), ("waiting", "Waiting", count_human)),
    "queue-bound": (("running", "Running", count_human), ("waiting", "Waiting", count_human),
                    ("ttft_p99_s", "TTFT p99", seconds_human), ("kv_cache_pct", "KV cache %", pct_human)),
    "hung": (("generation_tokens_per_s", "Gen tokens/s", rate_human), ("running", "Running", count_human),
             ("waiting", "Waiting", count_human), ("requests_per_s", "Requests/s", rate_human)),
}
DEFAULT_SIGNALS = (("running", "Running", count_human), ("waiting", "Waiting", count_human),
                   ("requests_per_s", "Requests/s", rate_human), ("ttft_p99_s", "TTFT p99", seconds_human))
GPU_SIGNALS = (("util_pct", "Util", pct_human), ("temp_c", "Temp", lambda v: f"{v:.0f}°C"),
               ("power_w", "Power", lambda v: f"{v:.0f}W"), ("mem_pct", "Memory", pct_human))
TREND_SLOTS = 4


def describe(v: Verdict, now_s: float, active: bool) -> Text:
    """The verdict as lines: what, since when, the explanation, each evidence, each remedy (as text)."""
    style = severity_style(v.severity)
    t = Text(f"{v.severity.upper()} ", style=style)
    t.append(plain(v.kind, 40), style=style)
    t.append("  ")
    t.append(plain(v.subject, 80), style="bold")
    onset = time.strftime("%H:%M:%S", time.localtime(v.since))
    t.append(f"\nsince {onset} ({since_human(v, now_s)})" if active else f"\ncleared (it held from {onset})",
             style="dim" if active else "green")
    t.append("\n\n" + plain(v.explanation, 800))
    if v.evidence:
        t.append("\n\nEvidence", style="bold")
        for e in v.evidence:
            t.append("\n  ")
            t.append(plain(e.signal, 80), style="bold")
            t.append(f"  {plain(e.value, 80)}  against {plain(e.against, 160)}  ({plain(e.window, 40)})")
    changes = getattr(v, "changes", ()) or ()  # audited actions, rollouts, events before the onset
    if changes:
        t.append("\n\nWhat changed before it", style="bold")
        for c in changes:
            t.append("\n  · " + plain(str(c), 400))
    if v.remedies:
        t.append("\n\nRemedies", style="bold")
        for r in v.remedies:
            t.append("\n  · " + plain(str(r), 400))
        t.append("\n  (on the Triage pane, a remedy's key opens its action pre-filled)", style="dim")
    return t


class VerdictDetailScreen(Screen[None]):
    """Esc goes back to the Triage pane. The body and trends follow each tick; a verdict that cleared
    keeps its last evidence, marked cleared."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]
    DEFAULT_CSS = """
    VerdictDetailScreen #verdict-title { background: $panel; padding: 0 1; text-style: bold; }
    VerdictDetailScreen #verdict-body, VerdictDetailScreen #verdict-trends-title { padding: 0 1; height: auto; }
    VerdictDetailScreen .trends { height: 4; }
    """

    def __init__(self, verdict: Verdict, history: HistoryStore) -> None:
        super().__init__()
        self.verdict = verdict
        self.history = history

    @property
    def key(self) -> tuple[str, str]:
        return self.verdict.key

    def compose(self) -> ComposeResult:
        yield Static(Text(f"Verdict {plain(self.verdict.kind, 40)} · {plain(self.verdict.subject, 80)}   (Esc: back)"),
                     id="verdict-title")
        with VerticalScroll():
            yield QuietStatic(id="verdict-body")
            yield QuietStatic(id="verdict-trends-title")
            for i in range(0, TREND_SLOTS, 2):
                with Horizontal(classes="trends"):
                    for j in (i, i + 1):
                        yield Trend("", id=f"vtrend-{j}")
        yield Footer()

    def _composed(self) -> bool:
        """Painted in the turn it is pushed, before its trends are mounted: nothing to do until they are."""
        return bool(self.query(f"#vtrend-{TREND_SLOTS - 1}")) and bool(self.query("#verdict-body"))

    def show(self, state, history: HistoryStore | None = None) -> None:
        """The verdict as it stands in ``state`` (or as last seen, cleared), and its signals' trends."""
        if not self._composed() or state is None:
            return
        now = next((v for v in state.verdicts if v.key == self.key), None)
        if now is not None:
            self.verdict = now
        v = self.verdict
        self.query_one("#verdict-body", QuietStatic).show(describe(v, state.taken_at, now is not None))
        hist = history or self.history
        ticks_since = max(0, round((state.taken_at - v.since) / max(state.refresh_s, 1e-3)))
        n = min(MAX_TICKS, ticks_since + BEFORE_ONSET_TICKS + 1)
        entity_name, signals, values = self._signals(state)
        title = Text("Trends", style="bold")
        if entity_name is None:
            title.append(f" — none: {plain(v.subject, 80)} has no history of its own here", style="dim")
        else:
            before = min(BEFORE_ONSET_TICKS, max(0, len(hist.series(entity_name, signals[0][0], n)) - ticks_since - 1))
            title.append(f" from {before * state.refresh_s:.0f} s before the onset to now "
                         f"({since_human(v, state.taken_at)} since it)", style="dim")
        self.query_one("#verdict-trends-title", QuietStatic).show(title)
        for i in range(TREND_SLOTS):
            for trend in self.query(f"#vtrend-{i}").results(Trend):  # none while the screen is torn down
                if entity_name is None or i >= len(signals):
                    trend.display = False
                    continue
                key, label, fmt = signals[i]
                trend.display = True
                trend.title = label
                value = values.get(key)
                trend.show(hist.series(entity_name, key, n), "—" if value is None else fmt(value), fmt=fmt)

    def _signals(self, state) -> tuple[str | None, tuple, dict]:
        """(history entity, the signals to draw, their values now) for the verdict's subject."""
        v = self.verdict
        e = state.engine(v.subject)
        if e is not None:
            signals = ENGINE_SIGNALS.get(v.kind, DEFAULT_SIGNALS)
            return e.name, signals, {k: getattr(e.stats, k, None) for k, _, _ in signals}
        for r in flatten(state.gpus):
            if gpu_subject(r.gpu) == v.subject:
                values = {"util_pct": r.gpu.util_pct, "temp_c": r.gpu.temp_c, "power_w": r.gpu.power_w,
                          "mem_pct": r.gpu.mem_pct}
                return entity(r.gid), GPU_SIGNALS, values
        return None, (), {}
