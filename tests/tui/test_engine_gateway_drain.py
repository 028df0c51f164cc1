"""Engine actions drain at the infertop gateway in front of the engine (real `infertop gateway`, fake engines).

The fake engine answers HTTP 500 to requests that arrive after SIGTERM, like
vLLM 0.32. Without a gateway, a change of ``max_num_seqs`` under load loses
such requests; with ``infertop gateway`` in front, the engine is drained
there first (requests wait in the gateway's queue), signalled once its
in-flight there is 0, restarted, and undrained once healthy — no request
fails. A failure or an abort at any step undrains it; each step is audited.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from engine_env import FAKE, Env, alive, wait_until
from gateway_child import TOKEN, Gateway, fake_profile

from infertop.config import load_config
from infertop.control.engines import cli as engine_cli
from infertop.control.engines import EngineAborted, SetArgsError
from infertop.control.gateway.drain import GatewayDrain, find_gateway, gateway_refs


@pytest.fixture(autouse=True)
def admin_token(monkeypatch):
    """The gateway's admin token, where both the gateway and infertop read it (admin_token_env)."""
    monkeypatch.setenv("INFERTOP_GATEWAY_TOKEN", TOKEN)


@pytest.fixture
def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    e.cleanup()


class Load:
    """``clients`` threads sending streamed completions to ``url`` back to back; every request's fate is kept:
    ok, http_5xx, http_other, cut (a 200 whose stream ended without [DONE]) or refused (no connection)."""

    def __init__(self, url: str, clients: int = 8, max_tokens: int = 20) -> None:
        self.url, self.max_tokens = url, max_tokens
        self.results: list[tuple[str, float, float, str]] = []  # (kind, sent, ended (monotonic), detail)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]
        for t in self._threads:
            t.start()

    def _client(self) -> None:
        body = {"model": "fake", "prompt": "hi", "max_tokens": self.max_tokens, "stream": True}
        with httpx.Client(base_url=self.url, timeout=httpx.Timeout(120, connect=5), trust_env=False) as c:
            while not self._stop.is_set():
                sent = time.monotonic()
                kind, detail = self._one(c, body)
                with self._lock:
                    self.results.append((kind, sent, time.monotonic(), detail))
                if kind != "ok":
                    self._stop.wait(0.05)

    @staticmethod
    def _one(c: httpx.Client, body: dict) -> tuple[str, str]:
        started = False
        try:
            with c.stream("POST", "/v1/completions", json=body) as r:
                started = True
                if r.status_code != 200:
                    kind = "http_5xx" if r.status_code >= 500 else "http_other"
                    return kind, f"{r.status_code} {r.read()[:200]!r}"
                done = any(line == "data: [DONE]" for line in r.iter_lines())
                return ("ok", "") if done else ("cut", "no [DONE]")
        except httpx.HTTPError as e:
            return ("cut" if started else "refused"), type(e).__name__

    def tally(self, since: float = 0.0, until: float = float("inf")) -> Counter:
        """Fates of the requests sent in [since, until)."""
        with self._lock:
            return Counter(k for k, t, _, _ in self.results if since <= t < until)

    def spanning(self, before: float, after: float) -> Counter:
        """Fates of the requests sent before ``before`` that ended after ``after``."""
        with self._lock:
            return Counter(k for k, t, e, _ in self.results if t < before and e > after)

    def details(self, kind: str) -> list[str]:
        with self._lock:
            return [d for k, _, _, d in self.results if k == kind]

    def stop(self) -> Counter:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        return self.tally()


def start_load(url: str, **kw) -> Load:
    return Load(url, **kw)


def audit_steps(env: Env) -> list[tuple[str, str, str]]:
    from infertop.control.audit import AuditLog

    return [(e["action"], e.get("phase", "record"), e.get("result", "")) for e in AuditLog(env.audit_path).entries()]


# ----------------------------------------------------------------- with a gateway


