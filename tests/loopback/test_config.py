"""Configuration: every mistake is one line naming file, line and field; exit code 2."""

from __future__ import annotations

import math
import os

import pytest
from cli_run import run_cli

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
    # numbers: finite, and within each field's documented bounds
    ("refresh_s: .inf\n", 1, "refresh_s", "must be a finite number"),
    ("refresh_s: .nan\n", 1, "refresh_s", "must be a finite number"),
    ("refresh_s: -1\n", 1, "refresh_s", "must be >= 0.1 and <= 600"),
    ("refresh_s: 0.00001\n", 1, "refresh_s", "must be >= 0.1"),
    ("refresh_s: 1e-5\n", 1, "refresh_s", "must be >= 0.1"),  # YAML 1.1 reads 1e-5 as text; we as a number
    ("refresh_s: 1e400\n", 1, "refresh_s", "must be a finite number"),
    ("refresh_s: \"1\"\n", 1, "refresh_s", "expected a number, got '1'"),
    ("window_s: 1\nrefresh_s: 1\n", 1, "window_s", "at least twice refresh_s"),
    ("slo:\n  kv_cache_pct: 0\n", 2, "slo.kv_cache_pct", "must be > 0 and <= 100"),
    ("engines:\n - url: http://x:1\n   timeout_s: 1e308\n", 3, "engines[0].timeout_s", "<= 600"),
    ("kube:\n  metrics_port: 70000\n", 2, "kube.metrics_port", "<= 65535"),
    ("profiles:\n  p:\n    model: m\n    gpu_memory_utilization: 1.5\n", 4,
     "profiles.p.gpu_memory_utilization", "must be > 0 and <= 1"),
    ("refresh_s: " + "9" * 5000 + "\n", 1, "refresh_s", "a number too large"),
    ("refresh_s: !!int\n", 1, "refresh_s", "invalid value: not a valid int: ''"),  # found by Hypothesis
    ("refresh_s: !!timestamp 2024-13-45\n", 1, "refresh_s", "invalid value: not a valid timestamp"),
    # duplicate names, given or derived from the url, found in one pass
    ("engines:\n - {url: 'http://a:1', name: x}\n - {url: 'http://b:1', name: x}\n", 3, "engines[1]",
     "duplicate engine name 'x', as engines[0]"),
    ("engines:\n - url: http://a:1\n - url: http://b:1\n - url: http://a:1\n", 4, "engines[2]",
     "duplicate engine name 'a:1', as engines[0] (derived from its url"),
    # keys: plain scalars only, one line even when the key holds a newline or ESC
    ("? [a, b]\n: 1\n", 1, "", "a key must be a plain value, got a list"),
    ('"a\\nb\\x1b": 1\n', 1, "a\\nb\\x1b", "unknown key"),
    ("profiles:\n  a: &b {model: x}\n  c:\n    <<: *b\n", 4, "profiles.c", "merge keys (<<) are not supported"),
    ("refresh_s: !!python/object:os.system 1\n", 1, "refresh_s", "invalid value: could not determine a constructor"),
]


@pytest.mark.parametrize("text, line, field, msg", BAD)
def test_errors_name_line_and_field(text, line, field, msg):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "cfg.yaml")
    e = err.value
    assert (e.line, e.field_path) == (line, field)
    assert msg in e.message
    assert "\n" not in str(e) and str(e).startswith(f"cfg.yaml:{line}: ")


def test_engines_without_names_get_distinct_names_from_their_urls():
    cfg = parse_config("engines: [{url: 'http://127.0.0.1:8001'}, {url: 'http://127.0.0.1:8002'}]\n")
    assert [e.name for e in cfg.engines] == ["local:8001", "local:8002"]


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
    assert cfg.slo.ttft_p99_s == 0.5 and cfg.slo.e2e_p99_s == 60.0
    assert cfg.profiles["tiny"].env == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_empty_file_and_missing_default_mean_defaults(tmp_path, monkeypatch):
    assert parse_config("").engines == []
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    cfg = load_config(None)
    assert cfg.source is None and cfg.refresh_s == 1.0
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


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


