"""Keep the README true: every key in the action table is documented there."""

from pathlib import Path

from infertop.ui.actions import ACTIONS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
SPELLING = {"tab": "Tab", "shift+tab": "Shift+Tab", "slash": "/", "escape": "Esc", "enter": "Enter",
            "question_mark": "?", "space": "Space", "right_square_bracket": "]", "left_square_bracket": "[",
            "plus": "+", "minus": "-"}


def spelled(key: str) -> str:
    if key.startswith("ctrl+"):
        return "Ctrl+" + key[5:].upper()
    return SPELLING.get(key, key)


def test_every_binding_is_in_the_readme():
    missing = [a.keys for a in ACTIONS for k in a.keys.split(",") if f"`{spelled(k)}`" not in README]
    assert missing == []


def test_readme_test_command_is_what_ci_runs():
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "make test" in README and "make test" in ci
