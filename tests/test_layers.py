"""Direction of dependencies: only infertop.ui may import textual or rich."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import infertop

NON_UI = sorted(
    m.name
    for m in pkgutil.walk_packages(infertop.__path__, "infertop.")
    if not m.name.startswith(("infertop.ui", "infertop.cli", "infertop.__main__"))
)


def test_non_ui_modules_never_import_textual_or_rich():
    code = (
        "import importlib, sys\n"
        f"for name in {NON_UI!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"UI libraries imported by non-UI modules: {out.stdout}"
    assert "infertop.sources.expfmt" in NON_UI and "infertop.analysis.quantiles" in NON_UI
