"""A node drain plan counts PodDisruptionBudgets across all its evictions, before it asks (issue 28 item 3).

Against the Kubernetes API emulator over HTTP: the server checks each eviction alone (every dry run passes),
so two evictions that break a budget together are flagged by the plan, not discovered mid-drain.
"""

from __future__ import annotations

import pytest

from infertop.config import KubeConfig
from infertop.control.audit import AuditLog
from infertop.control.kube import KubeControl
from infertop.sources.kube import KubeSession

TOKEN = "kube-pdb-token"
NS = "inference"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.02)


@pytest.fixture
def ctl(emu, tmp_path):
    path = emu.write_kubeconfig(tmp_path / "kubeconfig", context="lab", user="oncall")
    session = KubeSession.connect(str(path), namespaces=[NS])
    yield KubeControl(session, AuditLog(tmp_path / "audit.jsonl", user="alice"),
                      KubeConfig(eviction_retry_s=0.1, node_drain_timeout_s=30.0), poll_s=0.02)
    session.close()


def _ready(emu, names: list[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in emu.list("pods", NS)}
    return all(n in pods and {c["type"]: c["status"] for c in pods[n]["status"].get("conditions") or []}
               .get("Ready") == "True" for n in names)


def _three_pods(emu) -> None:
    """vllm-0 and vllm-1 on gpu-a, vllm-2 on gpu-b, all app=vllm and Ready."""
    for name, node in (("vllm-0", "gpu-a"), ("vllm-1", "gpu-a"), ("vllm-2", "gpu-b")):
        emu.add_pod(NS, name, labels={"app": "vllm"}, node_name=node)
    emu.wait_until(lambda: _ready(emu, ["vllm-0", "vllm-1", "vllm-2"]))


def _budget_counted(emu, name: str, healthy: int) -> None:
    emu.wait_until(lambda: (emu.get("poddisruptionbudgets", name, NS).get("status") or {})
                   .get("currentHealthy") == healthy)


def test_two_evictions_that_break_min_available_together_are_flagged_before_confirmation(emu, ctl):
    _three_pods(emu)
    emu.add_pdb(NS, "vllm-pdb", {"app": "vllm"}, min_available=2)  # 3 healthy: 1 disruption allowed
    _budget_counted(emu, "vllm-pdb", 3)
    plan = ctl.prepare("drain_node", "Node", None, "gpu-a")
    assert ("! evicting vllm-0 and vllm-1 leaves 1 of minAvailable 2 for PDB inference/vllm-pdb: the second "
            "eviction will be refused (429) until one is back") in plan.warnings
    assert not any(s.startswith("every eviction fits") for s in plan.steps)
    dry = ctl.dry_run(plan)  # each eviction alone passes the server's dry run
    assert dry.ok and "together they break a PodDisruptionBudget" in dry.message


def test_max_unavailable_counts_the_evictions_together_too(emu, ctl):
    _three_pods(emu)
    emu.add_pdb(NS, "vllm-mu", {"app": "vllm"}, max_unavailable=1)
    _budget_counted(emu, "vllm-mu", 3)
    plan = ctl.prepare("drain_node", "Node", None, "gpu-a")
    assert ("! evicting vllm-0 and vllm-1 makes 2 unavailable of maxUnavailable 1 for PDB inference/vllm-mu: the "
            "second eviction will be refused (429) until one is back") in plan.warnings


def test_evictions_within_the_budget_say_so_and_a_budget_of_other_pods_is_not_counted(emu, ctl):
    _three_pods(emu)
    emu.add_pod(NS, "router-0", labels={"app": "router"}, node_name="gpu-b")
    emu.add_pdb(NS, "vllm-pdb", {"app": "vllm"}, min_available=1)  # 3 healthy: 2 disruptions allowed
    emu.add_pdb(NS, "router-pdb", {"app": "router"}, min_available=1)  # its pod is on gpu-b
    _budget_counted(emu, "vllm-pdb", 3)
    plan = ctl.prepare("drain_node", "Node", None, "gpu-a")
    assert not any(w.startswith("!") for w in plan.warnings)
    assert ("every eviction fits its PodDisruptionBudget (PDB inference/vllm-pdb allows 2 disruptions: "
            "2 evictions within it)") in plan.steps
    assert ctl.dry_run(plan).message == "the server accepts the cordon and the evictions (dry run)"


def test_budgets_that_cannot_be_read_are_said_in_the_review(emu, ctl):
    _three_pods(emu)
    emu.add_pdb(NS, "vllm-pdb", {"app": "vllm"}, min_available=2)
    emu.set_rules([("*", "", "*"), ("*", "", "pods", "eviction"), ("*", "apps", "*")])  # no policy group
    plan = ctl.prepare("drain_node", "Node", None, "gpu-a")
    assert ("the PodDisruptionBudgets could not be read (forbidden: list poddisruptionbudgets in inference): an "
            "eviction they refuse shows only when the drain sends it") in plan.warnings
