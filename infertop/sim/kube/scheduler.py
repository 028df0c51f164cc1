"""The default scheduler: binds each unscheduled pod to a node, round-robin over the
nodes, honouring cordons, taints and tolerations, nodeSelector and free ``nvidia.com/gpu``;
a pod that fits nowhere gets PodScheduled=False and a FailedScheduling Event naming why."""

from __future__ import annotations

from collections import Counter

from .controller_base import GPU, NODES, PODS, ControllerBase, is_terminating, pod_gpus
from .quantities import parse_quantity
from .store import clone
from .util import find_condition, set_condition


class Scheduler(ControllerBase):
    """Binds the pending pods; remembers where the round-robin stopped."""

    def __init__(self, emu):
        super().__init__(emu)
        self._sched_cursor = 0  # the node the round-robin tries first

    @staticmethod
    def node_ready(node: dict) -> bool:
        cond = find_condition((node.get("status") or {}).get("conditions"), "Ready")
        return cond is None or cond.get("status") == "True"

    @staticmethod
    def _tolerates(pod: dict, taint: dict) -> bool:
        for t in (pod.get("spec") or {}).get("tolerations") or []:
            if t.get("effect") and t.get("effect") != taint.get("effect"):
                continue
            if t.get("operator") == "Exists":
                if not t.get("key") or t.get("key") == taint.get("key"):
                    return True
            elif t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
                return True
        return False

    def run(self) -> None:
        nodes = list(self.store.iter(NODES))
        used: dict[str, float] = {}  # GPUs taken per node (quantities may be fractional)
        for pod in self.store.iter(PODS):
            node = pod["spec"].get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                used[node] = used.get(node, 0.0) + pod_gpus(pod)
        for pod in list(self.store.iter(PODS)):
            if pod["spec"].get("nodeName") or is_terminating(pod):
                continue
            if pod["spec"].get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            need = pod_gpus(pod)
            reasons: Counter = Counter()
            chosen = None
            n = len(nodes)
            for k in range(n):
                idx = (self._sched_cursor + k) % n
                node = nodes[idx]
                labels = node["metadata"].get("labels") or {}
                if (node.get("spec") or {}).get("unschedulable"):
                    reasons["node(s) were unschedulable"] += 1
                    continue
                if not self.node_ready(node):
                    reasons["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"] += 1
                    continue
                bad = next((t for t in (node.get("spec") or {}).get("taints") or []
                            if t.get("effect") in ("NoSchedule", "NoExecute") and not self._tolerates(pod, t)),
                           None)
                if bad is not None:
                    reasons[f"node(s) had untolerated taint {{{bad.get('key')}: {bad.get('value', '')}}}"] += 1
                    continue
                selector = pod["spec"].get("nodeSelector") or {}
                if any(labels.get(k2) != v for k2, v in selector.items()):
                    reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                    continue
                alloc = (node.get("status") or {}).get("allocatable") or {}
                free = parse_quantity(alloc.get(GPU, 0)) - used.get(node["metadata"]["name"], 0.0)
                if need > 0 and free < need:
                    reasons[f"Insufficient {GPU}"] += 1
                    continue
                chosen = node
                self._sched_cursor = idx + 1
                break
            new = clone(pod)
            conds = new.setdefault("status", {}).setdefault("conditions", [])
            if chosen is not None:
                node_name = chosen["metadata"]["name"]
                new["spec"]["nodeName"] = node_name
                used[node_name] = used.get(node_name, 0.0) + need
                set_condition(conds, "PodScheduled", "True", None, None, self.ts(), probe=True)
                self.store.put(PODS, new)
                self._event(PODS, new, "Normal", "Scheduled",
                            f"Successfully assigned {new['metadata']['namespace']}/{new['metadata']['name']} "
                            f"to {node_name}", "default-scheduler")
            else:
                if not nodes:
                    message = "no nodes available to schedule pods"
                else:
                    detail = ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
                    message = (f"0/{len(nodes)} nodes are available: {detail}. preemption: 0/{len(nodes)} nodes "
                               f"are available: {len(nodes)} Preemption is not helpful for scheduling.")
                old = find_condition(conds, "PodScheduled")
                if old is not None and old.get("message") == message and old.get("status") == "False":
                    continue
                set_condition(conds, "PodScheduled", "False", "Unschedulable", message, self.ts(), probe=True)
                self.store.put(PODS, new)
                self._event(PODS, new, "Warning", "FailedScheduling", message, "default-scheduler")
