"""The GPUs pane, GPU tiles, GPU detail and `snapshot --dcgm`, through the Pilot and a subprocess.

NVML is the fake module of tests/support/fake_pynvml.py, handed to the app's
GpuCollector; dcgm-exporter is the simulator's, over loopback HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import fake_pynvml as fk
from fake_pynvml import FakeNvml, FakeProc, a100, h100, l4
from infertop.config import Config, GpuConfig
from infertop.sim import SimCluster
from infertop.sources.gpu import GpuCollector
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.screens.gpu_detail import GpuDetailScreen
from infertop.ui.widgets.gpus import COLUMNS, GpusTable
from infertop.ui.widgets.panels import Trend
from overview_view import tile, tiles
from pilot_wait import until

MiB = 1024 * 1024


def text_of(node, selector: str) -> str:
    w = node.query_one(selector)
    r = w.render()
    return str(getattr(r, "plain", r))


def gpu_rows(app) -> dict[str, dict[str, str]]:
    """Visible GPU table: first cell (label) → {column key: text}."""
    t = app.query_one("#gpus-table", GpusTable)
    out = {}
    for row_key in t.rows:
        cells = [str(getattr(c, "plain", c)).strip() for c in t.get_row(row_key)]
        out[cells[0]] = dict(zip((k for k, _ in COLUMNS), cells))
    return out


def nvml_app(nv: FakeNvml, endpoints=(), **settings) -> InfertopApp:
    collector = GpuCollector(GpuConfig(nvml=True), nvml_module=nv)
    return InfertopApp(Settings(config=Config(), endpoints=list(endpoints), **settings), poll=False,
                       gpu_collector=collector)


async def test_throttling_gpu_with_reason_and_lost_gpu_failed_while_others_update():
    nv = FakeNvml([h100(0), l4(1), h100(2)])
    app = nvml_app(nv)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_gpus_now()
        # Overview tiles: ok / throttled / failed, and the hottest GPU
        assert tile(app, "gpus") == "2/1/0"
        assert tile(app, "gpu_temp") == "84°C"
        await pilot.press("4")
        await until(pilot, lambda: app.query_one("#panes").active == "gpus", 'app.query_one("#panes").active == "gpus"')
        assert app.query_one("#panes").active == "gpus"
        rows = gpu_rows(app)
        assert list(rows) == ["gpu0", "gpu1", "gpu2"]
        assert rows["gpu0"]["status"] == "saturated" and rows["gpu0"]["util"].startswith("97%")
        assert rows["gpu0"]["mem"] == "72.0/80G" and rows["gpu0"]["power"] == "612/700W"
        # the L4 throttles: status and SM clock say why
        assert rows["gpu1"]["status"] == "throttled (HW thermal)"
        assert rows["gpu1"]["clock"] == "1590/2040 HW thermal, power cap"
        assert rows["gpu1"]["temp"] == "84°C"
        t = app.query_one("#gpus-table", GpusTable)
        assert "red" in str(t.get_row_at(1)[1].style)  # HW throttling is highlighted
        assert "✓ GPU nvml" in text_of(app, "#statusbar")

        # GPU 2 falls off the bus; GPU 0's load drops; both show on the next poll
        nv.gpus[2].lost = True
        nv.gpus[0].util = 40
        nv.gpus[0].temp = 58
        await app.poll_gpus_now()
        await until(pilot, lambda: gpu_rows(app)["gpu2"]["status"] == "failed (GPU is lost)", 'gpu_rows(app)["gpu2"]["status"] == "failed (GPU is lost)"')
        rows = gpu_rows(app)
        assert rows["gpu2"]["status"] == "failed (GPU is lost)"
        assert rows["gpu2"]["util"] == "—"
        assert rows["gpu0"]["util"].startswith("40%") and rows["gpu0"]["status"] == "busy"
        assert rows["gpu0"]["temp"] == "58°C"
        assert rows["gpu1"]["status"] == "throttled (HW thermal)"
        assert "⚠ nvml gpu2: NVML: GPU is lost" in text_of(app, "#statusbar")
        notice = text_of(app, "#gpu-notice")
        assert "gpu2: NVML: GPU is lost" in notice
        # the Overview tiles, painted from the same state when the pane is shown
        await pilot.press("1")
        await until(pilot, lambda: tile(app, "gpus") == "1/1/1", 'tile(app, "gpus") == "1/1/1"')
        assert tile(app, "gpus") == "1/1/1"
        assert "gpu2 failed" in tile(app, "gpu_errors")
        # the state change is in the log
        await pilot.press("3")
        await until(pilot, lambda: "gpu2 saturated → failed: NVML: GPU is lost"
                    in "\n".join(line.text for line in app.query_one("#log-view").lines), "the state change in the log")
        log = "\n".join(line.text for line in app.query_one("#log-view").lines)
        assert "gpu2 saturated → failed: NVML: GPU is lost" in log
        await pilot.press("4")

        # every move is shown at the next tick (no dead-band: the table, the trend and the
        # Overview tile show the same value), and the trend label beside it agrees
        nv.gpus[0].util = 41
        await app.poll_gpus_now()
        await until(pilot, lambda: gpu_rows(app)["gpu0"]["util"].startswith("41%"), 'gpu_rows(app)["gpu0"]["util"].startswith("41%")')
        assert gpu_rows(app)["gpu0"]["util"].startswith("41%")
        nv.gpus[0].util = 60
        await app.poll_gpus_now()
        assert gpu_rows(app)["gpu0"]["util"].startswith("60%")


async def test_gpu_detail_processes_owned_by_engines_and_mig_rows():
    # a process started with --port 18123 is engine "alpha"'s (matched through /proc)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "--port", "18123"],
                            stdin=subprocess.PIPE)
    try:
        nv = FakeNvml([h100(0, procs=[FakeProc(proc.pid, 70_000 * MiB)]), a100(1, mig=True)])
        nv.gpus[1].mig[0].procs = [FakeProc(os.getpid(), 16_000 * MiB, gpu_instance_id=2, compute_instance_id=0)]
        app = nvml_app(nv, [EngineEndpoint("alpha", "http://127.0.0.1:18123")])
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("4")
            await app.poll_gpus_now()
            await until(pilot, lambda: list(gpu_rows(app)) == ["gpu0", "gpu1", "└ gpu1/mig2", "└ gpu1/mig3", "└ gpu1/mig9"], 'list(gpu_rows(app)) == ["gpu0", "gpu1", "└ gpu1/mig2", "└…')
            rows = gpu_rows(app)
            assert list(rows) == ["gpu0", "gpu1", "└ gpu1/mig2", "└ gpu1/mig3", "└ gpu1/mig9"]
            assert rows["gpu0"]["engine"] == "alpha"
            assert rows["└ gpu1/mig2"]["name"] == "3g.20gb" and rows["└ gpu1/mig2"]["mem"] == "16.6/20G"
            assert rows["└ gpu1/mig2"]["status"] == "MIG device"
            assert rows["gpu1"]["errors"] == "3/0"
            # history for the selected GPU's sparklines
            await app.poll_gpus_now()
            assert "gpu0 97%" in app.query_one("#g-util-pct", Trend).title_text()
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, GpuDetailScreen)
                        and "NVIDIA H100 80GB HBM3" in text_of(app.screen, "#detail-body"), "the GPU detail with its body")
            screen = app.screen
            assert isinstance(screen, GpuDetailScreen)
            body = text_of(screen, "#detail-body")
            assert "NVIDIA H100 80GB HBM3" in body and "612/700W" in body and "00000000:18:00.0" in body
            assert "Clock events" in body and "Driver" in body and "550.90.07" in body
            procs = text_of(screen, "#detail-procs")
            assert str(proc.pid) in procs and "alpha" in procs and "--port 18123" in procs
            # the open detail follows new polls
            nv.gpus[0].temp = 71
            await app.poll_gpus_now()
            assert "GPU 71°C" in text_of(screen, "#detail-body")
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, GpuDetailScreen), 'not isinstance(app.screen, GpuDetailScreen)')
            assert not isinstance(app.screen, GpuDetailScreen)
            # Enter on the MIG parent row opens it, with the MIG device's process
            await pilot.press("4")  # focuses the table
            app.query_one("#gpus-table", GpusTable).move_cursor(row=1)
            await until(pilot, lambda: " gpu1 " in app.query_one("#g-util-pct", Trend).title_text(),
                        "gpu1's trends shown for the highlighted row")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, GpuDetailScreen) and app.screen.label.endswith("gpu1"), 'isinstance(app.screen, GpuDetailScreen) and app.screen.la…')
            assert isinstance(app.screen, GpuDetailScreen) and app.screen.label.endswith("gpu1")
            procs = text_of(app.screen, "#detail-procs")
            assert "gpu1/mig2" in procs and str(os.getpid()) in procs
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


async def test_no_driver_says_why_and_how_to_enable():
    app = nvml_app(FakeNvml([], init_error=fk.NVMLError_LibraryNotFound))
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_gpus_now()
        await pilot.press("4")
        await until(pilot, lambda: "no NVIDIA driver on this host" in text_of(app, "#gpu-notice"), "the no-driver notice")
        notice = text_of(app, "#gpu-notice")
        assert ("no NVIDIA driver on this host — add dcgm-exporter URLs under gpu.dcgm in the config, "
                "or --dcgm URL") in notice
        assert "--dcgm URL" in notice and "prometheus.url" in notice
        assert not app.query_one("#gpus-table").display or app.query_one("#gpus-table").region.height == 0
        assert "no GPU source: no NVIDIA driver on this host (4: GPUs)" in text_of(app, "#statusbar")
        assert tile(app, "gpus") == "none (4: why)"


async def test_nothing_configured_says_how_to_enable():
    cfg = Config(gpu=GpuConfig(nvml=False))
    app = InfertopApp(Settings(config=cfg), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_gpus_now()
        await pilot.press("4")
        await until(pilot, lambda: "no GPU source configured" in text_of(app, "#gpu-notice"), "the no-source notice")
        notice = text_of(app, "#gpu-notice")
        assert "no GPU source configured" in notice and "--dcgm URL" in notice


async def test_gpus_pane_at_80x24():
    nv = FakeNvml([h100(0), l4(1), h100(2), a100(3, mig=True)])
    app = nvml_app(nv)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_gpus_now()
        await app.poll_gpus_now()
        await pilot.press("4")
        await until(pilot, lambda: app.current_pane == "gpus" and app.query_one("#gpus-table", GpusTable).size.height >= 6,
                    "the GPUs table on view, laid out")
        table = app.query_one("#gpus-table", GpusTable)
        assert table.size.height >= 6  # header + rows between the tabs and the trends
        assert table.region.right <= 80
        # label, status (with the throttle reason) and utilisation fit without scrolling
        widths = [c.get_render_width(table) for c in list(table.columns.values())[:3]]
        assert sum(widths) <= 80
        for tid in ("#g-util-pct", "#g-mem-pct", "#g-power-w", "#g-temp-c"):
            w = app.query_one(tid)
            assert w.region.height == 3 and w.region.right <= 80 and w.region.width >= 19
        assert app.query_one("#statusbar").region.bottom <= 23
        await pilot.press("1")
        await until(pilot, lambda: tiles(app).tile_region("gpus").bottom <= 24, 'tiles(app).tile_region("gpus").bottom <= 24')
        assert tiles(app).tile_region("gpus").bottom <= 24


@pytest.fixture(scope="module")
def sim():
    with SimCluster(3, seed=7, realtime=False, load="steady") as c:
        c.gpus[1].cooling_loss_c = 20.0  # the poorly cooled GPU runs into its thermal slowdown (the sim's prefill got
        c.advance(90)                    # cheaper in 678ac9c: at this load it stayed under 85 °C on its own)
        c.gpus[2].xid = 79
        yield c


async def test_app_reads_dcgm_exporter(sim):
    cfg = Config(gpu=GpuConfig(nvml=False))
    app = InfertopApp(Settings(config=cfg, dcgm_urls=[sim.dcgm_url]), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_gpus_now()
        await pilot.press("4")
        await until(pilot, lambda: list(gpu_rows(app)) == ["gpu0", "gpu1", "◆ gpu2"], 'list(gpu_rows(app)) == ["gpu0", "gpu1", "◆ gpu2"]')
        rows = gpu_rows(app)
        assert list(rows) == ["gpu0", "gpu1", "◆ gpu2"]  # XID 79 is a gpu-fault verdict at once: its row is marked
        assert rows["gpu1"]["status"].startswith("throttled (")
        assert rows["◆ gpu2"]["status"] == "error (XID 79)" and rows["◆ gpu2"]["errors"].endswith("XID 79")
        assert "✓ GPU dcgm" in text_of(app, "#statusbar")
        assert tile(app, "gpus") == "1/1/1"


def _snapshot(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}  # no user config file
    return subprocess.run([sys.executable, "-m", "infertop", "snapshot", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_snapshot_cli_with_dcgm(sim, tmp_path):
    engines = [a for e in sim.engines for a in ("--engine", e.url)]
    p = _snapshot(["--json", "--window", "0", "--dcgm", sim.dcgm_url, *engines], tmp_path)
    assert p.returncode == 4, p.stderr  # XID 79 on gpu2: a critical verdict (gpu-fault) on what still answers
    doc = json.loads(p.stdout)
    assert [v["kind"] for v in doc["verdicts"] if v["severity"] == "critical"] == ["gpu-fault"]
    gpus = doc["gpus"]
    assert [g["label"] for g in gpus] == ["gpu0", "gpu1", "gpu2"]
    assert {g["host"] for g in gpus} == {"sim-node-0"} and all(g["source"] == "dcgm" for g in gpus)
    assert gpus[1]["status"].startswith("throttled (") and gpus[1]["throttle"]
    assert gpus[2]["status"] == "error (XID 79)"
    dcgm = [s for s in doc["sources"] if s["kind"] == "dcgm"]
    assert dcgm == [dict(dcgm[0], name=sim.dcgm_url, ok=True, error=None)]
    # every source that is not ok says why (here at least NVML, unless this host has a driver)
    assert all(s["error"] for s in doc["sources"] if not s["ok"])
    assert len([s for s in doc["sources"] if s["kind"] == "vllm"]) == 3

    # the plain table has a GPU section; an unreachable exporter is named with its error
    p = _snapshot(["--window", "0", "--dcgm", sim.dcgm_url, "--dcgm", "http://127.0.0.1:9/metrics", *engines],
                  tmp_path)
    assert p.returncode == 4, p.stderr  # a source is down (1), and the critical GPU fault outranks it
    lines = p.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("gpu "))
    assert lines[head + 1].startswith("gpu0") and lines[head + 2].startswith("gpu1")
    assert "throttled (" in lines[head + 2] and "error (XID 79)" in lines[head + 3]
    assert "http://127.0.0.1:9/metrics: connection refused" in p.stderr
