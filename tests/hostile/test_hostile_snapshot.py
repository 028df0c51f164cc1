"""`infertop snapshot` (a subprocess) with every hostile engine next to a healthy one:
valid JSON (no NaN/Infinity), bad values as null, plain text with no raw control characters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hostile_cases import CASES, ESC_SHOWN, HANG_TIMEOUT_S, healthy  # noqa: F401 — a fixture

# Engines that answer get a timeout a starved machine cannot run out (these servers share the test
# process's GIL, the 60 MB stream among them): their states are then the ones their answers call for.
ANSWER_TIMEOUT_S = 30.0


def reject_constant(name: str):
    raise ValueError(f"invalid JSON constant {name}")


def run_snapshot(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "infertop", "snapshot", *args], capture_output=True,
                          timeout=180, env=env)


def engines_config(tmp_path, timeouts: dict[str, float]) -> str:
    """A config file watching each URL with its timeout; its path."""
    path = tmp_path / "engines.yaml"
    path.write_text("engines:\n" + "".join(f"  - {{url: '{u}', timeout_s: {t}}}\n" for u, t in timeouts.items()))
    return str(path)


def test_snapshot_json_with_every_hostile_engine(healthy, scripted, tmp_path):
    urls = {}
    for case in CASES:
        srv = scripted()
        case.setup(srv)
        urls[srv.url] = case
    cfg = engines_config(tmp_path, {healthy.url: ANSWER_TIMEOUT_S, **{
        url: HANG_TIMEOUT_S if case.timeout_s <= HANG_TIMEOUT_S else ANSWER_TIMEOUT_S  # hangs: down at once
        for url, case in urls.items()}})
    p = run_snapshot(["--json", "--window", "1", "--config", cfg], tmp_path)
    assert p.returncode == 1, p.stderr.decode()[-2000:]  # 1: some source is down (the output says which)
    out = p.stdout.decode()
    assert "\x1b" not in out and "\x07" not in out
    doc = json.loads(out, parse_constant=reject_constant)
    by_url: dict[str, list[dict]] = {}
    for e in doc["engines"]:
        by_url.setdefault(e["url"], []).append(e)
    assert [e["state"] for e in by_url[healthy.url]] == ["up"]
    for url, case in urls.items():
        got = by_url[url]
        assert len(got) == case.names, case.name
        for e in got:
            # hangs are "down" at their 0.5 s timeout; the others answer well within theirs
            assert e["state"] == case.state, (case.name, e["state"], e["error"])
            for f in case.none_fields:
                assert e[f] is None, (case.name, f)
    assert len({e["name"] for e in doc["engines"]}) == len(doc["engines"])
    models = {e["model"] for e in doc["engines"]}
    assert "[/evil]" in models and ESC_SHOWN in models


def test_plain_snapshot_prints_no_control_characters(healthy, scripted, tmp_path):
    srv = scripted()
    next(c for c in CASES if c.name == "esc-label").setup(srv)
    bad = scripted()
    next(c for c in CASES if c.name == "markup-metric").setup(bad)
    cfg = engines_config(tmp_path, dict.fromkeys([healthy.url, srv.url, bad.url], ANSWER_TIMEOUT_S))
    p = run_snapshot(["--window", "0", "--config", cfg], tmp_path)
    assert p.returncode == 1, p.stderr.decode()[-2000:]  # 1: a source is down
    for stream in (p.stdout, p.stderr):
        assert b"\x1b" not in stream and b"\x07" not in stream
    assert b"foo[/x]" in p.stderr  # the bad engine's error, as it is
