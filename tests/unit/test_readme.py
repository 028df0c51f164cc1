"""Keep the README and docs/ true: every key of the action table is documented, every link resolves."""

import re
from pathlib import Path

from locations import REPO

from infertop.ui.actions import ACTIONS, key_display

ROOT = REPO
README = (ROOT / "README.md").read_text()
KEYS_DOC = (ROOT / "docs" / "keys.md").read_text()
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _missing_keys(text: str) -> list[str]:
    """Spelled as the footer and help spell it (``^R``)."""
    return [a.keys for a in ACTIONS for k in a.keys.split(",") if f"`{key_display(k)}`" not in text]


def test_every_binding_is_in_the_readme_key_table_and_in_docs_keys():
    assert _missing_keys(README) == []
    assert _missing_keys(KEYS_DOC) == []
    assert "(docs/keys.md)" in README


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in README and "make test" in ci


def _anchors(md: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in md.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", title)))
    return out


def _broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: — not ours to check
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            broken.append(target)
    return broken


def test_readme_and_docs_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert {p: b for p in pages if (b := _broken_links(p))} == {}
    linked = set(re.findall(r"\(docs/([\w-]+\.md)\)", README))
    assert linked == {p.name for p in pages[1:]}, "the README links every docs page"
