"""Regenerate screenshots/*.svg from the demo.

    .venv/bin/python screenshots/make_screenshots.py [--seconds 25]

Starts the demo exactly as ``infertop --demo`` does (the simulator, its
Kubernetes API, the gateway and its load), runs infertop against it headless
(Textual's run_test) for a while so windows and sparklines fill, then saves
one SVG per pane at 120x40 and the main panes at 80x24.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from infertop.cli import build_parser, fleet_sources, resolve_config
from infertop.ui.app import InfertopApp, Settings

OUT = Path(__file__).resolve().parent

# (file name, keys to press before the shot, keys to press after it)
SHOTS_BIG = [
    ("overview", ["1"], []),
    ("engines", ["2"], []),
    ("engine-detail", ["2", "down", "enter"], ["escape"]),
    ("gpus", ["4"], []),
    ("cluster", ["5"], []),
    ("queue", ["6"], []),
    ("autoscaler", ["7"], []),
    ("log", ["3"], []),
    ("triage-at-rest", ["8"], []),
    ("slo", ["9"], []),
    ("help", ["question_mark"], ["escape"]),
]
SHOTS_SMALL = [("overview-80x24", ["1"], []), ("engines-80x24", ["2"], []), ("gpus-80x24", ["4"], []),
               ("cluster-80x24", ["5"], []), ("queue-80x24", ["6"], []), ("autoscaler-80x24", ["7"], []),
               ("slo-80x24", ["9"], [])]
SHOTS_WIDE = [("overview-200x60", ["1"], []), ("slo-200x60", ["9"], [])]
# after an incident is injected into the demo: the Triage pane and a verdict's evidence
SHOTS_INCIDENT = [("triage", ["8"], []), ("verdict-detail", ["8", "enter"], ["escape"]), ("overview-incident", ["1"], []),
                  ("slo-incident", ["9"], [])]
INCIDENT = "queue-bound"


async def shoot(cfg, fleet, notes, size, shots, seconds: float, incident: str | None = None) -> None:
    settings = Settings(config=cfg, endpoints=fleet.endpoints, mode="demo", notes=notes, dcgm_urls=fleet.dcgm_urls,
                        engine_pods=fleet.engine_pods, state_dir=fleet.state_dir)
    app = InfertopApp(settings)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(seconds)
        if incident is not None:
            from infertop.demo import running_demo

            running_demo().inject(incident)  # as the palette's "Inject incident" does
            for _ in range(120):  # until triage names it (its onset holds a few seconds)
                await pilot.pause(0.5)
                if any(v.kind == incident for v in app.verdicts):
                    break
            await pilot.pause(3)
        for name, before, after in shots:
            try:
                for key in before:
                    await pilot.press(key)
                await pilot.pause(1.5)
            except Exception as e:  # a pane that this build does not have
                print(f"skip {name}: {e}", file=sys.stderr)
                continue
            path = app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
            print(path)
            for key in after:
                await pilot.press(key)


def running_demo_stop_incident() -> None:
    from infertop.demo import running_demo

    demo = running_demo()
    if demo is not None:
        demo.inject(None)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=25.0, help="seconds of data before the first shot")
    args = ap.parse_args()
    demo_args = build_parser().parse_args(["--demo"])
    cfg, notes = resolve_config(demo_args)
    with fleet_sources(demo_args, cfg, notes) as fleet:  # what `infertop --demo` watches
        asyncio.run(shoot(cfg, fleet, notes, (120, 40), SHOTS_BIG, args.seconds))
        asyncio.run(shoot(cfg, fleet, notes, (80, 24), SHOTS_SMALL, min(args.seconds, 10)))
        asyncio.run(shoot(cfg, fleet, notes, (200, 60), SHOTS_WIDE, min(args.seconds, 10)))
        asyncio.run(shoot(cfg, fleet, notes, (120, 40), SHOTS_INCIDENT, min(args.seconds, 10), incident=INCIDENT))
        running_demo_stop_incident()
    return 0


if __name__ == "__main__":
    sys.exit(main())
