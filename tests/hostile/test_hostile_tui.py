"""The TUI (Pilot) with every hostile engine, and a hostile dcgm-exporter, next to a healthy one.

Markup-like and control-character label values must reach the screen as plain
text, verbatim (control characters made visible), and the app must keep running.
"""

from __future__ import annotations

from textual.widgets import DataTable, RichLog

from hostile_cases import CASES, ESC_SHOWN, healthy  # noqa: F401 — a fixture
from infertop.config import Config, GpuConfig
from infertop.sources.gpu import GpuCollector
from infertop.sources.vllm import EngineEndpoint
from infertop.ui.app import InfertopApp, Settings
from overview_view import alert_lines
from pilot_wait import until


def cells(app, selector: str) -> list[list[str]]:
    table = app.query_one(selector, DataTable)
    return [[str(getattr(c, "plain", c)) for c in table.get_row(k)] for k in table.rows]


def text_of(app, selector: str) -> str:
    r = app.query_one(selector).render()
    return str(getattr(r, "plain", r))


def log_text(app) -> str:
    """The Log pane's text, wrapped lines joined, whitespace runs as one space."""
    return " ".join(" ".join(line.text for line in app.query_one("#log-view", RichLog).lines).split())


def no_gpus() -> GpuCollector:
    return GpuCollector(GpuConfig(nvml=False))


async def test_every_hostile_engine_at_once_in_the_tui(healthy, scripted):
    endpoints = [EngineEndpoint("healthy", healthy.url)]
    for case in CASES:
        srv = scripted()
        case.setup(srv)
        endpoints.append(EngineEndpoint(case.name, srv.url, timeout_s=case.timeout_s))
    app = InfertopApp(Settings(config=Config(), endpoints=endpoints), poll=False, gpu_collector=no_gpus())
    async with app.run_test(size=(200, 60)) as pilot:
        for _ in range(3):
            await app.poll_now()
        # values float32 cannot hold, recorded straight into the sparkline history
        for v in (1e308, float("inf"), float("-inf"), float("nan"), -1e300):
            app.history.record("healthy", "running", v)
            app.history.record("nonfinite", "ttft_p99_s", v)
        await pilot.press("2")
        await until(pilot, lambda: app.current_pane == "engines", "the Engines pane on view")
        app.render_snapshot(force=True)
        await until(pilot, lambda: len(cells(app, "#engines-table")) == 1 + len(CASES) - 2 + 2 + 64,
                    "every engine's row in the Engines table")
        assert app.is_running
        rows = cells(app, "#engines-table")
        flat = ["\t".join(r) for r in rows]
        # 1 healthy + 16 cases, two of which show several engines (duplicate names: 2, many series: 64)
        assert len(rows) == 1 + len(CASES) - 2 + 2 + 64
        assert len({r[0] for r in rows}) == len(rows)
        assert any("[/evil]" in r for r in flat)  # the model name, verbatim
        assert any(ESC_SHOWN in r for r in flat)  # control characters visible, never sent raw
        assert not any("\x1b" in r or "\x07" in r for r in flat)
        await pilot.press("3")  # the Log pane renders its lines once it has a size
        await until(pilot, lambda: "markup-metric" in log_text(app) and "garbage /metrics (line 1: invalid metric name 'foo[/x]')" in log_text(app), '"markup-metric" in log_text(app) and "garbage /metrics (l…')
        log = log_text(app)
        assert "markup-metric" in log and "garbage /metrics (line 1: invalid metric name 'foo[/x]')" in log
        assert "many-series/m#0" in log and "too many series (20000) — showing the first 64" in log
        assert "\x1b" not in log
        status = text_of(app, "#statusbar")
        assert "✗" in status and "\x1b" not in status
        # the overview (alerts, the hottest engines) renders the same texts
        await pilot.press("1")
        await until(pilot, lambda: app.current_pane == "overview" and any(line.strip() for line in alert_lines(app)),
                    "the Overview on view with its alert lines")
        assert app.is_running
        alerts = " ".join(alert_lines(app))
        assert "\x1b" not in alerts


DCGM_HOSTILE = """# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="[/evil]",Hostname="h\\x1b",pod="[/pod]",namespace="ns"} 250
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",modelName="\x1b]0;pwn\x07H100",Hostname="h"} NaN
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",modelName="[/evil]",Hostname="h\\x1b"} +Inf
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",modelName="\x1b]0;pwn\x07H100",Hostname="h"} 61
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a",modelName="[/evil]",Hostname="h\\x1b"} -inf
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-b",modelName="\x1b]0;pwn\x07H100",Hostname="h"} 1e308
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",modelName="[/evil]",Hostname="h\\x1b"} 1e308
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a",modelName="[/evil]",Hostname="h\\x1b"} 1e308
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",modelName="\x1b]0;pwn\x07H100",Hostname="h"} -5
DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",modelName="\x1b]0;pwn\x07H100",Hostname="h"} 1e300
"""


async def test_hostile_dcgm_exporter_in_the_tui(healthy, scripted):
    srv = scripted()
    srv.routes["/metrics"] = (200, DCGM_HOSTILE)
    bad = scripted()
    bad.routes["/metrics"] = (200, "foo[/x] 1\n")
    gpus = GpuCollector(GpuConfig(nvml=False), dcgm_urls=[srv.url + "/metrics", bad.url + "/metrics"])
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)),
                               endpoints=[EngineEndpoint("healthy", healthy.url)]), poll=False, gpu_collector=gpus)
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_now()
        await app.poll_gpus_now()
        await app.poll_gpus_now()
        await pilot.press("4")
        await until(pilot, lambda: app.current_pane == "gpus"
                    and "[/evil]" in "\n".join("\t".join(r) for r in cells(app, "#gpus-table")), "the GPU rows on view")
        assert app.is_running
        rows = {r[0].strip(): r for r in cells(app, "#gpus-table")}
        flat = "\n".join("\t".join(r) for r in rows.values())
        assert "[/evil]" in flat and "\\x1b]0;pwn\\x07H100" in flat and "\x1b" not in flat
        by_uuid = {g.uuid: g for g in app.joiner.gpu_rows}
        a, b = by_uuid["GPU-a"], by_uuid["GPU-b"]
        assert a.util_pct is None and a.temp_c is None and a.sm_clock_mhz is None  # 250 %, +Inf, -Inf
        assert a.name == "[/evil]" and a.host == "h\\x1b" and a.pod == "[/pod]"
        assert b.util_pct is None and b.power_w is None and b.temp_c == 61
        status = text_of(app, "#statusbar")
        assert "invalid metric name 'foo[/x]'" in status  # the error, as text, not markup
