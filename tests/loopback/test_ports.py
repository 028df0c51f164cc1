"""tests/support/ports.py: ports for children that bind later come from outside the ephemeral range."""

from __future__ import annotations

import socket

import ports
import pytest


@pytest.fixture
def range_file(tmp_path, monkeypatch):
    def write(text: str) -> None:
        path = tmp_path / "ip_local_port_range"
        path.write_text(text)
        monkeypatch.setattr(ports, "EPHEMERAL_RANGE_PATH", str(path))
    return write


def listening_on(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable(range_file):
    range_file("32768\t60999\n")
    got = [ports.free_port() for _ in range(200)]
    assert len(set(got)) == len(got)
    assert all(ports.LOW_START <= p < 32768 for p in got), sorted(got)[:5]
    for p in got[:20]:
        listening_on(p).close()  # really free: a server can bind it


def test_the_range_is_read_from_the_kernel_file(range_file):
    range_file("40000 50000\n")
    assert ports.ephemeral_range() == (40000, 50000)
    assert all(ports.LOW_START <= ports.free_port() < 40000 for _ in range(20))


@pytest.mark.parametrize("text", ["", "not numbers\n", "50000 40000\n", "0 99999\n"])
def test_an_unreadable_range_falls_back_to_linuxs_default(range_file, text):
    range_file(text)
    assert ports.ephemeral_range() == ports.DEFAULT_EPHEMERAL


def test_a_missing_range_file_falls_back_to_linuxs_default(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_PATH", str(tmp_path / "absent"))
    assert ports.ephemeral_range() == ports.DEFAULT_EPHEMERAL


def test_candidates_lie_below_the_range_else_above_it_else_nowhere():
    assert ports.candidate_ports(32768, 60999) == range(ports.LOW_START, 32768)
    assert ports.candidate_ports(1024, 60999) == range(61000, 65536)
    assert ports.candidate_ports(1024, 65000) == range(0)  # 535 above: too few


def test_with_no_room_outside_the_range_the_kernel_chooses(range_file):
    range_file("1024 65000\n")
    got = {ports.free_port() for _ in range(20)}
    assert len(got) == 20
    for p in got:
        listening_on(p).close()


def test_a_listening_port_is_not_bindable():
    with listening_on(0) as s:
        port = s.getsockname()[1]
        assert not ports.bindable(port)
    assert ports.bindable(ports.free_port())
