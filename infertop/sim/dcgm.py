"""Simulated GPUs and their dcgm-exporter text.

Each simulated engine owns one :class:`SimGpu` whose state follows the
engine's load on the same virtual clock: utilisation from the fraction of
time the engine was executing steps, power from utilisation and compute
intensity (prefill-heavy steps draw more), temperature with a thermal lag,
SM clock dropping from 1980 MHz to ~1830 MHz when hot (thermal throttling,
with the NVML clock-event bits set), an energy counter, and the framebuffer
that vLLM preallocates at start (``gpu_memory_utilization``).

:func:`render_dcgm` writes what dcgm-exporter (4.x, default counters plus
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``) serves: ``# HELP``/``# TYPE`` per
field, labels ``gpu, UUID, pci_bus_id, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION`` (+ ``container, namespace, pod`` in Kubernetes
mode), integers for integer fields and ``%f`` for float fields.
"""

from __future__ import annotations

import math
import random

__all__ = ["SimGpu", "render_dcgm", "DCGM_FIELDS", "CLOCK_EVENT_BITS", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; charset=utf-8"

#: NVML clocks-event reason bits (``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``).
CLOCK_EVENT_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}

# (field, prometheus type, help, kind) in dcgm-exporter's default-counters.csv order.
# kind "i": integer value, "f": float value (printed with %f, as the exporter does).
DCGM_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "i"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "i"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "f"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", "i"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "i"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "i"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "i"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "i"),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
     "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).", "i"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "i"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.",
     "i"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", "i"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", "i"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", "i"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "i"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "f"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "f"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data.", "f"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in "
     "bytes per second.", "f"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
     "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in "
     "bytes per second.", "f"),
)

# PCI bus ids of an 8-GPU HGX H100 board.
_HGX_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")

MAX_SM_CLOCK_MHZ = 1980
THROTTLED_SM_CLOCK_MHZ = 1830
HW_SLOWDOWN_SM_CLOCK_MHZ = 1755
IDLE_SM_CLOCK_MHZ = 345


