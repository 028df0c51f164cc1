"""The TUI's cheap paths show what the full paths showed: cell-diffed output gives
the same screen, sparklines bucketed on absolute sample index, a pane painted
only while on view, lines that repaint without layout, observe per poll."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import random
import select
import struct
import sys
import termios
import time
from pathlib import Path

import pyte
import pytest
from locations import REPO, SUPPORT
from rich.text import Text
from textual.app import App
from textual.geometry import Region
from vllm_text import perturb
from textual.widgets import TabbedContent

from infertop.config import Config, GpuConfig
from infertop.domain.engine import EngineStats
from infertop.domain.source import SourceHealth
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_join import FleetJoiner
from infertop.ui import fastpaint
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.fastpaint.driver import CellDiff
from infertop.ui.fastpaint.lean import LeanTable
from infertop.ui.widgets.panels import QuietStatic, Trend, bars
from overview_view import tile
from pilot_wait import until



# ----- cell-diffed output ------------------------------------------------------------
def screen_cells(screen: pyte.Screen) -> list[list[tuple]]:
    return [[(c.data, c.fg, c.bg, c.bold, c.italics, c.underscore, c.reverse, c.strikethrough)
             for c in (screen.buffer[y][x] for x in range(screen.columns))] for y in range(screen.lines)]


def test_cell_diff_sends_only_the_changed_cells():
    diff = CellDiff(20, 3)
    first = diff.frame("\x1b[1;1H\x1b[1mTTFT 116ms\x1b[0m\x1b[2;1Hsteady line")
    assert "TTFT 116ms" in first and "steady line" in first
    again = diff.frame("\x1b[1;1H\x1b[1mTTFT 117ms\x1b[0m\x1b[2;1Hsteady line")
    assert "7" in again and "116" not in again and "steady" not in again  # one cell, not two lines
    # nothing changed: only the cursor goes where the app left it
    assert diff.frame("\x1b[1;1H\x1b[1mTTFT 117ms\x1b[0m") == "\x1b[1;11H"
    # a style change alone is a change
    restyled = diff.frame("\x1b[2;1H\x1b[31msteady line\x1b[0m")
    assert "steady line" in restyled and "31" in restyled
    # an erase makes the model forget: the next frame is sent whole
    diff.frame("\x1b[2J")
    assert "TTFT 117ms" in diff.frame("\x1b[1;1H\x1b[1mTTFT 117ms\x1b[0m")


def assert_sent_paints_as_written(frames, cols: int, rows: int) -> None:
    """After every frame a terminal fed only what the diff sent shows what a terminal fed the app's own
    writes shows."""
    raw, sent = pyte.Screen(cols, rows), pyte.Screen(cols, rows)
    raw_stream, sent_stream = pyte.Stream(raw), pyte.Stream(sent)
    diff = CellDiff(cols, rows)
    for frame_no, frame in enumerate(frames):
        raw_stream.feed(frame)
        sent_stream.feed(diff.frame(frame))
        assert screen_cells(sent) == screen_cells(raw), f"frame {frame_no}"


def test_random_partial_frames_through_the_cell_diff_paint_what_they_paint_raw():
    # Spans written anywhere, overlapping, restyled, some unchanged.
    rng = random.Random(11)
    cols, rows = 40, 8
    styles = ["", "1", "31", "1;32", "7", "38;2;10;200;30;48;2;0;0;40"]

    def frame() -> str:
        parts = []
        for _ in range(rng.randint(1, 6)):
            r, c = rng.randrange(rows), rng.randrange(cols)
            text = "".join(rng.choice("0123456789 abcms.%") for _ in range(rng.randint(1, cols - c)))
            parts.append(f"\x1b[{r + 1};{c + 1}H\x1b[0;{rng.choice(styles)}m{text}\x1b[0m")
        return "".join(parts)

    assert_sent_paints_as_written((frame() for _ in range(300)), cols, rows)


def test_random_frames_of_bars_box_lines_and_marks_paint_what_they_paint_raw():
    # As above, with the one-cell characters of sparklines, box lines and marks (written to the model by
    # slices once known to take one cell), styles changing inside a line.
    rng = random.Random(12)
    cols, rows = 30, 6
    alphabet = "0123456789 ab.%" + "▁▂▃▄▅▆▇█▕━─—≤✓●…"
    styles = ["", "1", "31", "2;33", "38;2;10;200;30"]

    def frame() -> str:
        parts = []
        for _ in range(rng.randint(1, 6)):
            r, c = rng.randrange(rows), rng.randrange(cols - 2)
            parts.append(f"\x1b[{r + 1};{c + 1}H")
            width = 0
            for _ in range(rng.randint(1, 3)):  # a few segments, each its own style
                text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
                if c + width + len(text) > cols:
                    break
                width += len(text)
                parts.append(f"\x1b[{rng.choice(styles)}m{text}\x1b[0m")
        return "".join(parts)

    assert_sent_paints_as_written((frame() for _ in range(400)), cols, rows)


def run_child_in_pty(out: Path, state_dir: Path, deadline_s: float = 120.0) -> int:
    """tests/support/driver_child.py in a 120x40 pseudo-terminal; its output is drained here."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of 120x40, then the TUI
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            os.execv(sys.executable, [sys.executable, str(SUPPORT / "driver_child.py"), str(out),
                                      str(state_dir)])
        finally:
            os._exit(127)
    end = time.monotonic() + deadline_s
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    if not os.read(fd, 65536):
                        break
                except OSError:  # the child closed the terminal
                    break
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
        else:
            os.kill(pid, 9)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(fd)


