"""The GPUs pane: one row per GPU (MIG devices under their parent), the
selected GPU's trends, and a plain notice when a GPU source is missing.

Like the Engines table, rows are written cell by cell and only when the
text changed — never held back: the table, the trends and the Overview
tiles show the same tick's values.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from rich.markup import escape
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable

from ...domain.gpu import FAILED, UNAVAILABLE, GpuStats, classify
from ...domain.source import SourceHealth
from ...format import DASH, age_human, pct_human
from ...sources.nvml import NO_BINDING, NO_DRIVER
from ...state.history import HistoryStore
from ..fastpaint.lean import LeanTable
from .panels import QuietStatic, Trend
from .triage import gpu_subject, mark_text

GiB = 1024**3

# How to get GPU data, for the pane and the status bar.
HOW_TO_ENABLE = ("To see GPUs: list dcgm-exporter URLs under gpu.dcgm in the config file, or pass --dcgm URL "
                 "(repeatable); set prometheus.url to read them from Prometheus; on a GPU host keep gpu.nvml: true.")
NO_DRIVER_HINT = "no NVIDIA driver on this host — add dcgm-exporter URLs under gpu.dcgm in the config, or --dcgm URL"
# NVML reasons that mean "this host has no local GPUs" rather than "something broke".
QUIET_NVML = (NO_DRIVER, NO_BINDING)

# History series per GPU: (metric, trend title, formatter of the latest value).
TRENDS: tuple[tuple[str, str], ...] = (
    ("util_pct", "Util"),
    ("mem_pct", "Memory"),
    ("power_w", "Power"),
    ("temp_c", "Temp"),
)


def entity(gid: str) -> str:
    """History entity of one GPU row."""
    return f"gpu:{gid}"


def gpu_id(g: GpuStats) -> str:
    """A stable row id: UUID when known, else host + index (+ MIG instance)."""
    if g.uuid:
        base = g.uuid.lower()
    else:
        base = f"{g.host or '?'}:{g.index if g.index is not None else '?'}"
    if g.gpu_instance_id is not None:
        base += f"/gi{g.gpu_instance_id}"
    return base


class GpuRow(NamedTuple):
    gid: str
    gpu: GpuStats
    depth: int  # 0 = a GPU, 1 = a MIG device of the GPU above


def flatten(rows: Iterable[GpuStats]) -> list[GpuRow]:
    """GPUs in order, each followed by its MIG devices."""
    out: list[GpuRow] = []
    seen: set[str] = set()
    for g in rows:
        gid = gpu_id(g)
        while gid in seen:
            gid += "'"
        seen.add(gid)
        out.append(GpuRow(gid, g, 0))
        for j, m in enumerate(g.mig_devices):
            mid = f"{gid}/mig{m.gpu_instance_id if m.gpu_instance_id is not None else f'slot{j}'}"
            while mid in seen:
                mid += "'"
            seen.add(mid)
            out.append(GpuRow(mid, m, 1))
    return out


def metric_value(g: GpuStats, metric: str) -> float | None:
    if metric == "mem_pct":
        return g.mem_pct
    v = getattr(g, metric)
    if v is None and metric == "util_pct":
        v = g.gr_engine_active_pct
    return v


def record_history(history: HistoryStore, flat: Iterable[GpuRow]) -> None:
    """One sample per GPU row and trend metric (a missing value is a gap)."""
    for r in flat:
        for metric, _ in TRENDS:
            history.record(entity(r.gid), metric, metric_value(r.gpu, metric))


# -- formatting ---------------------------------------------------------------------

_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(pct: float | None, width: int = 5) -> str:
    """A horizontal bar of ``width`` cells in eighths."""
    if pct is None or math.isnan(pct):
        return " " * width
    n = round(max(0.0, min(100.0, pct)) / 100.0 * width * 8)
    full, part = divmod(n, 8)
    s = "█" * full + (_EIGHTHS[part] if part else "")
    return s.ljust(width)


def mem_human(used: int | None, total: int | None) -> str:
    """"71.9/80G" (GiB)."""
    if used is None and total is None:
        return DASH
    u = DASH if used is None else f"{used / GiB:.1f}"
    t = DASH if total is None else f"{total / GiB:.0f}"
    return f"{u}/{t}G"


def temp_human(c: float | None) -> str:
    return DASH if c is None else f"{c:.0f}°C"


def power_human(w: float | None, limit: float | None) -> str:
    if w is None:
        return DASH
    return f"{w:.0f}/{limit:.0f}W" if limit else f"{w:.0f}W"


def clock_human(mhz: float | None, max_mhz: float | None) -> str:
    if mhz is None:
        return DASH
    return f"{mhz:.0f}/{max_mhz:.0f}" if max_mhz else f"{mhz:.0f}"


def errors_human(g: GpuStats) -> str:
    """ECC corrected/uncorrected, then the last XID when there was one: "3/0 XID 79"."""
    if g.ecc_corrected is None and g.ecc_uncorrected is None:
        ecc = DASH
    else:
        c = DASH if g.ecc_corrected is None else str(g.ecc_corrected)
        u = DASH if g.ecc_uncorrected is None else str(g.ecc_uncorrected)
        ecc = f"{c}/{u}"
    return f"{ecc} XID {g.last_xid}" if g.last_xid else ecc


def short_error(error: str | None, limit: int = 32) -> str:
    """"NVML: GPU is lost" → "GPU is lost"."""
    if not error:
        return ""
    text = error
    head, sep, tail = text.partition(": ")
    if sep and head.lower() in ("nvml", "dcgm", "prometheus"):
        text = tail
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_text(g: GpuStats) -> str:
    status = classify(g)
    if g.state in (FAILED, UNAVAILABLE) and g.error:
        return f"{status} ({short_error(g.error)})"
    return status


def status_style(status: str) -> str:
    if status.startswith(("failed", "error")):
        return "bold red"
    if status.startswith("throttled (HW"):
        return "bold red"
    if status.startswith("throttled"):
        return "bold yellow"
    if status.startswith("app fault"):
        return "yellow"
    if status in ("busy", "saturated"):
        return "green"
    if status == "memory-bound":
        return "cyan"
    return "dim"


def _hw(words_source: GpuStats) -> bool:
    return any(r.startswith("Hw") for r in words_source.slowdowns)


class Cell(NamedTuple):
    text: str
    style: str = ""
    raw: float | None = None  # the number behind the text (tests read it)
    bar: str = ""  # appended in the bar style (utilisation)


def _util_cell(g: GpuStats) -> Cell:
    u = metric_value(g, "util_pct")
    if u is None:
        return Cell(DASH)
    return Cell(f"{u:>3.0f}% ", raw=u, bar=bar(u))


def _errors_style(g: GpuStats) -> str:
    if g.ecc_uncorrected or (g.last_xid and classify(g).startswith("error")):
        return "bold red"
    if g.last_xid or g.retired_pages:
        return "yellow"
    return ""


def _engine_text(g: GpuStats) -> str:
    if g.engine:
        return g.engine
    if g.pod:
        return f"{g.namespace}/{g.pod}" if g.namespace else g.pod
    return DASH


def row_cells(r: GpuRow, multi_host: bool) -> dict[str, Cell]:
    g = r.gpu
    label = g.label
    if multi_host and r.depth == 0 and g.host:
        label = f"{g.host}:{label}"
    if r.depth:
        label = "└ " + label
    status = status_text(g)
    if r.depth and status == "unknown":
        status = "MIG device"  # NVML reports no utilisation per MIG device
    broken = g.state in (FAILED, UNAVAILABLE)
    words = g.throttle_words
    clock = clock_human(g.sm_clock_mhz, g.sm_clock_max_mhz)
    if words:
        clock = f"{clock} {words}"
    temp_style = ""
    if g.temp_c is not None and any("Thermal" in r_ for r_ in g.slowdowns):
        temp_style = "bold red" if _hw(g) else "bold yellow"
    name = g.mig_profile if r.depth and g.mig_profile else (g.name or DASH)
    if broken:
        return {"gpu": Cell(label), "status": Cell(status, status_style(status)), "util": Cell(DASH),
                "mem": Cell(DASH), "temp": Cell(DASH), "power": Cell(DASH), "clock": Cell(DASH),
                "errors": Cell(DASH), "engine": Cell(_engine_text(g)), "name": Cell(name)}
    return {
        "gpu": Cell(label),
        "status": Cell(status, status_style(status)),
        "util": _util_cell(g),
        "mem": Cell(mem_human(g.mem_used_bytes, g.mem_total_bytes), raw=g.mem_used_bytes),
        "temp": Cell(temp_human(g.temp_c), temp_style, raw=g.temp_c),
        "power": Cell(power_human(g.power_w, g.power_limit_w), raw=g.power_w),
        "clock": Cell(clock, ("bold red" if _hw(g) else "bold yellow") if words else "", raw=g.sm_clock_mhz),
        "errors": Cell(errors_human(g), _errors_style(g)),
        "engine": Cell(_engine_text(g)),
        "name": Cell(name),
    }


# (key, header). Most important first: at 80 columns the left ones stay visible.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("gpu", "GPU"),
    ("status", "Status"),
    ("util", "Util"),
    ("mem", "Memory"),
    ("temp", "Temp"),
    ("power", "Power"),
    ("clock", "SM clock"),
    ("errors", "ECC/XID"),
    ("engine", "Engine"),
    ("name", "Name"),
)
def render_cell(c: Cell) -> Text | str:
    if c.bar:
        t = Text(c.text, style=c.style)
        t.append(c.bar, style="green")
        return t
    return Text(c.text, style=c.style or "")  # never a str: DataTable would parse it as markup


def _plain(c: Cell) -> str:
    return c.text + c.bar


class GpusTable(LeanTable):
    """DataTable of GPUs. ``update_rows`` touches only cells whose text changed."""

    DEFAULT_CSS = """
    GpusTable { height: 1fr; scrollbar-size-horizontal: 0; }
    """

    def __init__(self, **kwargs: Any) -> None:
        # the GPU label stays put when the operator scrolls right (at 80 columns)
        # The cells' own colours win over the cursor's: the selected row keeps its utilisation bar.
        super().__init__(cursor_type="row", zebra_stripes=False, fixed_columns=1,
                         cursor_foreground_priority="renderable", **kwargs)
        self._order: list[str] = []
        self._shown: dict[str, dict[str, Cell]] = {}

    def on_mount(self) -> None:
        for key, header in COLUMNS:
            self.add_column(header, key=key)

    @property
    def selected_gpu(self) -> str | None:
        if not self._order or self.cursor_row is None or not 0 <= self.cursor_row < len(self._order):
            return None
        return self._order[self.cursor_row]

    def update_rows(self, flat: list[GpuRow], multi_host: bool = False, marks: dict[str, str] | None = None) -> None:
        """``marks``: GPU (as triage names it) → the severity of a verdict about it (its row is marked)."""
        marks = marks or {}
        order = [r.gid for r in flat]
        if order != self._order:
            selected = self.selected_gpu
            self.clear()
            self._shown.clear()
            for r in flat:
                cells = _marked(row_cells(r, multi_host), r, marks)
                self.add_row(*(render_cell(cells[k]) for k, _ in COLUMNS), key=r.gid)
                self._shown[r.gid] = cells
            self._order = order
            if selected in order:
                self.move_cursor(row=order.index(selected))
            return
        for r in flat:
            shown = self._shown[r.gid]
            changed: dict[str, Cell] = {}
            cells = _marked(row_cells(r, multi_host), r, marks)
            for key, _ in COLUMNS:
                new = cells[key]
                old = shown.get(key)
                if old is not None and _plain(old) == _plain(new) and old.style == new.style:
                    continue
                shown[key] = new
                changed[key] = new
            if changed:
                self.set_cells(r.gid, {k: render_cell(c) for k, c in changed.items()})


def _marked(cells: dict[str, Cell], r: GpuRow, marks: dict[str, str]) -> dict[str, Cell]:
    """The GPU cell with the triage mark when a verdict is about this GPU."""
    if marks and r.depth == 0:
        severity = marks.get(gpu_subject(r.gpu))
        if severity is not None:
            text, style = mark_text(cells["gpu"].text, severity)
            cells["gpu"] = Cell(text, style)
    return cells


# -- sources ------------------------------------------------------------------------


def _quiet(h: SourceHealth) -> bool:
    return h.kind == "nvml" and h.last_error in QUIET_NVML


def source_notice(rows: list[GpuStats], health: list[SourceHealth]) -> str | None:
    """Markup for the line(s) above the table, or None when there is nothing to say.

    With no GPU rows it says plainly why (each source's error) and how to
    enable a source; with rows, only sources that fail are named.
    """
    if not health:
        return None
    lines: list[str] = []
    if not rows:
        if all(not h.ok and not h.last_error for h in health):
            return "[dim]Reading GPU sources…[/dim]"
        lines.append("[b]No GPU data.[/b]")
        for h in health:
            if h.ok:
                lines.append(f"[green]✓[/] {_name(h)} answers but reports no GPUs")
            elif h.last_error == NO_DRIVER:
                lines.append(f"[yellow]✗ nvml[/]: {NO_DRIVER_HINT}")
            elif h.last_error:
                lines.append(f"[red]✗ {_name(h)}[/]: {escape(h.last_error)}")
        lines.append(f"[dim]{HOW_TO_ENABLE}[/dim]")
        return "\n".join(lines)
    for h in health:
        if not h.last_error:
            continue
        if _quiet(h):
            lines.append(f"[dim]nvml: {escape(_first_clause(h.last_error))} (the GPUs below come from other sources)[/dim]")
        elif h.ok:
            lines.append(f"[yellow]⚠ {_name(h)}[/]: {escape(h.last_error)}")
        else:
            lines.append(f"[red]✗ {_name(h)}[/] down: {escape(h.last_error)}")
    return "\n".join(lines) if lines else None


def _name(h: SourceHealth) -> str:
    """"nvml", "dcgm http://node:9400/metrics"."""
    return escape(h.kind if h.name in (h.kind, "gpu") else f"{h.kind} {h.name}")


def _first_clause(text: str) -> str:
    return text.split(" — ")[0]


def gpu_status_parts(health: list[SourceHealth], now: float) -> list[str]:
    """Status-bar markup for the GPU sources (empty before the first poll)."""
    if not health or all(not h.ok and not h.last_error for h in health):
        return []
    ok = [h for h in health if h.ok]
    parts: list[str] = []
    if ok:
        kinds: dict[str, int] = {}
        for h in ok:
            kinds[h.kind] = kinds.get(h.kind, 0) + 1
        names = ", ".join(k if n == 1 else f"{k} ×{n}" for k, n in kinds.items())
        parts.append(f"[green]✓[/] GPU {names}")
    elif all(_quiet(h) or h.kind == "gpu" for h in health if h.last_error):
        why = next(h.last_error for h in health if h.last_error)
        parts.append(f"[yellow]no GPU source[/]: {escape(_first_clause(why))} (4: GPUs)")
        return parts
    bad = [h for h in health if not h.ok and h.last_error and not _quiet(h)]
    for h in bad[:2]:
        age = f", {age_human(now - h.last_error_at)} ago" if h.last_error_at is not None else ""
        parts.append(f"[red]✗ {_name(h)}[/] down: {escape(h.last_error or '')}{age}")
    if len(bad) > 2:
        parts.append(f"[red]+{len(bad) - 2} GPU sources down[/]")
    for h in [h for h in ok if h.last_error][:1]:
        parts.append(f"[yellow]⚠ {h.kind}[/] {escape(h.last_error or '')}")
    return parts


# -- engines --------------------------------------------------------------------------

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "", socket.gethostname().lower()}


def engine_refs(endpoints: Iterable[Any], pids: dict[str, int] | None = None
                ) -> list[tuple[str, int | None, int | None]]:
    """``(name, root_pid, port)`` for engines on this host, for GPU process → engine mapping.

    ``pids`` are the root PIDs of engines infertop started (by name); other
    local engines are matched by their URL's port against ``--port`` on the
    GPU process's command line (or an ancestor's). Remote engines are skipped.
    """
    pids = pids or {}
    out = []
    for e in endpoints:
        try:
            parts = urlsplit(e.url)
            host, port = (parts.hostname or "").lower(), parts.port
        except ValueError:
            continue
        pid = pids.get(e.name)
        if host not in _LOCAL_HOSTS and pid is None:
            continue
        if port is None:
            port = 443 if parts.scheme == "https" else 80
        out.append((e.name, pid, port))
    return out


# -- summary for the Overview tiles ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuSummary:
    gpus: int = 0
    ok: int = 0
    throttled: int = 0
    failed: int = 0  # failed, unavailable or in error (XID, uncorrected ECC)
    util_mean_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_max_c: float | None = None
    hottest: str | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    errors: str | None = None  # "gpu3 XID 79" — the worst error, when any
    thermal: bool = False

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_used_bytes / self.mem_total_bytes


def summarize(rows: list[GpuStats]) -> GpuSummary:
    """Fleet-wide GPU numbers (whole GPUs; MIG devices are inside their parent)."""
    if not rows:
        return GpuSummary()
    throttled = failed = 0
    utils: list[float] = []
    used = total = 0
    have_mem = False
    temp_max: float | None = None
    hottest = None
    power = limit = 0.0
    have_power = have_limit = False
    errors: list[str] = []
    thermal = False
    multi_host = len({g.host for g in rows}) > 1
    for g in rows:
        status = classify(g)
        name = f"{g.host}:{g.label}" if multi_host and g.host else g.label
        if g.state in (FAILED, UNAVAILABLE) or status.startswith("error"):
            failed += 1
            errors.append(f"{name} {status}")
            continue
        if status.startswith("throttled"):
            throttled += 1
        if any("Thermal" in r for r in g.slowdowns):
            thermal = True
        u = metric_value(g, "util_pct")
        if u is not None:
            utils.append(u)
        if g.mem_used_bytes is not None and g.mem_total_bytes:
            used += g.mem_used_bytes
            total += g.mem_total_bytes
            have_mem = True
        if g.temp_c is not None and (temp_max is None or g.temp_c > temp_max):
            temp_max, hottest = g.temp_c, name
        if g.power_w is not None:
            power += g.power_w
            have_power = True
            if g.power_limit_w:
                limit += g.power_limit_w
                have_limit = True
    return GpuSummary(
        gpus=len(rows), ok=len(rows) - throttled - failed, throttled=throttled, failed=failed,
        util_mean_pct=sum(utils) / len(utils) if utils else None,
        mem_used_bytes=used if have_mem else None, mem_total_bytes=total if have_mem else None,
        temp_max_c=temp_max, hottest=hottest,
        power_w=power if have_power else None, power_limit_w=limit if have_limit else None,
        errors=errors[0] + (f" +{len(errors) - 1}" if len(errors) > 1 else "") if errors else None,
        thermal=thermal,
    )


# -- the pane -----------------------------------------------------------------------------


class GpusPane(Vertical):
    """Notice, table and the selected GPU's trends."""

    DEFAULT_CSS = """
    GpusPane #gpu-notice { height: auto; padding: 0 1; display: none; }
    GpusPane #gpu-notice.visible { display: block; }
    GpusPane #gpu-trends { height: 3; }
    GpusPane.empty GpusTable, GpusPane.empty #gpu-trends { display: none; }
    """

    class DetailRequested(Message):
        """The operator asked for one GPU's detail (Enter on its row)."""

        def __init__(self, gpu_id: str) -> None:
            super().__init__()
            self.gpu_id = gpu_id

    def __init__(self, history: HistoryStore, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history = history
        self.rows: list[GpuStats] = []
        self.flat: list[GpuRow] = []
        self.by_id: dict[str, GpuRow] = {}
        self._trend_gpu: str | None = None
        self._trends_at = -1e9

    def compose(self) -> ComposeResult:
        yield QuietStatic(id="gpu-notice")
        yield GpusTable(id="gpus-table")
        with Horizontal(id="gpu-trends"):
            for metric, title in TRENDS:
                yield Trend(title, id=f"g-{metric.replace('_', '-')}")

    @property
    def table(self) -> GpusTable:
        return self.query_one(GpusTable)

    @property
    def selected_gpu(self) -> str | None:
        return self.table.selected_gpu

    def gpu(self, gid: str) -> GpuRow | None:
        return self.by_id.get(gid)

    def show(self, rows: list[GpuStats], health: list[SourceHealth], *, trends: bool = False,
             marks: dict[str, str] | None = None) -> None:
        """Bring the pane in line with the latest GPU rows and source health (``marks``: the GPUs triage
        verdicts are about, marked ◆)."""
        self.rows = list(rows)
        self.flat = flatten(rows)
        self.by_id = {r.gid: r for r in self.flat}
        notice = source_notice(self.rows, health)
        box = self.query_one("#gpu-notice", QuietStatic)
        box.set_class(notice is not None, "visible")
        if notice is not None:
            box.show(Text.from_markup(notice))
        self.set_class(not self.flat, "empty")
        multi_host = len({g.host for g in rows}) > 1
        self.table.update_rows(self.flat, multi_host, marks)
        if trends or self.selected_gpu != self._trend_gpu:
            self.show_trends()

    def show_trends(self) -> None:
        gid = self.selected_gpu
        self._trend_gpu = gid
        r = self.by_id.get(gid) if gid else None
        if r is None or gid is None:
            return
        g = r.gpu
        values = {  # short: four trends share 80 columns
            "util_pct": f"{g.label} {pct_human(metric_value(g, 'util_pct'))}",
            "mem_pct": pct_human(g.mem_pct),
            "power_w": DASH if g.power_w is None else f"{g.power_w:.0f}W",
            "temp_c": temp_human(g.temp_c),
        }
        for metric, _ in TRENDS:
            self.query_one(f"#g-{metric.replace('_', '-')}", Trend).show(
                self.history.series(entity(gid), metric, 120), values[metric])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table is self.table and self.selected_gpu != self._trend_gpu:
            self.show_trends()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table is not self.table:
            return
        event.stop()  # Enter here opens the GPU's detail, not an engine's
        gid = self.selected_gpu
        if gid is not None:
            self.post_message(self.DetailRequested(gid))
