"""Record → replay through the same panes; incident bundles from the TUI; the headless recorder."""

from __future__ import annotations

import lzma
import os
import sqlite3
import subprocess
import sys
import zlib

from infertop.config import Config, GpuConfig
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_types import FleetState
from infertop.state.recording.recorder import Recorder
from infertop.state.recording.replay import Player, Replay
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.widgets.engines_table import EnginesTable
from pilot_wait import until
from vllm_text import v1_doc
from overview_view import text_of, tile
from recorded_fleet import recorded_states


class Clock:
    def __init__(self) -> None:
        self.mono = 1000.0

    def __call__(self) -> float:
        return self.mono


def record(path, states) -> None:
    with Recorder(str(path)) as rec:
        for st in states:
            rec.append(st.taken_at, st.to_doc())


def cells(app) -> dict[str, list[str]]:
    t = app.query_one("#engines-table", EnginesTable)
    return {rk.value: [str(getattr(c, "plain", c)) for c in t.get_row(rk)] for rk in t.rows}


async def live_cells(state: FleetState) -> tuple[dict, str, str]:
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[]), poll=False)
    async with app.run_test(size=(140, 40)) as pilot:
        app.show_state(state)
        await pilot.pause()  # nothing to wait for: painting is synchronous, this only lets the first frame happen
        return await cells_then_overview(app, pilot)


async def cells_then_overview(app, pilot) -> tuple[dict, str, str]:
    """The Engines table (shown as a user would), then the Overview tile and the status bar."""
    await pilot.press("2")
    await until(pilot, lambda: app.current_pane == "engines"
                and set(cells(app)) == {e.name for e in app.state.engines}, "the Engines table on view, every engine in it")
    table = cells(app)
    await pilot.press("1")
    await until(pilot, lambda: app.current_pane == "overview", "the Overview on view")
    return table, tile(app, "running"), text_of(app, "#statusbar")


def replay_app(path, clock: Clock, **kw) -> InfertopApp:
    player = Player(Replay(str(path)), clock=clock, **kw)
    return InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], read_only=True,
                                mode="replay", replay=player, replay_path=str(path)), poll=False)


async def test_replay_paints_the_recorded_state_as_live_did(tmp_path):
    states = recorded_states()
    path = tmp_path / "flight.infertop"
    record(path, states)
    clock = Clock()
    app = replay_app(path, clock)
    async with app.run_test(size=(140, 40)) as pilot:
        app.player.pause()
        app.player.seek(states[25].taken_at)
        app.replay_ctl.jump()
        await until(pilot, lambda: app.state.tick == states[25].tick, 'app.state.tick == states[25].tick')
        assert app.state.tick == states[25].tick
        replayed = await cells_then_overview(app, pilot)
        # the sparkline history was rebuilt from the ticks before the position
        assert len(app.history.series("__fleet__", "running")) >= 20
        # step back and forward one tick: the state on screen follows
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: app.state.tick == states[24].tick, "one tick back")
        assert app.state.tick == states[24].tick
        await pilot.press("right_square_bracket")
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: app.state.tick == states[26].tick, "two ticks forward")
        assert app.state.tick == states[26].tick
        # nothing can be changed from a replay
        assert app.check_action("engine_new", ()) is False and app.check_action("save_bundle", ()) is False
        for live_only in ("kube_context", "kube_namespace", "refresh_now", "advisor_mode", "advisor_targets"):
            assert app.check_action(live_only, ()) is False, live_only  # K read ~/.kube/config in a replay
        assert "replay" in text_of(app, "#topbar") and "paused" in text_of(app, "#topbar")
    live = await live_cells(FleetState.from_doc(states[25].to_doc()))
    assert replayed[0] == live[0]  # same rows, same cells, including beta's stale "down" row
    assert replayed[1] == live[1] and replayed[2] == live[2]
    assert replayed[0]["beta"][1].startswith("down") and replayed[0]["beta"][2] == live[0]["beta"][2]


