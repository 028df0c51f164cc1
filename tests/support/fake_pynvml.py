"""A fake ``pynvml`` (nvidia-ml-py 13.x) for machines without a GPU.

It has pynvml's function names, signatures, constants and exception classes
(``NVMLError`` and its generated subclasses ``NVMLError_NotSupported``,
``NVMLError_GpuIsLost`` ... with the same ``value`` codes, built by the same
``_extractNVMLErrorsAsClasses`` scheme as the real module). An instance of
:class:`FakeNvml` is used where the module would be::

    nv = FakeNvml([h100(), a100(mig=True), l4()])
    nv.gpus[1].faults["nvmlDeviceGetPowerUsage"] = NVMLError_GpuIsLost
    NvmlSource(nvml_module=nv).collect()

Faults are injectable per GPU (``FakeGpu.faults``: function name →
exception class/instance) and for the whole library (``FakeNvml.faults``),
and the library itself can be missing (``FakeNvml(init_error=...)``).
Functions can be removed to mimic an older binding (``nv.remove(name)``).
Time (for the PCIe byte counters) only moves when a test calls ``tick``.
"""

from __future__ import annotations

import string
import sys
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# ---- constants (copied from pynvml.py, nvidia-ml-py 13.615) -----------------
NVML_SUCCESS                         = 0
NVML_ERROR_UNINITIALIZED             = 1
NVML_ERROR_INVALID_ARGUMENT          = 2
NVML_ERROR_NOT_SUPPORTED             = 3
NVML_ERROR_NO_PERMISSION             = 4
NVML_ERROR_ALREADY_INITIALIZED       = 5
NVML_ERROR_NOT_FOUND                 = 6
NVML_ERROR_INSUFFICIENT_SIZE         = 7
NVML_ERROR_INSUFFICIENT_POWER        = 8
NVML_ERROR_DRIVER_NOT_LOADED         = 9
NVML_ERROR_TIMEOUT                   = 10
NVML_ERROR_IRQ_ISSUE                 = 11
NVML_ERROR_LIBRARY_NOT_FOUND         = 12
NVML_ERROR_FUNCTION_NOT_FOUND        = 13
NVML_ERROR_CORRUPTED_INFOROM         = 14
NVML_ERROR_GPU_IS_LOST               = 15
NVML_ERROR_RESET_REQUIRED            = 16
NVML_ERROR_OPERATING_SYSTEM          = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH   = 18
NVML_ERROR_IN_USE                    = 19
NVML_ERROR_MEMORY                    = 20
NVML_ERROR_NO_DATA                   = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED    = 22
NVML_ERROR_INSUFFICIENT_RESOURCES    = 23
NVML_ERROR_FREQ_NOT_SUPPORTED        = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED                = 26
NVML_ERROR_NOT_READY                 = 27
NVML_ERROR_GPU_NOT_FOUND             = 28
NVML_ERROR_INVALID_STATE             = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED  = 30
NVML_ERROR_UNKNOWN                   = 999

NVML_TEMPERATURE_GPU     = 0
NVML_TEMPERATURE_GPU_MAX = 1
NVML_VOLATILE_ECC      = 0
NVML_AGGREGATE_ECC     = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED   = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_ERROR_TYPE_COUNT       = 2
NVML_CLOCK_GRAPHICS  = 0
NVML_CLOCK_SM        = 1
NVML_CLOCK_MEM       = 2
NVML_CLOCK_VIDEO     = 3
NVML_PSTATE_0               = 0
NVML_PSTATE_UNKNOWN         = 32
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR           = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_FI_DEV_PCIE_COUNT_TX_BYTES               = 197
NVML_FI_DEV_PCIE_COUNT_RX_BYTES               = 198
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE  = 0x1
nvmlMemory_v2 = 0x02000028
nvmlTemperature_v1 = 0x100000C
nvmlEventTypeXidCriticalError       = 0x0000000000000008

