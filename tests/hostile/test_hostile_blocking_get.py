"""The bounded httpx GETs (sources/http_client.py: blocking_get, httpx_get) against hostile answers:
an endless body, a huge declared length, a body dripping past the timeout, a redirect, and the
callers that read through them (a pod's load, a drain's /metrics, the autoscaler's metrics)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from scripted_server import Stream

from infertop.sources.http_client import HttpError, ResponseTooLarge, blocking_get, blocking_request, httpx_get

KIB = 1024


def endless(chunk: bytes = b"x" * 4096):
    def gen():
        while True:
            yield chunk
    return gen


class RawServer:
    """Answers every connection with ``answer`` (bytes, written as is), then waits for the client to go."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    got = conn.recv(4096)
                    if not got:
                        break
                    head += got
                self.requests.append(head)
                try:
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_an_endless_body_is_cut_at_the_limit(scripted):
    s = scripted()
    s.routes["/metrics"] = (200, Stream(endless()))
    with pytest.raises(ResponseTooLarge, match=r"^response too large \(> 64 KiB\)$"):
        blocking_get(s.url + "/metrics", 64 * KIB, timeout_s=5.0)


def test_a_declared_length_over_the_limit_is_refused_before_reading(scripted):
    s = scripted()
    s.routes["/metrics"] = (200, b"y" * (100 * KIB))
    with pytest.raises(ResponseTooLarge, match=r"^response too large \(100 KiB announced; the limit is 64 KiB\)$"):
        blocking_get(s.url + "/metrics", 64 * KIB, timeout_s=5.0)
    assert blocking_get(s.url + "/metrics", 128 * KIB, timeout_s=5.0) == (200, b"y" * (100 * KIB))


def test_a_body_that_drips_is_cut_at_the_whole_exchanges_timeout(scripted):
    """httpx's timeout bounds each read: a byte every 50 ms never trips it; the sum is bounded."""
    s = scripted()
    s.routes["/metrics"] = (200, Stream(endless(b"z"), delay_s=0.05))
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException, match="longer than 0.5 s"):
        blocking_get(s.url + "/metrics", 1 << 20, timeout_s=0.5)
    assert time.monotonic() - started < 30  # a hang guard, not a timing assertion


def test_a_redirect_is_a_status_not_followed():
    target = RawServer(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecret")
    redirect = RawServer(b"HTTP/1.1 302 Found\r\nLocation: " + target.url.encode() + b"/x\r\n"
                         b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    try:
        assert blocking_get(redirect.url + "/metrics", 1024, timeout_s=5.0) == (302, b"")
        assert target.requests == []
    finally:
        redirect.close()
        target.close()


def test_an_error_body_is_read_only_when_asked(scripted):
    s = scripted()
    s.routes["/admin/state"] = (401, b'{"error": {"message": "no"}}')
    s.routes["/big"] = (500, Stream(endless()))
    assert blocking_get(s.url + "/admin/state", 1024, timeout_s=5.0) == (401, b'{"error": {"message": "no"}}')
    assert blocking_get(s.url + "/admin/state", 1024, timeout_s=5.0, error_body=False) == (401, b"")
    assert blocking_get(s.url + "/big", 1024, timeout_s=5.0, error_body=False) == (500, b"")
    with pytest.raises(ResponseTooLarge):
        blocking_request("GET", s.url + "/big", 1024, timeout_s=5.0)


def test_a_kept_alive_client_is_reused_and_left_open(scripted):
    s = scripted()
    s.routes["/metrics"] = (200, b"ok")
    with httpx.Client(trust_env=False) as c:
        for _ in range(3):
            assert blocking_get(s.url + "/metrics", 1024, timeout_s=5.0, client=c) == (200, b"ok")
        assert not c.is_closed


async def test_the_async_httpx_get_has_the_lean_clients_bounds_and_words(scripted):
    s = scripted()
    s.routes["/endless"] = (200, Stream(endless()))
    s.routes["/big"] = (200, b"y" * (100 * KIB))
    s.routes["/gone"] = (404, b"nope")
    async with httpx.AsyncClient(trust_env=False) as c:
        with pytest.raises(ResponseTooLarge, match=r"^response too large \(> 64 KiB\)$"):
            await httpx_get(c, s.url + "/endless", 64 * KIB)
        with pytest.raises(ResponseTooLarge, match=r"announced; the limit is 64 KiB\)$"):
            await httpx_get(c, s.url + "/big", 64 * KIB)
        with pytest.raises(HttpError, match=r"^HTTP 404$"):
            await httpx_get(c, s.url + "/gone", 64 * KIB)
        assert await httpx_get(c, s.url + "/gone", 64 * KIB, any_status=True) == (404, b"")


# --- the callers ---

def test_a_drains_metrics_read_refuses_an_endless_body(scripted):
    from infertop.control.engines.progress import drain_counts

    s = scripted()
    s.routes["/metrics"] = (200, Stream(endless()))
    assert drain_counts(s.url, timeout_s=5.0) == (None, None)
    s.routes["/metrics"] = (200, "vllm:num_requests_running 2\nvllm:num_requests_waiting 1\n")
    assert drain_counts(s.url, timeout_s=5.0) == (3, None)


def test_the_autoscalers_metrics_read_is_bounded_and_says_its_status(scripted):
    from infertop.sources.kube import KubeError, read_wva_desired

    s = scripted()
    s.routes["/metrics"] = (200, 'wva_desired_replicas{variant_name="v",exported_namespace="ns"} 3\n')
    assert read_wva_desired(s.url + "/metrics") == {("ns", "v"): 3.0}
    s.routes["/metrics"] = (200, Stream(endless()))
    with pytest.raises(KubeError, match=r"ResponseTooLarge: response too large \(> 8 MiB\)$"):
        read_wva_desired(s.url + "/metrics", timeout_s=10.0)
    s.routes["/metrics"] = (503, b"down")
    with pytest.raises(KubeError, match=rf"^wva_desired_replicas from {s.url}/metrics: HTTP 503$"):
        read_wva_desired(s.url + "/metrics")


def test_a_gateway_admin_answer_past_its_bound_is_refused(scripted):
    from infertop.control.gateway.drain import GatewayDrain, GatewayError, GatewayRef

    s = scripted()
    s.routes["/admin/state"] = (200, Stream(endless()))
    drain = GatewayDrain(GatewayRef(admin_url=s.url, token="t", label="gw"), "e1", timeout_s=5.0)
    with pytest.raises(GatewayError, match=r"^gw: admin API: response too large \(> 1 MiB\)$"):
        drain.state()
