"""The state directory and everything infertop creates under it are owner-only (README: 0700)."""

from __future__ import annotations

import os
import stat

from infertop.control.audit import AuditLog
from infertop.control.engines.state import private_dir as engine_private_dir
from infertop.demo import demo_kubeconfig_path, demo_state_dir
from infertop.private_fs import private_dir
from infertop.sim import SimCluster
from infertop.sim.kube.cluster import SimKube


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_every_directory_created_is_owner_only_parents_included(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg" / "state"))
    os.umask(0o022)
    path = private_dir(tmp_path / "xdg" / "state" / "infertop" / "engines")
    for p in (path, path.parent, path.parent.parent, path.parent.parent.parent):
        assert mode(p) == 0o700, (p, oct(mode(p)))


def test_the_demo_kubeconfig_folder_and_the_state_root_are_owner_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "state" / "infertop"
    root.mkdir(parents=True, mode=0o755)  # left by an older infertop
    os.chmod(root, 0o755)
    kc = demo_kubeconfig_path()
    assert mode(root) == 0o700 and mode(demo_state_dir()) == 0o700 and kc.parent == demo_state_dir()


def test_the_sim_cluster_kubeconfig_parents_are_owner_only(tmp_path):
    os.umask(0o022)
    sim = SimCluster(1, seed=1, load="none", dcgm=False)  # not started: only the emulator serves
    kube = SimKube(sim)
    kube.emu.start()
    try:
        target = kube.write_kubeconfig(tmp_path / "a" / "b" / "kc")
    finally:
        kube.emu.stop()
    assert mode(tmp_path / "a") == 0o700 and mode(tmp_path / "a" / "b") == 0o700 and mode(target) == 0o600


def test_an_audit_log_folder_the_user_chose_is_created_private_but_never_tightened(tmp_path):
    os.umask(0o022)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    AuditLog(str(shared / "audit.jsonl")).check_writable()
    assert mode(shared) == 0o755  # the user's folder: left as it is
    AuditLog(str(tmp_path / "new" / "logs" / "audit.jsonl")).check_writable()
    assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "logs") == 0o700


def test_the_engine_state_helper_is_the_same(tmp_path):
    os.umask(0o022)
    d = engine_private_dir(tmp_path / "x" / "y")
    assert mode(d) == 0o700 and mode(d.parent) == 0o700
