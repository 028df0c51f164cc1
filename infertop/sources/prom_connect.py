"""One way to open a prometheus-api-client connection, shared by the Prometheus-backed sources."""

from __future__ import annotations

from typing import Any

from .sanitize import io_url


def connect_prometheus(url: str, token_file: str | None, timeout_s: float, *, method: str = "GET") -> Any:
    """A ``PrometheusConnect`` with a bearer token read from ``token_file`` (never logged) and no retries:
    a dead Prometheus must cost one timeout per refresh, not five."""
    from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 — heavy import, only when configured
    from urllib3.util.retry import Retry  # noqa: PLC0415

    headers = None
    if token_file:
        with open(token_file, encoding="utf-8") as fh:
            headers = {"Authorization": f"Bearer {fh.read().strip()}"}
    # the configured URL is redacted; its user:password (if any) is put back for the connection only
    return PrometheusConnect(url=io_url(url), headers=headers, disable_ssl=True, method=method,
                             retry=Retry(total=0, connect=0, read=0, status=0), timeout=timeout_s)