async def test_replay_plays_on_at_its_speed(tmp_path):
    states = recorded_states(10)
    path = tmp_path / "flight.infertop"
    record(path, states)
    clock = Clock()
    app = replay_app(path, clock, speed=2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        app.replay_ctl.tick()
        first = app.state.tick
        clock.mono += 2.0  # two seconds at 2x: four recorded ticks later
        app.replay_ctl.tick()
        await until(pilot, lambda: app.state.tick == first + 4, 'app.state.tick == first + 4')
        assert app.state.tick == first + 4


def test_replay_snapshot(snap_compare, tmp_path):
    states = recorded_states()
    path = tmp_path / "incident.infertop"
    record(path, states)
    clock = Clock()
    app = replay_app(path, clock)

    async def run_before(pilot):
        app.player.pause()
        app.player.seek(states[22].taken_at)
        app.replay_ctl.jump()
        await pilot.press("2")
        await pilot.pause()  # nothing to wait for: the snapshot compares the frame

    assert snap_compare(app, terminal_size=(110, 24), run_before=run_before)


async def test_incident_bundle_from_the_tui_holds_no_secret_and_replays(tmp_path, scripted):
    secret_token, secret_env = "kube-Sup3rSecretT0ken", "hf_SECRETvalue123"
    config = tmp_path / "config.yaml"
    config.write_text(
        "gpu:\n  nvml: false\n"
        "profiles:\n  tiny:\n    python: /usr/bin/python3\n    model: /models/tiny\n    port: 8011\n"
        f"    env: {{HF_TOKEN: \"{secret_env}\"}}\n"
        f"prometheus:\n  url: http://admin:{secret_token}@127.0.0.1:9090\n")
    from infertop.config import load_config

    cfg = load_config(str(config))
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 2}}))
    state_dir = tmp_path / "state"
    app = InfertopApp(Settings(config=cfg, endpoints=[EngineEndpoint("one", srv.url, timeout_s=10)],
                               state_dir=str(state_dir)), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3):
            await app.poll_now()
        app.log_event(f"operator note mentioning {secret_env}")
        await pilot.press("B")
        await app.workers.wait_for_complete()
        await until(pilot, lambda: any("incident bundle saved" in str(line) for line in app.log_lines),
                    "the bundle saved, said in the log")
    [bundle] = [p for p in os.listdir(state_dir) if p.startswith("incident-")]
    path = state_dir / bundle
    blob = path.read_bytes()
    conn = sqlite3.connect(path)
    for codec, data in conn.execute("SELECT codec, data FROM blocks"):
        blob += lzma.decompress(data) if codec == "lzma" else zlib.decompress(data)
    conn.close()
    assert secret_token.encode() not in blob and secret_env.encode() not in blob
    with Replay(str(path)) as rp:
        assert rp.count() == 3
        st = FleetState.from_doc(rp.at(rp.span()[1])[1])
        assert st.engine("one").stats.running == 2
    from infertop.state.recording.bundle import read_bundle_extras

    extras = read_bundle_extras(str(path))
    assert any("operator note mentioning" in line for line in extras.log_lines)
    assert "/models/tiny" in extras.config_text


