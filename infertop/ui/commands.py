"""Command palette provider fed by the action table."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .actions import visible_actions


class InfertopCommands(Provider):
    """infertop's actions in Textual's command palette (Ctrl+P)."""

    def _actions(self):
        read_only = getattr(self.app, "settings", None) and self.app.settings.read_only
        return [a for a in visible_actions(bool(read_only)) if a.action not in ("command_palette",)]

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
