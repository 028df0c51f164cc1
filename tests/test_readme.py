"""Keep the README true: every key in the action table is documented there."""

from pathlib import Path

from infertop.ui.actions import ACTIONS, key_display

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_binding_is_in_the_readme():
    """Spelled as the footer and help spell it (``^R``)."""
    missing = [a.keys for a in ACTIONS for k in a.keys.split(",") if f"`{key_display(k)}`" not in README]
    assert missing == []


def test_readme_test_command_is_what_ci_runs():
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "make test" in README and "make test" in ci
