"""``infertop gateway`` as a child process in front of fake engines (``Gateway``), its admin
``TOKEN``, and ``fake_profile``: a fake engine's profile as the gateway's config names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from engine_env import Env, wait_until
from locations import REPO
from ports import free_port


TOKEN = "gw-admin-secret"


class Gateway:
    """``infertop gateway --config FILE`` as a child process, on loopback ports of its own."""

    def __init__(self, tmp: Path, engines: list[dict], profiles: dict) -> None:
        self.port, self.admin_port = free_port(), free_port()
        self.config = tmp / "config.yaml"
        doc = {"audit_log": str(tmp / "audit.jsonl"),
               "gateway": {"listen": f"127.0.0.1:{self.port}", "admin_listen": f"127.0.0.1:{self.admin_port}",
                           "admin_token_env": "INFERTOP_GATEWAY_TOKEN", "metrics_poll_s": 0.2,
                           "engines": engines},
               "profiles": profiles}
        self.config.write_text(json.dumps(doc))  # JSON is YAML
        env = dict(os.environ, PYTHONPATH=str(REPO))  # this tree's infertop
        self.log = open(tmp / "gateway.log", "wb")  # noqa: SIM115 — closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "infertop", "gateway", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"
        assert wait_until(self._ready, timeout=60), (tmp / "gateway.log").read_text()

    def _ready(self) -> bool:
        try:
            return httpx.get(self.admin_url + "/admin/state", headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def engine(self, name: str) -> dict:
        doc = httpx.get(self.admin_url + "/admin/state", headers={"Authorization": f"Bearer {TOKEN}"},
                        timeout=30, trust_env=False).json()
        return next(e for e in doc["engines"] if e["name"] == name)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def fake_profile(env: Env, name: str = "e", **fake) -> dict:
    prof = env.profile(name=name, token_s=0.02, drain_s=1, **fake)
    prof.stop_grace_s = 30.0  # bounds the wait at the gateway: ample on a busy host
    return {"model": prof.model, "served_model_name": prof.served_model_name, "port": prof.port,
            "max_num_seqs": prof.max_num_seqs, "python": prof.python, "env": dict(prof.env),
            "start_timeout_s": prof.start_timeout_s, "stop_grace_s": prof.stop_grace_s}