def test_cell_diffed_stream_paints_the_same_screen_as_the_app_wrote(tmp_path, monkeypatch):
    # The TUI runs in a real terminal with the driver; every write is kept twice, as
    # the app wrote it and as it was sent. Replayed through a terminal emulator, both
    # give the same screen (characters and attributes) after every write: through
    # ticks, pane switches, the help screen opening and closing and a resize.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(SUPPORT)]))
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLORTERM", "truecolor")
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    out = tmp_path / "frames.json"
    assert run_child_in_pty(out, tmp_path / "state") == 0
    frames = json.loads(out.read_text())
    assert len(frames) > 50
    assert {(c, r) for _, _, c, r in frames} == {(120, 40), (100, 30)}  # the resize happened
    written_screen, sent_screen = pyte.Screen(120, 40), pyte.Screen(120, 40)
    written_stream, sent_stream = pyte.Stream(written_screen), pyte.Stream(sent_screen)
    for i, (written, sent, cols, rows) in enumerate(frames):
        if (written_screen.columns, written_screen.lines) != (cols, rows):
            written_screen.resize(rows, cols)
            sent_screen.resize(rows, cols)
        written_stream.feed(written)
        sent_stream.feed(sent)
        assert screen_cells(sent_screen) == screen_cells(written_screen), f"write {i} differs"
    assert "β-engine" in "\n".join(written_screen.display)  # the run ended on the Engines pane
    later = frames[len(frames) // 2:]  # ticks after the first paint: only changed cells go out
    assert sum(len(s) for _, s, _, _ in later) < 0.7 * sum(len(w) for w, _, _, _ in later)


# ----- sparklines ----------------------------------------------------------------------
def test_buckets_keep_their_points_while_the_series_scrolls():
    series = [float((i * 37) % 23) for i in range(400)]
    width, height, span = 22, 2, 120
    k = -(-span // width)
    shots = [bars(series[s:s + span], width, height, 23.0, first=s) for s in range(k * 3)]
    for s in range(1, len(shots)):
        before, after = shots[s - 1], shots[s]
        if (s + span - 1) % k == 0:
            continue  # the newest point starts a bucket: the bars move one column left
        changed = {c for r in range(height) for c in range(width) if before[r][c] != after[r][c]}
        assert changed <= {width - 1}, (s, changed)  # only the newest bar
    # each bar is the largest value of its k points, counted from the absolute index
    full = bars(series[6:6 + span], width, 1, 23.0, first=6)[0]
    top = bars([max(series[i:i + k]) for i in range(6, 6 + span, k)][-width:], width, 1, 23.0)[0]
    assert full == top


class TrendApp(App):
    def compose(self):
        yield Trend("Running", id="t")


async def test_a_scrolling_trend_repaints_only_its_newest_columns():
    app = TrendApp()
    series = [float((i * 37) % 23) + 1 for i in range(200)]
    async with app.run_test(size=(40, 6)) as pilot:
        trend = app.query_one(Trend)
        trend.show(series[:120], "5")
        trend.show(series[1:121], "5")  # the newest point starts a bucket
        await until(pilot, lambda: not trend._repaint_regions, "the first series painted")
        painted = trend.bar_rows()
        x0 = trend.content_offset.x  # repaint regions are in the widget's cells, its padding included
        right = x0 + trend.size.width
        # the next tick inside a bucket: only the value's digit and the columns on the right are dirty
        trend.show(series[2:122], "6")
        title, *rest = sorted(trend._repaint_regions, key=lambda r: r.y)
        assert title == Region(x0 + len("Running  "), 0, 1, 1)
        assert rest and all(r.y >= 1 and r.x >= right - 3 for r in rest)
        await until(pilot, lambda: not trend._repaint_regions, "the tick's columns repainted")
        now = trend.bar_rows()
        assert [row[:-2] for row in now] == [row[:-2] for row in painted]
        # another engine's series: everything is drawn again
        trend.show([1.0] * 120, "1")
        await until(pilot, lambda: trend.bar_rows()[1].endswith("█" * 10), 'trend.bar_rows()[1].endswith("█" * 10)')
        assert trend.bar_rows()[1].endswith("█" * 10)


# ----- lines of fixed size ---------------------------------------------------------------
class LinesApp(App):
    CSS = """
    #fixed { height: 1; }
    #auto { text-wrap: nowrap; }
    """

    def compose(self):
        yield QuietStatic(id="fixed")
        yield QuietStatic(id="auto")
        yield LeanTable(id="table")


async def test_fixed_lines_repaint_without_layout_and_others_still_grow():
    app = LinesApp()
    async with app.run_test(size=(40, 12)) as pilot:
        fixed, auto = app.query_one("#fixed", QuietStatic), app.query_one("#auto", QuietStatic)
        fixed.show("one")
        auto.show("one")
        await until(pilot, lambda: not fixed._layout_required and not auto._layout_required
                    and auto.size.height == 1, "the first lines laid out")
        fixed.show(Text("two"))
        assert not fixed._layout_required  # its size cannot change
        auto.show("two")
        assert not auto._layout_required  # one line, never wrapped: the same height
        auto.show("two\nlines")
        assert auto._layout_required
        await until(pilot, lambda: str(fixed.render()) == "two" and auto.size.height == 2, 'str(fixed.render()) == "two" and auto.size.height == 2')
        assert str(fixed.render()) == "two" and auto.size.height == 2



async def test_a_line_repaints_when_its_text_or_only_its_style_changes_and_not_otherwise():
    app = LinesApp()
    async with app.run_test(size=(40, 12)) as pilot:
        fixed = app.query_one("#fixed", QuietStatic)
        fixed.show(Text("5 down", style="red"))
        await until(pilot, lambda: not fixed._repaint_regions, "the red line painted")
        before, red = fixed._last, list(fixed.render_line(0))
        fixed.show(Text("5 down", style="red"))  # the same text and style: nothing to do
        assert fixed._last is before
        fixed.show(Text("5 down", style="green"))  # the same text, another colour: repainted
        await until(pilot, lambda: not fixed._repaint_regions, "the green line repainted")
        green = list(fixed.render_line(0))
        assert "".join(x.text for x in green) == "".join(x.text for x in red) and green != red
        fixed.show(Text.assemble(("5", "bold"), " down"))
        await until(pilot, lambda: not fixed._repaint_regions, "the bold line repainted")
        bold = list(fixed.render_line(0))
        assert bold[0].text.startswith("5") and bold[0].style.bold

async def test_a_wider_cell_widens_its_column_and_the_other_cells_update():
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        t = app.query_one(LeanTable)
        t.add_column("name", key="name")
        t.add_column("run", key="run")
        t.add_column("kv", key="kv")
        t.add_row("a", "1", "5%", key="a")
        await until(pilot, lambda: t.virtual_size.height == 2, "the row laid out under the header")
        t.set_cells("a", {"run": "123456789", "kv": "7%"})
        await until(pilot, lambda: t.columns["run"].content_width >= 9, "the run column widened")
        assert [str(c) for c in t.get_row("a")] == ["a", "123456789", "7%"]
        assert t.columns["run"].content_width >= 9


@pytest.mark.skipif(fastpaint.LEAN_TABLE not in fastpaint.pieces_for(None),
                    reason="measures the fast paint's own path, turned off by INFERTOP_FAST_PAINT")
async def test_set_cells_re_renders_only_the_changed_cells_and_shows_them():
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        t = app.query_one(LeanTable)
        for key in ("name", "run", "kv"):
            t.add_column(key, key=key)
        for name in ("a", "b", "c"):
            t.add_row(name, "10", "50%", key=name)
        await until(pilot, lambda: t.virtual_size.height == 4, "the three rows laid out under the header")
        line_of = {name: 1 + i for i, name in enumerate("abc")}  # below the header
        before = {name: "".join(seg.text for seg in t.render_line(y)) for name, y in line_of.items()}
        cached = {k: t._cell_render_cache.get(k) for k in list(t._cell_render_cache.keys())}
        t.set_cells("b", {"run": "11"})
        await until(pilot, lambda: not t._repaint_regions, "b's changed cell repainted")
        after = {name: "".join(seg.text for seg in t.render_line(y)) for name, y in line_of.items()}
        assert after["b"] == before["b"].replace("10", "11", 1) and after["a"] == before["a"]
        # every other cell kept its cached render (the same object); b's Run cell was rendered anew
        for key, lines in cached.items():
            now = t._cell_render_cache.get(key)
            if (str(key[0].value), str(key[1].value)) == ("b", "run"):
                assert now is not lines
            else:
                assert now is lines, key


async def test_a_row_handed_to_another_engine_keeps_its_place_without_relayout():
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        t = app.query_one(LeanTable)
        for key in ("name", "run"):
            t.add_column(key, key=key)
        for name in ("a", "b", "c"):
            t.add_row(name, "1", key=name)
        await until(pilot, lambda: t.virtual_size.height == 4 and not app.screen._layout_required,
                    "the three rows laid out under the header")
        t.rename_row("b", "z")
        t.set_cells("z", {"name": "z", "run": "9"})
        assert not app.screen._layout_required  # the table's size did not change
        await until(pilot, lambda: [r.key.value for r in t.ordered_rows] == ["a", "z", "c"], '[r.key.value for r in t.ordered_rows] == ["a", "z", "c"]')
        assert [r.key.value for r in t.ordered_rows] == ["a", "z", "c"]
        assert [str(c) for c in t.get_row("z")] == ["z", "9"]
        assert "".join(seg.text for seg in t.render_line(2)).split()[:2] == ["z", "9"]


# ----- the pane on view -------------------------------------------------------------------
class Engine:
    def __init__(self, name: str, running: int) -> None:
        self.endpoint = EngineEndpoint(name, "http://127.0.0.1:9", max_num_seqs=8)
        self.windows: dict = {}
        self.set(running)

    def set(self, running: int) -> None:
        self.stats = [EngineStats(name=self.endpoint.name, url=self.endpoint.url, state="up", running=running,
                                  max_num_seqs=8, scraped_at=time.time())]
        self.health = SourceHealth(self.endpoint.name, "vllm", True, last_ok_at=time.monotonic())


class Fleet:
    def __init__(self, *engines: Engine) -> None:
        self.collectors = list(engines)


def run_cell(app, name: str) -> str:
    t = app.query_one("#engines-table")
    return str(t.get_row(name)[2])


async def test_a_pane_shown_later_shows_the_state_on_screen_at_once(tmp_path):
    alpha = Engine("alpha", 1)
    fleet = Fleet(alpha)
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), state_dir=str(tmp_path)), poll=False)
    app.fleet.joiner = FleetJoiner(fleet, slo=Config().slo, refresh_s=1.0, window_s=60.0)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_state(app.joiner.build())
        await pilot.press("2")
        await until(pilot, lambda: run_cell(app, "alpha") == "1", 'run_cell(app, "alpha") == "1"')
        assert run_cell(app, "alpha") == "1"
        await pilot.press("1")
        for running in (2, 3, 4):  # ticks while the Engines pane is out of view
            alpha.set(running)
            app.show_state(app.joiner.build())
        fleet.collectors.append(Engine("beta", 6))
        app.show_state(app.joiner.build())
        await until(pilot, lambda: app.current_pane == "overview" and tile(app, "running") == "10",
                    "the last tick on the Overview, the Engines pane out of view")
        # a click on the tab (not the key): the pane is painted from the state on screen
        app.query_one("#panes", TabbedContent).active = "engines"
        await until(pilot, lambda: app.current_pane == "engines" and run_cell(app, "alpha") == "4"
                    and run_cell(app, "beta") == "6", "the Engines pane on view with the last tick")
        assert run_cell(app, "alpha") == "4" and run_cell(app, "beta") == "6"
        assert tile(app, "running") == "10"


