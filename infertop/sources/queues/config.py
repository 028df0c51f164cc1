"""The queue sources a config names: ``queues.gateways``, ``queues.epp``,
``queues.prometheus``, the ``--gateway`` / ``--epp`` flags (already merged into
the config), and the config's own ``gateway:`` server section, watched
automatically."""

from __future__ import annotations

from typing import Any

from ...domain.queues import DEFAULT_BUDGETS_S
from .collector import QueueCollector, QueueEndpoint, metrics_url
from .names import EPP, GATEWAY


def _host_url(listen: str | None) -> str | None:
    """``127.0.0.1:8100`` (or a URL) as an http URL; a wildcard address is reached on loopback."""
    if not listen:
        return None
    if listen.startswith(("http://", "https://")):
        return listen.rstrip("/")
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def name_from_url(url: str) -> str:
    rest = url.split("://", 1)[-1].rstrip("/")
    rest = rest[: -len("/metrics")] if rest.endswith("/metrics") else rest
    return rest.replace("127.0.0.1", "local").replace("localhost", "local")


def own_gateway(cfg: Any) -> dict | None:
    """The config's ``gateway:`` server section as a watch entry (None when it has none)."""
    gw = cfg.gateway
    if "gateway" not in cfg.sections or not gw.listen:
        return None
    token_file = gw.admin_token_file
    return {"url": _host_url(gw.listen), "name": "gateway", "admin_url": _host_url(gw.admin_listen),
            "token_env": None if token_file else gw.admin_token_env, "token_file": token_file}


def queue_endpoints(cfg: Any) -> list[QueueEndpoint]:
    """Every directly read queue source, with unique names."""
    q = cfg.queues
    budgets = {**DEFAULT_BUDGETS_S, **q.budgets}
    out: list[QueueEndpoint] = []
    names: set[str] = set()

    def unique(name: str) -> str:
        while name in names:
            name += "'"
        names.add(name)
        return name

    gateways = [dict(url=g.url, name=g.name, admin_url=g.admin_url, token_env=g.token_env, token_file=g.token_file,
                     timeout_s=g.timeout_s) for g in q.gateways]
    own = own_gateway(cfg)
    if own is not None and not any(metrics_url(g["url"]) == metrics_url(own["url"]) for g in gateways):
        gateways.append(own)
    for g in gateways:
        url = metrics_url(g["url"])
        out.append(QueueEndpoint(unique(g.get("name") or name_from_url(url)), GATEWAY, url,
                                 admin_url=g.get("admin_url"), token_env=g.get("token_env"),
                                 token_file=g.get("token_file"), timeout_s=g.get("timeout_s", 2.0), budgets=budgets))
    for e in q.epp:
        url = metrics_url(e.url)
        out.append(QueueEndpoint(unique(e.name or "epp " + name_from_url(url)), EPP, url, token_file=e.token_file,
                                 timeout_s=e.timeout_s, budgets=budgets))
    return out


def queue_collectors(cfg: Any, window_s: float) -> list:
    """Collectors for every queue source of ``cfg`` (Prometheus-backed ones need ``prometheus.url``)."""
    out: list = [QueueCollector(ep, window_s) for ep in queue_endpoints(cfg)]
    prom = cfg.prometheus
    if prom.url and cfg.queues.prometheus:
        from .prom import PromQueueCollector  # noqa: PLC0415 — prometheus-api-client only when used

        budgets = {**DEFAULT_BUDGETS_S, **cfg.queues.budgets}
        taken = {c.name for c in out}
        for p in cfg.queues.prometheus:
            name = p.name
            while name in taken:
                name += "'"
            taken.add(name)
            ep = QueueEndpoint(name, p.kind, prom.url, budgets=budgets, timeout_s=prom.timeout_s)
            out.append(PromQueueCollector(ep, prom.url, window_s, selector=p.selector, timeout_s=prom.timeout_s,
                                          token_file=prom.token_file))
    return out
