"""dcgm-exporter text for GPU tests: ``exporter_text`` (one family per metric, one sample per row),
``gpu_labels`` (the labels dcgm-exporter puts on a GPU's samples) and ``H100_VALUES`` (one busy H100)."""

from __future__ import annotations

def exporter_text(rows: list[tuple[dict[str, str], dict[str, float]]]) -> str:
    """dcgm-exporter style text: one family per metric, one sample per (labels, values) row."""
    metrics: dict[str, list[str]] = {}
    for labels, values in rows:
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for name, v in values.items():
            metrics.setdefault(name, []).append(f"{name}{{{lab}}} {v}")
    out = []
    for name, lines in metrics.items():
        out += [f"# HELP {name} {name}.", f"# TYPE {name} gauge", *lines]
    return "\n".join(out) + "\n"


def gpu_labels(i: int, uuid: str, host_key: str | None = "Hostname", host: str = "gpu-node-7",
               model: str = "NVIDIA H100 80GB HBM3", uuid_key: str = "UUID", **extra: str) -> dict[str, str]:
    lab = {"gpu": str(i), uuid_key: uuid, "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "device": f"nvidia{i}",
           "modelName": model}
    if host_key:
        lab[host_key] = host
    lab["DCGM_FI_DRIVER_VERSION"] = "570.124.06"
    lab.update(extra)
    return lab


H100_VALUES = {
    "DCGM_FI_DEV_SM_CLOCK": 1830, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_GPU_TEMP": 87,
    "DCGM_FI_DEV_MEMORY_TEMP": 92, "DCGM_FI_DEV_POWER_USAGE": 688.25, "DCGM_FI_DEV_GPU_UTIL": 99,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 41, "DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x40 | 0x4,
    "DCGM_FI_DEV_FB_FREE": 6963, "DCGM_FI_DEV_FB_USED": 74066, "DCGM_FI_DEV_FB_RESERVED": 530,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.97, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.41,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.52, "DCGM_FI_PROF_PCIE_TX_BYTES": 1.5e9, "DCGM_FI_PROF_PCIE_RX_BYTES": 2.5e8,
}
