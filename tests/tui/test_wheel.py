"""The wheel a user installs works on its own: built from this tree, installed into a clean
virtualenv (dependencies borrowed from the project's, never infertop itself), run from outside
the checkout — the themes ship inside it (``t`` switches theme), ``snapshot --demo`` runs."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from locations import REPO

ROOT = REPO

PILOT = textwrap.dedent("""
    import asyncio, infertop
    from infertop.config import Config, GpuConfig
    from infertop.ui.app import InfertopApp, Settings

    async def main():
        assert "{root}" not in infertop.__file__, infertop.__file__
        app = InfertopApp(Settings(config=Config(gpu=GpuConfig(nvml=False)), endpoints=[], state_dir="{state}"),
                          poll=False)
        async with app.run_test(size=(100, 30)) as pilot:
            assert app.theme == "infertop-dark", app.theme
            await pilot.press("t")
            await pilot.pause()
            assert app.theme == "infertop-light", app.theme
        print("themes ok")

    asyncio.run(main())
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(ROOT)], check=True, timeout=300, stdin=subprocess.DEVNULL)
    (whl,) = out.glob("infertop-*.whl")
    return whl


def test_the_wheel_carries_the_themes(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(p.name for p in (ROOT / "themes").glob("*.yaml"))
    assert shipped and sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("infertop/themes/")) == shipped


def test_the_installed_wheel_runs_outside_the_checkout(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # the project's dependencies, but not its editable infertop (a .pth in a .pth-added folder is not run)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, timeout=300, stdin=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"))
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = PILOT.format(root=str(ROOT), state=str(tmp_path / "state"))
    run = subprocess.run([str(py), "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "themes ok" in run.stdout, run.stderr[-2000:]
    snap = subprocess.run([str(venv / "bin" / "infertop"), "snapshot", "--demo", "--window", "1", "--json"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert snap.returncode in (0, 1), snap.stderr[-2000:]
    assert '"engines"' in snap.stdout and "crashed" not in snap.stderr
