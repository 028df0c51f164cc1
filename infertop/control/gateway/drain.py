"""Draining a local engine at the infertop gateway in front of it (admin API client).

vLLM 0.32 answers HTTP 500 to requests that reach it while it drains after
SIGTERM; a gateway in front holds them in its queue instead. Before an
engine action signals an engine, :class:`GatewayDrain` drains it at the
gateway (``POST /admin/engines/{name}/drain``), reads the gateway's in-flight
count for it (``GET /admin/state``) and undrains it afterwards.
:func:`find_gateway` finds the gateway fronting an engine from the config:
the ``gateway:`` section (the server's own) and ``queues.gateways`` entries
that have admin access. Tokens are read from the environment or a file and
never appear in a message, a repr or the audit log. No UI imports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from ...sources.http_client import ResponseTooLarge, blocking_request

__all__ = ["GatewayDrain", "GatewayError", "GatewayRef", "find_gateway", "gateway_refs"]

MAX_ANSWER_BYTES = 1024 * 1024  # /admin/state lists every engine and class: a few KiB


class GatewayError(Exception):
    """The gateway's admin API cannot be reached or refused a request: one line, no token."""


@dataclass(frozen=True)
class GatewayRef:
    """How to reach one gateway's admin API (the token is never shown)."""

    admin_url: str  # http://127.0.0.1:8101
    label: str  # "gateway 127.0.0.1:8100", for messages
    token: str | None = field(default=None, repr=False, compare=False)
    engines: tuple[tuple[str, str], ...] = ()  # (name, url) the config says it fronts, if known


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _token(env: str | None, path: str | None) -> str | None:
    if env and os.environ.get(env):
        return os.environ[env].strip()
    if path:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                return f.read(4096).strip() or None
        except OSError:
            return None
    return None


def _http(addr: str) -> str:
    addr = str(addr).strip()
    return addr.rstrip("/") if addr.startswith(("http://", "https://")) else f"http://{addr}"


def gateway_refs(config: Any) -> list[GatewayRef]:
    """The gateways with admin access the config names: its ``gateway:`` section (when it has an
    ``admin_listen``) and every ``queues.gateways`` entry with an ``admin_url``."""
    out: list[GatewayRef] = []
    gw = _get(config, "gateway")
    listed = list(_get(gw, "engines") or ()) if gw is not None else []
    admin = _get(gw, "admin_listen") if listed else None  # a section without engines runs no gateway
    if admin:
        engines = []
        for e in listed:
            url = str(_get(e, "url") or "")
            engines.append((str(_get(e, "name") or url), url))
        listen = _get(gw, "listen") or admin
        out.append(GatewayRef(_http(admin), f"gateway {listen}",
                              _token(_get(gw, "admin_token_env"), _get(gw, "admin_token_file")), tuple(engines)))
    queues = _get(config, "queues")
    for g in (_get(queues, "gateways") or ()) if queues is not None else ():
        admin = _get(g, "admin_url")
        if not admin:
            continue
        url = _get(g, "url") or admin
        ref = GatewayRef(_http(admin), f"gateway {urlsplit(_http(url)).netloc}",
                         _token(_get(g, "token_env"), _get(g, "token_file")))
        if all(r.admin_url != ref.admin_url for r in out):
            out.append(ref)
    return out


def _norm_url(url: str) -> str:
    """Comparable form of an engine URL: scheme, loopback spellings as one host, port."""
    try:
        u = urlsplit(str(url).strip())
        host = (u.hostname or "").lower()
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return str(url)
    if host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", ""):
        host = "loopback"
    return f"{u.scheme or 'http'}://{host}:{port}"


class GatewayDrain:
    """One engine at one gateway: drain, undrain, in-flight (blocking, short timeouts)."""

    # Connecting fails fast on a dead gateway; an answer may take longer from a gateway busy proxying a
    # burst on a loaded host (a 3 s read timeout failed a restart under load: nothing was signalled).
    def __init__(self, ref: GatewayRef, engine: str, timeout_s: float = 10.0, connect_timeout_s: float = 3.0) -> None:
        self.ref, self.engine, self.timeout_s = ref, engine, timeout_s
        self.connect_timeout_s = min(connect_timeout_s, timeout_s)
        self.label = ref.label

    def __repr__(self) -> str:
        return f"GatewayDrain({self.ref.admin_url!r}, engine={self.engine!r})"

    def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.ref.token}"} if self.ref.token else {}
        try:
            status, raw = blocking_request(method, self.ref.admin_url + path, MAX_ANSWER_BYTES, timeout_s=self.timeout_s,
                                           connect_timeout_s=self.connect_timeout_s, headers=headers, json_body=body)
        except ResponseTooLarge as e:
            raise GatewayError(f"{self.label}: admin API: {e}") from None
        except httpx.HTTPError as e:
            raise GatewayError(f"{self.label}: admin API unreachable ({type(e).__name__})") from None
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        if status != 200:
            msg = _get(_get(body, "error") or {}, "message") if isinstance(body, dict) else None
            raise GatewayError(f"{self.label}: {method} {path.split('?')[0]} → HTTP {status}"
                               + (f": {str(msg)[:200]}" if msg else ""))
        if not isinstance(body, dict):
            raise GatewayError(f"{self.label}: {path} answered something that is not a JSON object")
        return body

    def state(self) -> dict:
        """The gateway's view of the engine: ``{name, url, cap, in_flight, draining, up}``."""
        body = self._request("GET", "/admin/state")
        for e in body.get("engines") or ():
            if isinstance(e, dict) and e.get("name") == self.engine:
                return e
        raise GatewayError(f"{self.label}: no engine {self.engine!r} any more")

    def in_flight(self) -> int:
        n = self.state().get("in_flight")
        if not isinstance(n, (int, float)) or isinstance(n, bool) or n < 0:
            raise GatewayError(f"{self.label}: no in-flight count for {self.engine!r}")
        return int(n)

    def drain(self) -> dict:
        return self._request("POST", f"/admin/engines/{_quote(self.engine)}/drain")

    def undrain(self) -> dict:
        return self._request("POST", f"/admin/engines/{_quote(self.engine)}/undrain")

    def set_cap(self, cap: int) -> dict:
        return self._request("PATCH", f"/admin/engines/{_quote(self.engine)}", {"cap": int(cap)})


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _engine_at(engines: Iterable[dict], name: str, url: str | None) -> str | None:
    """The gateway's name for the engine: the one at the same URL (loopback spellings alike); else the
    one of the same name whose URL is unknown or is that name (a gateway names upstreams by profile)."""
    rows = [e for e in engines if isinstance(e, dict)]
    want = _norm_url(url) if url else None
    for e in rows:
        if want is not None and e.get("url") and _norm_url(str(e["url"])) == want:
            return str(e.get("name"))
    for e in rows:
        if e.get("name") == name and (want is None or not e.get("url") or e.get("url") == name):
            return name
    return None