def test_headless_record_then_replay_file(tmp_path, scripted):
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 4, "waiting": 1}}))
    config = tmp_path / "c.yaml"
    config.write_text("gpu:\n  nvml: false\nrefresh_s: 0.2\nwindow_s: 10\n")
    path = tmp_path / "rec.infertop"
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "infertop", "--config", str(config), "record", str(path),
                        "--engine", srv.url, "--duration", "2s"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "ticks appended" in r.stderr
    with Replay(str(path)) as rp:
        assert rp.count() >= 3
        st = FleetState.from_doc(rp.at(rp.span()[1])[1])
    assert [e.stats.running for e in st.engines] == [4.0] and st.refresh_s == 0.2
    # replay refuses what is not a recording, in one line
    bad = tmp_path / "not-a-recording"
    bad.write_text("hello")
    r = subprocess.run([sys.executable, "-m", "infertop", "replay", str(bad)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


async def test_headless_record_holds_the_cluster_and_the_advisor_and_marks_a_dead_api_stale(
        tmp_path, scripted, kube_emulator):
    """`infertop record` with Kubernetes configured records the cluster and the advisor's decisions in
    each tick, as the TUI shows them; with the API server gone, the last objects stay, stale, with the error."""
    import asyncio

    from infertop.config import load_config
    from infertop.flight_cli import record_loop

    emu = kube_emulator("t0ken")
    emu.add_deployment("default", "vllm", replicas=1)
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig", context="lab")
    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 4, "waiting": 1}}))
    config = tmp_path / "c.yaml"
    config.write_text(f"gpu:\n  nvml: false\nrefresh_s: 0.2\nwindow_s: 10\n"
                      f"kube:\n  kubeconfig: {kubeconfig}\n  context: lab\n  refresh_s: 0.2\n"
                      "advisor:\n  workloads: [vllm]\n")
    cfg = load_config(str(config))
    path = str(tmp_path / "rec.infertop")

    stop, seen = asyncio.Event(), {}

    def on_tick(state: FleetState) -> None:
        c = state.cluster
        if "live" not in seen:
            if c is not None and c.snapshot is not None and c.snapshot.workloads and state.autoscalers:
                seen["live"] = state
                emu.stop()  # the API server dies mid-recording
        elif c is not None and c.freshness.status != "fresh":
            seen["dead"] = state
            stop.set()

    await asyncio.wait_for(record_loop([EngineEndpoint("one", srv.url)], cfg, path, retention_s=3600,
                                       duration_s=None, stop=stop, on_tick=on_tick), timeout=60)
    live, dead = seen["live"], seen["dead"]
    assert live.cluster.freshness.status == "fresh"
    assert [w.name for w in dead.cluster.snapshot.workloads] == ["vllm"]  # the last objects, kept
    assert dead.cluster.freshness.reason  # and why they are stale
    with Replay(path) as rp:
        replayed = FleetState.from_doc(rp.at(rp.span()[1])[1])
    assert [w.name for w in replayed.cluster.snapshot.workloads] == ["vllm"]
    assert replayed.cluster.freshness.status != "fresh"
    advice = [d for d in replayed.autoscalers if d.get("workload") == "Deployment/default/vllm"]
    assert advice and advice[0]["mode"] in ("recommend", "off") and advice[0]["latest"] is not None


async def test_replayed_log_lines_carry_the_recorded_time_not_todays(tmp_path):
    import time as _time

    states = recorded_states()
    path = tmp_path / "flight.infertop"
    record(path, states)
    app = replay_app(path, Clock())
    async with app.run_test(size=(120, 40)) as pilot:
        app.player.pause()
        app.player.seek(states[21].taken_at)
        app.replay_ctl.jump()
        await until(pilot, lambda: [line for line in app.log_lines if "beta" in line and "→ down" in line],
                    "beta going down in the log")
        down = [line for line in app.log_lines if "beta" in line and "→ down" in line]
        assert down, list(app.log_lines)
        stamp = _time.strftime("%H:%M:%S", _time.localtime(states[20].taken_at))  # when it went down
        assert down[-1].startswith(stamp), (down, stamp)