nvmlClocksEventReasonGpuIdle              = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap           = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown           = 0x0000000000000008
nvmlClocksEventReasonSyncBoost            = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown    = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown    = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting  = 0x0000000000000100
nvmlClocksEventReasonNone                 = 0x0000000000000000
nvmlClocksThrottleReasonGpuIdle              = 0x0000000000000001
nvmlClocksThrottleReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksThrottleReasonSwPowerCap           = 0x0000000000000004
nvmlClocksThrottleReasonHwSlowdown           = 0x0000000000000008
nvmlClocksThrottleReasonSyncBoost            = 0x0000000000000010
nvmlClocksThrottleReasonSwThermalSlowdown    = 0x0000000000000020
nvmlClocksThrottleReasonHwThermalSlowdown    = 0x0000000000000040
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksThrottleReasonDisplayClockSetting  = 0x0000000000000100
nvmlClocksThrottleReasonNone                 = 0x0000000000000000

MiB = 1024 * 1024


# ---- errors (same scheme as pynvml: one subclass per NVML_ERROR_*) -----------
class NVMLError(Exception):
    _valClassMapping: dict = dict()
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED:       "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT:    "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED:       "Not Supported",
        NVML_ERROR_NO_PERMISSION:       "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND:           "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE:   "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER:  "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED:   "Driver Not Loaded",
        NVML_ERROR_TIMEOUT:             "Timeout",
        NVML_ERROR_IRQ_ISSUE:           "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND:   "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND:  "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM:   "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST:         "GPU is lost",
        NVML_ERROR_RESET_REQUIRED:      "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM:    "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY:              "Insufficient Memory",
        NVML_ERROR_UNKNOWN:             "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        try:
            if self.value not in NVMLError._errcode_to_string:
                NVMLError._errcode_to_string[self.value] = str(nvmlErrorString(self.value))
            return NVMLError._errcode_to_string[self.value]
        except NVMLError:
            return "NVML Error with code %d" % self.value

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError('nvmlErrorCode %s is not valid' % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    this_module = sys.modules[__name__]
    nvmlErrorsNames = [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]
    for err_name in nvmlErrorsNames:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):
                obj = NVMLError.__new__(typ, val)
                return obj
            return new
        new_error_class = type(class_name, (NVMLError,), {'__new__': gen_new(err_val)})
        new_error_class.__module__ = __name__
        setattr(this_module, class_name, new_error_class)
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()

