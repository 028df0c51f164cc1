"""Shared fixtures."""

from __future__ import annotations

import atexit
import ipaddress
import os
import shutil
import sys
import tempfile

import pytest

from scripted_server import ScriptedServer

# Tests never touch the user's own state: an engine the developer runs under
# ~/.local/state/infertop would otherwise be adopted by every app a test builds
# without a state_dir (seen: "2/2 engines ok" in a test that expects one down).
# Set before any test (and every subprocess a test starts) reads it; tests that
# need their own directory still set XDG_STATE_HOME themselves.
_STATE_HOME = tempfile.mkdtemp(prefix="infertop-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME
atexit.register(shutil.rmtree, _STATE_HOME, ignore_errors=True)


def _loopback(host: object) -> bool:
    if not isinstance(host, str):
        return True  # an AF_UNIX path or a raw tuple this guard cannot judge
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a host name other than localhost would be resolved off the machine


def _no_traffic_off_loopback(event: str, args: tuple) -> None:
    """Fail any connection a test (or code under test) makes outside 127.0.0.0/8 and ::1.

    An audit hook, not a patched socket: it sees every connect made through Python's
    socket module (httpx, requests, the kubernetes client, asyncio's selector loop)."""
    if event not in ("socket.connect", "socket.sendto", "socket.getaddrinfo"):
        return
    if event == "socket.getaddrinfo":
        host = args[0]
        host = host.decode() if isinstance(host, bytes) else host
        if host is None:
            return
    else:
        addr = args[1] if event == "socket.connect" else args[-1]
        if not isinstance(addr, tuple) or not addr:
            return
        host = addr[0]
    if not _loopback(host):
        raise PermissionError(f"tests may only connect to loopback, not {host!r}")


sys.addaudithook(_no_traffic_off_loopback)

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
