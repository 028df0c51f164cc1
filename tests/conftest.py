"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripted_server import ScriptedServer

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = sorted(FIXTURES.glob("metrics_*.txt"))


@pytest.fixture
def scripted():
    servers: list[ScriptedServer] = []

    def make() -> ScriptedServer:
        s = ScriptedServer().start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def capture_text(name: str) -> str:
    return (FIXTURES / name).read_text()