def test_set_under_load_through_the_gateway_fails_no_request_and_each_step_is_audited(env, tmp_path):
    profile = fake_profile(env)
    gw = Gateway(tmp_path, [{"name": "e", "url": "e"}], {"e": profile})  # cap: the profile's max_num_seqs (4)
    load = None
    try:
        mgr = env.manager()
        rec = mgr.start("e", env.profiles["e"])
        assert wait_until(lambda: gw.engine("e")["up"], timeout=60)
        assert gw.engine("e")["cap"] == 4
        cfg = load_config(gw.config)
        drain, warnings = find_gateway(cfg, "e", rec.url)
        assert drain is not None and drain.engine == "e" and warnings == []
        assert TOKEN not in repr(drain) and TOKEN not in repr(drain.ref)

        load = start_load(gw.url, clients=8)
        assert wait_until(lambda: load.tally().get("ok", 0) >= 8, timeout=60), load.tally()
        events, at = [], {}

        def progress(ev) -> None:
            events.append(ev)
            if ev.phase in ("spawned", "healthy"):
                at.setdefault(ev.phase, time.monotonic())  # the old engine is gone / the new one is up

        res = mgr.set_args("e", {"max_num_seqs": 8}, progress, gateway=drain)
        t1 = time.monotonic()
        assert wait_until(lambda: load.tally(t1).get("ok", 0) >= 8, timeout=60), load.tally(t1)
        total = load.stop()
        assert set(total) == {"ok"}, (total, load.details("http_5xx")[:3], load.details("cut")[:3])
        # requests sent before the new engine was spawned that ended after it was healthy waited in the
        # gateway's queue through the restart (nothing else could serve them) and succeeded
        waited = load.spanning(at["spawned"], at["healthy"])
        load = None
        assert res.changed and res.verified == {"max_num_seqs": "8"}
        assert res.stop.gateway.startswith(f"drained at {drain.label} first") and "undrained" in res.stop.gateway
        assert "its cap there 4 → 8" in res.stop.gateway
        assert res.stop.in_flight_before == 0  # the gateway had drained the engine before SIGTERM
        draining = [e for e in events if e.phase == "draining" and "in flight there" in e.message]
        assert all(e.countdown_s is not None for e in draining)
        state = gw.engine("e")
        assert (state["draining"], state["cap"], state["up"]) == (False, 8, True)
        steps = [s for s in audit_steps(env) if s[0] != "engine.start"]
        assert steps == [("gateway.drain", "intent", ""), ("gateway.drain", "outcome", "ok"),
                         ("engine.set", "intent", ""),
                         ("gateway.cap", "intent", ""), ("gateway.cap", "outcome", "ok"),
                         ("gateway.undrain", "intent", ""), ("gateway.undrain", "outcome", "ok"),
                         ("engine.set", "outcome", "ok")], steps
        assert TOKEN not in env.audit_path.read_text()
        assert waited.get("ok", 0) > 0 and set(waited) == {"ok"}, waited
    finally:
        if load is not None:
            load.stop()
        gw.stop()


def test_without_a_gateway_requests_during_the_drain_get_500(env, tmp_path):
    """The bare-host case the confirmation warns about (the fake answers like vLLM 0.32)."""
    env.profile(name="e", token_s=0.02, drain_s=1.5)
    mgr = env.manager()
    rec = mgr.start("e", env.profiles["e"])
    load = start_load(rec.url, clients=8)
    try:
        assert wait_until(lambda: load.tally().get("ok", 0) >= 8, timeout=60)
        mgr.set_args("e", {"max_num_seqs": 8})
    finally:
        total = load.stop()
    assert total.get("http_5xx", 0) > 0, total
    details = load.details("http_5xx")
    assert all("cannot schedule new futures after shutdown" in d for d in details), details[:3]
    mgr.stop("e")


