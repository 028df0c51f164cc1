"""The engine collector asks ``/metrics`` for only the samples it reads (``name[]``), and falls back
to the whole document where a server answers that query with nothing it can use.

The filtering server is prometheus_client's own exposition app (the library vLLM serves
``/metrics`` with), on loopback, over a real vLLM 0.32 capture, with each of the registries vLLM
uses: the global one (``auto_describe=True``: one API server) and a ``CollectorRegistry()`` whose
collector has no ``describe`` (several API servers, ``PROMETHEUS_MULTIPROC_DIR``), which answers
``name[]`` with nothing.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

from locations import capture_text
from infertop.sim.exposition import query_names, restrict
from infertop.sources.vllm import FILTERED_METRICS, EngineCollector, EngineEndpoint
from infertop.sources.vllm_names import SCRAPE_NAMES

UNDER_LOAD = capture_text("metrics_under_load.txt")


class Families:
    """A collector without ``describe`` yielding a parsed document, as vLLM's multiprocess one is."""

    def __init__(self, text: str) -> None:
        self.text = text

    def collect(self):
        return list(text_string_to_metric_families(self.text))


class Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def prom_app():
    """prometheus_client's /metrics app over a document; gives (url, the bytes of each /metrics answer)."""
    servers = []

    def start(text: str, *, multiprocess: bool = False):
        registry = CollectorRegistry(auto_describe=not multiprocess)
        registry.register(Families(text))
        inner = make_wsgi_app(registry)
        sizes: list[int] = []  # bytes of each /metrics answer

        def app(environ, start_response):
            # as vLLM routes it: /metrics answers everything (its request instrumentator ignores any
            # query); prometheus_client's own app is mounted at /metrics/
            path = environ["PATH_INFO"]
            if path not in ("/metrics", "/metrics/"):  # an engine's /health; nothing else
                ok = path == "/health"
                start_response("200 OK" if ok else "404 Not Found", [("Content-Length", "0")])
                return [b""]
            if path == "/metrics":
                environ = {**environ, "QUERY_STRING": ""}
            body = b"".join(inner(environ, start_response))
            sizes.append(len(body))
            return [body]

        httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}", sizes

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def collector(url: str, filtered: bool = True) -> EngineCollector:
    c = EngineCollector(EngineEndpoint(name="e", url=url, timeout_s=30.0), 60.0)
    c.filtered_scrape = filtered
    return c


def samples_of(text: str) -> set[tuple]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples}


async def test_a_filtered_scrape_reads_the_same_values_from_a_fifth_of_the_bytes(prom_app):
    url, sizes = prom_app(UNDER_LOAD)
    narrow, whole = collector(url), collector(url, filtered=False)
    try:
        (a,), (b,) = await narrow.poll(), await whole.poll()
    finally:
        await narrow.aclose()
        await whole.aclose()
    assert narrow.filtered_scrape and a.state == b.state == "up", narrow.health.last_error
    assert (a.running, a.waiting, a.kv_cache_pct, a.prefix_cache_hit_pct) == (b.running, b.waiting, b.kv_cache_pct,
                                                                        b.prefix_cache_hit_pct)
    assert narrow._last_read[1][0].counters == whole._last_read[1][0].counters
    assert narrow._last_read[1][0].gauges == whole._last_read[1][0].gauges
    assert narrow._last_read[1][0].cache_config == whole._last_read[1][0].cache_config
    filtered_bytes, full_bytes = sizes[0], sizes[-1]
    assert filtered_bytes * 4 < full_bytes, (filtered_bytes, full_bytes)


async def test_a_multiprocess_registry_gets_whole_documents(prom_app):
    url, sizes = prom_app(UNDER_LOAD, multiprocess=True)
    c = collector(url)
    try:
        (first,) = await c.poll()
        assert sizes[:2] == [0, max(sizes)]  # nothing for name[], then the whole document
        assert first.state == "up" and first.running is not None and not c.filtered_scrape
        (second,) = await c.poll()
        assert second.state == "up" and sizes[2:] == [max(sizes)]  # one request, for everything
    finally:
        await c.aclose()


async def test_an_engine_with_no_vllm_metrics_yet_keeps_the_filter(scripted):
    loading = "# HELP process_cpu_seconds_total x\n# TYPE process_cpu_seconds_total counter\n" \
              "process_cpu_seconds_total 1.5\n"
    doc = {"text": loading}
    srv = scripted().serve_engine(lambda: doc["text"])
    srv.by_query["/metrics/"] = lambda query: (200, restrict(doc["text"], query_names("?" + query) or set()))
    c = collector(srv.url)
    try:
        (s,) = await c.poll()
        assert s.state != "up" and "no vllm: metrics" in (s.error or "")
        assert c.filtered_scrape  # the whole document had no engine either: nothing says the filter fails
        doc["text"] = UNDER_LOAD  # the engine has loaded
        srv.requests.clear()
        (s,) = await c.poll()
        assert s.state == "up" and c.filtered_scrape
        assert [r for r in srv.requests if r.startswith("/metrics")] == [FILTERED_METRICS]
    finally:
        await c.aclose()


async def test_a_server_without_metrics_slash_gets_whole_documents(scripted):
    srv = scripted().serve_engine(UNDER_LOAD)  # /metrics/ is 404 here
    c = collector(srv.url)
    try:
        (s,) = await c.poll()
        assert s.state == "up" and not c.filtered_scrape
        assert [r for r in srv.requests if r.startswith("/metrics")] == [FILTERED_METRICS, "/metrics"]
    finally:
        await c.aclose()


def test_the_simulator_filters_as_prometheus_client_does():
    registry = CollectorRegistry(auto_describe=True)
    registry.register(Families(UNDER_LOAD))
    names = set(SCRAPE_NAMES) | {"process_cpu_seconds_total", "vllm:num_requests_running"}
    theirs = generate_latest(registry.restricted_registry(names)).decode()
    ours = restrict(UNDER_LOAD, names)
    assert samples_of(ours) == samples_of(theirs) != set()
    # HELP and TYPE stay with every family kept, and only with those
    ours_meta = sorted(line for line in ours.splitlines() if line.startswith("# TYPE"))
    theirs_meta = sorted(line for line in theirs.splitlines() if line.startswith("# TYPE"))
    assert ours_meta == theirs_meta
    assert query_names(FILTERED_METRICS) == set(SCRAPE_NAMES)
    assert query_names("/metrics") is None and query_names("/metrics?x=1") is None