def test_observe_copies_only_an_engine_that_was_polled():
    alpha, beta = Engine("alpha", 1), Engine("beta", 2)
    joiner = FleetJoiner(Fleet(alpha, beta), slo=Config().slo, refresh_s=1.0, window_s=60.0)
    joiner.observe()
    kept = dict(joiner._last_good)
    beta.set(5)  # only beta was polled
    joiner.observe()
    assert joiner._last_good["alpha"] is kept["alpha"]
    assert joiner._last_good["beta"] is not kept["beta"] and joiner._last_good["beta"].running == 5
    state = joiner.build()
    assert [e.stats.running for e in state.engines] == [1, 5]



def test_missing_reasons_are_reused_until_the_engine_is_polled_or_its_freshness_changes():
    from infertop.state.fleet_join import missing_reasons

    alpha, beta = Engine("alpha", 1), Engine("beta", 2)
    joiner = FleetJoiner(Fleet(alpha, beta), slo=Config().slo, refresh_s=1.0, window_s=60.0)
    first = joiner.build()
    assert first.engine("alpha").missing == missing_reasons(first.engine("alpha").stats, first.engine("alpha").freshness)
    assert "ttft_p99_s" in first.engine("alpha").missing
    beta.set(5)  # only beta was polled
    second = joiner.build()
    assert second.engine("alpha").missing is first.engine("alpha").missing  # same values, same reasons
    assert second.engine("beta").missing is not first.engine("beta").missing
    for st in (first, second):  # each state's reasons are those of its own values
        for e in st.engines:
            assert e.missing == missing_reasons(e.stats, e.freshness)
    alpha.health = SourceHealth("alpha", "vllm", False, last_error="connection refused",
                                last_error_at=time.monotonic(), consecutive_failures=1)
    third = joiner.build()  # alpha is down: its last values, stale, with the reason
    a = third.engine("alpha")
    assert a.freshness.status == "stale" and a.missing == missing_reasons(a.stats, a.freshness)