def test_a_failed_change_undrains_and_an_abort_at_the_gateway_signals_nothing(env, tmp_path):
    profile = fake_profile(env, oom_above=4)
    gw = Gateway(tmp_path, [{"name": "e", "url": "e", "cap": 16}], {"e": profile})
    try:
        mgr = env.manager()
        rec = mgr.start("e", env.profiles["e"])
        cfg = load_config(gw.config)
        drain, _ = find_gateway(cfg, "e", rec.url)
        assert drain is not None
        # 1. a change whose engine cannot start (and no rollback): the gateway takes the engine back anyway
        with pytest.raises(SetArgsError) as ei:
            mgr.set_args("e", {"max_num_seqs": 8}, rollback=False, gateway=drain)
        assert f"undrained at {drain.label}" in ei.value.reason, ei.value.reason
        assert gw.engine("e")["draining"] is False
        assert [s for s in audit_steps(env) if s[0] == "gateway.undrain"] == [
            ("gateway.undrain", "intent", ""), ("gateway.undrain", "outcome", "ok")]
        # 2. long requests in flight at the gateway; abort while it drains: nothing is signalled
        rec = mgr.start("e", env.profiles["e"])
        assert wait_until(lambda: gw.engine("e")["up"], timeout=60)
        load = start_load(gw.url, clients=3, max_tokens=200)  # 4 s each
        try:
            assert wait_until(lambda: gw.engine("e")["in_flight"] >= 3, timeout=60)
            abort = threading.Event()

            def progress(ev) -> None:
                if "in flight there" in ev.message:
                    abort.set()

            with pytest.raises(EngineAborted) as ei:
                mgr.restart("e", progress=progress, abort=abort, gateway=drain)
        finally:
            load.stop()
        msg = ei.value.reason
        assert "aborted while draining at" in msg and "nothing was signalled" in msg, msg
        assert f"undrained at {drain.label}" in msg
        assert alive(rec.pid) and mgr.status("e").pid == rec.pid
        assert gw.engine("e")["draining"] is False
        assert [(a["action"], a["result"]) for a in env.audit()][-2:] == [("gateway.undrain", "ok"),
                                                                           ("engine.restart", "aborted")]
        mgr.stop("e")
    finally:
        gw.stop()


def test_cli_set_drains_at_the_gateway_and_says_so(env, tmp_path, capsys):
    profile = fake_profile(env)
    gw = Gateway(tmp_path, [{"name": "front", "url": f"http://localhost:{profile['port']}", "cap": 16}],
                 {"e": profile})
    try:
        base = ["--config", str(gw.config), "--state-dir", str(env.state_dir), "--module", FAKE]
        assert engine_cli.main(["start", *base, "e"]) == 0
        capsys.readouterr()
        assert engine_cli.main(["set", *base, "e", "max_num_seqs=8"]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        # the gateway names it "front", at localhost: found by its URL
        assert f"e: drained at gateway 127.0.0.1:{gw.port} first (engine 'front' there)" in out, out
        assert "e: gateway: drained at" in out and "undrained" in out
        assert "no infertop gateway" not in out and TOKEN not in out
        assert gw.engine("front")["draining"] is False
        assert engine_cli.main(["stop", *base, "e"]) == 0
        out = capsys.readouterr().out
        assert "drained at gateway" in out and "undrained" in out
    finally:
        gw.stop()


def test_cli_without_a_gateway_notes_the_500s_and_how_to_avoid_them(env, capsys):
    env.profile(name="e")
    cfg = env.tmp / "plain.yaml"
    cfg.write_text(json.dumps({"audit_log": str(env.audit_path), "profiles": {"e": {
        "model": "fake-model", "port": env.profiles["e"].port, "python": sys.executable}}}))
    base = ["--config", str(cfg), "--state-dir", str(env.state_dir), "--module", FAKE]
    assert engine_cli.main(["start", *base, "e"]) == 0
    capsys.readouterr()
    assert engine_cli.main(["restart", *base, "e"]) == 0
    out = capsys.readouterr().out
    assert "note: no infertop gateway in front of e: requests arriving while vLLM drains get HTTP 500" in out
    assert "run `infertop gateway` in front of it" in out
    assert engine_cli.main(["stop", *base, "e"]) == 0


def test_which_gateway_fronts_an_engine():
    gw = SimpleNamespace(listen="127.0.0.1:8100", admin_listen="127.0.0.1:1", admin_token_env="NOPE_UNSET",
                         admin_token_file=None, engines=[SimpleNamespace(name="", url="tiny")])
    cfg = SimpleNamespace(gateway=gw, queues={"gateways": [{"url": "http://10.0.0.5:8100",
                                                            "admin_url": "http://127.0.0.1:2", "token_env": "X"},
                                                           {"url": "http://10.0.0.6:8100"}]})
    refs = gateway_refs(cfg)
    assert [(r.admin_url, r.label, r.engines) for r in refs] == [
        ("http://127.0.0.1:1", "gateway 127.0.0.1:8100", (("tiny", "tiny"),)),
        ("http://127.0.0.1:2", "gateway 10.0.0.5:8100", ())]  # no admin_url: nothing to drain with
    # a gateway section without engines runs no gateway: nothing to ask
    assert gateway_refs(SimpleNamespace(gateway=SimpleNamespace(admin_listen="127.0.0.1:8101", engines=[]))) == []
    # nobody answers: the one the config says fronts "tiny" is named in a warning, the other is skipped
    drain, warnings = find_gateway(cfg, "tiny", "http://127.0.0.1:9", timeout_s=0.5)
    assert drain is None and len(warnings) == 1
    assert warnings[0].startswith("gateway 127.0.0.1:8100: admin API unreachable") and "cannot be drained" in warnings[0]
    assert isinstance(GatewayDrain(refs[0], "tiny"), GatewayDrain)


async def test_tui_change_drains_at_the_gateway_and_says_so(env, tmp_path):
    from pilot_wait import until

    from textual.widgets import Input

    from infertop.ui.app import InfertopApp, Settings
    from infertop.ui.screens.confirm import ConfirmScreen
    from infertop.ui.screens.engine_dialogs import ArgsDialog

    profile = fake_profile(env)
    gw = Gateway(tmp_path, [{"name": "e", "url": "e", "cap": 16}], {"e": profile})
    try:
        cfg = load_config(gw.config)
        rec = env.manager().start("e", env.profiles["e"])
        s = Settings(config=cfg, endpoints=[], state_dir=str(env.state_dir), engine_module=FAKE)
        app = InfertopApp(s, poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.engine_manager is not None and app.managed("e") is not None,
                        what="re-adopted")
            await app.workers.wait_for_complete()
            await pilot.press("2")
            await app.poll_now()
            await until(pilot, lambda: app.selected_engine_name() == "e", what="engine e selected on the Engines pane")
            await pilot.press("m")
            # the keys go to the dialog's input only once it has the focus
            await until(pilot, lambda: isinstance(app.screen, ArgsDialog) and isinstance(app.focused, Input),
                        what="the args dialog with its input focused")
            await pilot.press("end", "backspace", "8", "enter")
            screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                                 and app.screen, what="check")
            notes = "\n".join(screen.notes)
            assert f"drain at gateway 127.0.0.1:{gw.port} first" in notes and "undrain" in notes, notes
            assert "no infertop gateway" not in notes
            await pilot.press("y")
            await until(pilot, lambda: screen.state == "done", what=screen.progress_text)
            assert screen.result == "ok", screen.result_text
            assert f"undrained at gateway 127.0.0.1:{gw.port}" in screen.result_text
            assert gw.engine("e")["draining"] is False
            assert app.managed("e").pid != rec.pid
            app.engine_manager.stop("e")
    finally:
        gw.stop()


