"""Admin API (token, validation, dry run), weights-file reload, /metrics, config and the command."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway_upstream import Upstream, start_gateway, wait_for
from infertop.config import ConfigError, parse_config
from infertop.gateway.admin import read_token
from infertop.gateway.runner import resolve_engines

AUTH = {"Authorization": "Bearer tok"}


@pytest.fixture
async def gw():
    up = await Upstream("a").start()
    made = []

    async def make(**kw):
        g = await start_gateway([up], **kw)
        made.append(g)
        return g, up

    yield make
    for g in made:
        await g.stop()
    await up.stop()


@pytest.fixture
async def client():
    async with aiohttp.ClientSession() as s:
        yield s


async def call(client, method, url, body=None, headers=AUTH) -> tuple[int, dict]:
    async with client.request(method, url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def test_admin_needs_the_token(gw, client):
    g, _ = await gw()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "tok"}):
        for method, path in (("GET", "/admin/state"), ("PATCH", "/admin/classes/batch"),
                             ("POST", "/admin/engines/a/drain")):
            status, doc = await call(client, method, g.admin_url + path, {"weight": 9}, headers=headers)
            assert status == 401 and doc["error"]["type"] == "authentication_error"
    assert g.policy.classes["batch"].weight == 2 and not g.policy.engines["a"].draining


async def test_admin_state_changes_dry_run_and_errors(gw, client):
    g, _ = await gw()
    status, doc = await call(client, "GET", g.admin_url + "/admin/state")
    assert status == 200
    assert [c["name"] for c in doc["classes"]] == ["realtime", "batch", "background"]
    assert set(doc["classes"][0]) == {"name", "priority", "weight", "max_wait_s", "reserved_slots", "queued",
                                      "oldest_wait_s"}
    assert doc["engines"] == [{"name": "a", "url": g.policy.engines["a"].url, "cap": 4, "in_flight": 0,
                               "draining": False, "up": True}]
    assert (doc["strict_top"], doc["default_class"]) == (False, "batch")

    status, doc = await call(client, "PATCH", g.admin_url + "/admin/classes/batch?dry_run=1",
                             {"weight": 7, "max_wait_s": 3})
    assert status == 200 and (doc["weight"], doc["max_wait_s"]) == (7, 3)
    assert g.policy.classes["batch"].weight == 2  # dry run: nothing changed
    status, doc = await call(client, "PATCH", g.admin_url + "/admin/classes/batch", {"weight": 7, "reserved_slots": 1})
    assert status == 200 and (doc["weight"], doc["reserved_slots"]) == (7, 1)
    assert g.policy.classes["batch"].weight == 7

    status, doc = await call(client, "PATCH", g.admin_url + "/admin/engines/a", {"cap": 2, "draining": True})
    assert status == 200 and (doc["cap"], doc["draining"]) == (2, True)
    status, doc = await call(client, "POST", g.admin_url + "/admin/engines/a/undrain?dry_run=1")
    assert status == 200 and doc["draining"] is False and g.policy.engines["a"].draining is True
    status, doc = await call(client, "POST", g.admin_url + "/admin/engines/a/undrain")
    assert doc["draining"] is False and g.policy.engines["a"].draining is False

    for path, body in (("/admin/classes/batch", {"weight": 0}), ("/admin/classes/batch", {"weight": "x"}),
                       ("/admin/classes/batch", {"reserved_slots": -1}), ("/admin/classes/batch", {"colour": 1}),
                       ("/admin/engines/a", {"cap": 0}), ("/admin/engines/a", {"draining": 1})):
        status, doc = await call(client, "PATCH", g.admin_url + path, body)
        assert status == 400 and set(doc["error"]) == {"message", "type", "code"}, (path, body, doc)
    async with client.patch(g.admin_url + "/admin/classes/batch", data=b"{nope", headers=AUTH) as r:
        assert r.status == 400
    assert (await call(client, "PATCH", g.admin_url + "/admin/classes/gold", {"weight": 1}))[0] == 404
    assert (await call(client, "POST", g.admin_url + "/admin/engines/zz/drain"))[0] == 404
    assert g.policy.classes["batch"].weight == 7 and g.policy.engines["a"].cap == 2


async def test_weights_file_is_reloaded_when_it_changes(gw, client, tmp_path):
    path = tmp_path / "weights.yaml"
    path.write_text("batch: {weight: 5}\n")
    g, _ = await gw(weights_file=str(path), files_poll_s=0.1)
    assert g.policy.classes["batch"].weight == 5
    tmp = tmp_path / "w.new"  # replaced the way a ConfigMap mount swaps it
    tmp.write_text("batch: {weight: 7, max_wait_s: 9}\nrealtime: {weight: 1}\n")
    os.replace(tmp, path)
    await wait_for(lambda: g.policy.classes["batch"].weight == 7, what="the reload")
    assert (g.policy.classes["batch"].max_wait_s, g.policy.classes["realtime"].weight) == (9, 1)
    path.write_text("batch: {weight: -1}\n")  # a bad file keeps the old values
    await wait_for(lambda: g.file_errors, what="the bad file to be noticed")
    assert "must be a number > 0" in g.file_errors[-1]
    assert g.policy.classes["batch"].weight == 7


async def test_metrics_exposition(gw, client):
    g, up = await gw(caps={"a": 1})
    async with client.post(g.url + "/v1/completions", json={"prompt": "x"}, headers={"x-infertop-class": "realtime"}) as r:
        assert r.status == 200
    up.hold = asyncio.Event()
    held = [asyncio.create_task(client.post(g.url + "/v1/completions", json={"prompt": "x"},
                                            headers={"x-infertop-tenant": t})) for t in ("t1", "t1", 'q"x')]
    await wait_for(lambda: g.policy.queued == 2, what="two queued")
    async with client.get(g.url + "/metrics") as r:
        fair = {s.labels["fairness_id"]: s.value for f in text_string_to_metric_families(await r.text())
                if f.name == "infertop_gateway_fairness_queue_size" for s in f.samples}
    assert sum(fair.values()) == 2 and set(fair) <= {"t1", 'q"x'}
    up.hold.set()
    for t in held:
        assert (await t).status == 200
    async with client.get(g.url + "/metrics") as r:
        text = await r.text()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("infertop_gateway_queue_size", "infertop_gateway_queue_oldest_wait_seconds",
                 "infertop_gateway_queue_wait_seconds", "infertop_gateway_dispatches",
                 "infertop_gateway_promotions", "infertop_gateway_class_weight", "infertop_gateway_class_priority",
                 "infertop_gateway_class_max_wait_seconds", "infertop_gateway_engine_in_flight",
                 "infertop_gateway_engine_cap", "infertop_gateway_engine_draining", "infertop_gateway_engine_up",
                 "infertop_gateway_upstream_errors", "infertop_gateway_requests",
                 "infertop_gateway_fairness_queue_size"):
        assert name in fams, name
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    assert samples[("infertop_gateway_queue_wait_seconds_count", (("class", "realtime"),))] == 1
    assert samples[("infertop_gateway_queue_wait_seconds_count", (("class", "batch"),))] == 3
    assert samples[("infertop_gateway_dispatches_total", (("class", "realtime"), ("engine", "a")))] == 1
    assert samples[("infertop_gateway_requests_total", (("class", "realtime"), ("code", "200")))] == 1
    assert samples[("infertop_gateway_queue_size", (("class", "batch"), ("priority", "50")))] == 0
    assert samples[("infertop_gateway_engine_up", (("engine", "a"),))] == 1
    async with client.get(g.url + "/v1/models") as r:
        assert r.status == 200 and (await r.json())["data"][0]["id"] == "tiny"
    async with client.get(g.url + "/health") as r:
        assert r.status == 200


async def test_engine_metrics_are_read(gw):
    g, up = await gw()
    up.kv, up.waiting = 0.5, 3
    e = g.policy.engines["a"]
    await wait_for(lambda: e.kv_cache_pct == 50.0 and e.vllm_waiting == 3, what="the engine's metrics")


def test_config_section_and_errors(tmp_path):
    cfg = parse_config("""
