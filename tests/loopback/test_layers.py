"""Direction of dependencies: only infertop.ui may import textual or rich."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from locations import REPO

import infertop

NON_UI = sorted(
    m.name
    for m in pkgutil.walk_packages(infertop.__path__, "infertop.")
    if not m.name.startswith(("infertop.ui", "infertop.cli", "infertop.__main__"))
)


def test_non_ui_modules_never_import_textual_or_rich():
    # textual at run time; rich only statically (the import-linter contract below): httpx imports
    # rich for its command line whenever click is installed, and the test tools install click.
    code = (
        "import importlib, sys\n"
        f"for name in {NON_UI!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"UI libraries imported by non-UI modules: {out.stdout}"
    assert "infertop.sources.expfmt" in NON_UI and "infertop.domain.quantiles" in NON_UI


def test_the_import_linter_contracts_hold():
    """domain < sources < analysis < state < control < ui; sim and gateway stand alone; only the UI
    imports textual/rich (.importlinter; its ignore_imports are today's known exceptions)."""
    from pathlib import Path

    root = REPO
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache", str(root / ".importlinter")], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "3 kept, 0 broken" in out.stdout