async def test_the_next_start_offers_to_undrain_an_engine_left_drained(env, tmp_path):
    """infertop ended mid-restart with the engine drained at its gateway: the next start opens the undrain
    (reviewed, y, audited) — before, it only said so in the Log and requests waited until undrained by hand."""
    from pilot_wait import until

    from infertop.control.audit import AuditLog
    from infertop.control.gateway.drain import STEP_DRAIN_WHY, GatewayDrain, gateway_refs
    from infertop.ui.app import InfertopApp, Settings
    from infertop.ui.screens.confirm import ConfirmScreen

    profile = fake_profile(env)
    gw = Gateway(tmp_path, [{"name": "e", "url": "e", "cap": 16}], {"e": profile})
    try:
        cfg = load_config(gw.config)
        [ref] = gateway_refs(cfg)
        GatewayDrain(ref, "e").drain()
        target = f"engine e at {ref.label}"
        log = AuditLog(env.audit_path)
        op = log.intent("gateway.drain", target, engine="e", why=STEP_DRAIN_WHY)
        log.outcome(op, "gateway.drain", target, "ok")
        lines = log.path.read_text().splitlines()  # as an infertop that is gone wrote them
        log.path.write_text("".join(line.replace(f'"pid": {os.getpid()}', '"pid": 999999999') + "\n" for line in lines))
        assert gw.engine("e")["draining"] is True
        app = InfertopApp(Settings(config=cfg, endpoints=[], state_dir=str(env.state_dir), engine_module=FAKE),
                          poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.dry_run_ok
                                 and app.screen, what="the undrain offered")
            assert screen.change == f"undrain e at {ref.label}"
            await pilot.press("y")
            await until(pilot, lambda: screen.state == "done", what=screen.progress_text)
            assert screen.result == "ok", screen.result_text
        assert gw.engine("e")["draining"] is False
        outcome = [e for e in AuditLog(env.audit_path).entries() if e.get("phase") == "outcome"][-1]
        assert (outcome["action"], outcome["result"], outcome["target"]) == ("gateway.undrain", "ok", target)
    finally:
        gw.stop()
