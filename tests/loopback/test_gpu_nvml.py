"""NVML source against the fake pynvml (tests/support/fake_pynvml.py), and process → engine mapping
with real processes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

import fake_pynvml as fk
from fake_pynvml import FakeNvml, FakeProc, a100, h100, l4
from infertop.config import GpuConfig
from infertop.domain.gpu import GpuStats, classify, decode_throttle
from infertop.sources.gpu import GpuCollector
from infertop.sources.nvml import NO_DRIVER, EngineRef, NvmlSource, has_port_arg, map_processes, parent_pid

MiB = 1024 * 1024


def collect(nv: FakeNvml, **kw) -> tuple[NvmlSource, list[GpuStats]]:
    src = NvmlSource(nvml_module=nv, host="node-a", **kw)
    return src, src.collect()


def test_fake_error_classes_match_pynvml():
    import pynvml

    names = {n for n in dir(pynvml) if n.startswith("NVMLError_")}
    assert names == {n for n in dir(fk) if n.startswith("NVMLError_")}
    for n in names:
        assert getattr(fk, n)().value == getattr(pynvml, n)().value, n
        assert type(fk.NVMLError(getattr(pynvml, n)().value)).__name__ == n
    assert str(fk.NVMLError_GpuIsLost()) == str(pynvml.NVMLError_GpuIsLost()) == "GPU is lost"


def test_values_for_three_gpu_models():
    nv = FakeNvml([h100(), a100(), l4()])
    src, rows = collect(nv)
    nv.tick(2.0)
    rows = src.collect()
    assert [g.name for g in rows] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4"]
    assert all(g.state == "ok" and g.source == "nvml" and g.host == "node-a" for g in rows)
    assert [g.index for g in rows] == [0, 1, 2]
    h, a, l = rows
    # H100: NVML v2 memory info ("used" excludes the driver's reservation)
    assert h.uuid.startswith("GPU-") and h.pci_bus_id == "00000000:18:00.0"
    assert (h.util_pct, h.mem_util_pct) == (97.0, 61.0)
    assert h.mem_used_bytes == 73680 * MiB and h.mem_total_bytes == 81559 * MiB
    assert h.temp_c == 64.0
    assert h.power_w == pytest.approx(612.417) and h.power_limit_w == 700.0
    assert (h.sm_clock_mhz, h.sm_clock_max_mhz, h.mem_clock_mhz, h.mem_clock_max_mhz) == (1980, 1980, 2619, 2619)
    assert h.throttle_reasons == ()
    assert (h.ecc_corrected, h.ecc_uncorrected) == (0, 0)
    assert h.retired_pages == 0  # remapped rows on Hopper
    assert h.fan_pct is None  # SXM board, no fan: NotSupported
    assert h.pstate == 0
    # PCIe from NVML's byte counters: exact rate over the 2 fake seconds
    assert h.pcie_tx_bytes_per_s == pytest.approx(1.25e9) and h.pcie_rx_bytes_per_s == pytest.approx(3.1e8)
    assert h.driver_version == "550.90.07" and h.last_xid == 0 and h.mig_mode is False
    assert classify(h) == "saturated"
    # A100: ECC counts, remapped rows, PCIe sampled (no counters on this driver)
    assert a.mem_total_bytes == 40960 * MiB and a.power_limit_w == 400.0 and a.sm_clock_max_mhz == 1410
    assert (a.ecc_corrected, a.ecc_uncorrected, a.retired_pages) == (3, 0, 1)
    assert a.pcie_tx_bytes_per_s == pytest.approx(420e6, rel=0.01)
    assert classify(a) == "busy"
    # L4: hot, HW thermal slowdown + power cap, retired pages supported (0)
    assert l.temp_c == 84.0 and l.power_limit_w == 72.0 and l.sm_clock_mhz == 1590 and l.sm_clock_max_mhz == 2040
    assert l.throttle_reasons == ("HwThermalSlowdown", "SwPowerCap")
    assert l.retired_pages == 0 and l.mig_mode is None  # MIG query NotSupported on L4
    assert classify(l) == "throttled (HW thermal)"
    assert l.throttle_words == "HW thermal, power cap"
    assert src.health.ok and src.health.last_error is None
    src.close()


def test_not_supported_field_is_none_only_there_and_logged_once(caplog):
    g = h100(faults={"nvmlDeviceGetPowerUsage": fk.NVMLError_NotSupported,
                     "nvmlDeviceGetTotalEccErrors": fk.NVMLError_NotSupported})
    nv = FakeNvml([g, l4()])
    caplog.set_level(logging.INFO, logger="infertop.sources.nvml")
    src, rows = collect(nv)
    rows = src.collect()
    h = rows[0]
    assert h.state == "ok"
    assert h.power_w is None and h.ecc_corrected is None and h.ecc_uncorrected is None
    assert h.power_limit_w == 700.0 and h.util_pct == 97.0 and h.temp_c == 64.0
    assert h.mem_used_bytes == 73680 * MiB and h.sm_clock_mhz == 1980
    assert rows[1].power_w == pytest.approx(71.3)  # the other GPU still has it
    logged = [r.getMessage() for r in caplog.records if "power not available" in r.getMessage()]
    assert len(logged) == 1 and logged[0].startswith("GPU 0:")
    assert nv.calls["nvmlDeviceGetPowerUsage"] == 3  # GPU 0 once, never again; GPU 1 twice


@pytest.mark.parametrize("where", ["query", "handle"])
def test_gpu_lost_on_one_gpu_marks_it_failed_and_keeps_the_others(where):
    nv = FakeNvml([h100(0), h100(1), l4(2)])
    src, rows = collect(nv)
    assert all(g.state == "ok" for g in rows)
    if where == "query":
        nv.gpus[1].lost = True
    else:
        nv.gpus[1].faults["nvmlDeviceGetHandleByIndex"] = fk.NVMLError_GpuIsLost
        nv.gpus[1].lost = True
    rows = src.collect()
    assert [g.state for g in rows] == ["ok", "failed", "ok"]
    lost = rows[1]
    assert lost.error == "NVML: GPU is lost" and lost.index == 1
    assert lost.uuid == nv.gpus[1].uuid  # identity kept from the previous collection
    assert classify(lost) == "failed" and lost.util_pct is None
    assert rows[0].util_pct == 97.0 and rows[2].temp_c == 84.0
    assert src.health.ok and "gpu1: NVML: GPU is lost" in src.health.last_error
    # after a reset the GPU comes back
    nv.gpus[1].lost = False
    nv.gpus[1].faults.clear()
    assert [g.state for g in src.collect()] == ["ok", "ok", "ok"]


def test_other_error_on_a_field_fails_that_gpu_only():
    nv = FakeNvml([a100(0), a100(1)])
    nv.gpus[0].faults["nvmlDeviceGetTemperature"] = fk.NVMLError_Unknown
    _, rows = collect(nv)
    assert rows[0].state == "failed" and rows[0].error == "NVML: Unknown Error"
    assert rows[1].state == "ok" and rows[1].temp_c == 51.0


@pytest.mark.parametrize("err", [fk.NVMLError_LibraryNotFound, fk.NVMLError_DriverNotLoaded])
def test_no_driver_is_a_state_not_an_exception(err):
    nv = FakeNvml([h100()], init_error=err)
    src, rows = collect(nv)
    assert rows == []
    assert not src.available
    assert src.health.ok is False and src.health.last_error == NO_DRIVER
    assert src.collect() == [] and nv.calls["nvmlInitWithFlags"] == 1  # not retried: it will not appear
    src.close()  # harmless


def test_no_driver_through_the_collector():
    c = GpuCollector(GpuConfig(nvml=True), nvml_module=FakeNvml([], init_error=fk.NVMLError_LibraryNotFound))
    rows, health = c.collect()
    assert rows == []
    assert [(h.kind, h.ok, h.last_error) for h in health] == [("nvml", False, NO_DRIVER)]
    assert c.nvml.gone  # later polls leave it alone (no thread for it) and still say why
    assert c.collect() == ([], health)
    c.close()


def test_real_pynvml_without_a_gpu_reports_no_driver():
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    src = NvmlSource()  # the real module
    assert src.collect() == []
    assert src.health.last_error == NO_DRIVER


def test_init_once_and_shutdown_on_close():
    nv = FakeNvml([h100()])
    src, _ = collect(nv)
    src.collect()
    src.collect()
    assert nv.calls["nvmlInitWithFlags"] == 1 and nv.initialised == 1
    src.close()
    src.close()
    assert nv.calls["nvmlShutdown"] == 1 and nv.initialised == 0
    assert nv.calls["nvmlEventSetFree"] == 1


def test_function_not_found_falls_back_to_older_functions():
    nv = FakeNvml([h100(procs=[FakeProc(4242, 70_000 * MiB)])])
    nv.faults["nvmlDeviceGetComputeRunningProcesses_v3"] = fk.NVMLError_FunctionNotFound
    nv.faults["nvmlDeviceGetCurrentClocksEventReasons"] = fk.NVMLError_FunctionNotFound
    nv.faults["nvmlDeviceGetMemoryInfo_v2"] = fk.NVMLError_FunctionNotFound
    nv.faults["nvmlDeviceGetTemperature"] = fk.NVMLError_FunctionNotFound
    nv.gpus[0].reasons = fk.nvmlClocksThrottleReasonSwPowerCap
    _, rows = collect(nv, read_proc=False)
    g = rows[0]
    assert [(p.pid, p.used_bytes) for p in g.processes] == [(4242, 70_000 * MiB)]
    assert nv.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 1
    assert g.throttle_reasons == ("SwPowerCap",)
    assert nv.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1
    assert g.mem_used_bytes == (73680 + 530) * MiB  # v1: "used" includes the reserved part
    assert g.temp_c == 64.0 and nv.calls["nvmlDeviceGetTemperatureV"] == 1
    assert g.state == "ok"


def test_missing_function_in_an_old_binding_falls_back():
    nv = FakeNvml([l4()])
    nv.remove("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetComputeRunningProcesses_v3",
              "nvmlDeviceGetComputeRunningProcesses_v2")
    nv.gpus[0].procs = [FakeProc(77, None)]
    _, rows = collect(nv, read_proc=False)
    assert rows[0].throttle_reasons == ("HwThermalSlowdown", "SwPowerCap")
    assert [(p.pid, p.used_bytes) for p in rows[0].processes] == [(77, None)]
    assert nv.calls["nvmlDeviceGetComputeRunningProcesses"] == 1


def test_throttle_reasons_decoded():
    assert decode_throttle(None) is None
    assert decode_throttle(0) == ()
    assert decode_throttle(0x1) == ("GpuIdle",)
    assert decode_throttle(0x40 | 0x4 | 0x1 | 0x100) == (
        "HwThermalSlowdown", "SwPowerCap", "DisplayClockSetting", "GpuIdle")
    assert decode_throttle(0x8 | 0x80 | 0x20 | 0x10 | 0x2) == (
        "HwPowerBrakeSlowdown", "HwSlowdown", "SwThermalSlowdown", "SyncBoost", "ApplicationsClocksSetting")
    nv = FakeNvml([h100(reasons=fk.nvmlClocksEventReasonHwPowerBrakeSlowdown | fk.nvmlClocksEventReasonGpuIdle,
                        util=40)])
    _, rows = collect(nv)
    assert rows[0].throttle_reasons == ("HwPowerBrakeSlowdown", "GpuIdle")
    assert classify(rows[0]) == "throttled (HW power brake)"
    # idle clocks alone are not a throttle
    nv = FakeNvml([h100(reasons=fk.nvmlClocksEventReasonGpuIdle, util=0, mem_util=0)])
    _, rows = collect(nv)
    assert classify(rows[0]) == "idle"


def test_classify_words():
    base = GpuStats(source="nvml", util_pct=50.0, mem_util_pct=20.0, throttle_reasons=())
    from dataclasses import replace

    assert classify(replace(base, util_pct=1.0)) == "idle"
    assert classify(base) == "busy"
    assert classify(replace(base, util_pct=99.0)) == "saturated"
    assert classify(replace(base, util_pct=99.0, mem_util_pct=85.0)) == "memory-bound"
    assert classify(replace(base, throttle_reasons=("HwThermalSlowdown",))) == "throttled (HW thermal)"
    assert classify(replace(base, last_xid=79)) == "error (XID 79)"
    assert classify(replace(base, last_xid=0)) == "busy"
    assert classify(replace(base, state="failed")) == "failed"
    assert classify(replace(base, util_pct=None)) == "unknown"


def test_mig_devices_listed_under_their_parent():
    nv = FakeNvml([a100(0, mig=True), h100(1)])
    nv.gpus[0].mig[0].procs = [FakeProc(9001, 16_000 * MiB, gpu_instance_id=2, compute_instance_id=0)]
    _, rows = collect(nv, read_proc=False)
    a, h = rows
    assert a.mig_mode is True and h.mig_mode is False and h.mig_devices == ()
    assert a.util_pct is None  # not reported for a MIG-enabled GPU
    assert a.mem_total_bytes == 40960 * MiB and a.power_w == pytest.approx(238.604)
    assert [m.mig_profile for m in a.mig_devices] == ["3g.20gb", "2g.10gb", "1g.5gb"]
    assert [m.gpu_instance_id for m in a.mig_devices] == [2, 3, 9]
    assert all(m.uuid.startswith("MIG-") and m.index == 0 for m in a.mig_devices)
    assert a.mig_devices[0].name == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    assert a.mig_devices[0].mem_used_bytes == 17010 * MiB and a.mig_devices[0].mem_total_bytes == 19968 * MiB
    assert [p.pid for p in a.mig_devices[0].processes] == [9001]
    assert a.mig_devices[1].processes == ()
    assert classify(a) == "mig"
    assert a.mig_devices[0].label == "gpu0/mig2"


def test_xid_events_give_last_xid():
    nv = FakeNvml([h100(0), h100(1)])
    src, rows = collect(nv)
    assert [g.last_xid for g in rows] == [0, 0]
    nv.xid(1, 48)
    nv.xid(1, 79)
    rows = src.collect()
    assert [g.last_xid for g in rows] == [0, 79]
    assert classify(rows[1]) == "error (XID 79)"


# -- process → engine mapping with real processes ------------------------------

PARENT = ("import subprocess, sys, time\n"
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
          "print(c.pid, flush=True)\n"
          "time.sleep(30)\n")


def _spawn_tree(*extra_args: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-c", PARENT, *extra_args], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    return p, child


def _kill_tree(p: subprocess.Popen, child: int) -> None:
    try:
        os.kill(child, 9)
    except ProcessLookupError:
        pass
    p.kill()
    p.wait(timeout=10)
    p.stdout.close()


def test_has_port_arg():
    assert has_port_arg(["python", "-m", "vllm", "--port", "8123"], 8123)
    assert has_port_arg(["vllm", "--port=8123"], 8123)
    assert not has_port_arg(["vllm", "--port", "81234"], 8123)
    assert not has_port_arg(["vllm", "--metrics-port", "8123"], 8123)


async def test_processes_mapped_to_engines_by_port_and_by_process_tree():
    pa, child_a = _spawn_tree("--port", "8123")  # engine A: only its port is known
    pb, child_b = _spawn_tree("--served-model-name", "b")  # engine B: infertop started it (root PID)
    try:
        assert parent_pid(child_a) == pa.pid and parent_pid(child_b) == pb.pid
        nv = FakeNvml([
            h100(0, procs=[FakeProc(child_a, 70_000 * MiB)]),
            h100(1, procs=[FakeProc(child_b, 60_000 * MiB), FakeProc(os.getpid(), 500 * MiB)]),
            l4(2),
        ])
        engines = [("engine-a", None, 8123), EngineRef("engine-b", root_pid=pb.pid)]
        c = GpuCollector(GpuConfig(nvml=True), nvml_module=nv, engines=engines)
        rows, health = await c.poll()
        await c.aclose()
        assert health[0].ok
        g0, g1, g2 = rows
        assert [(p.pid, p.engine) for p in g0.processes] == [(child_a, "engine-a")]
        assert g0.engine == "engine-a"
        assert [(p.pid, p.engine) for p in g1.processes] == [(child_b, "engine-b"), (os.getpid(), None)]
        assert g1.engine == "engine-b"
        assert g2.engine is None and g2.processes == ()
        assert "time.sleep(30)" in g0.processes[0].name  # from /proc/<pid>/cmdline
        # the parent itself carries --port: it maps directly too
        direct = map_processes([h100_row_with(pa.pid)], [EngineRef("engine-a", port=8123)])
        assert direct[0].processes[0].engine == "engine-a"
        # no engine matches a port nobody used
        assert map_processes([h100_row_with(child_a)], [("x", None, 9999)])[0].engine is None
    finally:
        _kill_tree(pa, child_a)
        _kill_tree(pb, child_b)


def h100_row_with(pid: int) -> GpuStats:
    from infertop.domain.gpu import GpuProcess

    return GpuStats(source="nvml", index=0, processes=(GpuProcess(pid=pid),))


def test_driver_without_gpus():
    src, rows = collect(FakeNvml([]))
    assert rows == [] and src.health.ok and src.health.last_error == "NVML sees no GPUs on this host"
