"""The Kubernetes API emulator now lives in the package (``infertop.sim.kube``), so that
``infertop sim --kube-port`` can serve it; this is a thin re-export so the tests keep
importing ``kube_emulator`` (and its submodules) from tests/support/ as before."""

import importlib
import sys

from infertop.sim.kube import KubeEmulator, Request

__all__ = ["KubeEmulator", "Request"]

for _name in ("access", "api", "controller_base", "controllers", "defaults", "deployments", "errors", "events",
              "hpa", "http_server", "kubelet", "patch", "pod_runtime", "quantities", "replicasets", "resources",
              "routing", "scheduler", "seed_autoscalers", "seed_objects", "selectors", "server", "statefulsets",
              "store", "subresources", "typecheck", "util", "validation", "watch"):
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"infertop.sim.kube.{_name}")
