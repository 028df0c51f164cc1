"""Command palette providers: the action table's actions, and in ``--demo`` the incidents to inject."""

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

    def _demo_incidents(self) -> DemoIncidentCommands:
        # The app lists this provider only (ui/app.py COMMANDS); the demo's entries come through it.
        return DemoIncidentCommands(self.screen, self.match_style)

    async def discover(self) -> Hits:
        for a in self._actions():
            yield DiscoveryHit(a.title, partial(self.app.run_action, a.action), help=f"key: {a.display_keys}")
        async for hit in self._demo_incidents().discover():
            yield hit

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for a in self._actions():
            score = matcher.match(a.title)
            if score > 0:
                yield Hit(score, matcher.highlight(a.title), partial(self.app.run_action, a.action),
                          help=f"key: {a.display_keys}")
        async for hit in self._demo_incidents().search(query):
            yield hit


class DemoIncidentCommands(Provider):
    """"Inject incident: NAME" in ``--demo``: the running simulator plays that scenario on one engine
    from now (onset, ramp, hold, recovery), so the verdict it leads to can be watched. Nothing outside
    a demo: there is no simulator to switch."""

    ENGINE = 1  # the engine it acts on (vllm-1: it has peers serving the same model)

    def _demo(self):
        from ..demo import running_demo

        settings = getattr(self.app, "settings", None)
        if settings is None or settings.mode != "demo" or settings.replay is not None:
            return None
        return running_demo()

    def _entries(self):
        from ..sim.scenarios import SCENARIOS

        if self._demo() is None:
            return []
        return [(f"Inject incident: {name}", name, f"vllm-{self.ENGINE}: {s.summary} (verdict {s.verdict})")
                for name, s in SCENARIOS.items()]

    def _inject(self, name: str) -> None:
        self.app.run_worker(partial(self._inject_now, name), thread=True, exclusive=False, group="demo-inject")

    def _inject_now(self, name: str) -> None:
        """In a worker thread: the simulator answers over a pipe."""
        from rich.text import Text

        from ..demo import DemoError

        demo = self._demo()
        app = self.app
        try:
            if demo is None:
                raise DemoError("no demo simulator is running")
            answer = demo.inject(name, engine=self.ENGINE)
        except DemoError as e:
            app.call_from_thread(app.notify, f"cannot inject {name}: {e}", severity="error", markup=False)
            return
        line = Text("demo ", style="bold magenta")
        line.append(f"incident injected: {answer}")  # plain text: the simulator's words are never markup
        log_event = getattr(app, "log_event", None)  # InfertopApp's Log pane (this provider is only its)
        if log_event is not None:
            app.call_from_thread(log_event, line)

    async def discover(self) -> Hits:
        for title, name, help_text in self._entries():
            yield DiscoveryHit(title, partial(self._inject, name), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, name, help_text in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self._inject, name), help=help_text)
