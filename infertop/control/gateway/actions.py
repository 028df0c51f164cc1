"""Steering an infertop gateway through its admin API, as kinds of the one action pipeline.

:class:`GatewayAdmin` speaks the admin API (bearer token read when a request is
made, never logged or shown); :class:`ClassEdit` changes a class's weight or
maximum wait, :class:`EngineDrain` drains or undrains an engine at the gateway
and follows its in-flight count down to 0. Each plans from a fresh
``/admin/state`` read (pure diff), checks with ``?dry_run=1`` before
anything changes, and is audited by the pipeline (intent, then outcome).
Blocking (sources/http_client.blocking_request, bounded): the pipeline runs them in threads.
"""

from __future__ import annotations

import difflib
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from ...sources.http_client import ResponseTooLarge, blocking_request
from ...sources.queues.collector import QueueEndpoint, TokenError
from ...sources.sanitize import error_text, plain_text
from ..pipeline import ActionRefused, Outcome, Preflight, Progress, ProgressFn, Review

ADMIN_TIMEOUT_S = 5.0
MAX_ANSWER_BYTES = 1024 * 1024
CLASS_FIELDS = ("weight", "max_wait_s", "reserved_slots")


class GatewayAdmin:
    """The admin API of one gateway (``endpoint.admin_url``, token from ``token_env`` / ``token_file``)."""

    def __init__(self, endpoint: QueueEndpoint, *, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
        if not endpoint.admin_url:
            raise ActionRefused(f"gateway {endpoint.name}: no admin_url configured — its admin API is unknown")
        if not endpoint.has_token:
            raise ActionRefused(f"gateway {endpoint.name}: no admin token configured (token_env or token_file)")
        self.endpoint = endpoint
        self.base = endpoint.admin_url.rstrip("/")
        self.timeout_s = timeout_s

    @property
    def name(self) -> str:
        return self.endpoint.name

    def request(self, method: str, path: str, body: dict | None = None, *, dry_run: bool = False) -> dict:
        """One admin request; any failure is an :class:`ActionRefused` of one line (with the HTTP status)."""
        try:
            token = self.endpoint.token()
        except TokenError as e:
            raise ActionRefused(f"gateway {self.name}: {e}") from None
        url = self.base + path + ("?dry_run=1" if dry_run else "")
        try:
            status, raw = blocking_request(method, url, MAX_ANSWER_BYTES, timeout_s=self.timeout_s,
                                           headers={"Authorization": f"Bearer {token}"}, json_body=body)
        except ResponseTooLarge as e:
            raise ActionRefused(f"gateway {self.name}: admin API: {e}") from None
        except httpx.TimeoutException:
            raise ActionRefused(f"gateway {self.name}: admin API timed out after {self.timeout_s:g} s") from None
        except httpx.HTTPError as e:
            why = "connection refused" if "refused" in str(e).lower() else type(e).__name__
            raise ActionRefused(f"gateway {self.name}: cannot reach the admin API at {self.base}: {why}") from None
        doc = _json(raw)
        if status == 401:
            raise ActionRefused(f"gateway {self.name} refused the admin token (401): check token_env / token_file "
                                "— nothing was changed", 401)
        if status >= 400:
            err = doc.get("error") if isinstance(doc, dict) else None
            msg = err.get("message") if isinstance(err, dict) else None
            raise ActionRefused(error_text(f"gateway {self.name}: {status}: {msg or 'error'}"),
                                status)
        if not isinstance(doc, dict):
            raise ActionRefused(f"gateway {self.name}: the admin API answered something that is not a JSON object")
        return doc

    def state(self) -> dict:
        return self.request("GET", "/admin/state")

    def klass(self, name: str) -> dict:
        for c in self.state().get("classes") or []:
            if isinstance(c, dict) and c.get("name") == name:
                return c
        raise ActionRefused(f"gateway {self.name} has no class {plain_text(name)!r} (any more)", 404)

    def engine(self, name: str) -> dict:
        for e in self.state().get("engines") or []:
            if isinstance(e, dict) and e.get("name") == name:
                return e
        raise ActionRefused(f"gateway {self.name} has no engine {plain_text(name)!r} (any more)", 404)

    def patch_class(self, name: str, changes: dict, *, dry_run: bool = False) -> dict:
        return self.request("PATCH", f"/admin/classes/{_seg(name)}", changes, dry_run=dry_run)

    def set_draining(self, name: str, draining: bool, *, dry_run: bool = False) -> dict:
        verb = "drain" if draining else "undrain"
        return self.request("POST", f"/admin/engines/{_seg(name)}/{verb}", None, dry_run=dry_run)


def _seg(name: str) -> str:
    return quote(name, safe="")


def _json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _wait_text(v: Any) -> str:
    """Seconds as the confirmation shows them: "1.12 s", not "1.11736 s"."""
    return f"{v:.2f} s" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{v} s"


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


class ClassEdit:
    """Change a class's weight / max wait / reserved slots on one gateway."""

    abortable = False
    timeout_s: float | None = 30.0

    def __init__(self, admin: GatewayAdmin, cls: str, changes: dict[str, float]) -> None:
        bad = set(changes) - set(CLASS_FIELDS)
        if bad or not changes:
            raise ActionRefused(f"only {', '.join(CLASS_FIELDS)} can be changed")
        self.admin, self.cls, self.changes = admin, cls, dict(changes)
        self.action = "gateway.class"
        self.target = f"class {cls} on gateway {admin.name}"
        self.object_key = f"gateway:{admin.name}:class:{cls}"
        self.old: dict[str, Any] = {}
        self.summary = ""

    def plan(self) -> Review:
        c = self.admin.klass(self.cls)
        self.old = {k: c.get(k) for k in self.changes}
        if all(self.old[k] == v for k, v in self.changes.items()):
            raise ActionRefused(f"{self.target} already has {', '.join(f'{k} {_fmt(v)}' for k, v in self.changes.items())}"
                                ": nothing to change")
        self.summary = ", ".join(f"{k} {_fmt(self.old[k])} → {_fmt(v)}" for k, v in self.changes.items())
        before = [f"{k}: {_fmt(c.get(k))}" for k in CLASS_FIELDS if k in c]
        after = [f"{k}: {_fmt(self.changes.get(k, c.get(k)))}" for k in CLASS_FIELDS if k in c or k in self.changes]
        diff = "\n".join(difflib.unified_diff(before, after, f"{self.cls} (now)", f"{self.cls} (after)", lineterm=""))
        notes = [f"queued now: {_fmt(c.get('queued'))}, oldest wait {_wait_text(c.get('oldest_wait_s'))}",
                 "takes effect at once on the gateway, no request is dropped"]
        return Review(f"Edit class {self.cls} on gateway {self.admin.name}", self.summary, diff, tuple(notes))

    def preflight(self) -> Preflight:
        try:
            got = self.admin.patch_class(self.cls, self.changes, dry_run=True)
        except ActionRefused as e:
            return Preflight(False, str(e), e.status)
        shown = ", ".join(f"{k} {_fmt(got.get(k))}" for k in self.changes)
        return Preflight(True, f"the gateway accepts it (dry run): {shown}")

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        try:
            self.admin.patch_class(self.cls, self.changes)
            progress(Progress("sent; reading the class back…", 0.5))
            now = self.admin.klass(self.cls)
        except ActionRefused as e:
            return Outcome("failed", str(e), e.status)
        differ = {k: now.get(k) for k, v in self.changes.items() if now.get(k) != v}
        if differ:
            return Outcome("failed", f"the gateway reports {differ} after the change")
        return Outcome("ok", f"{self.summary} — the gateway reports it")

    def audit_details(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.changes, "summary": self.summary, "server": self.admin.base}


class EngineDrain:
    """Drain an engine at the gateway (no new requests; in-flight finish, followed to 0) — or undrain it."""


    def __init__(self, admin: GatewayAdmin, engine: str, draining: bool, *, follow_timeout_s: float = 600.0,
                 poll_s: float = 0.25, clock: Callable[[], float] = time.monotonic) -> None:
        self.admin, self.engine, self.draining = admin, engine, draining
        self.verb = "drain" if draining else "undrain"
        self.action = f"gateway.{self.verb}"
        self.target = f"engine {engine} at gateway {admin.name}"
        self.object_key = f"gateway:{admin.name}:engine:{engine}"
        self.abortable = draining  # aborting stops following; the engine stays drained
        self.follow_timeout_s = follow_timeout_s
        self.timeout_s: float | None = follow_timeout_s + 10.0 if draining else 30.0
        self.poll_s, self.clock = poll_s, clock
        self.in_flight_before: Any = None

    def plan(self) -> Review:
        e = self.admin.engine(self.engine)
        if bool(e.get("draining")) == self.draining:
            raise ActionRefused(f"{self.target} is already {'draining' if self.draining else 'serving'}")
        self.in_flight_before = e.get("in_flight")
        if self.draining:
            notes = ("no new request goes to it; the requests in flight finish (followed until 0)",
                     f"in flight now: {_fmt(e.get('in_flight'))} of cap {_fmt(e.get('cap'))}",
                     "aborting stops following only: the engine stays drained until undrained")
            return Review(f"Drain {self.engine} at gateway {self.admin.name}",
                          f"drain {self.engine}: in flight {_fmt(e.get('in_flight'))} → 0", "", notes)
        return Review(f"Undrain {self.engine} at gateway {self.admin.name}", f"undrain {self.engine}: takes requests again",
                      "", (f"in flight now: {_fmt(e.get('in_flight'))}",))

    def preflight(self) -> Preflight:
        try:
            got = self.admin.set_draining(self.engine, self.draining, dry_run=True)
        except ActionRefused as e:
            return Preflight(False, str(e), e.status)
        return Preflight(True, f"the gateway accepts it (dry run): draining {got.get('draining')}")

    def execute(self, progress: ProgressFn, abort: threading.Event) -> Outcome:
        started = self.clock()
        try:
            self.admin.set_draining(self.engine, self.draining)
        except ActionRefused as e:
            return Outcome("failed", str(e), e.status)
        if not self.draining:
            return Outcome("ok", f"{self.engine} takes requests again at gateway {self.admin.name}")
        first = None
        while True:
            try:
                n = self.admin.engine(self.engine).get("in_flight")
            except ActionRefused as e:
                return Outcome("failed", f"drain sent; following failed: {e}", e.status)
            n = n if isinstance(n, (int, float)) and not isinstance(n, bool) else None
            first = n if first is None else first
            took = self.clock() - started
            if n == 0:
                return Outcome("ok", f"{self.engine} drained at gateway {self.admin.name}: 0 in flight after "
                                     f"{took:.1f} s")
            left = self.follow_timeout_s - took
            frac = None if not first or n is None else max(0.0, 1.0 - n / first)
            progress(Progress(f"draining {self.engine}: {_fmt(n)} in flight", frac, countdown_s=max(0.0, left)))
            if abort.is_set():
                return Outcome("aborted", f"stopped following with {_fmt(n)} in flight: {self.engine} stays drained "
                                          "at the gateway (undrain with d)")
            if left <= 0:
                return Outcome("timeout", f"{_fmt(n)} still in flight after {self.follow_timeout_s:g} s: "
                                          f"{self.engine} stays drained at the gateway")
            abort.wait(self.poll_s)

    def audit_details(self) -> dict[str, Any]:
        return {"old": {"draining": not self.draining, "in_flight": self.in_flight_before},
                "new": {"draining": self.draining}, "summary": f"{self.verb} {self.engine}",
                "server": self.admin.base}
