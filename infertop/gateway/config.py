"""The ``gateway:`` section of the infertop config (schema only; :mod:`infertop.config` builds it).

Its bounded fields are declared and checked with :mod:`infertop.config_build`, as every section's.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ..config_build import bounded, bounds_errors

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_CAP = 8


@dataclass
class GatewayEngine:
    """An upstream: ``url`` is a URL, or the name of an ``engines:`` entry or a launch profile."""

    url: str
    name: str = ""
    cap: int | None = bounded(None, 1, 1_000_000)  # None: the engine's max_num_seqs, else DEFAULT_CAP
    timeout_s: float = bounded(300.0, 0.05, 86400)  # idle read timeout: no byte for this long → 504
    connect_timeout_s: float = bounded(2.0, 0.05, 600)
    priority_scheduling: bool | None = None  # None: detect (send priority; drop it if the engine refuses)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        if not self.url:
            errs.append(("url", "must not be empty"))
        return errs


@dataclass
class GatewayClass:
    """A traffic class; ``priority`` as InferenceObjective.spec.priority (higher = more urgent)."""

    name: str
    priority: int = 0
    weight: float = bounded(1.0, 0, 1_000_000, lo_open=True)
    max_wait_s: float = bounded(30.0, 0, 86400, lo_open=True)
    reserved_slots: int = bounded(0, 0, 1_000_000)
    # how long a request of this class may be held before dispatch, so several leave together
    # (0: dispatch as soon as a slot is free); halved for the top class while its backlog > top_backlog
    batch_wait_s: float = bounded(0.0, 0, 60)

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        if not self.name:
            errs.append(("name", "must not be empty"))
        return errs


def default_classes() -> list[GatewayClass]:
    return [GatewayClass("realtime", 100, 8.0, 2.0), GatewayClass("batch", 50, 2.0, 30.0),
            GatewayClass("background", 10, 1.0, 120.0)]


@dataclass
class GatewayConfig:
    """``infertop gateway``'s section. Defaults give a usable gateway on loopback."""

    listen: str = "127.0.0.1:8100"
    admin_listen: str = "127.0.0.1:8101"
    admin_token_env: str = "INFERTOP_GATEWAY_TOKEN"
    admin_token_file: str | None = None
    engines: list[GatewayEngine] = field(default_factory=list)
    classes: list[GatewayClass] = field(default_factory=list)  # empty: default_classes()
    default_class: str = "batch"
    strict_top: bool = False
    api_keys_file: str | None = None
    weights_file: str | None = None
    max_body_bytes: int = bounded(DEFAULT_MAX_BODY_BYTES, 1024, 1 << 30)
    max_client_connections: int = bounded(4096, 1, 1_000_000)  # open at once; more → 503, closed
    client_header_timeout_s: float = bounded(10.0, 0.05, 600)  # a request head still incomplete → 408
    max_queue: int = bounded(10_000, 1, 10_000_000)  # waiting requests in all classes; more → 429
    top_backlog: int = bounded(10, 1, 1_000_000)  # the adaptive rule's threshold
    metrics_poll_s: float = bounded(1.0, 0.1, 600)  # engines' /metrics (KV cache, waiting, up)
    kv_cache_max_pct: float = bounded(95.0, 0, 100, lo_open=True)  # an engine this full takes no new request
    vllm_waiting_max: int = bounded(4, 0, 1_000_000)  # …nor one whose own queue is longer than this
    files_poll_s: float = bounded(1.0, 0.1, 600)  # how often weights/api keys files are checked
    drain_grace_s: float = bounded(30.0, 0, 86400)  # on SIGTERM: in-flight requests get this long

    def all_classes(self) -> list[GatewayClass]:
        return self.classes or default_classes()

    def validate(self) -> list[tuple[str, str]]:
        errs = bounds_errors(self)
        for key in ("listen", "admin_listen"):
            why = address_error(getattr(self, key), loopback=key == "admin_listen")
            if why:
                errs.append((key, why))
        names = [c.name for c in self.all_classes()]
        dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if dup:
            errs.append(("classes", f"duplicate class {dup!r}"))
        if self.default_class not in names:
            errs.append(("default_class", f"{self.default_class!r} is not a class ({', '.join(names)})"))
        seen: set[str] = set()
        for i, e in enumerate(self.engines):
            n = e.name or e.url
            if n in seen:
                errs.append((f"engines[{i}]", f"duplicate engine name {n!r}"))
            seen.add(n)
        return errs


def split_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6) → (host, port); raises ValueError."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {text!r}")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def address_error(text: str, *, loopback: bool = False) -> str | None:
    try:
        host, _ = split_address(text)
    except ValueError as e:
        return str(e)
    if loopback and not is_loopback(host):
        return f"must be a loopback address (127.0.0.1, ::1 or localhost), got {host!r}"
    return None
