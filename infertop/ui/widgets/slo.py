"""The SLO pane (key 9): per class its objective, burn rates with the windows used, the worst engine's stage
budgets, the capacity answer and what-ifs, each engine's class and why, cost — and four plots (textual-plotext)
of the history before this tick: fleet TTFT p99, queue depth, KV %, the fast burn — each with its target line,
a time axis, and a range fitted to the data (not from zero). In replay the history is the recording's before
the position (the app rebuilds it on a seek). Every text from outside is :class:`rich.text.Text`."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, Vertical, VerticalScroll
from textual_plotext import PlotextPlot

from ...analysis.slo.text import slo_lines
from ...state.fleet_history import FLEET
from .panels import QuietStatic

PLOT_POINTS = 600  # the newest points a plot draws (10 min at a 1 s refresh)
BURN_METRIC = "burn_fast"


def slo_entity(name: str) -> str:
    return f"slo:{name}"


def record_slo(history, state) -> None:
    """Each class's fast-pair (long window) burn rate into the history, for the burn plot."""
    report = getattr(state, "slo_report", None)
    if not isinstance(report, dict):
        return
    for c in report.get("classes") or ():
        try:
            fast: dict = next((w for w in c.get("burn") or () if w.get("pair") == "fast"), {})
            history.record(slo_entity(str(c["name"])), BURN_METRIC, fast.get("long_burn"))
        except (TypeError, KeyError, AttributeError):
            continue  # a recording of the wrong shape: no point


def time_ticks(n: int, step_s: float) -> tuple[list[float], list[str]]:
    """Up to 4 ticks on an axis of ``n`` points ``step_s`` apart ending at 0 ("now")."""
    if n <= 1:
        return [0.0], ["now"]
    span = (n - 1) * step_s
    out_x, out_l = [], []
    for k in range(3, -1, -1):
        x = -span * k / 3
        out_x.append(x)
        out_l.append("now" if k == 0 else _ago(-x))
    return out_x, out_l


