"""Routing: one request's path and method to discovery documents or to the API verbs
(get, list with selectors and ``limit``/``continue`` paging, create, update, patch by
Content-Type, delete, deletecollection, subresources), authorised by the emulator's
rules; watches go to :class:`~.watch.WatchStream`."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from . import errors as E
from . import resources as R
from .api import APPLY, JSON_PATCH, MERGE, STRATEGIC
from .resources import BY_PATH, ResourceType
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .util import bool_param
from .watch import WatchStream

if TYPE_CHECKING:
    from .http_server import Handler
    from .server import KubeEmulator

PATCH_TYPES = (STRATEGIC, MERGE, JSON_PATCH, APPLY)


class PlainText(str):
    """A text/plain answer (pod logs, health checks)."""


class Dispatch:
    """Routes one request to the API layer."""

    def __init__(self, emu: "KubeEmulator", handler: Handler, method: str, path: str, query: dict,
                 ctype: str, raw: bytes):
        self.emu, self.handler, self.method, self.path = emu, handler, method, path
        self.query, self.ctype, self.raw = query, ctype, raw
        self.api = emu.api

    def body(self) -> Any:
        if not self.raw:
            raise E.bad_request("the request body is empty")
        try:
            return json.loads(self.raw)
        except ValueError as exc:
            raise E.bad_request(f"error decoding the request body: {exc}") from None

    def dry_run(self) -> bool:
        value = self.query.get("dryRun")
        if value is None or value == "":
            return False
        if value != "All":
            raise E.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
        return True

    def run(self):
        parts = [p for p in self.path.split("/") if p]
        method = self.method
        if not parts:
            return 200, {"paths": ["/api", "/api/v1", "/apis", "/version"]
                         + sorted({f"/apis/{g}/{v}" for (g, v, _), rt in BY_PATH.items()
                                   if g and R.served(rt, self.emu.installed)})}
        if parts[0] in ("healthz", "livez", "readyz") and method == "GET":
            return 200, PlainText("ok")
        if parts == ["version"]:
            self._only_get()
            return 200, R.version_info()
        if parts[0] == "api":
            if len(parts) == 1:
                self._only_get()
                return 200, R.api_versions(self.emu.address)
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                self._only_get()
                return 200, R.api_group_list(self.emu.installed)
            group = parts[1]
            if len(parts) == 2:
                self._only_get()
                doc = R.api_group(group, self.emu.installed)
                if doc is None:
                    raise E.path_not_found()
                return 200, doc
            version, rest = parts[2], parts[3:]
        else:
            raise E.path_not_found()
        if not rest:
            self._only_get()
            doc = R.api_resource_list(group, version, self.emu.installed)
            if doc is None:
                raise E.path_not_found()
            return 200, doc
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = BY_PATH.get((group, version, rest[2]))
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest:
            raise E.path_not_found()
        rt = BY_PATH.get((group, version, rest[0]))
        if rt is None or len(rest) > 3 or not R.served(rt, self.emu.installed):
            raise E.path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and rt.subresource(sub) is None:
            raise E.path_not_found()
        if name is not None and rt.namespaced and namespace is None:
            raise E.path_not_found()
        watch = watch or bool_param(self.query.get("watch"))
        return self._resource(rt, namespace, name, sub, watch)

    def _only_get(self) -> None:
        if self.method != "GET":
            raise E.method_not_allowed()

    def _verb(self, name: str | None, watch: bool) -> str:
        return {
            "GET": "watch" if watch else ("get" if name else "list"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[self.method]

    def _selectors(self, rt: ResourceType):
        try:
            return (parse_label_selector(self.query.get("labelSelector")),
                    parse_field_selector(self.query.get("fieldSelector"), rt))
        except SelectorError as exc:
            raise E.bad_request(str(exc)) from None

    def _resource(self, rt: ResourceType, namespace: str | None, name: str | None, sub: str | None,
                  watch: bool):
        api, method = self.api, self.method
        if rt.kind == "SelfSubjectAccessReview":
            if method != "POST" or name is not None:
                raise E.method_not_allowed()
            return 201, api.subresources.access_review(self.body())
        verb = self._verb(name, watch)
        if verb not in rt.verbs and not sub:
            raise E.method_not_allowed()
        self.emu._authorize(verb, rt, sub or "", namespace, name)
        if method == "GET":
            if sub == "eviction":
                raise E.method_not_allowed()
            if sub == "log":
                assert namespace is not None and name is not None  # a pod's subresource path names both (run)
                if bool_param(self.query.get("follow")):
                    self.emu._follow_log(self.handler, namespace, name, self.query)
                    return None
                return 200, PlainText(self.emu._read_log(namespace, name, self.query))
            label_pred, field_pred = self._selectors(rt)
            if watch:
                if name is not None:
                    by_name = parse_field_selector(f"metadata.name={name}", rt)
                    inner = field_pred
                    field_pred = lambda o: by_name(o) and inner(o)  # noqa: E731
                WatchStream(self.emu, self.handler, rt, namespace, label_pred, field_pred, self.query).run()
                return None
            if name is None:
                return 200, self._list(rt, namespace, label_pred, field_pred)
            return 200, api.get(rt, namespace, name, sub)
        if method == "POST":
            if name is None:
                return 201, api.create(rt, namespace, self.body(), dry_run=self.dry_run())
            if sub == "eviction":
                assert namespace is not None  # a pod's subresource path names it (run)
                return 201, api.subresources.evict(namespace, name, self.body(), dry_run=self.dry_run())
            raise E.method_not_allowed()
        if sub == "log":
            raise E.method_not_allowed()
        if method == "PUT":
            if name is None or sub == "eviction":
                raise E.method_not_allowed()
            return 200, api.update(rt, namespace, name, self.body(), subresource=sub, dry_run=self.dry_run())
        if method == "PATCH":
            if name is None or sub == "eviction":
                raise E.method_not_allowed()
            if self.ctype not in PATCH_TYPES:
                raise E.unsupported_media_type(self.ctype)
            obj, created = api.patch(rt, namespace, name, self.body(), self.ctype, subresource=sub,
                                     dry_run=self.dry_run(), field_manager=self.query.get("fieldManager"),
                                     force=bool_param(self.query.get("force")))
            return (201 if created else 200), obj
        if method == "DELETE":
            if sub:
                raise E.method_not_allowed()
            options = {}
            if self.raw:
                options = self.body()
                if not isinstance(options, dict):
                    raise E.bad_request("the body of a DELETE must be DeleteOptions")
            if "gracePeriodSeconds" in self.query:
                try:
                    options["gracePeriodSeconds"] = int(self.query["gracePeriodSeconds"])
                except ValueError:
                    raise E.bad_request("gracePeriodSeconds must be an integer") from None
            if "propagationPolicy" in self.query:
                options["propagationPolicy"] = self.query["propagationPolicy"]
            dry_run = self.dry_run() or "All" in (options.get("dryRun") or [])
            if name is None:
                label_pred, field_pred = self._selectors(rt)
                items = api.delete_collection(rt, namespace, label_pred, field_pred, options, dry_run=dry_run)
                return 200, self._list_body(rt, items, {})
            return 200, api.delete(rt, namespace, name, options, dry_run=dry_run)
        raise E.method_not_allowed()

    @staticmethod
    def _list_body(rt: ResourceType, items: list[dict], meta: dict) -> dict:
        for item in items:  # the real API leaves kind/apiVersion out of list items
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}

    def _list(self, rt: ResourceType, namespace: str | None, label_pred, field_pred) -> dict:
        with self.emu.store.lock:
            rv = str(self.emu.store.resource_version)
            items = self.api.list(rt, namespace, label_pred, field_pred)
        meta: dict = {"resourceVersion": rv}
        token = self.query.get("continue")
        if token:
            try:
                start = tuple(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
            except (ValueError, KeyError, TypeError):
                raise E.bad_request("invalid continue token") from None
            items = [i for i in items if (i["metadata"].get("namespace", ""), i["metadata"]["name"]) > start]
        limit = self.query.get("limit")
        if limit:
            try:
                n = int(limit)
            except ValueError:
                raise E.bad_request("limit must be an integer") from None
            if 0 < n < len(items):
                last = items[n - 1]["metadata"]
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                    {"rv": rv, "start": [last.get("namespace", ""), last["name"]]}).encode()).decode()
                meta["remainingItemCount"] = len(items) - n
                items = items[:n]
        return self._list_body(rt, items, meta)