# ----- window buckets in one pass, once per poll ------------------------------------------------
def test_window_buckets_are_computed_once_per_poll_and_follow_each_new_poll():
    from infertop.domain.engine_stats import QUANTILES, all_window_buckets, derive, quantile, window_buckets
    from infertop.domain.window import CounterWindow

    window = CounterWindow(60)
    les = ("0.01", "0.05", "0.1", "0.5", "1.0", "+Inf")
    scales = {"ttft": 3, "itl": 11, "e2e": 2, "queue": 1}

    def poll(t: int) -> None:
        raw = {"requests": 10.0 * t, "not@a-bound": float(t)}
        for h, scale in scales.items():
            for i, le in enumerate(les):
                raw[f"{h}@{le}"] = float(t * t * scale * (i + 1))
        window.add(float(t), raw)

    def expected(t0: int, t1: int) -> dict:  # the increase of each bucket between two polls, by hand
        return {h: sorted((float(le), float((t1 * t1 - t0 * t0) * scale * (i + 1))) for i, le in enumerate(les))
                for h, scale in scales.items()}

    for t in range(4):
        poll(t)
    together = all_window_buckets(window)
    assert {h: sorted(b) for h, b in together.items()} == expected(0, 3)  # "not@a-bound" is no bucket
    assert all_window_buckets(window) is together  # a second reader before the next poll: no recomputation
    for h in together:
        assert window_buckets(window, h) is together[h]
    stats = derive(EngineStats(name="e", url="u"), window, {"running": 1.0})
    for h, q, attr in QUANTILES:
        assert getattr(stats, attr) == quantile(window, h, q) and getattr(stats, attr) is not None
    poll(4)  # a new poll moves the last edge: the buckets follow it
    assert {h: sorted(b) for h, b in all_window_buckets(window).items()} == expected(0, 4)


