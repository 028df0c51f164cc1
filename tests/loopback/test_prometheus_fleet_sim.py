"""The simulator's many-engines mode: every engine on one port by path
(``SimCluster(shared_port=…)``, ``infertop sim --shared-port``), file_sd targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from locations import REPO

from infertop.sim import SimCluster
from infertop.sim.cli import main as sim_main
from infertop.sources.expfmt import Parser
from infertop.sources.vllm import EngineEndpoint
from infertop.sources.fleet_collector import FleetCollector


@pytest.fixture
def fleet():
    with SimCluster(n_engines=3, seed=2, realtime=False, load="steady", shared_port=0, metrics_cache_s=60.0,
                    kubernetes_labels=True) as c:
        c.advance(20)
        yield c


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=5, trust_env=False)


def test_every_engine_is_its_own_api_under_one_port(fleet):
    ports = {httpx.URL(e.url).port for e in fleet.engines}
    assert len(ports) == 1 and [e.url.rsplit("/", 1)[1] for e in fleet.engines] == ["0", "1", "2"]
    for e in fleet.engines:
        assert get(e.url + "/health").status_code == 200
        assert get(e.url + "/v1/models").json()["data"][0]["id"] == e.model
        text = get(e.url + "/metrics").text
        exp = Parser().parse(text)
        assert "vllm:num_requests_running" in exp.layout.index
        assert text == e.render_metrics()
    base = fleet.engines[0].url.rsplit("/engine/", 1)[0]
    assert get(base + "/engine/3/metrics").status_code == 404
    assert get(base + "/nothing").status_code == 404
    assert get(base + "/dcgm/metrics").text.count("DCGM_FI_DEV_GPU_UTIL{") == 3


def test_metrics_are_rendered_at_most_once_per_cache_interval(fleet):
    e = fleet.engines[0]
    first = get(e.url + "/metrics").text
    fleet.advance(5)
    assert get(e.url + "/metrics").text == first  # cached for 60 s
    e.metrics_cache_s = 0.0
    assert get(e.url + "/metrics").text != first


def test_a_down_engine_answers_503_and_the_others_keep_answering(fleet):
    fleet.set_fault(1, "down")
    assert get(fleet.engines[1].url + "/metrics").status_code == 503
    assert get(fleet.engines[0].url + "/metrics").status_code == 200
    fleet.set_fault(1, None)
    assert get(fleet.engines[1].url + "/metrics").status_code == 200


def test_file_sd_lists_each_engine_as_a_target_with_its_labels(fleet):
    groups = fleet.fleet.file_sd()
    assert len(groups) == 3
    paths = {g["labels"]["__metrics_path__"] for g in groups}
    assert paths == {"/engine/0/metrics", "/engine/1/metrics", "/engine/2/metrics"}
    for g, e in zip(groups, fleet.engines):
        assert g["targets"] == [e.url.split("://")[1].split("/")[0]]
        assert "http://" + g["labels"]["instance"] == e.url
        assert g["labels"]["pod"] == e.gpu.pod and g["labels"]["namespace"] == "inference"


async def test_direct_scraping_of_shared_port_engines_works_as_for_a_port_each(fleet):
    col = FleetCollector([EngineEndpoint(f"e{i}", e.url) for i, e in enumerate(fleet.engines)])
    snap = await col.poll_once()
    await col.aclose()
    assert [s.state for s in snap.engines] == ["up"] * 3
    assert [s.model for s in snap.engines] == [e.model for e in fleet.engines]


@pytest.mark.parametrize("argv, error", [
    (["--file-sd", "x.json"], "--file-sd needs --shared-port"),
    (["--shared-port", "70000"], "--shared-port must be 0..65535"),
    (["--shared-port", "0", "--tick", "0"], "--tick must be > 0 and <= 60"),
])
def test_sim_flags_are_checked(argv, error, capsys):
    assert sim_main(argv) == 2
    assert error in capsys.readouterr().err


def test_sim_cli_writes_the_targets_file_before_ready(tmp_path):
    targets = tmp_path / "targets.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "infertop", "sim", "--engines", "20", "--shared-port", "0",
                             "--file-sd", str(targets), "--kubernetes-labels", "--lean"],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if line.strip() == "ready":
                break
        assert lines[-2] == f"file_sd {targets}"
        groups = json.loads(targets.read_text())
        assert len(groups) == 20
        url = "http://" + groups[7]["labels"]["instance"]
        assert lines[7].startswith(f"engine 7 {url} ")
        text = get(url + "/metrics").text
        assert "vllm:kv_cache_usage_perc" in text and "http_requests_total" not in text  # --lean
    finally:
        proc.terminate()
        proc.wait(timeout=20)