# Named here so linters and readers see them (created above).
NVMLError_NotSupported = nvmlExceptionClass(NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = nvmlExceptionClass(NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = nvmlExceptionClass(NVML_ERROR_NOT_FOUND)
NVMLError_GpuIsLost = nvmlExceptionClass(NVML_ERROR_GPU_IS_LOST)
NVMLError_LibraryNotFound = nvmlExceptionClass(NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_DriverNotLoaded = nvmlExceptionClass(NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_FunctionNotFound = nvmlExceptionClass(NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_Uninitialized = nvmlExceptionClass(NVML_ERROR_UNINITIALIZED)
NVMLError_Timeout = nvmlExceptionClass(NVML_ERROR_TIMEOUT)
NVMLError_Unknown = nvmlExceptionClass(NVML_ERROR_UNKNOWN)
NVMLError_InvalidArgument = nvmlExceptionClass(NVML_ERROR_INVALID_ARGUMENT)
NVMLError_ArgumentVersionMismatch = nvmlExceptionClass(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)


def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


# ---- the simulated hardware ---------------------------------------------------
@dataclass
class FakeProc:
    pid: int
    used_bytes: int | None
    gpu_instance_id: int = 0xFFFFFFFF
    compute_instance_id: int = 0xFFFFFFFF


@dataclass
class FakeMig:
    slot: int
    profile: str  # "3g.20gb"
    mem_total: int
    mem_used: int
    gpu_instance_id: int
    compute_instance_id: int = 0
    uuid: str = ""
    procs: list[FakeProc] = field(default_factory=list)
    faults: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeGpu:
    name: str
    uuid: str
    pci_bus_id: str
    mem_total: int
    mem_used: int
    mem_reserved: int
    util: int
    mem_util: int
    temp: int
    power_mw: int
    power_limit_mw: int
    sm_clock: int
    sm_clock_max: int
    mem_clock: int
    mem_clock_max: int
    reasons: int = 0
    ecc: tuple[int, int] | None = (0, 0)  # (corrected, uncorrected) volatile; None = not supported
    retired_pages: tuple[list[int], list[int]] | None = None  # (SBE, DBE); None = not supported
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    fan: int | None = None  # None = passive cooling, NotSupported
    pstate: int = 0
    pcie_rates: tuple[int, int] = (0, 0)  # bytes/s (tx, rx)
    pcie_counters: bool = True  # NVML_FI_DEV_PCIE_COUNT_* supported
    procs: list[FakeProc] = field(default_factory=list)
    mig: list[FakeMig] | None = None  # not None = MIG mode on
    faults: dict[str, Any] = field(default_factory=dict)
    lost: bool = False  # every call on the device raises GpuIsLost


def h100(n: int = 0, **kw: Any) -> FakeGpu:
    """NVIDIA H100 80GB HBM3 (SXM5) under decode load."""
    g = FakeGpu(
        name="NVIDIA H100 80GB HBM3", uuid=f"GPU-5d1e3c4a-8f0b-4c1e-9a7d-1b2c3d4e5f{n:02x}",
        pci_bus_id=f"00000000:{0x18 + n:02X}:00.0",
        mem_total=81559 * MiB, mem_used=73680 * MiB, mem_reserved=530 * MiB,
        util=97, mem_util=61, temp=64, power_mw=612_417, power_limit_mw=700_000,
        sm_clock=1980, sm_clock_max=1980, mem_clock=2619, mem_clock_max=2619,
        reasons=0, ecc=(0, 0), retired_pages=None, remapped_rows=(0, 0, 0, 0), fan=None, pstate=0,
        pcie_rates=(1_250_000_000, 310_000_000), pcie_counters=True,
    )
    for k, v in kw.items():
        setattr(g, k, v)
    return g


def a100(n: int = 0, mig: bool = False, **kw: Any) -> FakeGpu:
    """NVIDIA A100-SXM4-40GB; with ``mig`` three GPU instances (3g, 2g, 1g)."""
    g = FakeGpu(
        name="NVIDIA A100-SXM4-40GB", uuid=f"GPU-a3f0c2d1-7e6b-4a59-8c31-0d9e8f7a6b{n:02x}",
        pci_bus_id=f"00000000:{0x07 + n:02X}:00.0",
        mem_total=40960 * MiB, mem_used=35102 * MiB, mem_reserved=0,
        util=58, mem_util=22, temp=51, power_mw=238_604, power_limit_mw=400_000,
        sm_clock=1410, sm_clock_max=1410, mem_clock=1215, mem_clock_max=1215,
        reasons=0, ecc=(3, 0), retired_pages=None, remapped_rows=(1, 0, 0, 0), fan=None, pstate=0,
        pcie_rates=(420_000_000, 95_000_000), pcie_counters=False,
    )
    if mig:
        g.mig = [
            FakeMig(0, "3g.20gb", 19968 * MiB, 17010 * MiB, gpu_instance_id=2, uuid=f"MIG-4b3e2a17-9c0d-5e1f-a2b3-c4d5e6f7a8{n:02x}"),
            FakeMig(1, "2g.10gb", 9856 * MiB, 8801 * MiB, gpu_instance_id=3, uuid=f"MIG-7c8d9e0f-1a2b-5c3d-8e4f-5a6b7c8d9e{n:02x}"),
            FakeMig(3, "1g.5gb", 4864 * MiB, 13 * MiB, gpu_instance_id=9, uuid=f"MIG-0e1f2a3b-4c5d-5e6f-9a0b-1c2d3e4f5a{n:02x}"),
        ]
        g.util = 0
    for k, v in kw.items():
        setattr(g, k, v)
    return g


def l4(n: int = 0, **kw: Any) -> FakeGpu:
    """NVIDIA L4 (passively cooled, 72 W), hot and thermally throttled."""
    g = FakeGpu(
        name="NVIDIA L4", uuid=f"GPU-9e8d7c6b-5a4f-4e3d-b2c1-a0f9e8d7c6{n:02x}",
        pci_bus_id=f"00000000:{0x3B + n:02X}:00.0",
        mem_total=23034 * MiB, mem_used=20515 * MiB, mem_reserved=280 * MiB,
        util=100, mem_util=83, temp=84, power_mw=71_300, power_limit_mw=72_000,
        sm_clock=1590, sm_clock_max=2040, mem_clock=6251, mem_clock_max=6251,
        reasons=nvmlClocksEventReasonHwThermalSlowdown | nvmlClocksEventReasonSwPowerCap,
        ecc=(0, 0), retired_pages=([], []), remapped_rows=None, fan=None, pstate=0,
        pcie_rates=(90_000_000, 45_000_000), pcie_counters=False,
    )
    for k, v in kw.items():
        setattr(g, k, v)
    return g


class _Handle:
    __slots__ = ("gpu", "mig")

    def __init__(self, gpu: int, mig: int | None = None) -> None:
        self.gpu = gpu
        self.mig = mig

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.gpu}{'' if self.mig is None else f'/mig{self.mig}'}>"


class _EventSet:
    def __init__(self) -> None:
        self.registered: set[int] = set()
        self.queue: list[SimpleNamespace] = []


def _raise(fault: Any) -> None:
    if isinstance(fault, BaseException):
        raise fault
    if isinstance(fault, type) and issubclass(fault, BaseException):
        raise fault()
    if isinstance(fault, int):
        raise NVMLError(fault)
    raise AssertionError(f"bad fault {fault!r}")


class FakeNvml:
    """Stands in for the ``pynvml`` module (pass it as ``nvml_module``)."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_error: Any = None,
                 driver_version: str = "550.90.07") -> None:
        mod = sys.modules[__name__]
        for name in dir(mod):
            if name.startswith(("NVML", "nvml")) and not callable(getattr(mod, name)) or name.startswith("NVMLError"):
                setattr(self, name, getattr(mod, name))
        self.NVMLError = NVMLError
        self.nvmlExceptionClass = nvmlExceptionClass
        self.nvmlErrorString = nvmlErrorString
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.driver_version = driver_version
        self.faults: dict[str, Any] = {}  # function name → fault, for every device
        self.calls: Counter[str] = Counter()
        self.initialised = 0
        self.now_us = 1_700_000_000_000_000
        self._pcie_bytes: dict[int, list[int]] = {}
        self._event_sets: list[_EventSet] = []

    # -- test controls ----------------------------------------------------
    def remove(self, *names: str) -> None:
        """Make functions vanish, as in an older nvidia-ml-py."""
        for n in names:
            setattr(self, n, None)

    def tick(self, seconds: float) -> None:
        """Advance the fake clock; PCIe byte counters grow at their rates."""
        dt = int(seconds * 1e6)
        self.now_us += dt
        for i, g in enumerate(self.gpus):
            c = self._pcie_bytes.setdefault(i, [10**12, 4 * 10**11])
            c[0] += int(g.pcie_rates[0] * seconds)
            c[1] += int(g.pcie_rates[1] * seconds)

    def xid(self, index: int, xid: int) -> None:
        """Queue an XID critical-error event for GPU ``index``."""
        for es in self._event_sets:
            if index in es.registered:
                es.queue.append(SimpleNamespace(device=_Handle(index), eventType=nvmlEventTypeXidCriticalError,
                                                eventData=xid, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF))

    # -- plumbing -----------------------------------------------------------
    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if value is None and name.startswith("nvml"):
            raise AttributeError(name)  # removed → like an older binding
        return value

    def _enter(self, fname: str, handle: _Handle | None = None) -> FakeGpu | FakeMig | None:
        self.calls[fname] += 1
        if not self.initialised and fname not in ("nvmlInit", "nvmlInitWithFlags", "nvmlErrorString"):
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if fname in self.faults:
            _raise(self.faults[fname])
        if handle is None:
            return None
        if not isinstance(handle, _Handle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[handle.gpu]
        if g.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if fname in g.faults:
            _raise(g.faults[fname])
        if handle.mig is None:
            return g
        m = next(m for m in g.mig or [] if m.slot == handle.mig)
        if fname in m.faults:
            _raise(m.faults[fname])
        return m

    # -- library -------------------------------------------------------------
    def nvmlInitWithFlags(self, flags):
        self.calls["nvmlInitWithFlags"] += 1
        if self.init_error is not None:
            _raise(self.init_error)
        self.initialised += 1

    def nvmlInit(self):
        self.nvmlInitWithFlags(0)
        return None

    def nvmlShutdown(self):
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetProcessName(self, pid):
        self._enter("nvmlSystemGetProcessName")
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[index]
        if "nvmlDeviceGetHandleByIndex" in g.faults:
            _raise(g.faults["nvmlDeviceGetHandleByIndex"])
        return _Handle(index)

    # -- identity --------------------------------------------------------------
    def nvmlDeviceGetName(self, handle):
        d = self._enter("nvmlDeviceGetName", handle)
        if isinstance(d, FakeMig):
            return f"{self.gpus[handle.gpu].name} MIG {d.profile}"
        return d.name

    def nvmlDeviceGetUUID(self, handle):
        d = self._enter("nvmlDeviceGetUUID", handle)
        return d.uuid

    def nvmlDeviceGetIndex(self, handle):
        self._enter("nvmlDeviceGetIndex", handle)
        return handle.gpu

    def nvmlDeviceGetPciInfo(self, handle):
        d = self._enter("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=d.pci_bus_id, busIdLegacy=d.pci_bus_id[4:], domain=0, bus=0, device=0,
                               pciDeviceId=0, pciSubSystemId=0)

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    # -- utilisation, memory, thermals, power, clocks ---------------------------
    def _gpu_only(self, d: Any) -> FakeGpu:
        if isinstance(d, FakeMig):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return d

    def nvmlDeviceGetUtilizationRates(self, handle):
        d = self._gpu_only(self._enter("nvmlDeviceGetUtilizationRates", handle))
        if d.mig is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # as on a real MIG-enabled GPU
        return SimpleNamespace(gpu=d.util, memory=d.mem_util)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        fname = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        d = self._enter(fname, handle)
        if isinstance(d, FakeMig):
            total, used, reserved = d.mem_total, d.mem_used, 0
        else:
            total, used, reserved = d.mem_total, d.mem_used, d.mem_reserved
        if not version:
            # v1: "used" includes what the driver reserves
            return SimpleNamespace(total=total, free=total - used - reserved, used=used + reserved)
        if version != nvmlMemory_v2:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return SimpleNamespace(version=version, total=total, reserved=reserved, free=total - used - reserved, used=used)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        d = self._gpu_only(self._enter("nvmlDeviceGetTemperature", handle))
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return d.temp

    def nvmlDeviceGetTemperatureV(self, handle, sensor, version=nvmlTemperature_v1):
        d = self._gpu_only(self._enter("nvmlDeviceGetTemperatureV", handle))
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return d.temp

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._gpu_only(self._enter("nvmlDeviceGetPowerUsage", handle)).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._gpu_only(self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)).power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._gpu_only(self._enter("nvmlDeviceGetPowerManagementLimit", handle)).power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle, type):  # noqa: A002 — pynvml's name
        d = self._gpu_only(self._enter("nvmlDeviceGetClockInfo", handle))
        return {NVML_CLOCK_SM: d.sm_clock, NVML_CLOCK_GRAPHICS: d.sm_clock, NVML_CLOCK_MEM: d.mem_clock}[type]

    def nvmlDeviceGetMaxClockInfo(self, handle, type):  # noqa: A002
        d = self._gpu_only(self._enter("nvmlDeviceGetMaxClockInfo", handle))
        return {NVML_CLOCK_SM: d.sm_clock_max, NVML_CLOCK_GRAPHICS: d.sm_clock_max, NVML_CLOCK_MEM: d.mem_clock_max}[type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._gpu_only(self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._gpu_only(self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle)).reasons

    def nvmlDeviceGetFanSpeed(self, handle):
        d = self._gpu_only(self._enter("nvmlDeviceGetFanSpeed", handle))
        if d.fan is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return d.fan

    def nvmlDeviceGetPerformanceState(self, handle):
        return self._gpu_only(self._enter("nvmlDeviceGetPerformanceState", handle)).pstate

    # -- errors, retirement ------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        d = self._gpu_only(self._enter("nvmlDeviceGetTotalEccErrors", handle))
        if d.ecc is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return d.ecc[errorType]

    def nvmlDeviceGetRetiredPages(self, device, sourceFilter):
        d = self._gpu_only(self._enter("nvmlDeviceGetRetiredPages", device))
        if d.retired_pages is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return list(d.retired_pages[sourceFilter])

    def nvmlDeviceGetRemappedRows(self, device):
        d = self._gpu_only(self._enter("nvmlDeviceGetRemappedRows", device))
        if d.remapped_rows is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return d.remapped_rows

    # -- PCIe ---------------------------------------------------------------------
    def nvmlDeviceGetPcieThroughput(self, device, counter):
        d = self._gpu_only(self._enter("nvmlDeviceGetPcieThroughput", device))
        return d.pcie_rates[counter] // 1024  # KB/s, sampled over 20 ms by the real library

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        d = self._gpu_only(self._enter("nvmlDeviceGetFieldValues", handle))
        counters = self._pcie_bytes.setdefault(handle.gpu, [10**12, 4 * 10**11])
        out = []
        for fid in fieldIds:
            fid = fid[0] if isinstance(fid, tuple) else fid
            v = SimpleNamespace(fieldId=fid, scopeId=0, timestamp=self.now_us, latencyUsec=0,
                                valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, nvmlReturn=NVML_SUCCESS,
                                value=SimpleNamespace(ullVal=0, dVal=0.0, uiVal=0, ulVal=0, sllVal=0, siVal=0, usVal=0))
            if fid in (NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_PCIE_COUNT_RX_BYTES) and d.pcie_counters:
                v.value.ullVal = counters[fid - NVML_FI_DEV_PCIE_COUNT_TX_BYTES]
            else:
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            out.append(v)
        return out

    # -- processes ----------------------------------------------------------------
    def _procs(self, fname: str, handle: _Handle) -> list:
        d = self._enter(fname, handle)
        if isinstance(d, FakeMig):
            procs = d.procs
        else:
            procs = list(d.procs) + [p for m in d.mig or [] for p in m.procs]
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_bytes, gpuInstanceId=p.gpu_instance_id,
                                computeInstanceId=p.compute_instance_id) for p in procs]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._procs("nvmlDeviceGetComputeRunningProcesses", handle)

    # -- MIG ------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, device):
        d = self._gpu_only(self._enter("nvmlDeviceGetMigMode", device))
        if d.name.startswith("NVIDIA L4"):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        on = NVML_DEVICE_MIG_ENABLE if d.mig is not None else NVML_DEVICE_MIG_DISABLE
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        d = self._gpu_only(self._enter("nvmlDeviceGetMaxMigDeviceCount", device))
        return 7 if d.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        d = self._gpu_only(self._enter("nvmlDeviceGetMigDeviceHandleByIndex", device))
        if d.mig is None or not any(m.slot == index for m in d.mig):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return _Handle(device.gpu, index)

    def nvmlDeviceIsMigDeviceHandle(self, device):
        self._enter("nvmlDeviceIsMigDeviceHandle", device)
        return int(device.mig is not None)

    def nvmlDeviceGetGpuInstanceId(self, device):
        d = self._enter("nvmlDeviceGetGpuInstanceId", device)
        if not isinstance(d, FakeMig):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return d.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device):
        d = self._enter("nvmlDeviceGetComputeInstanceId", device)
        if not isinstance(d, FakeMig):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return d.compute_instance_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice):
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice)
        return _Handle(migDevice.gpu)

    # -- events -----------------------------------------------------------------------
    def nvmlEventSetCreate(self):
        self._enter("nvmlEventSetCreate")
        es = _EventSet()
        self._event_sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        self._gpu_only(self._enter("nvmlDeviceRegisterEvents", handle))
        eventSet.registered.add(handle.gpu)
        return None

    def nvmlEventSetWait_v2(self, eventSet, timeoutms):
        self._enter("nvmlEventSetWait_v2")
        if not eventSet.queue:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        return eventSet.queue.pop(0)

    def nvmlEventSetWait(self, eventSet, timeoutms):
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet):
        self._enter("nvmlEventSetFree")
        if eventSet in self._event_sets:
            self._event_sets.remove(eventSet)
        return None
