"""Detail view of one GPU (or MIG device): every field, its history, its processes."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from ...domain.gpu import THROTTLE_WORDS, GpuStats, classify
from ...format import DASH, bytes_human, pct_human, rate_human
from ...state.history import HistoryStore
from ..widgets.gpus import TRENDS, clock_human, entity, metric_value, power_human, temp_human
from ..widgets.panels import QuietStatic, Trend


def _v(v: object, unit: str = "") -> str:
    if v is None:
        return DASH
    if isinstance(v, float):
        return f"{v:.0f}{unit}"
    return f"{v}{unit}"


def _mb(bytes_per_s: float | None) -> str:
    return DASH if bytes_per_s is None else f"{rate_human(bytes_per_s / 1e6)} MB/s"


def _pct_of(pct: float | None) -> str:
    return f"  ({pct_human(pct)})" if pct is not None else ""


def describe(g: GpuStats) -> str:
    """Multi-line markup of everything known about ``g``."""
    status = classify(g)
    reasons = g.throttle_reasons
    if reasons is None:
        throttle = DASH
    elif not reasons:
        throttle = "none"
    else:
        throttle = ", ".join(THROTTLE_WORDS.get(r, r) for r in reasons)
        if g.slowdowns:
            throttle += f"  [b]→ clocks held down by {g.throttle_words}[/b]"
    rows: list[tuple[str, str]] = [
        ("Status", escape(status) + (f" — {escape(g.error)}" if g.error else "")),
        ("Name", escape(g.name or DASH) + (f"  (MIG {g.mig_profile})" if g.mig_profile else "")),
        ("UUID", g.uuid or DASH),
        ("Host / index", f"{escape(g.host or DASH)} / {_v(g.index)}"
                         + (f"  GPU instance {g.gpu_instance_id}, compute instance {_v(g.compute_instance_id)}"
                            if g.gpu_instance_id is not None else "")),
        ("PCI bus", g.pci_bus_id or DASH),
        ("Driver", g.driver_version or DASH),
        ("Source", g.source + (f"  {escape(g.source_url)}" if g.source_url else "")),
        ("Utilization", f"GPU {pct_human(metric_value(g, 'util_pct'))}, memory interface {pct_human(g.mem_util_pct)}"),
        ("Memory", f"{bytes_human(g.mem_used_bytes)} / {bytes_human(g.mem_total_bytes)}{_pct_of(g.mem_pct)}"),
        ("Temperature", f"GPU {temp_human(g.temp_c)}, memory {temp_human(g.mem_temp_c)}"),
        ("Power", f"{power_human(g.power_w, g.power_limit_w)}{_pct_of(g.power_pct)}"),
        ("SM clock", f"{clock_human(g.sm_clock_mhz, g.sm_clock_max_mhz)} MHz{_pct_of(g.sm_clock_pct)}"),
        ("Memory clock", f"{clock_human(g.mem_clock_mhz, g.mem_clock_max_mhz)} MHz"),
        ("Clock events", throttle),
        ("P-state / fan", f"{'P' + str(g.pstate) if g.pstate is not None else DASH} / {pct_human(g.fan_pct)}"),
        ("PCIe", f"tx {_mb(g.pcie_tx_bytes_per_s)}, rx {_mb(g.pcie_rx_bytes_per_s)}"),
        ("ECC errors", DASH if g.ecc_corrected is None and g.ecc_uncorrected is None
                       else f"{_v(g.ecc_corrected)} corrected, {_v(g.ecc_uncorrected)} uncorrected (volatile)"),
        ("Retired pages", _v(g.retired_pages)),
        ("Last XID", "none" if g.last_xid == 0 else _v(g.last_xid)),
        ("Engine", escape(g.engine or DASH)),
    ]
    if g.pod or g.namespace or g.container:
        rows.append(("Pod", escape(f"{g.namespace or DASH}/{g.pod or DASH} (container {g.container or DASH})")))
    dcp = [(n, v) for n, v in (("graphics active", g.gr_engine_active_pct), ("SM active", g.sm_active_pct),
                               ("SM occupancy", g.sm_occupancy_pct), ("tensor active", g.tensor_active_pct),
                               ("DRAM active", g.dram_active_pct)) if v is not None]
    if dcp:
        rows.append(("Profiling", ", ".join(f"{n} {pct_human(v)}" for n, v in dcp)))
    if g.mig_mode is not None:
        rows.append(("MIG", ("on, " + f"{len(g.mig_devices)} device(s)") if g.mig_mode else "off"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"[b]{k.ljust(width)}[/b]  {v}" for k, v in rows)


def describe_processes(g: GpuStats) -> str:
    """The compute processes on ``g`` (and on its MIG devices) with their owning engine."""
    procs = [(g.label, p) for p in g.processes] + [(m.label, p) for m in g.mig_devices for p in m.processes]
    if not procs:
        if g.source == "nvml":
            return "[dim]No compute processes.[/dim]"
        return f"[dim]No process list ({g.source} does not report processes; NVML on the GPU's host does).[/dim]"
    lines = [f"[b]{'PID':>8}  {'Memory':>10}  {'Engine':<14}  {'Device':<10}  Command[/b]"]
    for dev, p in sorted(procs, key=lambda x: x[1].pid):
        lines.append(f"{p.pid:>8}  {bytes_human(p.used_bytes):>10}  {escape(p.engine or DASH):<14}  {dev:<10}  "
                     f"{escape((p.name or DASH)[:80])}")
    return "\n".join(lines)


class GpuDetailScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]
    DEFAULT_CSS = """
    GpuDetailScreen #detail-title { background: $panel; padding: 0 1; text-style: bold; }
    GpuDetailScreen #detail-body, GpuDetailScreen #detail-procs { padding: 0 1; height: auto; }
    GpuDetailScreen #detail-procs { margin-top: 1; }
    GpuDetailScreen .trends { height: 3; }
    """

    def __init__(self, gpu_id: str, label: str, history: HistoryStore) -> None:
        super().__init__()
        self.gpu_id = gpu_id
        self.label = label
        self.history = history

    def compose(self) -> ComposeResult:
        yield Static(f"GPU {self.label}   (Esc: back)", id="detail-title")
        with VerticalScroll():
            yield QuietStatic(id="detail-body")
            for i in range(0, len(TRENDS), 2):
                with Horizontal(classes="trends"):
                    for metric, title in TRENDS[i : i + 2]:
                        yield Trend(title, id=f"trend-{metric.replace('_', '-')}")
            yield QuietStatic(id="detail-procs")
        yield Footer()

    def show(self, g: GpuStats | None) -> None:
        body = self.query_one("#detail-body", QuietStatic)
        if g is None:
            body.show(f"{self.label} is no longer reported by any GPU source.")
            return
        body.show(describe(g))
        self.query_one("#detail-procs", QuietStatic).show(describe_processes(g))
        values = {"util_pct": pct_human(metric_value(g, "util_pct")), "mem_pct": pct_human(g.mem_pct),
                  "power_w": power_human(g.power_w, g.power_limit_w), "temp_c": temp_human(g.temp_c)}
        for metric, _ in TRENDS:
            self.query_one(f"#trend-{metric.replace('_', '-')}", Trend).show(
                self.history.series(entity(self.gpu_id), metric, 120), values[metric])
