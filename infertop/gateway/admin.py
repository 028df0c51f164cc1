"""The admin API (loopback only; every request needs ``Authorization: Bearer <token>``).

GET /admin/state; PATCH /admin/classes/{name}; PATCH /admin/engines/{name};
POST /admin/engines/{name}/drain|undrain. ``?dry_run=1`` validates and returns the
would-be object without changing anything. Errors are ``{"error": {message, type, code}}``.
"""

from __future__ import annotations

import hmac
import json
import os

from aiohttp import web

from .policy import PolicyError
from .server import Gateway


def _error(status: int, message: str, typ: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": typ, "code": status}}, status=status)


def read_token(env_name: str | None, path: str | None) -> str | None:
    """The admin token from the file (first line) or the environment variable; None when neither is set.
    Raises ValueError when the file cannot be read (the reason names the file, never its content)."""
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"admin_token_file {path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        if not token:
            raise ValueError(f"admin_token_file {path}: empty")
        return token
    token = os.environ.get(env_name or "", "").strip()
    return token or None


class Admin:
    def __init__(self, gateway: Gateway, token: str) -> None:
        self.gateway = gateway
        self.policy = gateway.policy
        self._token = token.encode()
        self.app = web.Application(middlewares=[self._auth], client_max_size=64 * 1024)
        r = self.app.router
        r.add_get("/admin/state", self.state)
        r.add_patch("/admin/classes/{name}", self.patch_class)
        r.add_patch("/admin/engines/{name}", self.patch_engine)
        r.add_post("/admin/engines/{name}/drain", self.drain)
        r.add_post("/admin/engines/{name}/undrain", self.undrain)

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        auth = request.headers.get("Authorization", "")
        given = auth[7:].strip().encode() if auth[:7].lower() == "bearer " else b""
        if not given or not hmac.compare_digest(given, self._token):
            return _error(401, "missing or wrong admin token (Authorization: Bearer <token>)", "authentication_error")
        try:
            return await handler(request)
        except web.HTTPException as e:
            return _error(e.status, e.reason, "invalid_request_error")

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response(self.policy.state(self.gateway.now()))

    @staticmethod
    async def _body(request: web.Request) -> dict:
        try:
            doc = json.loads(await request.read() or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise PolicyError("the body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise PolicyError("the body must be a JSON object")
        return doc

    @staticmethod
    def _dry(request: web.Request) -> bool:
        return request.query.get("dry_run", "") not in ("", "0", "false")

    async def patch_class(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.policy.classes:
            return _error(404, f"no class {name!r}", "not_found_error")
        try:
            changes = await self._body(request)
            if self._dry(request):
                c = self.policy.check_class_change(name, changes)
                doc = c.as_dict(self.gateway.now())
                doc.update({k: (int(v) if k == "reserved_slots" else float(v)) for k, v in changes.items()})
                return web.json_response(doc)
            c = self.policy.change_class(name, changes)
        except PolicyError as e:
            return _error(400, str(e), "invalid_request_error")
        self.gateway.pump()
        return web.json_response(c.as_dict(self.gateway.now()))

    async def _engine(self, request: web.Request, changes: dict | None) -> web.Response:
        name = request.match_info["name"]
        if name not in self.policy.engines:
            return _error(404, f"no engine {name!r}", "not_found_error")
        try:
            if changes is None:
                changes = await self._body(request)
            if self._dry(request):
                doc = self.policy.check_engine_change(name, changes).as_dict()
                doc.update(changes)
                return web.json_response(doc)
            e = self.policy.change_engine(name, changes)
        except PolicyError as exc:
            return _error(400, str(exc), "invalid_request_error")
        self.gateway.engines_changed()
        return web.json_response(e.as_dict())

    async def patch_engine(self, request: web.Request) -> web.Response:
        return await self._engine(request, None)

    async def drain(self, request: web.Request) -> web.Response:
        return await self._engine(request, {"draining": True})

    async def undrain(self, request: web.Request) -> web.Response:
        return await self._engine(request, {"draining": False})