# --- limits: hostile files fail with the one-line error, never hang or exhaust memory ---------------------

def alias_bomb(levels: int, width: int, *, as_key: bool) -> str:
    """A "billion laughs": each level repeats the one below ``width`` times (width ** levels strings)."""
    lines = ['a: &a ["lol"]']
    prev = "a"
    for i in range(1, levels):
        name = chr(ord("a") + i)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * width) + "]")
        prev = name
    lines.append(f"? *{prev}\n: 1" if as_key else f"z: *{prev}")
    return "\n".join(lines) + "\n"


def anchored_key_bomb() -> str:
    """The issue's shape: every level anchored inside one key (str() of that key never returned)."""
    levels = ["&a [" + ",".join(["lol"] * 9) + "]"]
    levels += [f"&{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]" for i in range(1, 9)]
    return "? [" + ", ".join(levels) + "]\n: 1\n"


HOSTILE = [
    ("anchored key bomb", anchored_key_bomb(), "expands to more than"),
    ("alias bomb as a key", alias_bomb(9, 9, as_key=True), "expands to more than"),
    ("alias bomb as a value", alias_bomb(9, 9, as_key=False), "expands to more than"),
    ("bigger alias bomb", alias_bomb(10, 12, as_key=True), "expands to more than"),
    ("recursive alias", "engines: &a [*a]\n", "recursive alias *a"),
    ("recursive alias as a key", "&a {*a : 1}\n", "recursive alias *a"),
    ("deep flow nesting", "refresh_s: " + "[" * 100_000 + "]" * 100_000 + "\n", "nest"),
    ("deep block nesting", "".join(" " * i + "a:\n" for i in range(200)), "nested deeper than 32 levels"),
    ("NUL byte", "refresh_s: 1\x00\n", "characters are not allowed"),
    ("ESC byte", "theme: \x1b]0;pwned\x07\n", "characters are not allowed"),
    ("not UTF-8", b"theme: \xff\xfe\n", "not UTF-8 text"),
    ("lone surrogate", "theme: \ud800\n", "not UTF-8 text"),
    ("long scalar", "theme: " + "x" * 70_000 + "\n", "a value longer than 65536 characters"),
    ("long key", "x" * 70_000 + ": 1\n", "a value longer than 65536 characters"),
    ("two documents", "refresh_s: 1\n---\nrefresh_s: 2\n", "invalid YAML"),
]


@pytest.mark.timeout(30)  # a hang guard only: each case is a few milliseconds
@pytest.mark.parametrize("pure_python", [False, True], ids=["libyaml", "pure-python"])
@pytest.mark.parametrize("name, text, msg", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_files_give_one_line(name, text, msg, pure_python):
    if pure_python and name == "deep flow nesting":
        msg = "nested deeper than 32 levels"  # PyYAML's parser has no depth limit of its own
    with pytest.raises(ConfigError) as err:
        parse_config(text, "cfg.yaml", pure_python=pure_python)
    assert msg in err.value.message
    assert err.value.line is not None
    line = str(err.value)
    assert "\n" not in line and "\x1b" not in line and len(line) < 600


def test_alias_bombs_are_small_files():
    assert len(alias_bomb(9, 9, as_key=True).encode()) < 400  # the were 308 and 394 bytes
    assert len(anchored_key_bomb().encode()) < 400


def test_reading_stops_at_the_size_limit(tmp_path):
    (tmp_path / "big.yaml").write_bytes(b"#" * (16 * 2**20 + 10))
    with pytest.raises(ConfigError, match="larger than 16 MiB"):
        load_config(tmp_path / "big.yaml")
    with pytest.raises(ConfigError, match="not a regular file"):  # endless: never read
        load_config("/dev/zero")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path)
    assert load_config(os.devnull).engines == []  # --config /dev/null: no config file, said on purpose