class SimGpu:
    """One simulated GPU (H100 SXM by default) driven by its engine's load.

    ``force_throttle=True`` models a GPU with poor cooling: it runs hot and
    thermally throttles under load (SM clock ~1830 MHz, bit 0x20; above
    92 °C also hardware slowdown, bits 0x8|0x40). ``xid`` sets the last XID
    error; ``pcie_replays`` the PCIe replay counter.
    """

    def __init__(
        self,
        index: int = 0,
        seed: int = 0,
        *,
        model_name: str = "NVIDIA H100 80GB HBM3",
        hostname: str = "sim-node-0",
        uuid: str | None = None,
        pci_bus_id: str | None = None,
        driver_version: str = "570.124.06",
        fb_total_mib: int = 81559,
        fb_reserved_mib: int = 543,
        gpu_memory_utilization: float = 0.9,
        power_limit_w: float = 700.0,
        idle_power_w: float = 70.0,
        mem_clock_mhz: int = 2619,
        force_throttle: bool = False,
        xid: int = 0,
        pcie_replays: int = 0,
        pod: str | None = None,
        namespace: str | None = None,
        container: str | None = None,
    ) -> None:
        rng = random.Random(f"infertop-sim-gpu:{seed}:{index}")
        self.index = index
        self.model_name = model_name
        self.hostname = hostname
        if uuid is None:
            h = rng.getrandbits(128)
            s = f"{h:032x}"
            uuid = f"GPU-{s[:8]}-{s[8:12]}-{s[12:16]}-{s[16:20]}-{s[20:]}"
        self.uuid = uuid
        if pci_bus_id is None:
            bus = _HGX_BUS_IDS[index] if index < len(_HGX_BUS_IDS) else f"{(0x10 + index) % 256:02X}"
            pci_bus_id = f"00000000:{bus}:00.0"
        self.pci_bus_id = pci_bus_id
        self.device = f"nvidia{index}"
        self.driver_version = driver_version
        self.fb_total_mib = fb_total_mib
        self.fb_reserved_mib = fb_reserved_mib
        self.gpu_memory_utilization = gpu_memory_utilization
        self.power_limit_w = power_limit_w
        self.idle_power_w = idle_power_w
        self.mem_clock_mhz = mem_clock_mhz
        self.force_throttle = force_throttle
        self.xid = xid
        self.pcie_replays = pcie_replays
        self.pod = pod
        self.namespace = namespace
        self.container = container
        #: False while the engine process is not running (framebuffer released).
        self.engine_loaded = True
        self.sleep_level = 0
        # dynamic state
        self.util = 0.0  # 0..1, smoothed like the driver's sampling window
        self.intensity = 0.0  # 0..1 compute intensity of the recent steps
        self.power_w = idle_power_w
        self.temp_c = 32.0 + (18.0 if force_throttle else 0.0) + rng.random() * 2
        self.energy_mj = float(rng.randrange(2_000_000_000, 40_000_000_000))
        self._fb_jitter = rng.randrange(0, 64)
        self.throttle = 0  # 0 none, 1 sw thermal, 2 hw thermal
        #: Degrees the die runs above its normal temperature for the same power (failed fans, a blocked
        #: inlet): the gpu-throttled scenario raises it until the GPU throttles.
        self.cooling_loss_c = 0.0
        self.power_capped = False

    # ----------------------------------------------------------------- model

    def advance(self, dt: float, busy_s: float, tokens: int = 0) -> None:
        """Advance ``dt`` seconds during which the engine was busy ``busy_s`` seconds
        and processed ``tokens`` tokens."""
        if dt <= 0:
            return
        inst = min(1.0, max(0.0, busy_s / dt))
        a = 1.0 - math.exp(-dt / 1.0)
        self.util += (inst - self.util) * a
        tok_rate = tokens / busy_s if busy_s > 0 else 0.0
        inst_int = min(1.0, tok_rate / 20000.0)
        if busy_s > 0:
            self.intensity += (inst_int - self.intensity) * a
        clock_ratio = self.sm_clock_mhz / MAX_SM_CLOCK_MHZ if self.util > 0.01 else 1.0
        target_p = self.idle_power_w + self.util * (280.0 + 350.0 * self.intensity) * (clock_ratio ** 2)
        self.power_capped = target_p > self.power_limit_w * 0.98
        target_p = min(target_p, self.power_limit_w * 0.99)
        self.power_w += (target_p - self.power_w) * (1.0 - math.exp(-dt / 0.5))
        if self.force_throttle:
            target_t = 50.0 + (self.power_w - self.idle_power_w) * 0.13
        else:
            target_t = 32.0 + (self.power_w - self.idle_power_w) * 0.085
        target_t += self.cooling_loss_c
        if self.throttle == 1:
            # the clock-down holds the die near the slowdown threshold
            target_t = min(target_t, 87.5)
        self.temp_c += (target_t - self.temp_c) * (1.0 - math.exp(-dt / 20.0))
        self.energy_mj += self.power_w * dt * 1000.0
        t = self.temp_c
        if t >= 92.0:
            self.throttle = 2
        elif t >= 85.0:
            self.throttle = 2 if (self.throttle == 2 and t >= 90.0) else 1
        elif t < 82.0:
            self.throttle = 0
        elif self.throttle == 2:
            self.throttle = 1

    @property
    def speed(self) -> float:
        """Relative compute speed for the engine: SM clock / max clock under load."""
        if self.throttle == 2:
            return HW_SLOWDOWN_SM_CLOCK_MHZ / MAX_SM_CLOCK_MHZ
        if self.throttle == 1:
            return THROTTLED_SM_CLOCK_MHZ / MAX_SM_CLOCK_MHZ
        return 1.0

    @property
    def idle(self) -> bool:
        return self.util < 0.01

    @property
    def sm_clock_mhz(self) -> int:
        if self.idle and self.throttle == 0:
            return IDLE_SM_CLOCK_MHZ
        if self.throttle == 2:
            return HW_SLOWDOWN_SM_CLOCK_MHZ
        if self.throttle == 1:
            return THROTTLED_SM_CLOCK_MHZ
        return MAX_SM_CLOCK_MHZ

    @property
    def clock_event_reasons(self) -> int:
        bits = 0
        if self.idle:
            bits |= CLOCK_EVENT_BITS["gpu_idle"]
        if self.power_capped:
            bits |= CLOCK_EVENT_BITS["sw_power_cap"]
        if self.throttle >= 1:
            bits |= CLOCK_EVENT_BITS["sw_thermal_slowdown"]
        if self.throttle == 2:
            bits |= CLOCK_EVENT_BITS["hw_slowdown"] | CLOCK_EVENT_BITS["hw_thermal_slowdown"]
        return bits

    @property
    def fb_used_mib(self) -> int:
        if not self.engine_loaded:
            return 0
        base = 437 + self._fb_jitter  # CUDA context
        if self.sleep_level == 2:
            return base
        if self.sleep_level == 1:
            return base + 1024
        return int(self.fb_total_mib * self.gpu_memory_utilization) + base

    @property
    def fb_free_mib(self) -> int:
        return max(0, self.fb_total_mib - self.fb_reserved_mib - self.fb_used_mib)

    @property
    def util_pct(self) -> int:
        return int(round(self.util * 100))

    def values(self) -> dict[str, float]:
        """Field name -> value, as exported."""
        u = self.util
        k = self.intensity
        return {
            "DCGM_FI_DEV_SM_CLOCK": self.sm_clock_mhz,
            "DCGM_FI_DEV_MEM_CLOCK": self.mem_clock_mhz,
            "DCGM_FI_DEV_MEMORY_TEMP": int(self.temp_c + 4.0),
            "DCGM_FI_DEV_GPU_TEMP": int(self.temp_c),
            "DCGM_FI_DEV_POWER_USAGE": round(self.power_w, 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(self.energy_mj),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": self.pcie_replays,
            "DCGM_FI_DEV_GPU_UTIL": self.util_pct,
            "DCGM_FI_DEV_MEM_COPY_UTIL": int(round(u * (35.0 + 40.0 * (1.0 - k)))),
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_XID_ERRORS": self.xid,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": self.clock_event_reasons,
            "DCGM_FI_DEV_FB_FREE": self.fb_free_mib,
            "DCGM_FI_DEV_FB_USED": self.fb_used_mib,
            "DCGM_FI_DEV_FB_RESERVED": self.fb_reserved_mib,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(u * 0.985, 6),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(u * (0.08 + 0.55 * k), 6),
            "DCGM_FI_PROF_DRAM_ACTIVE": round(u * (0.45 + 0.35 * (1.0 - k)), 6),
            "DCGM_FI_PROF_PCIE_TX_BYTES": round(2.1e6 + u * 4.0e7, 0),
            "DCGM_FI_PROF_PCIE_RX_BYTES": round(3.4e6 + u * 9.0e7, 0),
        }

    def labels(self, *, hostname_label: str = "Hostname", uuid_label: str = "UUID") -> str:
        """The label block (without braces), in dcgm-exporter's order."""
        parts = [f'gpu="{self.index}"', f'{uuid_label}="{self.uuid}"', f'pci_bus_id="{self.pci_bus_id}"',
                 f'device="{self.device}"', f'modelName="{self.model_name}"']
        if hostname_label and self.hostname:
            parts.append(f'{hostname_label}="{self.hostname}"')
        parts.append(f'DCGM_FI_DRIVER_VERSION="{self.driver_version}"')
        for k in ("container", "namespace", "pod"):
            v = getattr(self, k)
            if v is not None:
                parts.append(f'{k}="{v}"')
        return ",".join(parts)


def _fmt(kind: str, v: float) -> str:
    if kind == "i":
        return str(int(v))
    return f"{v:f}"


def render_dcgm(gpus, *, hostname_label: str = "Hostname", uuid_label: str = "UUID") -> str:
    """dcgm-exporter text for ``gpus`` (one node's exporter).

    ``hostname_label`` is ``"Hostname"`` (exporter <= 4.5.x), ``"hostname"``
    (newer main) or ``""`` (``--no-hostname``); ``uuid_label="uuid"`` mimics
    ``--use-old-namespace``.
    """
    gpus = sorted(gpus, key=lambda g: g.index)
    blocks = [g.labels(hostname_label=hostname_label, uuid_label=uuid_label) for g in gpus]
    vals = [g.values() for g in gpus]
    out: list[str] = []
    for name, typ, doc, kind in DCGM_FIELDS:
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {typ}\n")
        for lb, v in zip(blocks, vals):
            out.append(f"{name}{{{lb}}} {_fmt(kind, v[name])}\n")
    return "".join(out)