async def test_the_app_observes_each_engine_as_it_is_polled(scripted):
    from vllm_text import v1_doc

    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 3}}))
    app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[EngineEndpoint("one", srv.url)]),
                      poll=False)
    async with app.run_test(size=(120, 40)):
        await app.collector.poll_collector(app.collector.collectors[0])
        assert app.joiner._last_good["one"].running == 3  # kept before any tick


# ----- the lean HTTP client of the engine polls -----------------------------------------------
async def _raw_server(answers: list[bytes], close_after_each: bool):
    """A loopback server answering each request with the next of ``answers`` (raw HTTP bytes)."""
    import asyncio

    served = {"connections": 0, "requests": 0}

    async def handle(reader, writer):
        served["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(answers[served["requests"] % len(answers)])
                served["requests"] += 1
                await writer.drain()
                if close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", served


async def test_lean_client_keeps_the_connection_and_reads_every_framing():
    from infertop.sources.http_client import LeanHttpClient

    answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
               b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy"]
    server, url, served = await _raw_server(answers, close_after_each=False)
    client = LeanHttpClient()
    try:
        assert await client.get(url + "/metrics", 100) == (200, b"hello")
        assert await client.get(url + "/metrics", 100) == (200, b"abcde")
        assert client.opened == 1 and served["connections"] == 1  # kept alive
        assert await client.get(url + "/health", 100, any_status=True) == (503, b"")
    finally:
        await client.aclose()
        server.close()


async def test_lean_client_retries_once_on_a_connection_the_server_closed():
    from infertop.sources.http_client import LeanHttpClient

    # Answers without "Connection: close", then hangs up: the idle connection is dead.
    server, url, served = await _raw_server([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"], close_after_each=True)
    client = LeanHttpClient()
    try:
        for _ in range(3):
            assert await client.get(url + "/metrics", 100) == (200, b"ok")
        assert served["requests"] == 3 and client.opened == 3
    finally:
        await client.aclose()
        server.close()


async def test_lean_client_bounds_and_errors_are_one_line():
    import pytest

    from infertop.sources.http_client import HttpError, LeanHttpClient

    answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000,
               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"y" * 1024 + b"\r\n" * 1 + b"0\r\n\r\n",
               b"garbage\r\n\r\n"]
    server, url, _ = await _raw_server(answers, close_after_each=False)
    client = LeanHttpClient()
    try:
        with pytest.raises(HttpError, match=r"^response too large \(4.9 KiB announced; the limit is 1 KiB\)$"):
            await client.get(url, 1000)
        with pytest.raises(HttpError, match=r"^response too large \(> 1 KiB\)$"):
            await client.get(url, 1000)
        with pytest.raises(HttpError, match=r"^bad HTTP response \(malformed status line\)$"):
            await client.get(url, 1000)
    finally:
        await client.aclose()
        server.close()
    with pytest.raises(HttpError, match="^connection refused$"):
        await LeanHttpClient().get("http://127.0.0.1:9/metrics", 100)


async def test_a_body_over_the_limit_is_not_kept_alive_by_its_error():
    """The error's traceback holds the reading frames (and a caller keeping the error in a local makes a
    cycle the collector may reach late): what was read must not be held there. A hostile endpoint sending
    megabytes every second once grew the console to 760 MB this way."""
    import pytest

    from infertop.sources.http_client import HttpError, LeanHttpClient

    chunk = b"1000\r\n" + b"z" * 4096 + b"\r\n"
    answers = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 64,  # 256 KiB, chunked
               b"HTTP/1.1 200 OK\r\n\r\n" + b"z" * 262144]  # 256 KiB until the server closes
    server, url, _ = await _raw_server(answers, close_after_each=True)
    client = LeanHttpClient()
    try:
        for _ in answers:
            with pytest.raises(HttpError, match=r"^response too large") as got:
                await client.get(url, 100_000)
            held, tb = 0, got.value.__traceback__.tb_next  # the client's frames, not this test's
            while tb is not None:
                for v in tb.tb_frame.f_locals.values():
                    if isinstance(v, list):
                        held += sum(len(x) for x in v if isinstance(x, (bytes, bytearray)))
                tb = tb.tb_next
            assert held == 0
    finally:
        await client.aclose()
        server.close()


# ----- lazy values: only the samples the extractor reads are converted -----------------------


def test_lazy_values_give_the_extractor_the_same_samples_as_full_conversion():
    from locations import CAPTURES
    from infertop.sources.expfmt import Parser
    from infertop.sources.vllm_names import Extractor

    for path in CAPTURES:
        eager, lazy = (Parser(), Extractor()), (Parser(lazy_values=True), Extractor())
        text = path.read_text()
        for k in range(4):  # the first document is cold, the next ones reuse its layout
            doc = perturb(text, 1.5 * k) if k else text
            want = eager[1].extract(eager[0].parse(doc))
            exp = lazy[0].parse(doc)
            assert lazy[1].extract(exp) == want
            assert (exp._raw is not None) == (k > 0)  # warm: values are converted as they are read
            assert exp.values == eager[0].parse(doc).values  # everything still readable, converted on demand


def test_a_value_that_is_no_number_is_an_error_when_read_with_its_line():
    from locations import CAPTURES
    from infertop.sources.expfmt import ParseError, Parser
    from infertop.sources.vllm_names import Extractor

    text = CAPTURES[0].read_text()
    lines = text.split("\n")
    read_no = next(i for i, l in enumerate(lines) if l.startswith("vllm:num_requests_running{"))
    unread_no = next(i for i, l in enumerate(lines) if l.startswith("vllm:iteration_tokens_total_bucket{"))
    parser, extractor = Parser(lazy_values=True), Extractor()
    extractor.extract(parser.parse(text))
    for no, bad in ((read_no, "1.2.3"), (unread_no, "NaNa")):  # number-like characters, no numbers
        broken = list(lines)
        broken[no] = broken[no].rpartition(" ")[0] + " " + bad
        exp = parser.parse("\n".join(broken))
        with pytest.raises(ParseError, match=rf"^line {no + 1}: invalid value: '{bad}'"):
            exp.values
        if no == read_no:
            with pytest.raises(ParseError, match=rf"^line {no + 1}: "):
                extractor.extract(exp)
        else:  # a series infertop does not read: its samples are still extracted
            assert extractor.extract(exp) == Extractor().extract(Parser().parse(text))
    # text that cannot be a number never takes the warm path: the full parse names the line
    broken = list(lines)
    broken[unread_no] = broken[unread_no].rpartition(" ")[0] + " <html>"
    with pytest.raises(ParseError, match=rf"^line {unread_no + 1}: invalid value"):
        parser.parse("\n".join(broken))


# ----- an unchanged body is not parsed again ---------------------------------------------------
async def test_a_body_identical_to_the_last_is_not_parsed_and_a_changed_one_is(scripted):
    from vllm_text import v1_doc

    from infertop.sources.expfmt import Parser
    from infertop.sources.vllm import EngineCollector

    class CountingParser(Parser):  # counts the documents read; parses exactly as the collector's own
        __slots__ = ("documents",)

        def __init__(self) -> None:
            super().__init__(lazy_values=True)
            self.documents = 0

        def parse(self, text):
            self.documents += 1
            return super().parse(text)

    body = {"text": v1_doc(engines={"0": {"running": 3}})}
    srv = scripted().serve_engine(lambda: body["text"])
    c = EngineCollector(EngineEndpoint("one", srv.url), 60.0)
    c.parser = CountingParser()
    try:
        for _ in range(3):
            assert [s.running for s in await c.poll()] == [3]
        # the first body is parsed; the second (same length) is hashed and parsed once more; then none
        assert c.parser.documents == 2 and (await c.poll())[0].running == 3 and c.parser.documents == 2
        read = c.parser.documents
        body["text"] = body["text"].replace("vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"} 3",
                                            "vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"} 4")
        assert "} 4" in body["text"]  # the same length, other values
        assert [s.running for s in await c.poll()] == [4] and c.parser.documents == read + 1
    finally:
        await c.aclose()


