"""The type check (issue 26): the modules listed here pass mypy with no error. The list grows as
layers are cleaned; a new error in one of them fails this test."""

from __future__ import annotations

import subprocess
import sys

import pytest

TYPED = ["infertop/domain", "infertop/format.py", "infertop/config.py", "infertop/config_build.py", "infertop/config_load.py", "infertop/text.py",
         "infertop/sources", "infertop/analysis", "infertop/state", "infertop/control", "infertop/gateway",
         "infertop/__init__.py", "infertop/__main__.py", "infertop/cli.py", "infertop/crash.py", "infertop/demo.py",
         "infertop/event_loop.py", "infertop/flight_cli.py", "infertop/gpu_snapshot.py", "infertop/pipes.py",
         "infertop/private_fs.py", "infertop/snapshot.py", "infertop/ui/controllers", "infertop/sim",
         "infertop/ui/widgets", "infertop/ui/screens", "infertop/ui/status.py", "infertop/ui/commands.py",
         "infertop/ui/actions.py", "infertop/ui/themes.py", "infertop/ui/fastpaint", "infertop/ui/app.py"]
# Every module of the package but the simulator's test-only parts is here; ui/controllers holds the App's
# controllers (paint, navigation, remedies, Kubernetes, running actions, engines, queues, advisor, …).


def test_the_typed_modules_pass_mypy():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                          "--no-incremental", *TYPED], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:]
