"""A real Prometheus (Debian package) stopped mid-run is a monitoring outage, never an engine
outage (issue 27 item 2): the engines keep their last values marked stale, the status bar names
one failing source, no alert is cleared, triage says metrics-stale (not engine-down), and
``snapshot --prometheus`` says the metrics are stale.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from locations import REPO

from infertop.analysis.triage import Triage
from infertop.snapshot import print_table
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import STALE
from infertop.ui.status import AlertLog, status_line

from prom_sim_fleet import N, Driver, prometheus, sim, fleet_source, wait_for  # noqa: F401 — fixtures

pytestmark = pytest.mark.real_prometheus


class TightSlo:
    """Targets every busy engine misses: each has an alert to keep (or, on the old code, to clear)."""

    ttft_p99_s, itl_p95_s, e2e_p99_s, queue_p99_s, kv_cache_pct = 2.0, 0.04, 1e-6, 1.0, 0.0


def test_prometheus_stopped_mid_run_is_metrics_stale_not_engines_down(prometheus, sim):  # noqa: F811
    driver = Driver(sim).start()
    src = fleet_source(prometheus.url)
    joiner = FleetJoiner(src, slo=TightSlo(), refresh_s=1.0, window_s=20.0)
    log, triage, t = AlertLog(), Triage(), [1000.0]

    def tick():
        """One refresh and one state; the Log and triage see one second pass per tick."""
        src.refresh()
        joiner.observe()
        t[0] += 1.0
        state = replace(joiner.build(), taken_at=t[0])
        return state, [line.plain for line in log.changes(state)], triage.evaluate(state, t[0])

    try:
        def every_engine_alerting():
            state, _, _ = tick()
            targets = {a.target for a in state.alerts if a.severity == "warning"}
            return len(state.engines) == N and all(e.fresh for e in state.engines) \
                and targets >= {e.name for e in state.engines} and state

        before = wait_for("an alert on every engine", every_engine_alerting, log=prometheus.log)
        for _ in range(6):  # held 5 s: logged
            tick()
        kept = {(a.target, a.text.split(" (")[0]) for a in before.alerts}
        prometheus.stop()
        lines, verdicts = [], ()
        for _ in range(15):  # longer than the Log's 10 s before it clears an alert
            state, new, verdicts = tick()
            lines += new
    finally:
        driver.freeze()
        src.close()
    reason = "metrics stale (Prometheus unreachable: connection refused)"
    assert [(e.freshness.status, e.stats.state, e.freshness.reason) for e in state.engines] == \
        [(STALE, "up", reason)] * N
    assert all(e.stats.running is not None for e in state.engines)  # the last values, not zeros
    assert not [ln for ln in lines if ln.startswith("cleared")], lines  # no false all-clear
    # every engine's alert stands, marked stale; one alert names the failing source
    assert {(a.target, a.text.split(" (")[0]) for a in state.alerts if a.text.endswith("(stale)")} >= \
        {k for k in kept if k[0] in {e.name for e in state.engines}}
    source = f"{prometheus.url} (engines)"
    assert [a.text.split(" since")[0] for a in state.alerts if a.target == source] == \
        ["metrics stale: Prometheus unreachable"]
    bar = status_line(state).plain
    assert bar.startswith("✗ metrics stale: Prometheus unreachable since ") and "engines down" not in bar, bar
    assert {v.kind for v in verdicts} == {"metrics-stale"}, verdicts  # engine-down stays silent
    out = io.StringIO()
    print_table(state, out)
    assert "metrics stale: Prometheus unreachable" in out.getvalue()
    assert "every engine within its SLO targets" not in out.getvalue()


def test_snapshot_against_a_stopped_prometheus_says_the_metrics_are_stale(prometheus, sim, tmp_path):  # noqa: F811
    prometheus.stop()
    empty = tmp_path / "infertop.yaml"
    empty.write_text("{}\n")
    out = subprocess.run([sys.executable, "-m", "infertop", "snapshot", "--config", str(empty),
                          "--prometheus", prometheus.url], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode not in (0, 70), out.stderr
    assert "metrics stale: Prometheus unreachable since" in out.stdout and "(connection refused)" in out.stdout
    assert "every engine within its SLO targets" not in out.stdout, out.stdout
