"""The suite's own guards (conftest.py): no traffic off loopback, no user state."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from infertop.private_fs import default_state_dir


def test_a_connection_off_loopback_is_refused_before_it_is_made():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(PermissionError, match="only connect to loopback"):
            s.connect(("10.255.255.1", 9))  # the hook raises before the kernel sees it
    finally:
        s.close()


def test_a_name_lookup_off_the_machine_is_refused():
    with pytest.raises(PermissionError, match="only connect to loopback"):
        socket.getaddrinfo("registry.invalid", 443)


def test_loopback_still_connects():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        with socket.create_connection(srv.getsockname(), timeout=2):
            pass
    finally:
        srv.close()


def test_the_state_directory_is_not_the_users():
    home_state = Path(os.path.expanduser("~")) / ".local" / "state" / "infertop"
    assert default_state_dir() != home_state
    assert str(default_state_dir()).startswith(os.environ["XDG_STATE_HOME"])
