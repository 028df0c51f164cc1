"""Issue 29, edges: credentials in URLs, invisible and unencodable characters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from infertop.config import parse_config
from infertop.sources.sanitize import io_url, plain_text, redact_url

SECRET = "S3cretPassw0rd"


def test_invisible_characters_and_lone_surrogates_are_made_visible():
    shown = plain_text("a\u200bb\ufeffc\u061cd\u00ade\ud800f\U000e0041g")
    assert shown == "a\\u200bb\\ufeffc\\u061cd\\xade\\ud800f\\U000e0041g"
    shown.encode("utf-8")  # strict: nothing left that a UTF-8 terminal cannot take
    assert plain_text("llama-3 8B é 日本") == "llama-3 8B é 日本"


def test_url_credentials_are_redacted_at_config_load_and_kept_for_io_only():
    cfg = parse_config(f"""
engines:
  - url: http://admin:{SECRET}@127.0.0.1:8000
gpu: {{dcgm: ['http://u:{SECRET}@gpu-node:9400/metrics']}}
prometheus: {{url: 'https://u:{SECRET}@prom:9090'}}
queues:
  gateways: [{{url: 'http://u:{SECRET}@gw:8080', admin_url: 'http://u:{SECRET}@gw:8081'}}]
  epp: [{{url: 'http://u:{SECRET}@epp:9090/metrics'}}]
""")
    e = cfg.engines[0]
    assert (e.name, e.url) == ("local:8000", "http://127.0.0.1:8000")
    assert cfg.gpu.dcgm == ["http://gpu-node:9400/metrics"]
    assert cfg.prometheus.url == "https://prom:9090"
    assert SECRET not in repr(cfg)
    assert io_url(cfg.prometheus.url) == f"https://u:{SECRET}@prom:9090"  # the connection keeps it
    assert redact_url("http://host:1/a@b") == "http://host:1/a@b"  # an @ in the path is no credential


def _snapshot(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path),
           "PYTHONIOENCODING": "utf-8"}  # strict: a lone surrogate raised UnicodeEncodeError (exit 70)
    return subprocess.run([sys.executable, "-m", "infertop", "snapshot", "--window", "0", *args],
                          capture_output=True, timeout=180, env=env)


def test_snapshot_hides_the_password_and_survives_a_lone_surrogate(scripted, tmp_path):
    srv = scripted()
    srv.serve_engine("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n", model="m\\ud800x")
    url = srv.url.replace("http://", f"http://admin:{SECRET}@")
    for extra in ([], ["--json"]):
        p = _snapshot(["--engine", url, *extra], tmp_path)
        out = p.stdout.decode("utf-8", "backslashreplace") + p.stderr.decode("utf-8", "backslashreplace")
        assert p.returncode in (0, 1), out[-2000:]
        assert SECRET not in out and "Traceback" not in out
        assert "m\\ud800x" in out.replace("\\\\", "\\")  # shown escaped, in the table and the JSON
    doc = json.loads(p.stdout)
    assert [e["url"] for e in doc["engines"]] == [srv.url]
