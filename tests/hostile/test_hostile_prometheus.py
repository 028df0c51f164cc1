"""Hostile Prometheus answers (issue 29 item 5): every read is bounded and each refusal is one line.

A loopback server plays the Prometheus HTTP API badly: a gzip bomb, a huge JSON
body, a one-byte drip, and answers of odd shapes.  The real client reads it.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib

import pytest

from infertop.sources.prometheus.connect import BoundedPrometheus, PromAnswerError
from infertop.sources.prometheus.gpu import PromGpuSource

GOOD = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n1", "UUID": "GPU-1"},
     "value": [time.time(), "42"]}]}}


def _gzip_bomb(inflated_bytes: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip wrapper
    zeros = b"0" * (1 << 20)
    return b"".join(z.compress(zeros) for _ in range(inflated_bytes >> 20)) + z.flush()


class HostileProm:
    """``mode`` picks the answer: good, bomb, huge, drip, or a JSON document of an odd shape (``doc``)."""

    def __init__(self) -> None:
        self.mode, self.doc = "good", GOOD
        self.bomb = _gzip_bomb(256 << 20)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._answer()

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer()

            def _answer(self) -> None:
                try:
                    outer.serve(self)
                except (ConnectionError, OSError):
                    pass  # the client gave up on a hostile answer: expected

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def serve(self, h) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        if self.mode == "bomb":
            h.send_header("Content-Encoding", "gzip")
            h.send_header("Content-Length", str(len(self.bomb)))
            h.end_headers()
            h.wfile.write(self.bomb)
        elif self.mode == "huge":  # 64 MiB of one label value, no Content-Length
            h.end_headers()
            h.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"')
            for _ in range(64):
                h.wfile.write(b"x" * (1 << 20))
        elif self.mode == "drip":  # a byte every 0.3 s, at most 60 of them
            h.end_headers()
            for b in json.dumps(GOOD).encode()[:60]:
                h.wfile.write(bytes([b]))
                h.wfile.flush()
                time.sleep(0.3)
        else:
            body = json.dumps(self.doc if self.mode == "doc" else GOOD).encode()
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def hostile():
    srv = HostileProm()
    yield srv
    srv.stop()


def _refused(srv: HostileProm, timeout_s: float = 5.0) -> tuple[str, int]:
    """The error text of one query, and the peak Python memory it took."""
    client = BoundedPrometheus(srv.url, None, timeout_s)
    tracemalloc.start()
    try:
        with pytest.raises(PromAnswerError) as err:
            client.custom_query("up")
        return str(err.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gzip_bomb_stops_at_the_limit_after_decompression(hostile):
    hostile.mode = "bomb"
    text, peak_bytes = _refused(hostile)
    assert text == "Prometheus answer too large (> 16 MiB)"
    assert peak_bytes < 48 << 20  # 256 MiB inflated, never held


def test_a_huge_json_body_stops_at_the_limit(hostile):
    hostile.mode = "huge"
    text, peak_bytes = _refused(hostile)
    assert text == "Prometheus answer too large (> 16 MiB)" and peak_bytes < 48 << 20


def test_a_dripping_server_times_out_at_the_deadline(hostile):
    hostile.mode = "drip"
    text, _ = _refused(hostile, timeout_s=1.0)
    assert text == "timeout after 1 s"


@pytest.mark.parametrize(("doc", "error"), [
    ({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}, "resultType scalar"),
    ({"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}}, "result is dict"),
    ({"status": "success", "data": {"resultType": "vector", "result": [1, 2]}}, "a vector item without metric/value"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": [], "value": 1}]}},
     "a vector item without metric/value"),
    ([1, 2], "no data"),
])
def test_odd_shapes_are_one_line_naming_what_was_unexpected(hostile, doc, error):
    hostile.mode, hostile.doc = "doc", doc
    text, _ = _refused(hostile)
    assert text == f"unexpected answer from Prometheus: {error}"


def test_the_gpu_source_shows_each_refusal_and_recovers(hostile):
    src = PromGpuSource(hostile.url, timeout_s=1.0)
    for mode in ("bomb", "drip", "doc"):
        hostile.mode, hostile.doc = mode, {"status": "success", "data": {"resultType": "scalar", "result": 1}}
        assert src.collect() == [] and not src.health.ok
        assert "\n" not in src.health.last_error
    assert src.health.last_error == "unexpected answer from Prometheus: resultType scalar"
    hostile.mode = "good"
    rows = src.collect()
    assert src.health.ok and [r.util_pct for r in rows] == [42.0]


@pytest.mark.parametrize("doc", [
    {"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}},
    {"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}},
])
def test_snapshot_on_odd_shapes_exits_without_a_crash(hostile, doc, tmp_path):
    hostile.mode, hostile.doc = "doc", doc
    cfg = tmp_path / "c.yaml"
    cfg.write_text("gpu: {nvml: false}\nprometheus: {backfill_points: 0}\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "infertop", "snapshot", "--json", "--config", str(cfg),
                        "--prometheus", hostile.url], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode not in (70,) and "Traceback" not in r.stderr, r.stderr
    doc_out = json.loads(r.stdout)
    errors = [s.get("error") or "" for s in doc_out["sources"]]
    assert any("unexpected answer from Prometheus" in e for e in errors), doc_out["sources"]


def test_the_fleet_source_shows_each_refusal_in_place_and_recovers(hostile):
    from infertop.config import PrometheusConfig
    from infertop.sources.prometheus.fleet import PromFleetSource

    src = PromFleetSource(PrometheusConfig(url=hostile.url, timeout_s=1.0, backfill_points=0))
    try:
        hostile.doc = {"status": "success", "data": {"resultType": "scalar", "result": 1}}
        for mode, error in (("bomb", "Prometheus answer too large (> 16 MiB)"), ("drip", "timeout after 1 s"),
                            ("doc", "unexpected answer from Prometheus: resultType scalar")):
            hostile.mode = mode
            assert src.refresh().error == error and not src.health.ok
        hostile.mode = "good"
        assert src.refresh().error is None and src.health.ok
    finally:
        src.close()


def test_a_gpu_row_whose_newest_sample_is_old_shows_stale(hostile):
    """An instant query's value timestamp is the evaluation time: a GPU last sampled 40 s ago came
    back as fresh. The answer also carries each GPU's newest sample time (timestamp()); older than
    stale_after_s, that row keeps its values and says it is stale."""
    now = time.time()

    def gpu(i: int, util: str) -> dict:
        return {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": str(i), "Hostname": "n1", "UUID": f"GPU-{i}"},
                "value": [now, util]}

    def sampled(i: int, ts: float) -> dict:  # what Prometheus answers for the age part: no __name__
        return {"metric": {"gpu": str(i), "Hostname": "n1", "UUID": f"GPU-{i}", "infertop_sample_ts": "1"},
                "value": [now, str(ts)]}

    hostile.mode, hostile.doc = "doc", {"status": "success", "data": {"resultType": "vector", "result": [
        gpu(0, "90"), gpu(1, "42"), sampled(0, now - 40.0), sampled(1, now - 1.0)]}}
    src = PromGpuSource(hostile.url, timeout_s=1.0)  # stale after 30 s, as prometheus.stale_after_s
    rows = {r.index: r for r in src.collect()}
    assert src.health.ok and sorted(rows) == [0, 1]
    assert (rows[0].state, rows[0].error, rows[0].util_pct) == (
        "unavailable", "stale in Prometheus: newest sample 40 s old", 90.0)  # kept, never shown as fresh
    assert (rows[1].state, rows[1].error, rows[1].util_pct) == ("ok", None, 42.0)
