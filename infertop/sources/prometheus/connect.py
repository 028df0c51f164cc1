"""One way to query Prometheus, shared by the Prometheus-backed sources.

Every read is bounded: the body AFTER decompression (a gzip bomb stops at the
limit), time to connect and between bytes, an overall deadline per query (a
server that drips a byte every few seconds times out), the number of series,
and the answer's shape (only a vector / matrix of ``{"metric": {}, "value"}``
items is accepted).  Errors are one line naming the limit that was hit.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..sanitize import io_url

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_SERIES = 20_000
_CHUNK_BYTES = 64 * 1024


class PromAnswerError(Exception):
    """A Prometheus answer that was refused (too large, too slow, odd shape); the text is shown as is."""


class BoundedPrometheus:
    """The part of ``PrometheusConnect`` the sources use (``custom_query``, ``custom_query_range``), bounded."""

    def __init__(self, url: str, headers: dict[str, str] | None, timeout_s: float, method: str = "GET",
                 max_body_bytes: int = MAX_BODY_BYTES, max_series: int = MAX_SERIES) -> None:
        import requests  # noqa: PLC0415 — heavy import, only when configured

        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.method = method
        self.max_body_bytes = max_body_bytes
        self.max_series = max_series
        self._session = requests.Session()  # no retries: a dead Prometheus costs one timeout per refresh
        self._session.headers.update(headers or {})

    def custom_query(self, query: str, params: dict | None = None, timeout: float | None = None) -> list:
        return self._query("/api/v1/query", {"query": query, **(params or {})}, ("vector",), timeout)

    def custom_query_range(self, query: str, start_time: Any, end_time: Any, step: str,
                           params: dict | None = None, timeout: float | None = None) -> list:
        args = {"query": query, "start": round(start_time.timestamp(), 3), "end": round(end_time.timestamp(), 3),
                "step": step, **(params or {})}
        return self._query("/api/v1/query_range", args, ("matrix",), timeout)

    def _query(self, path: str, args: dict, kinds: tuple[str, ...], timeout: float | None) -> list:
        timeout_s = timeout or self.timeout_s
        body = self._read(self.url + path, args, timeout_s)
        return check_answer(body, kinds, self.max_series)

    def _read(self, url: str, args: dict, timeout_s: float) -> bytes:
        """The decompressed body, read in chunks under a size limit and an overall deadline."""
        import requests  # noqa: PLC0415
        import urllib3  # noqa: PLC0415

        deadline = time.monotonic() + timeout_s
        data, params = (args, None) if self.method == "POST" else (None, args)
        try:
            resp = self._session.request(self.method, url, params=params, data=data, stream=True,
                                         timeout=(timeout_s, timeout_s), verify=False)
        except requests.exceptions.Timeout:
            raise PromAnswerError(f"timeout after {timeout_s:g} s") from None
        with resp:
            chunks, size_bytes = [], 0
            try:
                # read1: returns what has arrived (a drip cannot hold one read past the deadline); decoded,
                # so the limit is on the inflated bytes
                while chunk := resp.raw.read1(_CHUNK_BYTES, decode_content=True):
                    size_bytes += len(chunk)
                    if size_bytes > self.max_body_bytes:
                        raise PromAnswerError(f"Prometheus answer too large (> {_mib(self.max_body_bytes)})")
                    if time.monotonic() > deadline:
                        raise PromAnswerError(f"timeout after {timeout_s:g} s")
                    chunks.append(chunk)
            except (requests.exceptions.Timeout, requests.exceptions.ConnectionError, urllib3.exceptions.HTTPError,
                    OSError) as exc:
                if "timed out" in str(exc).lower() or isinstance(exc, requests.exceptions.Timeout):
                    raise PromAnswerError(f"timeout after {timeout_s:g} s") from None
                raise
            if resp.status_code != 200:
                raise PromAnswerError(f"HTTP {resp.status_code}")
        return b"".join(chunks)


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / (1024 * 1024):g} MiB"


def check_answer(body: bytes, kinds: tuple[str, ...], max_series: int) -> list:
    """The ``result`` list of a Prometheus answer, or ``PromAnswerError`` naming what was unexpected."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise PromAnswerError("unexpected answer from Prometheus: not JSON") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        raise PromAnswerError("unexpected answer from Prometheus: no data")
    kind = data.get("resultType")
    if kind not in kinds:
        raise PromAnswerError(f"unexpected answer from Prometheus: resultType {str(kind)[:40]}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PromAnswerError(f"unexpected answer from Prometheus: result is {type(result).__name__}")
    if len(result) > max_series:
        raise PromAnswerError(f"Prometheus answer has too many series ({len(result)} > {max_series})")
    key = "value" if kind == "vector" else "values"
    for item in result:
        if not (isinstance(item, dict) and isinstance(item.get("metric"), dict)
                and isinstance(item.get(key), list)):
            raise PromAnswerError(f"unexpected answer from Prometheus: a {kind} item without metric/{key}")
    return result


def connect_prometheus(url: str, token_file: str | None, timeout_s: float, *, method: str = "GET") -> Any:
    """A bounded Prometheus client with a bearer token read from ``token_file`` (never logged)."""
    headers = None
    if token_file:
        with open(token_file, encoding="utf-8") as fh:
            headers = {"Authorization": f"Bearer {fh.read().strip()}"}
    # the configured URL is redacted; its user:password (if any) is put back for the connection only
    return BoundedPrometheus(io_url(url), headers, timeout_s, method)
