"""Where the test tree's files are, so no test builds a path from its own ``__file__`` (tests move between tiers)."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
#: The fake vLLM engine, run as ``python FAKE_ENGINE --port N`` by the engine-control tests.
FAKE_ENGINE = SUPPORT / "fake_engine.py"
#: Recorded /metrics answers of a real vLLM engine (idle, under load, after load).
CAPTURES = sorted(FIXTURES.glob("metrics_*.txt"))


def capture_text(name: str) -> str:
    return (FIXTURES / name).read_text()