def test_many_engines_and_a_late_duplicate():
    n = 20_000
    text = "engines:\n" + "".join(f"  - url: http://10.0.{i // 250}.{i % 250}:8000\n" for i in range(n))
    assert len(parse_config(text).engines) == n
    with pytest.raises(ConfigError) as err:
        parse_config(text + "  - url: http://10.0.0.0:8000\n", "cfg.yaml")
    assert (err.value.line, err.value.field_path) == (n + 2, f"engines[{n}]")


# --- property-based: arbitrary input never raises anything but ConfigError -------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TOKENS = ["engines:", "refresh_s:", "window_s:", "slo:", "kube:", "profiles:", "p:", "model:", "url:", "name:",
          "env:", "extra_args:", "- ", ": ", "\n", "  ", "    ", "[", "]", "{", "}", ",", "&a ", "*a", "&b ", "*b",
          "? ", "<<: ", "!!str ", "!!int ", "!!binary ", "!x ", "'", '"', "#", "---\n", "...\n", "|", ">",
          ".inf", "-.inf", ".nan", "1e400", "0x1F", "0o17", "1_000", "-1", "0.00001", "9" * 50, "~", "null",
          "true", "yes", "2024-01-01", "http://a:1", "\\x00", "\t", "\x85", "é", "\U0001f600"]

yamlish = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
quick = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _parses_or_config_error(data, pure_python: bool = False) -> None:
    try:
        parse_config(data, "cfg.yaml", pure_python=pure_python)
    except ConfigError as e:
        assert "\n" not in str(e)


@quick
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_only_raise_config_error(data):
    _parses_or_config_error(data)


@quick
@given(st.text(max_size=2000))
def test_arbitrary_text_only_raises_config_error(text):
    _parses_or_config_error(text)


@quick
@given(yamlish)
def test_yaml_like_text_only_raises_config_error(text):
    _parses_or_config_error(text)


@quick
@given(yamlish)
def test_yaml_like_text_only_raises_config_error_pure_python(text):
    _parses_or_config_error(text, pure_python=True)


# --- the command line: each case exits 2 with one line -------------------------------------------------

@pytest.mark.parametrize("case", ["bomb", "deep", "nul", "int", "inf"])
def test_cli_hostile_config_exits_2_with_one_line(tmp_path, case):
    text = {"bomb": anchored_key_bomb(), "deep": "a:\n" + "[" * 5000 + "\n", "nul": "refresh_s: 1\0\n",
            "int": "refresh_s: " + "7" * 5000 + "\n", "inf": "refresh_s: .inf\n"}[case]
    f = tmp_path / "config.yaml"
    f.write_text(text)
    r = run_cli("snapshot", "--config", str(f), "--window", "0")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"infertop: {f}:"), r.stderr


KEYS = ["engines", "refresh_s", "window_s", "history_s", "theme", "read_only", "slo", "gpu", "kube", "profiles",
        "url", "name", "max_num_seqs", "timeout_s", "ttft_p99_s", "kv_cache_pct", "dcgm", "namespaces", "metrics_port",
        "drain_then", "model", "port", "env", "extra_args", "gpu_memory_utilization", "tiny"]
leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                   st.sampled_from(["http://a:1", "fcfs", "delete"]))
documents = st.dictionaries(st.sampled_from(KEYS), st.recursive(
    leaves, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
    max_leaves=30), max_size=8)


@quick
@given(documents)
def test_schema_shaped_documents_load_finite_or_raise_config_error(doc):
    import yaml

    try:
        cfg = parse_config(yaml.safe_dump(doc), "cfg.yaml")
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    numbers = [cfg.refresh_s, cfg.window_s, cfg.history_s, cfg.slo.ttft_p99_s, cfg.slo.kv_cache_pct]
    numbers += [e.timeout_s for e in cfg.engines] + [p.port for p in cfg.profiles.values()]
    assert all(math.isfinite(v) for v in numbers) and 0.1 <= cfg.refresh_s <= 600
