"""Local GPUs through NVML (nvidia-ml-py).

Collection is synchronous (every NVML call blocks): run :meth:`NvmlSource.collect`
in a thread (``asyncio.to_thread``). The NVML module is injected so tests can
pass a fake with pynvml's names; by default ``import pynvml``.

Robustness rules:

* a field the board or driver does not support (``NVMLError_NotSupported``,
  ``NoPermission``, a function missing from the library or the binding) is
  ``None`` for that field only, logged once per (GPU, field), and not asked
  again;
* ``NVMLError_LibraryNotFound`` / ``DriverNotLoaded`` at init is a source
  state (:data:`NO_DRIVER`), not an exception;
* any other error on one GPU (``GpuIsLost``, ``Unknown`` ...) marks that GPU
  ``failed`` with the error; the other GPUs are still collected.

Process → engine mapping (:func:`map_processes`) reads ``/proc``.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, NamedTuple

from ..domain.gpu import FAILED, GpuProcess, GpuStats, decode_throttle
from ..domain.source import SourceHealth

log = logging.getLogger(__name__)

NO_DRIVER = "no NVIDIA driver on this host — configure dcgm-exporter endpoints (gpu.dcgm) or Prometheus"
NO_BINDING = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"

# NVML return codes (pynvml NVML_ERROR_*), used when the module lacks a constant.
_ERR_INVALID_ARGUMENT = 2
_ERR_NOT_SUPPORTED = 3
_ERR_NO_PERMISSION = 4
_ERR_NOT_FOUND = 6
_ERR_DRIVER_NOT_LOADED = 9
_ERR_TIMEOUT = 10
_ERR_LIBRARY_NOT_FOUND = 12
_ERR_FUNCTION_NOT_FOUND = 13
_ERR_NO_DATA = 21
_ERR_ARGUMENT_VERSION_MISMATCH = 25
_ERR_DEPRECATED = 26
_SUCCESS = 0

# Errors that mean "this field is not available here", never "GPU broken".
FIELD_ERRORS = frozenset({_ERR_INVALID_ARGUMENT, _ERR_NOT_SUPPORTED, _ERR_NO_PERMISSION, _ERR_NOT_FOUND,
                          _ERR_FUNCTION_NOT_FOUND, _ERR_NO_DATA, _ERR_ARGUMENT_VERSION_MISMATCH, _ERR_DEPRECATED})
# Errors after which the next function of a fallback chain is tried.
FALLBACK_ERRORS = frozenset({_ERR_FUNCTION_NOT_FOUND, _ERR_ARGUMENT_VERSION_MISMATCH, _ERR_NOT_SUPPORTED,
                             _ERR_DEPRECATED, _ERR_INVALID_ARGUMENT})

_NVML_TEMPERATURE_GPU = 0
_NVML_CLOCK_SM = 1
_NVML_CLOCK_MEM = 2
_NVML_VOLATILE_ECC = 0
_NVML_CORRECTED = 0
_NVML_UNCORRECTED = 1
_NVML_PCIE_UTIL_TX_BYTES = 0
_NVML_PCIE_UTIL_RX_BYTES = 1
_NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
_NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198
_XID_EVENT = 0x0000000000000008
_MAX_EVENTS_PER_POLL = 256


class _FieldMissing(Exception):
    """Internal: a whole fallback chain ended without a value."""


def _s(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return str(v)


def mig_profile_from_name(name: str | None) -> str | None:
    """"NVIDIA A100-SXM4-40GB MIG 3g.20gb" → "3g.20gb"."""
    if not name or " MIG " not in name:
        return None
    return name.rsplit(" MIG ", 1)[1].strip() or None


class _GpuMemo:
    """Per-GPU state kept between collections."""

    __slots__ = ("handle", "name", "uuid", "pci_bus_id", "sm_max", "mem_max", "pcie_prev", "pcie_mode", "xid_registered")

    def __init__(self) -> None:
        self.handle: Any = None
        self.name: str | None = None
        self.uuid: str | None = None
        self.pci_bus_id: str | None = None
        self.sm_max: float | None = None
        self.mem_max: float | None = None
        self.pcie_prev: tuple[int, int, int] | None = None  # (tx, rx, timestamp µs)
        self.pcie_mode: str | None = None  # "counters", "sampled", "off"
        self.xid_registered = False


class NvmlSource:
    """NVML on this host: init once, collect many times, close once."""

    kind = "nvml"

    def __init__(self, nvml_module: Any = None, *, host: str | None = None, pcie: bool = True,
                 read_proc: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self._module = nvml_module
        self.nv: Any = None
        self.host = host or socket.gethostname()
        self.pcie = pcie
        self.read_proc = read_proc
        self.clock = clock
        self.driver_version: str | None = None
        self.unavailable_reason: str | None = None
        self._initialised = False
        self._permanent = False  # unavailable for good (no driver / no binding)
        self._memo: dict[int, _GpuMemo] = {}
        self._unsupported: set[tuple[str, ...]] = set()  # (gpu key, field); ("log", gpu key, field) once logged
        self._event_set: Any = None
        self._last_xid: dict[str, int] = {}
        self._health = SourceHealth(name="nvml", kind="nvml", ok=False)
        self._failures = 0
        self._nvml_error: type[BaseException] = Exception

    # -- lifecycle -------------------------------------------------------
    @property
    def health(self) -> SourceHealth:
        return self._health

    @property
    def available(self) -> bool:
        return self._initialised

    @property
    def gone(self) -> bool:
        """NVML is unavailable for good here (no driver, no binding): nothing left to try."""
        return self._permanent

    def open(self) -> bool:
        """Initialise NVML once; False (with :attr:`unavailable_reason`) when it cannot."""
        if self._initialised:
            return True
        if self._permanent:
            return False
        if self.nv is None:
            if self._module is None:
                try:
                    import pynvml  # noqa: PLC0415
                except ImportError:
                    return self._unavailable(NO_BINDING, permanent=True)
                self._module = pynvml
            self.nv = self._module
            self._nvml_error = getattr(self.nv, "NVMLError", Exception)
        try:
            self.nv.nvmlInit()
        except self._nvml_error as e:
            code = getattr(e, "value", None)
            if code in (_ERR_LIBRARY_NOT_FOUND, _ERR_DRIVER_NOT_LOADED):
                return self._unavailable(NO_DRIVER, permanent=True)
            if code == _ERR_NO_PERMISSION:
                return self._unavailable("NVML: no permission to open the GPU devices (/dev/nvidia*)", permanent=False)
            return self._unavailable(f"NVML init failed: {_err_text(e)}", permanent=False)
        except OSError as e:  # a broken libnvidia-ml.so
            return self._unavailable(f"NVML init failed: {e}", permanent=True)
        self._initialised = True
        self.unavailable_reason = None
        try:
            self.driver_version = _s(self.nv.nvmlSystemGetDriverVersion())
        except (self._nvml_error, AttributeError):
            self.driver_version = None
        try:
            self._event_set = self.nv.nvmlEventSetCreate()
        except (self._nvml_error, AttributeError) as e:
            log.info("NVML: no XID events (%s)", _err_text(e))
            self._event_set = None
        return True

    def close(self) -> None:
        """Shut NVML down (once); the source can be opened again later."""
        if not self._initialised:
            return
        if self._event_set is not None:
            try:
                self.nv.nvmlEventSetFree(self._event_set)
            except (self._nvml_error, AttributeError):
                pass
            self._event_set = None
        try:
            self.nv.nvmlShutdown()
        except self._nvml_error as e:
            log.info("NVML shutdown: %s", _err_text(e))
        self._initialised = False
        self._memo.clear()
        self._unsupported.clear()

    def __enter__(self) -> NvmlSource:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unavailable(self, reason: str, permanent: bool) -> bool:
        self.unavailable_reason = reason
        self._permanent = permanent
        self._failures += 1
        self._health = SourceHealth(name="nvml", kind="nvml", ok=False, last_error=reason,
                                    last_error_at=self.clock(), consecutive_failures=self._failures,
                                    last_ok_at=self._health.last_ok_at)
        return False

    # -- collection ------------------------------------------------------
    def collect(self) -> list[GpuStats]:
        """One blocking pass over every GPU; [] when NVML is unavailable."""
        started = self.clock()
        if not self.open():
            return []
        nv = self.nv
        try:
            count = int(nv.nvmlDeviceGetCount())
        except self._nvml_error as e:
            self._unavailable(f"NVML: cannot count GPUs: {_err_text(e)}", permanent=False)
            return []
        self._drain_xid_events()
        rows = [self._collect_gpu(i) for i in range(count)]
        now = self.clock()
        failed = [g for g in rows if g.state == FAILED]
        self._failures = 0
        err = None
        if failed:
            err = "; ".join(f"{g.label}: {g.error}" for g in failed)[:200]
        elif not rows:
            err = "NVML sees no GPUs on this host"
        self._health = SourceHealth(name="nvml", kind="nvml", ok=True, last_ok_at=now, latency_s=now - started,
                                    last_error=err, last_error_at=now if err else None)
        return rows

    def _collect_gpu(self, i: int) -> GpuStats:
        memo = self._memo.get(i)
        if memo is None:
            memo = self._memo[i] = _GpuMemo()
        try:
            if memo.handle is None:
                memo.handle = self.nv.nvmlDeviceGetHandleByIndex(i)
            h = memo.handle
            if memo.uuid is None:
                memo.uuid = _s(self.nv.nvmlDeviceGetUUID(h))
                memo.name = _s(self.nv.nvmlDeviceGetName(h))
                pci = self._field(i, "pci", [("nvmlDeviceGetPciInfo", (h,))])
                memo.pci_bus_id = _s(getattr(pci, "busId", None)) if pci is not None else None
                memo.sm_max = self._field(i, "sm_clock_max", [("nvmlDeviceGetMaxClockInfo", (h, _NVML_CLOCK_SM))])
                memo.mem_max = self._field(i, "mem_clock_max", [("nvmlDeviceGetMaxClockInfo", (h, _NVML_CLOCK_MEM))])
                self._register_xid(memo)
            return self._read_gpu(i, memo, h)
        except self._nvml_error as e:
            memo.handle = None  # ask again next time (the GPU may come back after a reset)
            return GpuStats(source="nvml", host=self.host, index=i, uuid=memo.uuid, name=memo.name,
                            pci_bus_id=memo.pci_bus_id, driver_version=self.driver_version,
                            state=FAILED, error=f"NVML: {_err_text(e)}")

    def _read_gpu(self, i: int, memo: _GpuMemo, h: Any) -> GpuStats:
        f = self._field
        k = i
        util = f(k, "util", [("nvmlDeviceGetUtilizationRates", (h,))])
        mem = self._memory(k, h)
        temp = f(k, "temp", [("nvmlDeviceGetTemperature", (h, _NVML_TEMPERATURE_GPU)),
                             ("nvmlDeviceGetTemperatureV", (h, _NVML_TEMPERATURE_GPU))])
        power = f(k, "power", [("nvmlDeviceGetPowerUsage", (h,))])
        limit = f(k, "power_limit", [("nvmlDeviceGetEnforcedPowerLimit", (h,)), ("nvmlDeviceGetPowerManagementLimit", (h,))])
        sm = f(k, "sm_clock", [("nvmlDeviceGetClockInfo", (h, _NVML_CLOCK_SM))])
        memclk = f(k, "mem_clock", [("nvmlDeviceGetClockInfo", (h, _NVML_CLOCK_MEM))])
        reasons = f(k, "throttle", [("nvmlDeviceGetCurrentClocksEventReasons", (h,)),
                                    ("nvmlDeviceGetCurrentClocksThrottleReasons", (h,))])
        ecc_c = f(k, "ecc_corrected", [("nvmlDeviceGetTotalEccErrors", (h, _NVML_CORRECTED, _NVML_VOLATILE_ECC))])
        ecc_u = f(k, "ecc_uncorrected", [("nvmlDeviceGetTotalEccErrors", (h, _NVML_UNCORRECTED, _NVML_VOLATILE_ECC))])
        retired = self._retired(k, h)
        tx, rx = self._pcie(k, memo, h) if self.pcie else (None, None)
        fan = f(k, "fan", [("nvmlDeviceGetFanSpeed", (h,))])
        pstate = f(k, "pstate", [("nvmlDeviceGetPerformanceState", (h,))])
        procs = self._processes(k, h)
        mig_mode = f(k, "mig_mode", [("nvmlDeviceGetMigMode", (h,))])
        mig_on = None if mig_mode is None else bool(mig_mode[0])
        migs = self._mig_devices(i, h) if mig_on else ()
        last_xid = self._last_xid.get(memo.uuid or "", 0) if memo.xid_registered else None
        return GpuStats(
            source="nvml", host=self.host, index=i, uuid=memo.uuid, name=memo.name,
            util_pct=None if util is None else float(util.gpu),
            mem_util_pct=None if util is None else float(util.memory),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            temp_c=None if temp is None else float(temp),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0,
            sm_clock_mhz=None if sm is None else float(sm),
            sm_clock_max_mhz=None if memo.sm_max is None else float(memo.sm_max),
            mem_clock_mhz=None if memclk is None else float(memclk),
            mem_clock_max_mhz=None if memo.mem_max is None else float(memo.mem_max),
            throttle_reasons=decode_throttle(reasons),
            ecc_corrected=None if ecc_c is None else int(ecc_c),
            ecc_uncorrected=None if ecc_u is None else int(ecc_u),
            retired_pages=retired, last_xid=last_xid,
            pcie_tx_bytes_per_s=tx, pcie_rx_bytes_per_s=rx,
            fan_pct=None if fan is None else float(fan),
            pstate=None if pstate is None or int(pstate) == 32 else int(pstate),
            processes=procs, mig_devices=migs, mig_mode=mig_on,
            pci_bus_id=memo.pci_bus_id, driver_version=self.driver_version,
        )

    def _memory(self, k: Any, h: Any) -> Any:
        calls: list[tuple[str, tuple]] = []
        v2 = getattr(self.nv, "nvmlMemory_v2", None)
        if v2 is not None:
            calls.append(("nvmlDeviceGetMemoryInfo", (h, v2)))  # "used" excludes driver-reserved memory
        calls.append(("nvmlDeviceGetMemoryInfo", (h,)))
        return self._field(k, "memory", calls)

    def _retired(self, k: Any, h: Any) -> int | None:
        """Retired pages (pre-Ampere) or remapped HBM rows (Ampere and later)."""
        if (str(k), "retired_pages") not in self._unsupported:
            try:
                sbe = self._call(k, "retired_pages", [("nvmlDeviceGetRetiredPages", (h, 0))])
                dbe = self._call(k, "retired_pages", [("nvmlDeviceGetRetiredPages", (h, 1))])
                return len(sbe) + len(dbe)
            except _FieldMissing:
                pass
        rows = self._field(k, "remapped_rows", [("nvmlDeviceGetRemappedRows", (h,))])
        if rows is None:
            return None
        return int(rows[0]) + int(rows[1])

    def _pcie(self, k: Any, memo: _GpuMemo, h: Any) -> tuple[float | None, float | None]:
        """PCIe bytes/s: from the byte counters (free) when the driver has them,
        else nvmlDeviceGetPcieThroughput (which samples ~20 ms per call)."""
        if memo.pcie_mode in (None, "counters"):
            vals = self._field(k, "pcie_counters", [("nvmlDeviceGetFieldValues",
                                                     (h, [_NVML_FI_DEV_PCIE_COUNT_TX_BYTES, _NVML_FI_DEV_PCIE_COUNT_RX_BYTES]))])
            ok = vals is not None and len(vals) == 2 and all(getattr(v, "nvmlReturn", 1) == _SUCCESS for v in vals)
            if ok:
                memo.pcie_mode = "counters"
                tx, rx = int(vals[0].value.ullVal), int(vals[1].value.ullVal)
                ts = int(vals[0].timestamp)
                prev, memo.pcie_prev = memo.pcie_prev, (tx, rx, ts)
                if prev is None or ts <= prev[2] or tx < prev[0] or rx < prev[1]:
                    return None, None
                dt = (ts - prev[2]) / 1e6
                return (tx - prev[0]) / dt, (rx - prev[1]) / dt
            memo.pcie_mode = "sampled"
            self._note(k, "pcie_counters", "PCIe byte counters not supported; sampling nvmlDeviceGetPcieThroughput")
        if memo.pcie_mode == "sampled":
            tx = self._field(k, "pcie_tx", [("nvmlDeviceGetPcieThroughput", (h, _NVML_PCIE_UTIL_TX_BYTES))])
            rx = self._field(k, "pcie_rx", [("nvmlDeviceGetPcieThroughput", (h, _NVML_PCIE_UTIL_RX_BYTES))])
            return (None if tx is None else tx * 1024.0), (None if rx is None else rx * 1024.0)  # KB/s
        return None, None

    def _processes(self, k: Any, h: Any) -> tuple[GpuProcess, ...]:
        procs = self._field(k, "processes", [("nvmlDeviceGetComputeRunningProcesses_v3", (h,)),
                                             ("nvmlDeviceGetComputeRunningProcesses_v2", (h,)),
                                             ("nvmlDeviceGetComputeRunningProcesses", (h,))])
        if not procs:
            return ()
        out = []
        for p in procs:
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(pid=pid, used_bytes=None if used is None else int(used), name=self._proc_name(pid)))
        return tuple(out)

    def _proc_name(self, pid: int) -> str | None:
        if self.read_proc:
            name = process_cmdline(pid)
            if name:
                return name[:120]
        fn = getattr(self.nv, "nvmlSystemGetProcessName", None)
        if fn is None:
            return None
        try:
            return _s(fn(pid))
        except self._nvml_error:
            return None

    def _mig_devices(self, i: int, h: Any) -> tuple[GpuStats, ...]:
        n = self._field(i, "mig_count", [("nvmlDeviceGetMaxMigDeviceCount", (h,))]) or 0
        out = []
        for j in range(int(n)):
            try:
                mh = self.nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except self._nvml_error as e:
                if getattr(e, "value", None) in (_ERR_NOT_FOUND, _ERR_INVALID_ARGUMENT):
                    continue  # empty slot
                out.append(GpuStats(source="nvml", host=self.host, index=i, name=f"MIG slot {j}",
                                    gpu_instance_id=None, state=FAILED, error=f"NVML: {_err_text(e)}"))
                continue
            out.append(self._read_mig(i, j, mh))
        return tuple(out)

    def _read_mig(self, i: int, j: int, mh: Any) -> GpuStats:
        k = f"{i}/mig{j}"
        uuid = name = None
        try:
            uuid = _s(self.nv.nvmlDeviceGetUUID(mh))
            name = _s(self.nv.nvmlDeviceGetName(mh))
            gi = self._field(k, "gpu_instance_id", [("nvmlDeviceGetGpuInstanceId", (mh,))])
            ci = self._field(k, "compute_instance_id", [("nvmlDeviceGetComputeInstanceId", (mh,))])
            util = self._field(k, "util", [("nvmlDeviceGetUtilizationRates", (mh,))])
            mem = self._memory(k, mh)
            procs = self._processes(k, mh)
        except self._nvml_error as e:
            return GpuStats(source="nvml", host=self.host, index=i, uuid=uuid, name=name,
                            mig_profile=mig_profile_from_name(name), state=FAILED, error=f"NVML: {_err_text(e)}")
        return GpuStats(
            source="nvml", host=self.host, index=i, uuid=uuid, name=name,
            util_pct=None if util is None else float(util.gpu),
            mem_util_pct=None if util is None else float(util.memory),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            processes=procs, mig_profile=mig_profile_from_name(name),
            gpu_instance_id=None if gi is None else int(gi),
            compute_instance_id=None if ci is None else int(ci),
            driver_version=self.driver_version,
        )

    # -- XID events -------------------------------------------------------
    def _register_xid(self, memo: _GpuMemo) -> None:
        if self._event_set is None or memo.xid_registered:
            return
        try:
            self.nv.nvmlDeviceRegisterEvents(memo.handle, _XID_EVENT, self._event_set)
            memo.xid_registered = True
        except self._nvml_error as e:
            if getattr(e, "value", None) not in FIELD_ERRORS:
                raise
            self._note(memo.uuid, "xid", _err_text(e))
        except AttributeError:
            pass

    def _drain_xid_events(self) -> None:
        if self._event_set is None:
            return
        wait = getattr(self.nv, "nvmlEventSetWait_v2", None) or getattr(self.nv, "nvmlEventSetWait", None)
        if wait is None:
            return
        for _ in range(_MAX_EVENTS_PER_POLL):
            try:
                ev = wait(self._event_set, 0)
            except self._nvml_error as e:
                if getattr(e, "value", None) != _ERR_TIMEOUT:
                    log.info("NVML event wait: %s", _err_text(e))
                return
            if not int(ev.eventType) & _XID_EVENT:
                continue
            try:
                uuid = _s(self.nv.nvmlDeviceGetUUID(ev.device))
            except self._nvml_error:
                continue
            xid = int(ev.eventData)
            log.warning("GPU %s: XID %d", uuid, xid)
            self._last_xid[uuid or ""] = xid

    # -- field helpers ----------------------------------------------------
    def _field(self, k: Any, field: str, calls: list[tuple[str, tuple]]) -> Any:
        """First answer of a fallback chain, or None when the field is not available."""
        try:
            return self._call(k, field, calls)
        except _FieldMissing:
            return None

    def _call(self, k: Any, field: str, calls: list[tuple[str, tuple]]) -> Any:
        key = (str(k), field)
        if key in self._unsupported:
            raise _FieldMissing
        last: str = "function not found"
        for n, (fname, args) in enumerate(calls):
            fn = getattr(self.nv, fname, None)
            if fn is None:
                last = f"{fname} missing from the NVML binding"
                continue
            try:
                return fn(*args)
            except self._nvml_error as e:
                code = getattr(e, "value", None)
                if code not in FIELD_ERRORS:
                    raise
                last = f"{fname}: {_err_text(e)}"
                if n + 1 < len(calls) and code in FALLBACK_ERRORS:
                    continue
                break
            except TypeError as e:  # an old binding without the version argument
                last = f"{fname}: {e}"
                continue
        self._unsupported.add(key)
        self._note(k, field, last)
        raise _FieldMissing

    def _note(self, k: Any, field: str, why: str) -> None:
        key = ("log", str(k), field)
        if key in self._unsupported:
            return
        self._unsupported.add(key)
        log.info("GPU %s: %s not available (%s)", k, field, why)


def _err_text(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 — pynvml's __str__ calls into the library
        text = ""
    return text or f"{type(e).__name__} ({getattr(e, 'value', '?')})"


# -- processes → engines -------------------------------------------------------


class EngineRef(NamedTuple):
    """An engine infertop knows about: its name, the PID of its root process
    (when infertop started it), and its HTTP port (``--port`` on its command line)."""

    name: str
    root_pid: int | None = None
    port: int | None = None


def process_cmdline(pid: int, proc_root: str = "/proc") -> str | None:
    """The command line of ``pid`` joined with spaces, or None if unreadable."""
    args = _cmdline_args(pid, proc_root)
    if not args:
        return None
    return " ".join(args)


def _cmdline_args(pid: int, proc_root: str) -> list[str] | None:
    try:
        with open(f"{proc_root}/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    if not raw:
        return None
    return raw.rstrip(b"\0").decode("utf-8", errors="replace").split("\0")


def parent_pid(pid: int, proc_root: str = "/proc") -> int | None:
    """PPID from /proc/<pid>/stat (the command name may contain spaces and parentheses)."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    tail = raw[raw.rfind(b")") + 2:].split()
    try:
        return int(tail[1])
    except (IndexError, ValueError):
        return None