async def test_after_a_seek_the_log_holds_what_happened_before_the_new_position(tmp_path):
    """A seek past an engine going down shows that Log line at the time it happened (the jump skipped
    the tick); a seek back before it takes it away again: the Log is the one of the new position."""
    import time as _time

    states = recorded_states()
    path = tmp_path / "flight.infertop"
    record(path, states)
    app = replay_app(path, Clock())
    async with app.run_test(size=(120, 40)) as pilot:
        app.player.pause()
        app.player.seek(states[28].taken_at)
        app.replay_ctl.jump()
        await until(pilot, lambda: [line for line in app.log_lines if "beta up → down" in line], "beta going down in the log")
        down = [line for line in app.log_lines if "beta up → down" in line]
        assert len(down) == 1, list(app.log_lines)
        assert down[0].startswith(_time.strftime("%H:%M:%S", _time.localtime(states[20].taken_at)))
        app.player.seek(states[10].taken_at)
        app.replay_ctl.jump()
        await until(pilot, lambda: not [line for line in app.log_lines if "→ down" in line], "the down line gone from the log")
        assert not [line for line in app.log_lines if "→ down" in line], list(app.log_lines)
        app.player.seek(states[25].taken_at)
        app.replay_ctl.jump()
        await until(pilot, lambda: len([line for line in app.log_lines if "beta up → down" in line]) == 1, 'len([line for line in app.log_lines if "beta up → down" i…')
        assert len([line for line in app.log_lines if "beta up → down" in line]) == 1


async def test_the_end_of_a_recording_is_said_once_in_the_log_and_the_header(tmp_path):
    states = recorded_states(10)
    path = tmp_path / "flight.infertop"
    record(path, states)
    clock = Clock()
    app = replay_app(path, clock, speed=4.0)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(6):
            app.replay_ctl.tick()
            clock.mono += 2.0  # 8 recorded seconds a step: past the end
        await until(pilot, lambda: app.state.tick == states[-1].tick and "end of recording" in text_of(app, "#topbar"),
                    "the last tick, the end said in the header")
        assert app.state.tick == states[-1].tick
        assert [line for line in app.log_lines if "end of recording" in line] != []
        assert len([line for line in app.log_lines if "end of recording" in line]) == 1
        assert "end of recording" in text_of(app, "#topbar")


async def test_a_critical_verdict_saves_an_incident_bundle_by_itself_once(tmp_path, scripted):
    """An engine that served for a while hangs (answers, counts no token while requests run): the hung
    verdict saves an incident bundle by itself (mode 0600, named incident-auto-…, said in the Log); a
    second critical verdict soon after saves none (one per 10 minutes)."""
    made = {"one": 0, "two": 0}
    hung: set[str] = set()

    def serving(name: str, running: int):
        def doc() -> str:  # tokens counted while it serves; frozen once it hangs
            made[name] += 0 if name in hung else 100
            return v1_doc(engines={"0": {"running": running, "gen": made[name]}})
        return doc

    srv = scripted().serve_engine(serving("one", 2))
    other = scripted().serve_engine(serving("two", 1))
    wall = [1_800_000_000.0]
    state_dir = tmp_path / "state"
    app = InfertopApp(Settings(config=Config(), endpoints=[EngineEndpoint("one", srv.url, timeout_s=5),
                                                           EngineEndpoint("two", other.url, timeout_s=5)],
                               state_dir=str(state_dir), wall_clock=lambda: wall[0]), poll=False)

    async def ticks(n: int) -> None:
        for _ in range(n):
            wall[0] += 1.0
            await app.poll_now()
        await app.workers.wait_for_complete()

    async with app.run_test(size=(120, 40)) as pilot:
        await ticks(35)
        assert not list(state_dir.glob("incident-*"))
        hung.add("one")
        await ticks(20)
        await until(pilot, lambda: len((list(state_dir.glob("incident-auto-*.infertop")))) == 1, 'len((list(state_dir.glob("incident-auto-*.infertop")))) == 1')
        bundles = list(state_dir.glob("incident-auto-*.infertop"))
        assert len(bundles) == 1, ([v.kind for v in app.verdicts], list(app.log_lines)[-6:])
        [bundle] = bundles
        assert (bundle.stat().st_mode & 0o777) == 0o600
        assert any("incident bundle saved (verdict hung one)" in line for line in app.log_lines)
        hung.add("two")
        await ticks(20)
        assert [v.kind for v in app.verdicts if v.subject == "two"] == ["hung"]
        assert len(list(state_dir.glob("incident-*"))) == 1  # the next one waits 10 minutes