def find_gateway(config: Any, name: str, url: str | None, timeout_s: float = 10.0
                 ) -> tuple[GatewayDrain | None, list[str]]:
    """The gateway fronting engine ``name`` (at ``url``), asked through its admin API, and
    warnings about gateways the config names that could not be asked (one line each)."""
    warnings: list[str] = []
    for ref in gateway_refs(config):
        listed = _engine_at(({"name": n, "url": u} for n, u in ref.engines), name, url)
        probe = GatewayDrain(ref, listed or name, timeout_s)
        try:
            body = probe._request("GET", "/admin/state")
        except GatewayError as e:
            if listed is not None:  # the config says it fronts this engine: say why it cannot drain there
                warnings.append(f"{e}: the engine cannot be drained there")
            continue
        at = _engine_at(body.get("engines") or (), name, url)
        if at is not None:
            return GatewayDrain(ref, at, timeout_s), warnings
    return None, warnings


STEP_DRAIN_WHY = "before signalling the engine"  # the ``why`` of a stop / restart / set's own drain


def drains_left(entries: Iterable[dict]) -> list[dict]:
    """Drain outcomes ('ok') of an engine action's gateway step that no later ``gateway.undrain``
    outcome (any result) follows on the same target: an infertop that ended mid-action left the
    engine drained there.  Each is the intent entry (its ``target``, ``time``, ``pid``), oldest first."""
    step_intents: dict[str, dict] = {}
    left: dict[str, dict] = {}
    for e in entries:
        action, target, op = e.get("action"), str(e.get("target")), e.get("op")
        if e.get("phase") == "intent" and action == "gateway.drain" and e.get("why") == STEP_DRAIN_WHY:
            step_intents[str(op)] = e
        elif e.get("phase") == "outcome" and action == "gateway.drain" and e.get("result") == "ok":
            if str(op) in step_intents:
                left[target] = step_intents[str(op)]
        elif e.get("phase") == "outcome" and action == "gateway.undrain":
            left.pop(target, None)
    return list(left.values())


class UndrainLeft:
    """Undrain an engine an earlier infertop drained at its gateway and never undid (it ended mid-action):
    offered at the next start, reviewed, confirmed and audited like the drain was."""

    action = "gateway.undrain"
    abortable = False
    timeout_s: float | None = 30.0

    def __init__(self, target: str, engine: str, config: Any, since: str = "?") -> None:
        self.target, self.engine, self.config, self.since = target, engine, config, since
        self.object_key = f"gateway-undrain:{target}"
        self._gw: GatewayDrain | None = None

    def plan(self):
        from ..pipeline import ActionRefused, Review

        ref = next((r for r in gateway_refs(self.config) if self.target.endswith(f" at {r.label}")), None)
        if ref is None:
            raise ActionRefused(f"{self.target}: that gateway is not in the config (undrain it there by hand)")
        self._gw = GatewayDrain(ref, self.engine)
        return Review(f"Undrain {self.engine} at {ref.label}?", f"undrain {self.engine} at {ref.label}", "",
                      (f"an engine action drained it ({self.since}) and ended before undraining it: requests for "
                       "it wait at the gateway or go to its other engines",
                       "undrain: the gateway sends it requests again"))

    def preflight(self):
        from ..pipeline import Preflight

        assert self._gw is not None
        try:
            st = self._gw.state()
        except GatewayError as e:
            return Preflight(False, str(e))
        if not st.get("draining"):
            return Preflight(False, f"{self.engine} is not drained at {self._gw.label} (any more): nothing to do")
        return Preflight(True, f"{self.engine} is drained at {self._gw.label} ({st.get('in_flight', '?')} in flight)")

    def execute(self, progress, abort):
        from ..pipeline import Outcome

        assert self._gw is not None
        try:
            self._gw.undrain()
        except GatewayError as e:
            return Outcome("failed", str(e))
        return Outcome("ok", f"{self.engine} undrained at {self._gw.label}")

    def audit_details(self) -> dict[str, Any]:
        return {"engine": self.engine, "why": "left drained by an earlier infertop", "summary": f"undrain {self.engine}"}
