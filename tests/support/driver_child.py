"""Run the infertop TUI in the terminal it was started in, with the cell-diffing
driver, and keep every write: what the app wrote and what was sent (JSON, argv[1]).

Started by tests/tui/test_perf_paths.py in a pseudo-terminal. The fleet state changes
every step; the run switches panes, opens and closes the help screen, and
resizes its own terminal, then quits.
"""

from __future__ import annotations

import fcntl
import json
import struct
import sys
import termios
import time

from infertop.config import Config, GpuConfig
from infertop.domain.engine import EngineStats
from infertop.domain.source import SourceHealth
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_join import FleetJoiner
from infertop.ui.app import InfertopApp, Settings
from infertop.ui.fastpaint.driver import driver_class

NAMES = ("alpha", "β-engine", "モデル-7b")  # a wide-character name too


class Engine:
    """What the fleet state reads of one engine's collector."""

    def __init__(self, name: str) -> None:
        self.endpoint = EngineEndpoint(name, f"http://127.0.0.1:9/{name}", max_num_seqs=16)
        self.windows: dict = {}
        self.set(0)

    def set(self, step: int) -> None:
        i = NAMES.index(self.endpoint.name)
        now = time.monotonic()
        self.stats = [EngineStats(name=self.endpoint.name, url=self.endpoint.url, state="up",
                                  running=(step * (i + 1)) % 13, waiting=(step + i) % 4,
                                  kv_cache_pct=float((step * 7 + i * 20) % 100), max_num_seqs=16,
                                  ttft_p99_s=0.05 + 0.01 * ((step + i) % 9), scraped_at=time.time())]
        self.health = SourceHealth(self.endpoint.name, "vllm", True, last_ok_at=now)


class Fleet:
    def __init__(self) -> None:
        self.collectors = [Engine(n) for n in NAMES]


class Scripted(InfertopApp):
    step = None

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(0.05, self.step)


def main(out_path: str, state_dir: str) -> None:
    frames: list[tuple[str, str, int, int]] = []
    fleet = Fleet()
    settings = Settings(config=Config(gpu=GpuConfig(nvml=False)),
                        endpoints=[c.endpoint for c in fleet.collectors], state_dir=state_dir)
    app = Scripted(settings, poll=False)
    app.driver_class = driver_class(on_frame=lambda w, s, c, r: frames.append((w, s, c, r)))
    app.fleet.joiner = FleetJoiner(fleet, slo=settings.config.slo, refresh_s=1.0, window_s=60.0)
    step = 0
    script = {10: lambda: app.action_show_pane("engines"), 18: app.action_help, 24: app.pop_screen,
              28: lambda: app.action_show_pane("gpus"), 34: lambda: app.action_show_pane("overview"),
              40: lambda: fcntl.ioctl(sys.__stderr__.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0)),
              46: lambda: app.action_show_pane("engines"), 60: app.exit}

    def advance() -> None:
        nonlocal step
        step += 1
        for c in fleet.collectors:
            c.set(step)
        app.show_state(app.joiner.build())
        if step in script:
            script[step]()

    app.step = advance
    app.run()
    with open(out_path, "w") as f:
        json.dump(frames, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