engines: [{name: local, url: "http://127.0.0.1:8000", max_num_seqs: 16}]
profiles:
  small: {model: tiny, port: 8011, max_num_seqs: 2, scheduling_policy: priority}
gateway:
  engines:
    - {url: local}
    - {url: small, name: s}
    - {url: "http://127.0.0.1:9000", name: x, cap: 3}
  classes: [{name: realtime, priority: 100, weight: 8, max_wait_s: 2}, {name: batch, priority: 50}]
""")
    ups = resolve_engines(cfg.gateway, cfg.engines, cfg.profiles)
    assert [(u.name, u.url, u.cap, u.priority_scheduling) for u in ups] == [
        ("local", "http://127.0.0.1:8000", 16, None), ("s", "http://127.0.0.1:8011", 2, True),
        ("x", "http://127.0.0.1:9000", 3, None)]
    for text, msg in (("gateway: {admin_listen: '0.0.0.0:8101'}", "loopback"),
                      ("gateway: {default_class: gold}", "not a class"),
                      ("gateway: {classes: [{name: a, weight: 0}]}", ">"),
                      ("gateway: {listen: nope}", "host:port")):
        with pytest.raises(ConfigError, match=msg):
            parse_config(text)
    cfg = parse_config("gateway: {engines: [{url: nowhere}]}")
    with pytest.raises(ValueError, match="nowhere"):
        resolve_engines(cfg.gateway)


def test_token_from_file_or_env(tmp_path, monkeypatch):
    f = tmp_path / "token"
    f.write_text("s3cret\n")
    assert read_token("X_GW_TOKEN", str(f)) == "s3cret"
    monkeypatch.setenv("X_GW_TOKEN", "envtok")
    assert read_token("X_GW_TOKEN", None) == "envtok"
    monkeypatch.delenv("X_GW_TOKEN")
    assert read_token("X_GW_TOKEN", None) is None
    with pytest.raises(ValueError, match="cannot read"):
        read_token(None, str(tmp_path / "missing"))


def test_command_refuses_bad_config_in_one_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("gateway: {admin_listen: '10.0.0.1:8101'}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for args in (["--config", str(cfg)], ["--config", os.devnull],
                 ["--config", os.devnull, "--engine", "http://127.0.0.1:1", "--admin-listen", "8.8.8.8:1"]):
        out = subprocess.run([sys.executable, "-m", "infertop", "gateway", *args], capture_output=True, text=True,
                             env=env, timeout=60)
        assert out.returncode == 2, out
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr


async def test_command_serves_and_never_prints_the_token(tmp_path):
    up = await Upstream("a").start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "INFERTOP_GATEWAY_TOKEN": "very-secret-token"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "infertop", "gateway", "--config", os.devnull, "--engine", up.url,
        "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
        assert line[0] == "gateway" and line[2] == "admin"
        async with aiohttp.ClientSession() as s:
            async with s.post(line[1] + "/v1/completions", json={"prompt": "x"}) as r:
                assert r.status == 200
            async with s.get(line[3] + "/admin/state",
                             headers={"Authorization": "Bearer very-secret-token"}) as r:
                assert r.status == 200
    finally:
        proc.terminate()
        out, err = await proc.communicate()
        await up.stop()
    assert proc.returncode == 0
    assert b"very-secret-token" not in out + err


async def test_failing_metrics_take_an_engine_out_only_while_it_answers_nothing(gw, client):
    g, up = await gw()
    e = g.policy.engines["a"]
    up.metrics_status = 500
    for _ in range(3):  # answering requests: /metrics failing does not make it down
        async with client.post(g.url + "/v1/completions", json={"prompt": "x"}) as r:
            assert r.status == 200
    await wait_for(lambda: g.probes[0].failures >= 3, what="failed polls")
    assert e.up
    e.answered_at = float("-inf")  # as if its last answer were long ago
    await wait_for(lambda: not e.up, what="the engine to be taken out")
    up.metrics_status = 200
    await wait_for(lambda: e.up, what="the engine to come back")
