"""`infertop snapshot` (a subprocess) with every hostile engine next to a healthy one:
valid JSON (no NaN/Infinity), bad values as null, plain text with no raw control characters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hostile_cases import CASES, ESC_SHOWN, healthy  # noqa: F401 — a fixture


def reject_constant(name: str):
    raise ValueError(f"invalid JSON constant {name}")


def run_snapshot(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "infertop", "snapshot", *args], capture_output=True,
                          timeout=180, env=env)


def test_snapshot_json_with_every_hostile_engine(healthy, scripted, tmp_path):
    urls = {}
    for case in CASES:
        srv = scripted()
        case.setup(srv)
        urls[srv.url] = case
    engines = [a for u in [healthy.url, *urls] for a in ("--engine", u)]
    p = run_snapshot(["--json", "--window", "1", *engines], tmp_path)
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
            # the snapshot's own engine timeout is the default 2 s: hangs are "down" either way
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
    p = run_snapshot(["--window", "0", "--engine", healthy.url, "--engine", srv.url, "--engine", bad.url], tmp_path)
    assert p.returncode == 1, p.stderr.decode()[-2000:]  # 1: a source is down
    for stream in (p.stdout, p.stderr):
        assert b"\x1b" not in stream and b"\x07" not in stream
    assert b"foo[/x]" in p.stderr  # the bad engine's error, as it is
