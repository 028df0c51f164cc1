"""The one YAML reader (infertop/config_load.py): limits on size, depth and alias expansion, errors
that name file and line — and the config, the gateway's files, themes and bundles all read through it."""

from __future__ import annotations

import pytest

from infertop.config import parse_config
from infertop.config_load import ConfigError, Limits, load, read_file
from infertop.gateway.files import load_api_keys, load_weights
from infertop.state.recording.bundle import config_secrets
from infertop.ui import themes


def laughs(levels: int = 9, width: int = 9) -> str:
    """A "billion laughs" document: ``width ** levels`` strings once every alias is expanded (~400 bytes)."""
    names = [chr(ord("a") + i) for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [" + ", ".join(["lol"] * width) + "]"]
    for prev, name in zip(names, names[1:]):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_plain_data_like_safe_load():
    assert load("a: 1\nb: [x, 2.5, true, null]\nc: {d: e}\n", "f.yaml") == {
        "a": 1, "b": ["x", 2.5, True, None], "c": {"d": "e"}}
    assert load("", "f.yaml") is None
    assert load("# only a comment\n", "f.yaml") is None


def test_too_big_is_refused_before_parsing():
    with pytest.raises(ConfigError) as err:
        load("a: 1\n" + "#" * 2048, "f.yaml", Limits(max_bytes=1024))
    assert str(err.value) == "f.yaml: larger than 1 KiB"


def test_too_big_a_file_is_never_read_past_the_limit(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_bytes(b"#" * (2 * 2**20))
    with pytest.raises(ConfigError, match=r"big\.yaml: larger than 1 MiB$"):
        read_file(f, Limits(max_bytes=2**20))


def test_an_alias_bomb_is_refused_not_expanded():
    text = laughs()
    assert len(text.encode()) < 400
    with pytest.raises(ConfigError) as err:
        load(text, "bomb.yaml")
    assert err.value.path == "bomb.yaml" and err.value.line is not None
    assert "expands to more than 2000000 nodes" in err.value.message


def test_a_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match=r"^f\.yaml:1: recursive alias \*a$"):
        load("&a [*a]\n", "f.yaml")


def test_too_deep_is_refused_with_its_line():
    text = "x:\n" + "".join("  " * i + "- \n" for i in range(1, 5)) + "  " * 5 + "- [[[[[[[[[[1]]]]]]]]]]\n"
    with pytest.raises(ConfigError) as err:
        load(text, "deep.yaml", Limits(max_depth=8))
    assert err.value.message == "nested deeper than 8 levels"
    assert err.value.line == 6


@pytest.mark.parametrize("pure_python", [False, True], ids=["libyaml", "pure-python"])
def test_a_syntax_error_names_its_line(pure_python):
    with pytest.raises(ConfigError) as err:
        load("a: 1\nb: 2\nc: [3\n", "f.yaml", pure_python=pure_python)
    assert str(err.value).startswith("f.yaml:4: invalid YAML: ")
    assert "\n" not in str(err.value)


def test_unsafe_tags_and_odd_values_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"^f\.yaml:2: invalid value: could not determine a constructor"):
        load("a: 1\nb: !!python/object:os.system 1\n", "f.yaml")
    with pytest.raises(ConfigError, match=r"^f\.yaml: invalid value: a number too large$"):
        load("a: " + "9" * 5000 + "\n", "f.yaml")
    with pytest.raises(ConfigError, match=r"^f\.yaml:1: not UTF-8 text$"):
        load(b"a: \xff\n", "f.yaml")


def test_a_fifo_or_directory_is_refused_unread(tmp_path):
    with pytest.raises(ConfigError, match="not a regular file"):
        read_file(tmp_path)
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read: No such file"):
        read_file(tmp_path / "nope.yaml")


# --- each caller reads through it ---

def test_the_config_refuses_an_alias_bomb():
    with pytest.raises(ConfigError, match=r"^cfg\.yaml:\d+: expands to more than"):
        parse_config(laughs(), "cfg.yaml")


def test_a_gateway_keys_file_that_is_an_alias_bomb_is_refused(tmp_path):
    f = tmp_path / "keys.yaml"
    f.write_text(laughs())
    with pytest.raises(ValueError, match=r"keys\.yaml:\d+: expands to more than 1000000 nodes"):
        load_api_keys(str(f))


def test_a_gateway_weights_file_keeps_its_line_and_never_quotes_the_text(tmp_path):
    f = tmp_path / "weights.yaml"
    f.write_text("interactive:\n  weight: 2\nbatch: [sk-secret\n")
    with pytest.raises(ValueError) as err:
        load_weights(str(f), {"interactive", "batch"})
    assert str(err.value) == f"{f}:4: not valid YAML"
    f.write_text("#" * (2**20 + 1))
    with pytest.raises(ValueError, match=r"weights\.yaml: larger than 1 MiB$"):
        load_weights(str(f), {"interactive"})


def test_a_theme_file_that_is_an_alias_bomb_is_refused_with_a_clear_message(tmp_path, monkeypatch):
    d = tmp_path / "cfg" / "infertop" / "themes"
    d.mkdir(parents=True)
    (d / "laughs.yaml").write_text("name: laughs\nprimary: '#ff0000'\nvariables:\n" + "".join(
        "  " + line + "\n" for line in laughs(6, 9).splitlines()))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    problem = themes.broken_theme("laughs")
    assert problem is not None and problem.startswith(f"theme {d / 'laughs.yaml'}:")
    assert "expands to more than 10000 nodes" in problem
    loaded, problems = themes.load_themes()
    assert "laughs" not in {t.name for t in loaded}
    assert problems == [problem]


def test_a_theme_syntax_error_names_file_and_line(tmp_path, monkeypatch):
    d = tmp_path / "cfg" / "infertop" / "themes"
    d.mkdir(parents=True)
    (d / "bad.yaml").write_text("name: bad\nprimary: [red\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert themes.broken_theme("bad").startswith(f"theme {d / 'bad.yaml'}:3: invalid YAML: ")


def test_a_bundle_scrubs_a_config_that_reads_and_skips_an_alias_bomb():
    assert config_secrets("engines:\n  - url: http://x:1\n    api_key: sk-live-123456\n") == {"sk-live-123456"}
    assert config_secrets(laughs()) == set()  # refused, not expanded: the line-by-line redaction still runs