def value_ticks(lo: float, hi: float, target: float | None = None, most: int = 4) -> tuple[list[float], list[str]]:
    """Round ticks (1, 2, 2.5, 5 × 10ⁿ apart) inside [lo, hi], the target among them at its own value, so
    that the target line sits on a row labelled with it (not on a neighbour's "1.83")."""
    span = hi - lo
    if not (span > 0 and math.isfinite(span)):
        return ([target], [_tick_text(target)]) if target is not None else ([], [])
    raw = span / most
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks = [k * step for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
    if target is not None and lo <= target <= hi:
        ticks = sorted([t for t in ticks if abs(t - target) > step / 2] + [target])
    return ticks, [_tick_text(t) for t in ticks]


def _tick_text(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _ago(s: float) -> str:
    if s >= 3600:
        return f"-{s / 3600:.1f}h"
    if s >= 60:
        return f"-{s / 60:.0f}m"
    return f"-{s:.0f}s"


class SloPlot(PlotextPlot):
    """One trend with its target line: ``series`` and ``target`` are kept for whoever asks what is drawn."""

    DEFAULT_CSS = "SloPlot { height: 1fr; min-height: 5; }"

    def __init__(self, title: str, unit: str, **kw) -> None:
        super().__init__(**kw)
        self.title, self.unit = title, unit
        self.series: list[float] = []
        self.target: float | None = None
        self.target_label = ""
        self.ylim: tuple[float, float] = (0.0, 1.0)

    def show(self, values: list[float], step_s: float, target: float | None, target_label: str = "") -> None:
        vals = [v for v in values[-PLOT_POINTS:]]
        self.series, self.target, self.target_label = vals, target, target_label
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(f"{self.title} ({self.unit})")
        n = len(vals)
        xs = [-(n - 1 - i) * step_s for i in range(n)]
        pts = [(x, v) for x, v in zip(xs, vals) if v is not None and not math.isnan(v)]
        if pts:
            plt.plot([x for x, _ in pts], [v for _, v in pts], marker="hd")
        if target is not None:
            plt.hline(target, "red")
            left = xs[0] if xs else 0.0
            plt.text(target_label or f"target {target:g}", x=left - left * 0.02, y=target, color="red",
                     alignment="left")
        lo = min((v for _, v in pts), default=target or 0.0)
        hi = max((v for _, v in pts), default=target or 1.0)
        if target is not None:
            lo, hi = min(lo, target), max(hi, target)
        pad = (hi - lo) * 0.1 or abs(hi) * 0.1 or 1.0
        # fitted to the data and the target, not from zero (a 85–95 % KV cache is not a solid slab)
        self.ylim = (lo - pad if lo - pad > 0 or lo < 0 else max(0.0, lo - pad), hi + pad)
        plt.ylim(*self.ylim)
        ty, tyl = value_ticks(*self.ylim, target)
        if ty:
            plt.yticks(ty, tyl)
        tx, tl = time_ticks(max(n, 1), step_s)
        plt.xticks(tx, tl)
        plt.xlim(min(tx[0], -step_s), 0.0)  # one point still spans an axis (plotext divides by its width)
        self.refresh()

    def render(self):
        if self.size.width < 12 or self.size.height < 4:
            return Text(f"{self.title}: needs more room")
        try:
            return super().render()
        except (ZeroDivisionError, ValueError, IndexError):  # plotext on a degenerate axis: said, never raised
            return Text(f"{self.title}: nothing to plot yet")


class SloPane(Vertical):
    DEFAULT_CSS = """
    SloPane #slo-text-box { height: 1fr; min-height: 4; }
    SloPane #slo-plots { height: 3fr; min-height: 10; grid-size: 2 2; grid-gutter: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="slo-text-box"):
            yield QuietStatic(id="slo-text")
        with Grid(id="slo-plots"):
            yield SloPlot("fleet TTFT p99", "s", id="slo-plot-ttft")
            yield SloPlot("queue depth", "requests", id="slo-plot-queue")
            yield SloPlot("KV cache max", "%", id="slo-plot-kv")
            yield SloPlot("fast burn", "× budget", id="slo-plot-burn")

    def show(self, state, history) -> None:
        report = getattr(state, "slo_report", None)
        self.query_one("#slo-text", QuietStatic).show(Text("\n".join(slo_lines(report))))
        step = state.refresh_s or 1.0
        classes = _classes(report)
        ttft_t = min((c["targets"]["ttft"] for c in classes if c.get("engines")), default=None) if classes else None
        self.query_one("#slo-plot-ttft", SloPlot).show(history.series(FLEET, "ttft_p99_s", PLOT_POINTS), step, ttft_t,
                                                       f"TTFT target {ttft_t:g} s" if ttft_t else "")
        lam = state.fleet.requests_per_s
        queue_t = min((c["targets"]["queue"] for c in classes if c.get("engines")), default=None) if classes else None
        depth_t = lam * queue_t if lam and queue_t else None  # Little's law: the depth that waits queue_t
        self.query_one("#slo-plot-queue", SloPlot).show(history.series(FLEET, "waiting", PLOT_POINTS), step, depth_t,
                                                        f"λ × queue target = {depth_t:.1f}" if depth_t else "")
        kv_t = state.slo.kv_cache_pct
        self.query_one("#slo-plot-kv", SloPlot).show(history.series(FLEET, "kv_cache_pct_max", PLOT_POINTS), step,
                                                     kv_t, f"KV target {kv_t:g} %")
        burn_of = {c["name"]: history.series(slo_entity(str(c["name"])), BURN_METRIC, PLOT_POINTS) for c in classes}
        name = max(burn_of, key=lambda n: _last(burn_of[n]), default=None)
        fast = report.get("fast_burn") if isinstance(report, dict) else None
        plot = self.query_one("#slo-plot-burn", SloPlot)
        plot.title = f"fast burn, {name}" if name else "fast burn"
        plot.show(burn_of.get(name, []) if name else [], step, fast if isinstance(fast, (int, float)) else 14.4,
                  f"page at {fast:g}×" if isinstance(fast, (int, float)) else "page at 14.4×")


def _classes(report) -> list[dict]:
    if not isinstance(report, dict):
        return []
    return [c for c in report.get("classes") or () if isinstance(c, dict) and isinstance(c.get("targets"), dict)
            and "name" in c]


def _last(series: list[float]) -> float:
    for v in reversed(series):
        if v is not None and not math.isnan(v):
            return v
    return -1.0
