"""PodLoadScraper: the Cluster pane's per-refresh read of every pod's load, over loopback HTTP."""

from __future__ import annotations

from locations import capture_text
from infertop.sim.exposition import query_names, restrict
from infertop.sources.kube.load import LOAD_FILTER, PodLoadScraper

UNDER_LOAD = capture_text("metrics_under_load.txt")


def vllm_like(srv, text: str):
    """/metrics answers everything; /metrics/ filters by name[] (as vLLM routes them)."""
    srv.serve_engine(text)
    srv.by_query["/metrics/"] = lambda query: (200, restrict(text, query_names("?" + query) or set()))
    return srv


def metrics_requests(srv) -> list[str]:
    return [r for r in srv.requests if r.startswith("/metrics")]


async def test_pods_are_read_again_over_kept_connections_and_for_two_samples(scripted):
    a, b = vllm_like(scripted(), UNDER_LOAD), vllm_like(scripted(), UNDER_LOAD)
    scraper = PodLoadScraper(timeout_s=5.0)
    try:
        for _ in range(3):
            loads = await scraper.scrape({"ns/a": a.url, "ns/b": b.url + "/"})
        assert loads["ns/a"].error is None and loads["ns/a"] == loads["ns/b"]
        assert loads["ns/a"].in_flight == sum(
            float(line.rsplit(" ", 1)[1]) for line in UNDER_LOAD.splitlines()
            if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")))
        assert metrics_requests(a) == [LOAD_FILTER] * 3
        assert [pod.client.opened for pod in scraper._pods.values()] == [1, 1]  # one connection each, kept
        assert len(restrict(UNDER_LOAD, query_names(LOAD_FILTER))) < len(UNDER_LOAD) // 20
        # a pod no longer asked for is let go, with its connection
        await scraper.scrape({"ns/a": a.url})
        assert list(scraper._pods) == [a.url]
    finally:
        scraper.close()
    assert scraper._pods == {}


async def test_a_server_without_the_filter_gets_whole_documents_from_then_on(scripted):
    srv = scripted().serve_engine(UNDER_LOAD)  # /metrics/ is 404 here
    scraper = PodLoadScraper(timeout_s=5.0)
    try:
        first = (await scraper.scrape({"p": srv.url}))["p"]
        second = (await scraper.scrape({"p": srv.url}))["p"]
    finally:
        scraper.close()
    assert first.error is None and first == second and first.in_flight is not None
    assert metrics_requests(srv) == [LOAD_FILTER, "/metrics", "/metrics"]


async def test_an_engine_still_loading_says_so_and_keeps_the_filter(scripted):
    doc = {"text": "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"}
    srv = scripted()
    srv.routes["/metrics"] = (200, lambda: doc["text"])
    srv.by_query["/metrics/"] = lambda query: (200, restrict(doc["text"], query_names("?" + query) or set()))
    scraper = PodLoadScraper(timeout_s=5.0)
    try:
        loading = (await scraper.scrape({"p": srv.url}))["p"]
        doc["text"] = UNDER_LOAD
        srv.requests.clear()
        loaded = (await scraper.scrape({"p": srv.url}))["p"]
    finally:
        scraper.close()
    assert loading.error == "no vllm:num_requests_* at /metrics" and loading.in_flight is None
    assert loaded.error is None and loaded.in_flight is not None
    assert metrics_requests(srv) == [LOAD_FILTER]

