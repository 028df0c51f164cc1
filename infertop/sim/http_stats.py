"""Per-server HTTP request statistics, rendered like prometheus_fastapi_instrumentator."""

from __future__ import annotations

import threading
import time

from .exposition import _Builder, _hist_values, _labelstr
from .histograms import Histogram

__all__ = ["HttpStats", "HTTP_HIGHR_BUCKETS", "HTTP_DURATION_BUCKETS", "HTTP_EXCLUDED"]

HTTP_HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
                      5.0, 7.5, 10.0, 30.0, 60.0)
HTTP_DURATION_BUCKETS = (0.1, 0.5, 1.0)
#: vLLM excludes these handlers from the HTTP metrics.
HTTP_EXCLUDED = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})


class HttpStats:
    """Per-server request statistics, rendered like prometheus_fastapi_instrumentator."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version = 0
        self.created_unix = time.time()
        self.requests: dict[tuple[str, str, str], list[float]] = {}  # (handler, method, status) -> [n, created]
        self.sizes: dict[str, list[float]] = {}  # handler -> [n, req_sum, resp_sum, created_req, created_resp]
        self.durations: dict[tuple[str, str], list] = {}  # (handler, method) -> [Histogram, created]
        self.highr = Histogram(HTTP_HIGHR_BUCKETS)

    def record(self, handler: str, method: str, status: int, duration_s: float, req_bytes: int,
               resp_bytes: int) -> None:
        if handler in HTTP_EXCLUDED:
            return
        status_s = f"{status // 100}xx"
        now = time.time()
        with self.lock:
            r = self.requests.get((handler, method, status_s))
            if r is None:
                r = self.requests[(handler, method, status_s)] = [0.0, now]
                self.version += 1
            r[0] += 1
            s = self.sizes.get(handler)
            if s is None:
                s = self.sizes[handler] = [0.0, 0.0, 0.0, now, now]
                self.version += 1
            s[0] += 1
            s[1] += req_bytes
            s[2] += resp_bytes
            d = self.durations.get((handler, method))
            if d is None:
                d = self.durations[(handler, method)] = [Histogram(HTTP_DURATION_BUCKETS), now]
                self.version += 1
            d[0].observe(duration_s)
            self.highr.observe(duration_s)


def _add_http(b: _Builder, http: HttpStats, created: bool = True) -> None:
    reqs = sorted(http.requests)
    b.counter("http_requests", "Total number of requests by method, status and handler.",
              [{"handler": h, "method": m, "status": s} for h, m, s in reqs],
              lambda: [http.requests[k][0] for k in reqs], created=False)
    if created:
        b.header("http_requests_created", "gauge", "Total number of requests by method, status and handler.")
        for h, m, s in reqs:
            b.static_sample("http_requests_created" + _labelstr({"handler": h, "method": m, "status": s}),
                            http.requests[(h, m, s)][1])
    handlers = sorted(http.sizes)
    doc = ("Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. "
           "No percentile calculated. ")
    b.summary("http_request_size_bytes", doc, [{"handler": h} for h in handlers],
              lambda: [v for h in handlers for v in (http.sizes[h][0], http.sizes[h][1])],
              [http.sizes[h][3] for h in handlers] if created else None)
    doc = ("Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. "
           "No percentile calculated. ")
    b.summary("http_response_size_bytes", doc, [{"handler": h} for h in handlers],
              lambda: [v for h in handlers for v in (http.sizes[h][0], http.sizes[h][2])],
              [http.sizes[h][4] for h in handlers] if created else None)
    doc = "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. "
    b.histogram("http_request_duration_highr_seconds", doc, [({}, HTTP_HIGHR_BUCKETS)],
                lambda: _hist_values(http.highr), created=False)
    if created:
        b.static_gauge("http_request_duration_highr_seconds_created", doc, [({}, http.created_unix)])
    durs = sorted(http.durations)
    doc = "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. "
    b.histogram("http_request_duration_seconds", doc,
                [({"handler": h, "method": m}, HTTP_DURATION_BUCKETS) for h, m in durs],
                lambda: [v for k in durs for v in _hist_values(http.durations[k][0])], created=False)
    if created:
        b.static_gauge("http_request_duration_seconds_created", doc,
                       [({"handler": h, "method": m}, http.durations[(h, m)][1]) for h, m in durs])
