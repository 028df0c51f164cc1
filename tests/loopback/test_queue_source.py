"""Queue sources: an endpoint picker's flow-control /metrics in both name
generations (written from the documented names and labels), the infertop
gateway's /metrics and admin state (a loopback stand-in speaking the contract),
failures, and the queue state inside the one fleet state."""

from __future__ import annotations

import re

import pytest
from aiohttp import web
from locations import FIXTURES

from infertop.config import Config, ConfigError, QueueEppConfig, QueueGatewayConfig, load_config
from infertop.sources.expfmt import parse
from infertop.sources.queues.collector import QueueCollector, QueueEndpoint, metrics_url
from infertop.sources.queues.config import queue_collectors, queue_endpoints
from infertop.sources.queues.names import extract
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import MISSING, STALE, FleetState
from infertop.domain.queues import QueueSource
from infertop.state.queues import join_queues, queue_totals
from queue_gateway_fake import TOKEN, FakeGateway

EPP_TOKEN = "epp-metrics-token"


def doubled(text: str) -> str:
    """The same document later: every histogram bucket and count doubled (the same requests again)."""
    return re.sub(r"^(\S+_(?:bucket|count)\{[^}]*\}) (\d+)$", lambda m: f"{m[1]} {2 * int(m[2])}", text, flags=re.M)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def epp_server():
    """An endpoint picker's /metrics behind a bearer token; ``docs`` are served one per request."""
    docs: list[str] = []

    async def metrics(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {EPP_TOKEN}":
            return web.Response(status=401, text="unauthorized")
        return web.Response(text=docs.pop(0) if len(docs) > 1 else docs[0], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", docs
    await runner.cleanup()


@pytest.mark.parametrize("fixture,generation", [("epp_llmd.txt", "llm-d"), ("epp_gie.txt", "gie")])
async def test_endpoint_picker_flow_control_both_generations(epp_server, tmp_path, fixture, generation):
    url, docs = epp_server
    text = (FIXTURES / fixture).read_text()
    docs.extend([text, doubled(text)])
    token = tmp_path / "token"
    token.write_text(EPP_TOKEN + "\n")
    clock = Clock()
    c = QueueCollector(QueueEndpoint("epp", "epp", metrics_url(url), token_file=str(token),
                                     budgets={"100": 1.0, "0": 30.0}), window_s=60, clock=clock)
    first = await c.poll()
    assert c.health.ok, c.health.last_error
    # one scrape: depths and saturation are there; windowed values need history
    assert [(b.name, b.depth, b.wait_p99_s, b.share_pct) for b in first.classes] == [
        ("priority 100", 5, None, None), ("priority 0", 40, None, None), ("priority -10", 120, None, None)]
    assert first.missing["priority 100.wait_p99_s"] == "not enough history yet"
    clock.t += 10
    view = await c.poll()
    assert view.generation == generation and view.kind == "epp"
    top, mid, low = view.classes
    assert (top.priority, mid.priority, low.priority) == (100, 0, -10)
    assert (top.depth, mid.depth, low.depth) == (5, 40, 120)  # summed over fairness ids
    assert top.queue_bytes == 4096
    # the increase over the window is the first document's histogram: p50 in the first bucket,
    # p99 interpolated in (0.1, 1]; band 0 counts rejected requests' queue time too
    assert top.wait_p50_s == pytest.approx(0.01)
    assert top.wait_p99_s == pytest.approx(0.1 + 0.9 * 9 / 10)
    assert mid.wait_p99_s == pytest.approx(1 + 9 * (0.99 * 67 - 27) / 40)
    # share of dispatches: only dispatched outcomes; a band with no series has no share (None, not 0)
    assert (top.share_pct, mid.share_pct, low.share_pct) == (pytest.approx(62.5), pytest.approx(37.5), None)
    assert top.dispatches_per_s == pytest.approx(10.0)
    assert (top.budget_s, mid.budget_s, low.budget_s) == (1.0, 30.0, None)
    assert top.over_budget is False and mid.over_budget is False
    assert top.weight is None and top.oldest_wait_s is None and "weights" in view.missing["priority 100.weight"]
    assert view.queued == 165 and view.oldest_wait_s is None
    assert view.pool_saturation_pct == pytest.approx(92) and view.pool_kv_cache_pct == pytest.approx(81)
    assert [(e.name, e.vllm_waiting) for e in view.engines] == [("vllm-0", 4), ("vllm-1", 7)]


async def test_endpoint_picker_refusing_the_token_is_a_down_source_with_the_reason(epp_server, tmp_path):
    url, docs = epp_server
    docs.append((FIXTURES / "epp_llmd.txt").read_text())
    token = tmp_path / "token"
    token.write_text("wrong")
    c = QueueCollector(QueueEndpoint("epp", "epp", metrics_url(url), token_file=str(token)), window_s=60)
    assert await c.poll() is None
    assert not c.health.ok and c.health.last_error == "HTTP 401: the token was refused"
    assert "wrong" not in c.health.last_error
    token.unlink()
    await c.poll()
    assert c.health.last_error.startswith("cannot read the token file")


async def test_a_token_with_a_line_break_is_refused_unsent_and_a_huge_document_is_cut(epp_server, tmp_path):
    """A token file holding a second line (a header it would smuggle in) is refused before anything is
    sent, and the error names neither; a document over the limit is refused while it is read."""
    from infertop.sources.vllm import MAX_BODY_BYTES

    url, docs = epp_server
    docs.append((FIXTURES / "epp_llmd.txt").read_text())
    token = tmp_path / "token"
    token.write_text(f"{EPP_TOKEN}\r\nX-Smuggled: 1")
    c = QueueCollector(QueueEndpoint("epp", "epp", metrics_url(url), token_file=str(token)), window_s=60)
    assert await c.poll() is None
    err = c.health.last_error
    assert not c.health.ok and "refused header 'Authorization'" in err
    assert EPP_TOKEN not in err and "Smuggled" not in err
    token.write_text(EPP_TOKEN)
    assert await c.poll() is not None and c.health.ok
    docs[:] = ["# " + "x" * (MAX_BODY_BYTES + 10) + "\n"]
    assert await c.poll() is not None  # the last view, kept (stale) while the source fails
    assert not c.health.ok and c.health.last_error.startswith("response too large (")
    await c.aclose()


def test_newer_generation_wins_and_junk_labels_are_plain_and_capped():
    old = (FIXTURES / "epp_gie.txt").read_text()
    new = 'llm_d_epp_flow_control_queue_size{priority="7",fairness_id="x"} 2\n'
    s = extract(parse(new + old), "epp")
    assert s.generation == "llm-d" and list(s.classes) == ["priority 7"]
    hostile = "".join(f'llm_d_epp_flow_control_queue_size{{priority="\\u001b[31m{i}"}} 1\n' for i in range(300))
    s = extract(parse(hostile), "epp")
    assert len(s.classes) == 64 and s.dropped == 236
    assert all("\x1b" not in name for name in s.classes)


@pytest.fixture
def gateway():
    with FakeGateway() as gw:
        yield gw


async def test_gateway_metrics_and_admin_state(gateway, monkeypatch):
    monkeypatch.setenv("GW_TOKEN", TOKEN)
    clock = Clock()
    ep = QueueEndpoint("gw", "gateway", metrics_url(gateway.url), admin_url=gateway.url, token_env="GW_TOKEN")
    c = QueueCollector(ep, window_s=60, clock=clock)
    gateway.burst("batch", 30, oldest_s=4.5)
    gateway.engines["a"].in_flight = 6
    await c.poll()
    gateway.dispatch("realtime", "a", 30, wait_s=0.02)
    gateway.dispatch("batch", "b", 10, wait_s=3.0)
    gateway.classes["background"].promotions = 2
    clock.t += 5
    view = await c.poll()
    assert c.health.ok and view.admin == "ok" and view.admin_error is None
    rt, batch, bg = view.classes  # highest priority first
    assert (rt.name, rt.priority, rt.weight, rt.max_wait_s, rt.budget_s) == ("realtime", 100, 8, 2, 1.0)
    assert (batch.depth, batch.oldest_wait_s, batch.budget_s) == (20, 4.5, 30.0)
    assert rt.share_pct == pytest.approx(75) and batch.share_pct == pytest.approx(25) and bg.share_pct == 0
    assert rt.wait_p99_s <= 0.025 and 2.5 < batch.wait_p99_s <= 5.0
    assert bg.promotions == 2 and rt.promotions == 0
    assert bg.budget_s is None and "queues.budgets" in view.missing["background.budget_s"]
    a, b = view.engines
    assert (a.name, a.in_flight, a.cap, a.saturation_pct, a.draining, a.up) == ("a", 6, 8, 75, False, True)
    assert a.url == "http://127.0.0.1:9/a"  # from the admin state
    assert view.default_class == "batch" and view.strict_top is False
    assert view.queued == 20 and view.oldest_wait_s == 4.5
    assert ("GET", "/admin/state") in gateway.requests


async def test_gateway_admin_refusing_the_token_is_a_warning_not_a_down_source(gateway, monkeypatch):
    monkeypatch.setenv("GW_TOKEN", "not-the-token")
    ep = QueueEndpoint("gw", "gateway", metrics_url(gateway.url), admin_url=gateway.url, token_env="GW_TOKEN")
    c = QueueCollector(ep, window_s=60)
    view = await c.poll()
    assert c.health.ok and view.admin == "refused"
    assert view.admin_error == "admin API: 401 — the gateway refused the token"
    assert c.health.last_error == view.admin_error  # the status bar's warning
    assert "not-the-token" not in repr(view)
    monkeypatch.delenv("GW_TOKEN")
    view = await c.poll()
    assert view.admin == "error" and view.admin_error == "admin API: environment variable GW_TOKEN is not set"


async def test_a_failing_source_keeps_its_last_view_stale_then_fleet_doc_round_trips(gateway):
    clock = Clock()
    c = QueueCollector(QueueEndpoint("gw", "gateway", metrics_url(gateway.url)), window_s=60, clock=clock)
    never = QueueCollector(QueueEndpoint("dead", "epp", "http://127.0.0.1:9/metrics", timeout_s=0.5), window_s=60,
                           clock=clock)
    gateway.burst("realtime", 3, oldest_s=0.4)
    await c.poll()
    await never.poll()
    gateway.stop()
    clock.t += 1
    await c.poll()
    assert not c.health.ok
    wall = 5000.0
    got = join_queues([c, never], [], wall, clock.t, stale_after_s=3.0)
    assert got[0].freshness.status == STALE and got[0].freshness.reason == "connection refused"
    assert got[0].freshness.since == pytest.approx(wall)
    assert got[0].klass("realtime").depth == 3  # the last good values, marked stale
    assert got[1].freshness.status == MISSING and got[1].classes == ()
    assert got[1].freshness.reason == "connection refused"
    assert queue_totals(got) == (None, None)  # nothing fresh: no total, not 0

    class NoEngines:
        collectors: list = []

    joiner = FleetJoiner(NoEngines(), slo=Config().slo, refresh_s=1, window_s=60, wall=lambda: wall,
                         mono=lambda: clock.t)
    joiner.queue_collectors = [c, never]
    state = joiner.build()
    assert [s.kind for s in state.sources] == ["gateway", "epp"] and not state.all_fresh
    doc = state.to_doc()
    assert doc["queues"][0]["classes"][0]["name"] == "realtime"
    back = FleetState.from_doc(doc)
    assert isinstance(back.queues[0], QueueSource) and back.queues == state.queues
    assert back.to_doc() == doc


def test_config_sources_flags_and_the_own_gateway_section():
    cfg = Config()
    cfg.queues.gateways.append(QueueGatewayConfig(url="http://gw:8100", admin_url="http://127.0.0.1:8101",
                                                  token_env="T"))
    cfg.queues.epp.append(QueueEppConfig(url="http://epp:9090", token_file="/var/run/token"))
    cfg.queues.budgets = {"batch": 60.0}
    assert len(queue_endpoints(cfg)) == 2  # no gateway: section, no own gateway
    cfg.sections = ("gateway",)  # the config's own gateway server section: watched automatically
    cfg.gateway.listen = "0.0.0.0:8200"
    eps = queue_endpoints(cfg)
    assert [(e.name, e.kind, e.metrics_url) for e in eps] == [
        ("gw:8100", "gateway", "http://gw:8100/metrics"), ("gateway", "gateway", "http://127.0.0.1:8200/metrics"),
        ("epp epp:9090", "epp", "http://epp:9090/metrics")]
    assert eps[0].budgets["batch"] == 60.0 and eps[0].budgets["realtime"] == 1.0 and eps[0].budgets["code"] == 0.2
    assert len(queue_collectors(cfg, 60)) == 3
    assert (eps[1].admin_url, eps[1].token_env) == ("http://127.0.0.1:8101", "INFERTOP_GATEWAY_TOKEN")
    cfg.gateway.listen = "gw:8100"  # the same gateway twice is watched once
    assert len(queue_endpoints(cfg)) == 2


def test_a_gateway_section_in_the_file_is_watched_and_bad_queue_config_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("gateway:\n  listen: 127.0.0.1:8300\nqueues:\n  epp:\n    - url: http://epp:9090\n")
    cfg = load_config(path)
    assert [(e.name, e.metrics_url) for e in queue_endpoints(cfg)] == [
        ("gateway", "http://127.0.0.1:8300/metrics"), ("epp epp:9090", "http://epp:9090/metrics")]
    path.write_text("queues:\n  gateways:\n    - url: gw:8100\n")
    with pytest.raises(ConfigError, match=r"c.yaml:3: queues.gateways\[0\].url: must start with http"):
        load_config(path)
    path.write_text("queues:\n  budgets: {batch: 0}\n")
    with pytest.raises(ConfigError, match=r"c.yaml:2: queues.budgets.batch: must be > 0"):
        load_config(path)


def test_snapshot_table_and_json_carry_the_queues_and_record_replays_them(gateway, tmp_path, capsys):
    import json

    from infertop.cli import main
    from infertop.flight_cli import open_replay
    from scripted_server import ScriptedServer
    from vllm_text import v1_doc

    gateway.burst("realtime", 5, oldest_s=0.25)
    engine = ScriptedServer().serve_engine(v1_doc(engines={"0": {"running": 1}})).start()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"engines: [{{url: '{engine.url}'}}]\ngpu: {{nvml: false}}\n")
    try:
        code = main(["snapshot", "--config", str(cfg), "--gateway", gateway.url, "--json", "--window", "0.5"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0, doc["sources"]  # every source fresh, the gateway too
        (q,) = doc["queues"]
        assert (q["kind"], q["name"], q["queued"], q["freshness"]["status"]) == (
            "gateway", f"local:{gateway.port}", 5, "fresh")
        assert [(c["name"], c["depth"], c["weight"]) for c in q["classes"]] == [
            ("realtime", 5, 8), ("batch", 0, 2), ("background", 0, 1)]
        assert q["classes"][0]["share_pct"] is None and "realtime.share_pct" in q["missing"]
        # the document is the state, its verdicts included (a recording carries them; replay shows them)
        assert FleetState.from_doc(doc).to_doc() == doc
        assert main(["snapshot", "--config", str(cfg), "--gateway", gateway.url, "--window", "0.5"]) == 0
        out = capsys.readouterr().out
        assert "queue gateway" in out and "queued 5" in out and "realtime" in out
        assert main(["snapshot", "--config", str(cfg), "--epp", "http://", "--json"]) == 2
        assert "--epp: expected an http(s) URL" in capsys.readouterr().err
        # the recorder polls the same sources: a replayed tick carries the queues
        rec = tmp_path / "rec.db"
        assert main(["record", str(rec), "--config", str(cfg), "--gateway", gateway.url, "--duration", "3s"]) == 0
        replay, span = open_replay(str(rec))
        try:
            tick = FleetState.from_doc(replay.at(span[1])[1])
        finally:
            replay.close()
        assert tick.queues[0].klass("realtime").depth == 5 and tick.queues[0].fresh
        # a gateway that does not answer is a source down: exit 1, with why
        gateway.stop()
        assert main(["snapshot", "--config", str(cfg), "--gateway", gateway.url, "--window", "0.5"]) == 1
        assert "connection refused" in capsys.readouterr().err
    finally:
        engine.stop()


def test_the_queues_slot_keeps_other_entries_beside_gateways():
    """The Prometheus engine source puts its fleet queue depth (a mapping) in the same slot."""
    from infertop.state.fleet_types import FRESH, Freshness, Slo

    gw = QueueSource("gw", "gateway", "http://gw/metrics", freshness=Freshness(FRESH, "http://gw/metrics", 1.0, 0.1),
                     queued=4.0, oldest_wait_s=0.5)
    prom = {"source": "prometheus", "promql": "sum(x)", "depth": 9.0, "error": None}
    state = FleetState(tick=1, taken_at=2.0, refresh_s=1.0, window_s=60.0, slo=Slo(2, 0.04, 5, 1, 90),
                       queues=(gw, prom))
    doc = state.to_doc()
    back = FleetState.from_doc(doc)
    assert back.queues == (gw, prom) and back.to_doc() == doc
    assert queue_totals(back.queues) == (4.0, 0.5)
