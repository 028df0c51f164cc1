"""A config with launch profiles and no ``engines:``: the fleet is the engines infertop started —
no phantom 127.0.0.1:8000, and ``snapshot`` includes the managed engines."""

from __future__ import annotations

import json

from engine_env import Env  # the fake-engine manager the engine tests use

from infertop import cli


def config_file(env: Env, name: str = "e") -> str:
    prof = env.profiles[name]
    path = env.tmp / "config.yaml"
    path.write_text(f"audit_log: {env.audit_path}\ngpu:\n  nvml: false\nprofiles:\n  {name}:\n"
                    f"    model: {prof.model}\n    port: {prof.port}\n    max_num_seqs: {prof.max_num_seqs}\n")
    return str(path)


def test_profiles_without_engines_poll_no_phantom_local_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    env = Env(tmp_path)
    env.profile()
    args = cli.build_parser().parse_args(["--config", config_file(env)])
    cfg, _ = cli.resolve_config(args)
    demo, endpoints = cli.start_engines(args, cfg)
    assert demo is None and endpoints == []
    bare = cli.build_parser().parse_args([])  # no profiles, no engines: the local default stays
    cfg0, _ = cli.resolve_config(bare)
    assert [e.url for e in cli.start_engines(bare, cfg0)[1]] == [cli.DEFAULT_LOCAL_URL]


def test_snapshot_includes_the_engines_infertop_manages(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    env = Env(tmp_path)
    env.state_dir = tmp_path / "xdg" / "infertop"  # the default state directory snapshot reads
    prof = env.profile()
    try:
        rec = env.manager().start("e", prof)
        assert rec.alive
        rc = cli.snapshot_main(["--config", config_file(env), "--json", "--window", "0.5"])
        doc = json.loads(capsys.readouterr().out)
    finally:
        for m in env.managers:
            m.stop("e")
        env.cleanup()
    assert [(e["name"], e["state"]) for e in doc["engines"]] == [("e", "up")]
    assert rc == 0
