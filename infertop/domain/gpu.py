"""What infertop knows about one GPU (or one MIG device) at one moment.

``None`` means "not available" (the driver or exporter does not report it,
or the field is not supported on this board) and renders as an em dash; it
is never confused with zero.
"""

from __future__ import annotations

from dataclasses import dataclass

# GPU row states.
OK = "ok"
FAILED = "failed"  # the GPU answered with an error (GPU is lost, ...)
UNAVAILABLE = "unavailable"  # the source could not be read at all

# Clock event ("throttle") reason bits, shared by NVML and DCGM
# (nvmlClocksEventReason* == DCGM_CLOCKS_EVENT_REASON_*). Order = severity
# for :func:`classify` (the first active one names the throttle).
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x0000000000000040, "HwThermalSlowdown"),
    (0x0000000000000080, "HwPowerBrakeSlowdown"),
    (0x0000000000000008, "HwSlowdown"),
    (0x0000000000000020, "SwThermalSlowdown"),
    (0x0000000000000004, "SwPowerCap"),
    (0x0000000000000010, "SyncBoost"),
    (0x0000000000000200, "BoardLimit"),
    (0x0000000000000400, "Reliability"),
    (0x0000000000000002, "ApplicationsClocksSetting"),
    (0x0000000000000100, "DisplayClockSetting"),
    (0x0000000000000001, "GpuIdle"),
)

# What the operator reads for each reason.
THROTTLE_WORDS: dict[str, str] = {
    "HwThermalSlowdown": "HW thermal",
    "HwPowerBrakeSlowdown": "HW power brake",
    "HwSlowdown": "HW slowdown",
    "SwThermalSlowdown": "SW thermal",
    "SwPowerCap": "power cap",
    "SyncBoost": "sync boost",
    "BoardLimit": "board limit",
    "Reliability": "reliability",
    "ApplicationsClocksSetting": "app clocks",
    "DisplayClockSetting": "display clock",
    "GpuIdle": "idle",
}

# Reasons that mean the clocks are held down by something the operator cares
# about (GpuIdle, application clocks and display clock are benign).
SLOWDOWN_REASONS = frozenset(
    {"HwThermalSlowdown", "HwPowerBrakeSlowdown", "HwSlowdown", "SwThermalSlowdown", "SwPowerCap",
     "BoardLimit", "Reliability"}
)


def decode_throttle(mask: int | float | None) -> tuple[str, ...] | None:
    """Bitmask → reason names, most severe first; ``None`` stays ``None``."""
    if mask is None:
        return None
    m = int(mask)
    return tuple(name for bit, name in THROTTLE_BITS if m & bit)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process on a GPU."""

    pid: int
    used_bytes: int | None = None
    name: str | None = None
    engine: str | None = None  # the engine that owns it, when known


@dataclass(frozen=True, slots=True)
class GpuStats:
    """One GPU (or MIG device) as one source saw it.

    ``source`` is "nvml", "dcgm" or "prometheus"; ``source_url`` says which
    endpoint. ``throttle_reasons`` holds NVML reason names (see
    :data:`THROTTLE_WORDS` for the words to show); ``()`` means "none active",
    ``None`` "not reported".
    """

    source: str
    host: str | None = None
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    util_pct: float | None = None
    mem_util_pct: float | None = None  # memory-interface busy %, not capacity
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    throttle_reasons: tuple[str, ...] | None = None
    ecc_corrected: int | None = None  # volatile (since driver load)
    ecc_uncorrected: int | None = None
    retired_pages: int | None = None  # retired pages, or remapped HBM rows (Ampere+)
    last_xid: int | None = None  # last XID seen (0 = none)
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    fan_pct: float | None = None
    pstate: int | None = None  # 0 = P0 (max performance) .. 15
    processes: tuple[GpuProcess, ...] = ()
    mig_devices: tuple[GpuStats, ...] = ()
    state: str = OK
    error: str | None = None
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    engine: str | None = None  # engine owning the processes on it, when known
    # identity / extras
    source_url: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    mig_mode: bool | None = None
    mig_profile: str | None = None  # on MIG devices: "1g.10gb" ...
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mem_temp_c: float | None = None
    # DCGM profiling (DCP) fields, 0..100
    gr_engine_active_pct: float | None = None
    sm_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_active_pct: float | None = None
    dram_active_pct: float | None = None

    # -- derived ---------------------------------------------------------
    @property
    def key(self) -> tuple:
        """Identity across sources: UUID (+ MIG instance) when known, else host + index."""
        if self.uuid:
            return (self.uuid.lower(), self.gpu_instance_id)
        return (self.host, self.index, self.gpu_instance_id)

    @property
    def label(self) -> str:
        """Short name for one row: "gpu0", "gpu0/mig1" or "host:gpu0"."""
        base = f"gpu{self.index}" if self.index is not None else (self.uuid or "gpu?")[:12]
        if self.gpu_instance_id is not None:
            base += f"/mig{self.gpu_instance_id}"
        return base

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_used_bytes / self.mem_total_bytes

    @property
    def power_pct(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return 100.0 * self.power_w / self.power_limit_w

    @property
    def sm_clock_pct(self) -> float | None:
        if self.sm_clock_mhz is None or not self.sm_clock_max_mhz:
            return None
        return 100.0 * self.sm_clock_mhz / self.sm_clock_max_mhz

    @property
    def slowdowns(self) -> tuple[str, ...]:
        """Active reasons that actually hold the clocks down, most severe first."""
        return tuple(r for r in self.throttle_reasons or () if r in SLOWDOWN_REASONS)

    @property
    def throttle_words(self) -> str:
        """"HW thermal, power cap" — or "" when nothing holds the clocks down."""
        return ", ".join(THROTTLE_WORDS.get(r, r) for r in self.slowdowns)


# Thresholds for classify(), percent.
IDLE_BELOW_PCT = 5.0
SATURATED_AT_PCT = 95.0
MEMORY_BOUND_AT_PCT = 70.0
# XIDs that are application faults (bad kernel, illegal address in one
# process), not a sick GPU. They are still shown, as "app fault".
APP_XIDS = frozenset({13, 31, 43, 45, 68})


def classify(g: GpuStats) -> str:
    """One word (or two) an operator reads at a glance.

    In order: "failed", "n/a" (source unavailable), "error (XID 79)",
    "error (ECC)", "throttled (HW thermal)", "memory-bound", "saturated",
    "busy", "idle"; "unknown" when utilisation is not reported.
    """
    if g.state == FAILED:
        return "failed"
    if g.state == UNAVAILABLE:
        return "n/a"
    if g.last_xid:
        if g.last_xid in APP_XIDS:
            return f"app fault (XID {g.last_xid})"
        return f"error (XID {g.last_xid})"
    if g.ecc_uncorrected:
        return "error (ECC)"
    slow = g.slowdowns
    if slow and not (g.util_pct is not None and g.util_pct < IDLE_BELOW_PCT):
        return f"throttled ({THROTTLE_WORDS.get(slow[0], slow[0])})"
    util = g.util_pct
    if util is None and g.gr_engine_active_pct is not None:
        util = g.gr_engine_active_pct
    if util is None:
        if g.mig_devices:
            return "mig"
        return "unknown"
    dram = g.dram_active_pct if g.dram_active_pct is not None else g.mem_util_pct
    if util >= IDLE_BELOW_PCT and dram is not None and dram >= MEMORY_BOUND_AT_PCT:
        return "memory-bound"
    if util >= SATURATED_AT_PCT:
        return "saturated"
    if util >= IDLE_BELOW_PCT:
        return "busy"
    return "idle"