def has_port_arg(args: Iterable[str], port: int) -> bool:
    """True when a command line carries ``--port P`` or ``--port=P``."""
    want = str(port)
    prev = None
    for a in args:
        if prev == "--port" and a == want:
            return True
        if a == f"--port={want}":
            return True
        prev = a
    return False


def owner_engine(pid: int, engines: Iterable[EngineRef | tuple], proc_root: str = "/proc",
                 _cache: dict | None = None) -> str | None:
    """The engine that owns ``pid``: its root process is ``pid`` or an ancestor,
    or ``pid`` or an ancestor was started with ``--port <engine port>``."""
    refs = [e if isinstance(e, EngineRef) else EngineRef(*e) for e in engines]
    if not refs:
        return None
    cache = {} if _cache is None else _cache
    chain = _ancestors(pid, proc_root, cache)
    for ref in refs:
        if ref.root_pid is not None and ref.root_pid in chain:
            return ref.name
    for ref in refs:
        if ref.port is None:
            continue
        for p in chain:
            args = cache.get(("cmd", p), False)
            if args is False:
                args = cache[("cmd", p)] = _cmdline_args(p, proc_root)
            if args and has_port_arg(args, ref.port):
                return ref.name
    return None


def _ancestors(pid: int, proc_root: str, cache: dict) -> list[int]:
    chain: list[int] = []
    p: int | None = pid
    while p and p > 1 and p not in chain and len(chain) < 64:
        chain.append(p)
        key = ("ppid", p)
        if key not in cache:
            cache[key] = parent_pid(p, proc_root)
        p = cache[key]
    return chain


def map_processes(gpus: Iterable[GpuStats], engines: Iterable[EngineRef | tuple],
                  proc_root: str = "/proc") -> list[GpuStats]:
    """Set ``GpuProcess.engine`` and ``GpuStats.engine`` (also on MIG devices).

    ``engines`` are ``(name, root_pid or None, port or None)``. A GPU's
    ``engine`` is the engine owning its processes (several: names joined by ", ").
    """
    refs = [e if isinstance(e, EngineRef) else EngineRef(*e) for e in engines]
    cache: dict = {}

    def one(g: GpuStats) -> GpuStats:
        procs = tuple(replace(p, engine=owner_engine(p.pid, refs, proc_root, cache) or p.engine) for p in g.processes)
        migs = tuple(one(m) for m in g.mig_devices)
        names = {p.engine for p in procs if p.engine} | {m.engine for m in migs if m.engine}
        engine = ", ".join(sorted(names)) if names else g.engine
        if procs == g.processes and migs == g.mig_devices and engine == g.engine:
            return g
        return replace(g, processes=procs, mig_devices=migs, engine=engine)

    if not refs:
        return list(gpus)
    return [one(g) for g in gpus]
