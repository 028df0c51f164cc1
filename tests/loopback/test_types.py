"""The type check (issue 26): the modules listed here pass mypy with no error. The list grows as
layers are cleaned; a new error in one of them fails this test."""

from __future__ import annotations

import subprocess
import sys

import pytest

TYPED = ["infertop/domain", "infertop/format.py", "infertop/config.py", "infertop/config_load.py", "infertop/text.py",
         "infertop/sources", "infertop/analysis", "infertop/state", "infertop/control", "infertop/gateway",
         "infertop/__init__.py", "infertop/__main__.py", "infertop/cli.py", "infertop/crash.py", "infertop/demo.py",
         "infertop/event_loop.py", "infertop/flight_cli.py", "infertop/gpu_snapshot.py", "infertop/pipes.py",
         "infertop/private_fs.py", "infertop/snapshot.py", "infertop/ui/controllers", "infertop/sim",
         "infertop/ui/widgets", "infertop/ui/screens", "infertop/ui/status.py", "infertop/ui/commands.py",
         "infertop/ui/actions.py", "infertop/ui/themes.py", "infertop/ui/fastpaint/__init__.py",
         "infertop/ui/fastpaint/compositor.py", "infertop/ui/fastpaint/direct_lines.py",
         "infertop/ui/fastpaint/driver.py", "infertop/ui/kube_connection.py"]
# ui/controllers holds the Kubernetes (kube.py, kube_connection.py, kube_header.py, kube_reads.py,
# kube_scope.py) and running actions (actions.py) controllers. Not yet: ui/app.py and its mixins (app_paint,
# app_navigation, remedy_actions: they become controllers), ui/fastpaint/lean.py (LeanTable, to be replaced by a
# maintained table).


def test_the_typed_modules_pass_mypy():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                          "--no-incremental", *TYPED], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:]
