"""Configuration: every mistake is one line naming file, line and field; exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from infertop.config import ConfigError, load_config, parse_config

BAD = [
    ("engines:\n  - url: http://127.0.0.1:8000\n    naem: a\n", 3, "engines[0].naem", "unknown key (did you mean 'name'?)"),
    ("engines:\n  - url: 8000\n", 2, "engines[0].url", "expected a string, got 8000"),
    ("refresh_s: [1\n", 2, "", "invalid YAML"),
    ("slo:\n  ttft_p99_s: fast\n", 2, "slo.ttft_p99_s", "expected a number, got 'fast'"),
    ("engines:\n - url: http://x:1\n   max_num_seqs: 0\n", 3, "engines[0].max_num_seqs", "must be >= 1"),
    ("engines:\n - url: ftp://x\n", 2, "engines[0].url", "must start with http://"),
    ("refresh_s: 1\nrefresh_s: 2\n", 2, "refresh_s", "duplicate key"),
    ("engines: {a: 1}\n", 1, "engines", "expected a list"),
    ("colour: red\n", 1, "colour", "unknown key"),
    ("profiles:\n  small:\n    port: 8000\n", 3, "profiles.small.model", "required"),
    ("profiles:\n  small:\n    model: /m\n    scheduling_policy: lifo\n", 4, "profiles.small.scheduling_policy", "fcfs or priority"),
    ("read_only: yes please\n", 1, "read_only", "expected true or false"),
]


@pytest.mark.parametrize("text, line, field, msg", BAD)
def test_errors_name_line_and_field(text, line, field, msg):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "cfg.yaml")
    e = err.value
    assert (e.line, e.field_path) == (line, field)
    assert msg in e.message
    assert "\n" not in str(e) and str(e).startswith(f"cfg.yaml:{line}: ")


def test_valid_config_round_trip():
    cfg = parse_config(
        "refresh_s: 0.5\nwindow_s: 30\ntheme: infertop-light\n"
        "engines:\n  - url: http://127.0.0.1:8001\n  - name: big\n    url: http://10.0.0.5:8000\n    max_num_seqs: 64\n"
        "slo: {ttft_p99_s: 0.5}\ngpu: {dcgm: ['http://127.0.0.1:9400/metrics']}\n"
        "profiles:\n  tiny:\n    model: /models/tiny\n    max_num_seqs: 4\n    env: {VLLM_CPU_KVCACHE_SPACE: '1'}\n"
    )
    assert cfg.refresh_s == 0.5 and cfg.window_s == 30.0
    assert [e.name for e in cfg.engines] == ["local:8001", "big"]
    assert cfg.engines[1].max_num_seqs == 64
    assert cfg.slo.ttft_p99_s == 0.5 and cfg.slo.e2e_p99_s == 5.0
    assert cfg.profiles["tiny"].env == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_empty_file_and_missing_default_mean_defaults(tmp_path, monkeypatch):
    assert parse_config("").engines == []
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    cfg = load_config(None)
    assert cfg.source is None and cfg.refresh_s == 1.0
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


def run_cli(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "infertop", *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize("text", ["engines:\n  - url: [oops\n", "engines:\n  - url: http://a:1\n    bogus: 1\n"])
@pytest.mark.parametrize("sub", [[], ["snapshot", "--json"]])
def test_cli_broken_config_exits_2_with_one_line(tmp_path, text, sub):
    f = tmp_path / "config.yaml"
    f.write_text(text)
    r = run_cli(*sub, "--config", str(f))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"infertop: {f}:") and "Traceback" not in r.stderr


def test_snapshot_json_with_engine_flag_and_no_config(tmp_path, scripted):
    import json

    from vllm_text import v1_doc

    srv = scripted().serve_engine(v1_doc(engines={"0": {"running": 3, "waiting": 1}}))
    r = run_cli("snapshot", "--json", "--window", "0", "--engine", srv.url, "--engine", "http://127.0.0.1:9",
                env_extra={"XDG_CONFIG_HOME": str(tmp_path)})
    assert r.returncode == 1, r.stderr  # one engine is down: exit 1, with everything known printed
    doc = json.loads(r.stdout)
    by = {e["name"]: e for e in doc["engines"]}
    good = by[srv.url.split("://")[1].replace("127.0.0.1", "local")]
    assert good["running"] == 3 and good["waiting"] == 1 and good["state"] == "up"
    assert by["local:9"]["state"] == "down" and by["local:9"]["error"] == "connection refused"
    assert {s["name"]: s["ok"] for s in doc["sources"]}["local:9"] is False