# ----- one-line cells rendered the short way: the very segments DataTable renders -----------------
async def test_one_line_cells_render_the_same_segments_as_datatable():
    from textual.app import ComposeResult
    from textual.widgets import DataTable

    cells = ["12.5", "—", Text("3.20s", style="bold red"), Text("up", style="green"), Text("idle"),
             "", "a [b]", "two\nlines", Text("wide text that cannot fit in the column"),
             Text.assemble(("a", "red"), "b"), Text("right", justify="right"), "ünïcode ✓", Text("⚠ 2", style="yellow")]

    class Tables(App):
        def compose(self) -> ComposeResult:
            yield LeanTable(id="lean")
            yield DataTable(id="plain")

    app = Tables()
    async with app.run_test(size=(120, 20)) as pilot:
        lean, plain = app.query_one("#lean", LeanTable), app.query_one("#plain", DataTable)
        for t in (lean, plain):
            t.add_column("c0", width=6, key="c0")
            t.add_column("c1", width=12, key="c1")
            for i, c in enumerate(cells):
                t.add_row(c, c, key=f"r{i}")
        lean.cursor_type = plain.cursor_type = "row"
        await until(pilot, lambda: lean.virtual_size.height == plain.virtual_size.height == 1 + len(cells)
                    and not lean._repaint_regions and not plain._repaint_regions, "both tables laid out and painted")
        short = 0
        for move in range(3):  # the cursor's row and the others, as painted
            for row in range(len(cells)):
                for col in range(2):
                    for cursor, hover in ((False, False), (True, False), (False, True)):
                        style = lean.rich_style
                        width = lean.columns[lean._column_locations.get_key(col)].get_render_width(lean)
                        lean._cell_render_cache.clear()
                        plain._cell_render_cache.clear()
                        fast = lean._one_line_cell(lean._row_locations.get_key(row), lean._column_locations.get_key(col),
                                                   row, col, style, width, cursor, hover)
                        want = DataTable._render_cell(lean, row, col, style, width, cursor, hover)
                        assert lean._render_cell(row, col, style, width, cursor, hover) == want
                        if fast is not None:
                            short += 1
                            assert fast == want, (cells[row], col, cursor, hover)
            lean.move_cursor(row=move + 1)
            plain.move_cursor(row=move + 1)
            await until(pilot, lambda: lean.cursor_row == plain.cursor_row == move + 1
                        and not lean._repaint_regions and not plain._repaint_regions, "the cursors' rows repainted")
        assert short >= 3 * 3 * 12  # the one-line cells that fit took the short way
        # painted whole, the two tables are the same lines (click targets and all)
        app.set_focus(None)
        await until(pilot, lambda: not lean.has_focus and not plain.has_focus
                    and all(list(lean.render_line(y)) == list(plain.render_line(y)) for y in range(lean.size.height)),
                    "both tables unfocused and painted alike")
        for y in range(lean.size.height):
            assert list(lean.render_line(y)) == list(plain.render_line(y)), y
