"""The tests' own layout rules: a test module never imports another test module or a conftest (what
two tests share lives in tests/support), and there is one import style (absolute, no relative
imports). A shared helper renamed in one test file broke another's collection in every tier
(CI: ``cannot import name '_require_prometheus'``)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[int, str, int]]:
    """(line, module, level) of every ``from … import`` and ``import`` in ``path``."""
    found: list[tuple[int, str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.module or "", node.level))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, 0) for alias in node.names)
    return found


def _test_sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def test_the_rules_see_every_tier():
    tiers = {p.relative_to(TESTS).parts[0] for p in _test_sources() if p.name.startswith("test_")}
    assert {"unit", "loopback", "tui", "hostile", "real"} <= tiers


def test_no_test_module_imports_another_test_module_or_a_conftest():
    offences = [
        f"{p.relative_to(TESTS)}:{line} imports {module}"
        for p in _test_sources()
        for line, module, _level in _imports(p)
        if module.rsplit(".", 1)[-1].startswith("test_") or module.rsplit(".", 1)[-1] == "conftest"
    ]
    assert offences == []


def test_no_relative_imports():
    offences = [
        f"{p.relative_to(TESTS)}:{line} from {'.' * level}{module}"
        for p in _test_sources()
        for line, module, level in _imports(p)
        if level
    ]
    assert offences == []
