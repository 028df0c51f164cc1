"""Check infertop's NVML source against a real GPU and nvidia-smi, side by side.

Run once on a machine with an NVIDIA GPU (needs only httpx, pyyaml and
nvidia-ml-py; torch, if present, puts load on GPU 0)::

    python3 benchmarks/gpu_real_check.py [--out DIR]

It reads every GPU idle, then under a matrix-multiply load started with
``--port 8123`` on its command line (as a vLLM engine has), then idle again.
Each infertop reading is followed at once by ``nvidia-smi --query-gpu``; the
report compares the fields both show, checks that the load's PID is listed on
GPU 0 and mapped to the engine on port 8123, and times a collection
(CPU seconds per collection of every GPU). Writes ``gpu_real_check.json``
to --out and prints one line per check; exit 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infertop.config import Config, GpuConfig  # noqa: E402
from infertop.sources.gpu import GpuCollector  # noqa: E402
from infertop.sources.nvml import EngineRef, map_processes  # noqa: E402

SMI_FIELDS = ("index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,"
              "power.draw,power.limit,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,pstate,fan.speed")
LOAD = r"""
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
hold = torch.empty(6 * 2**30, dtype=torch.uint8, device="cuda")  # 6 GiB more, visible in memory.used
torch.cuda.synchronize(); print("ready", flush=True)
end = time.time() + float(sys.argv[-1])
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
"""
ENGINE_PORT = 8123


def smi() -> list[dict]:
    """One nvidia-smi reading of every GPU, numbers as floats (None for N/A)."""
    out = subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    names = SMI_FIELDS.split(",")
    rows = []
    for line in out.strip().splitlines():
        row = {}
        for k, v in zip(names, (c.strip() for c in line.split(",")), strict=False):
            try:
                row[k] = float(v)
            except ValueError:
                row[k] = None if v in ("[N/A]", "N/A", "[Not Supported]") else v
        rows.append(row)
    return rows


def smi_pids() -> list[int]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout
    return [int(x) for x in out.split() if x.strip().isdigit()]


def sample(col: GpuCollector, label: str) -> dict:
    rows, health = col.collect()
    rows = map_processes(rows, [EngineRef("vllm-on-gpu", None, ENGINE_PORT)])
    return {"label": label, "at": time.time(), "infertop": [asdict(g) for g in rows],
            "health": [{"name": h.name, "ok": h.ok, "error": h.last_error} for h in health],
            "nvidia_smi": smi(), "smi_pids": smi_pids()}


PAIRS = (  # infertop field, nvidia-smi field, scale to smi unit, tolerance (abs, rel)
    ("mem_used_bytes", "memory.used", 1 / 2**20, (64, 0.02)),
    ("mem_total_bytes", "memory.total", 1 / 2**20, (1, 0.0)),
    ("temp_c", "temperature.gpu", 1, (3, 0.0)),
    ("power_w", "power.draw", 1, (40, 0.25)),
    ("power_limit_w", "power.limit", 1, (1, 0.0)),
    ("sm_clock_max_mhz", "clocks.max.sm", 1, (1, 0.0)),
    ("mem_clock_max_mhz", "clocks.max.mem", 1, (1, 0.0)),
    ("mem_clock_mhz", "clocks.mem", 1, (50, 0.05)),
)


def compare(s: dict) -> list[tuple[str, bool, str]]:
    checks = []
    for g, m in zip(s["infertop"], s["nvidia_smi"], strict=False):
        tag = f"{s['label']} gpu{g['index']}"
        checks.append((f"{tag} uuid", g["uuid"] == m["uuid"], f"{g['uuid']} vs {m['uuid']}"))
        checks.append((f"{tag} name", g["name"] == m["name"], f"{g['name']!r} vs {m['name']!r}"))
        for ours, theirs, scale, (tol_abs, tol_rel) in PAIRS:
            a, b = g.get(ours), m.get(theirs)
            if a is None or b is None:
                checks.append((f"{tag} {ours}", a is None and b is None, f"{a} vs {b} (one side missing)"))
                continue
            a_s = a * scale
            ok = abs(a_s - b) <= max(tol_abs, tol_rel * abs(b))
            checks.append((f"{tag} {ours}", ok, f"{a_s:.1f} vs {b:.1f}"))
        ps = m.get("pstate")
        if isinstance(ps, str) and ps.startswith("P"):
            checks.append((f"{tag} pstate", g["pstate"] == int(ps[1:]), f"P{g['pstate']} vs {ps}"))
    return checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".", help="folder for gpu_real_check.json")
    ap.add_argument("--load-s", type=float, default=25.0)
    args = ap.parse_args()
    col = GpuCollector(Config(gpu=GpuConfig(nvml=True)).gpu, Config().prometheus)
    report: dict = {"samples": [], "checks": []}
    try:
        col.collect()
        time.sleep(1.0)
        report["samples"].append(sample(col, "idle"))

        n = 100
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            col.collect()
        report["collect_cpu_ms"] = (time.process_time() - c0) / n * 1e3
        report["collect_wall_ms"] = (time.perf_counter() - w0) / n * 1e3

        load = None
        if shutil.which("python3"):
            load = subprocess.Popen([sys.executable, "-c", LOAD, "--port", str(ENGINE_PORT), str(args.load_s)],
                                    stdout=subprocess.PIPE, text=True)
            ready = load.stdout.readline().strip() if load.stdout else ""
            report["load"] = {"pid": load.pid, "ready": ready}
            time.sleep(3.0)
            for i in range(3):
                report["samples"].append(sample(col, f"load{i}"))
                time.sleep(1.0)
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                col.collect()
            report["collect_cpu_ms_busy_with_process"] = (time.process_time() - c0) / n * 1e3
            report["collect_wall_ms_busy_with_process"] = (time.perf_counter() - w0) / n * 1e3
            load.terminate()
            load.wait(30)
            time.sleep(2.0)
            report["samples"].append(sample(col, "after"))
    finally:
        col.close()

    checks = []
    for s in report["samples"]:
        checks += compare(s)
        checks.append((f"{s['label']} source ok", all(h["ok"] for h in s["health"]), str(s["health"])))
    loads = [s for s in report["samples"] if s["label"].startswith("load")]
    if loads and report.get("load", {}).get("ready") == "ready":
        pid = report["load"]["pid"]
        g0 = loads[-1]["infertop"][0]
        pids = [p["pid"] for p in g0["processes"]]
        checks.append(("load pid listed on gpu0 (nvidia-smi lists it too)", pid in pids and pid in loads[-1]["smi_pids"],
                       f"infertop {pids}, nvidia-smi {loads[-1]['smi_pids']}, load {pid}"))
        checks.append(("gpu0 mapped to the engine on --port 8123", g0["engine"] == "vllm-on-gpu", str(g0["engine"])))
        utils = [(s["infertop"][0]["util_pct"], s["nvidia_smi"][0]["utilization.gpu"]) for s in loads]
        checks.append(("gpu0 busy under load (infertop, nvidia-smi)", all((a or 0) >= 50 and (b or 0) >= 50 for a, b in utils),
                       str(utils)))
        after = report["samples"][-1]["infertop"][0]
        checks.append(("load pid gone after it exited", pid not in [p["pid"] for p in after["processes"]],
                       str([p["pid"] for p in after["processes"]])))
    report["checks"] = [{"check": c, "ok": ok, "detail": d} for c, ok, d in checks]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_real_check.json").write_text(json.dumps(report, indent=1, default=str))
    for c, ok, d in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {c}: {d}")
    print(f"collect: {report['collect_cpu_ms']:.2f} ms CPU, {report['collect_wall_ms']:.2f} ms wall per collection "
          f"of {len(report['samples'][0]['infertop'])} GPU(s) idle; "
          f"{report.get('collect_cpu_ms_busy_with_process', float('nan')):.2f} ms CPU with a process on the GPU")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
