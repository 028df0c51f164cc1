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


@pytest.fixture
def kube_emulator():
    """Factory: a started Kubernetes API emulator with two 8-GPU nodes; stopped
    at teardown, which also asserts the emulator hit no internal error."""
    from kube_emulator import KubeEmulator

    started = []

    def make(token: str, **kw) -> KubeEmulator:
        emu = KubeEmulator(token=token, **kw).start()
        emu.add_node("gpu-a", gpus=8)
        emu.add_node("gpu-b", gpus=8)
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.stop()
        assert emu.errors == []
