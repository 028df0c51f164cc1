"""Command palette provider fed by the action table."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .actions import visible_actions


class InfertopCommands(Provider):
    """infertop's actions in Textual's command palette (Ctrl+P)."""

    def _actions(self):
        """What can run right now: the same gate as the key bindings (read-only
        mode, RBAC, whether the selection is a local engine...)."""
        app = self.app
        read_only = getattr(app, "settings", None) and app.settings.read_only
        out = []
        for a in visible_actions(bool(read_only)):
            name = a.action.split("(")[0]
            if name == "command_palette":
                continue
            try:
                allowed = app.check_action(name, ())
            except Exception:  # noqa: BLE001 — a gate that cannot decide hides nothing
                allowed = True
            if allowed:
                out.append(a)
        return out

    async def discover(self) -> Hits:
        for a in self._actions():
            yield DiscoveryHit(a.title, partial(self.app.run_action, a.action), help=f"key: {a.display_keys}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for a in self._actions():
            score = matcher.match(a.title)
            if score > 0:
                yield Hit(score, matcher.highlight(a.title), partial(self.app.run_action, a.action),
                          help=f"key: {a.display_keys}")
