"""Seeding the emulated cluster as a test or the demo wants it: namespaces, nodes (GPUs,
conditions, cordons), workloads, pods, ConfigMaps, Services and PodDisruptionBudgets.
:class:`ObjectSeeding` is a base of the emulator."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from . import resources as R
from .emulator_state import EmulatorState
from .resources import resource_type
from .store import clone
from .util import format_time, set_condition


class ObjectSeeding(EmulatorState):
    """Builders of the objects a cluster starts with, as methods of the emulator (its
    ``api``, ``store``, ``clock`` and ``rng``)."""

    def add_namespace(self, name: str, labels: dict | None = None) -> dict:
        existing = self.get("namespaces", name)
        if existing is not None:
            return existing
        return self.api.create(R.BY_KIND["Namespace"], None,
                               {"metadata": {"name": name, "labels": dict(labels or {})}})

    def _ensure_namespace(self, namespace: str) -> None:
        if self.store.peek(R.BY_KIND["Namespace"], "", namespace) is None:
            self.add_namespace(namespace)

    def add_node(self, name: str, gpus: int = 8, *, cpu: str = "64", memory: str = "512Gi",
                 labels: dict | None = None, unschedulable: bool = False, taints: list | None = None,
                 ready: bool = True, gpu_product: str = "NVIDIA-H100-80GB-HBM3",
                 address: str | None = None) -> dict:
        self._node_count += 1
        address = address or f"127.1.0.{10 + self._node_count}"  # loopback: nothing emulated is off the machine
        now = format_time(self.clock())
        resources = {"cpu": str(cpu), "memory": str(memory), "pods": "110", "ephemeral-storage": "1Ti"}
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if gpus:
            resources["nvidia.com/gpu"] = str(gpus)
            node_labels.update({"nvidia.com/gpu.product": gpu_product, "nvidia.com/gpu.count": str(gpus)})
        node_labels.update(labels or {})
        taints = list(taints or [])
        if unschedulable:
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": now})

        def cond(ctype, status, reason, message):
            return {"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": now, "lastTransitionTime": now}

        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"podCIDR": f"127.{self._node_count}.0.0/16"},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [
                    cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                         "kubelet has sufficient memory available"),
                    cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    cond("Ready", "True" if ready else "False", "KubeletReady" if ready else "KubeletNotReady",
                         "kubelet is posting ready status" if ready else "container runtime is down"),
                ],
                "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": f"{self.rng.getrandbits(128):032x}",
                    "systemUUID": f"{self.rng.getrandbits(128):032x}",
                    "bootID": f"{self.rng.getrandbits(128):032x}",
                    "kernelVersion": "6.8.0-1015-nvidia",
                    "osImage": "Ubuntu 24.04.1 LTS",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": "v1.33.1",
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
            },
        }
        if unschedulable:
            node["spec"]["unschedulable"] = True
        if taints:
            node["spec"]["taints"] = taints
        return self.api.create(R.BY_KIND["Node"], None, node, keep_status=True)

    def _set_node(self, name: str, fn: Callable[[dict], None]) -> dict:
        rt = R.BY_KIND["Node"]
        with self.store.lock:
            node = self.api.get_current(rt, None, name)
            fn(node)
            return self.store.put(rt, node)

    def cordon(self, name: str) -> dict:
        def fn(node):
            node["spec"]["unschedulable"] = True
            taints = node["spec"].setdefault("taints", [])
            if not any(t.get("key") == "node.kubernetes.io/unschedulable" for t in taints):
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                               "timeAdded": format_time(self.clock())})
        return self._set_node(name, fn)

    def uncordon(self, name: str) -> dict:
        def fn(node):
            node["spec"].pop("unschedulable", None)
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != "node.kubernetes.io/unschedulable"]
            if taints:
                node["spec"]["taints"] = taints
            else:
                node["spec"].pop("taints", None)
        return self._set_node(name, fn)

    def set_node_ready(self, name: str, ready: bool) -> dict:
        def fn(node):
            conds = node["status"].setdefault("conditions", [])
            set_condition(conds, "Ready", "True" if ready else "False",
                          "KubeletReady" if ready else "NodeStatusUnknown",
                          "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
                          format_time(self.clock()))
        return self._set_node(name, fn)

    @staticmethod
    def _container(name: str, image: str, args, command, gpus, port, env, resources) -> dict:
        c: dict = {"name": name, "image": image}
        if command:
            c["command"] = list(command)
        if args:
            c["args"] = list(args)
        if port:
            c["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        if env:
            c["env"] = [{"name": k, "value": str(v)} for k, v in env.items()] if isinstance(env, dict) else list(env)
        res = clone(resources) if resources else {}
        if gpus:
            res.setdefault("limits", {})["nvidia.com/gpu"] = str(gpus)
            res.setdefault("requests", {})["nvidia.com/gpu"] = str(gpus)
        if res:
            c["resources"] = res
        return c

    def _workload(self, kind: str, namespace: str, name: str, replicas: int, image: str, args, labels,
                  gpu_per_pod, *, container_name: str, port: int | None, env, command, resources,
                  annotations, template_annotations, extra_spec: dict, selector: dict | None = None) -> dict:
        self._ensure_namespace(namespace)
        labels = dict(labels or {"app": name})
        template: dict = {
            "metadata": {"labels": dict(labels)},
            "spec": {"containers": [self._container(container_name, image, args, command, gpu_per_pod, port, env,
                                                    resources)]},
        }
        if template_annotations:
            template["metadata"]["annotations"] = dict(template_annotations)
        obj: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(selector or labels)}, "template": template,
                     **extra_spec},
        }
        if annotations:
            obj["metadata"]["annotations"] = dict(annotations)
        return self.api.create(resource_type(kind), namespace, obj)

    def add_deployment(self, namespace: str, name: str, replicas: int = 1,
                       image: str = "vllm/vllm-openai:v0.9.2", args: list[str] | None = None,
                       labels: dict | None = None, gpu_per_pod: int = 1, *, container_name: str = "vllm",
                       port: int | None = 8000, env: dict | list | None = None, command: list[str] | None = None,
                       resources: dict | None = None, annotations: dict | None = None,
                       template_annotations: dict | None = None, strategy: dict | None = None,
                       progress_deadline_seconds: int | None = None, min_ready_seconds: int | None = None,
                       selector: dict | None = None) -> dict:
        """Create a Deployment (labels default to ``{"app": name}``, also its selector unless ``selector``)."""
        extra: dict = {}
        if strategy:
            extra["strategy"] = strategy
        if progress_deadline_seconds is not None:
            extra["progressDeadlineSeconds"] = progress_deadline_seconds
        if min_ready_seconds is not None:
            extra["minReadySeconds"] = min_ready_seconds
        return self._workload("Deployment", namespace, name, replicas, image, args, labels, gpu_per_pod,
                              container_name=container_name, port=port, env=env, command=command,
                              resources=resources, annotations=annotations,
                              template_annotations=template_annotations, extra_spec=extra, selector=selector)

    def add_statefulset(self, namespace: str, name: str, replicas: int = 1,
                        image: str = "vllm/vllm-openai:v0.9.2", args: list[str] | None = None,
                        labels: dict | None = None, gpu_per_pod: int = 1, *, container_name: str = "vllm",
                        port: int | None = 8000, env: dict | list | None = None, command: list[str] | None = None,
                        resources: dict | None = None, annotations: dict | None = None,
                        template_annotations: dict | None = None, service_name: str | None = None,
                        pod_management_policy: str | None = None) -> dict:
        extra: dict = {"serviceName": service_name or name}
        if pod_management_policy:
            extra["podManagementPolicy"] = pod_management_policy
        return self._workload("StatefulSet", namespace, name, replicas, image, args, labels, gpu_per_pod,
                              container_name=container_name, port=port, env=env, command=command,
                              resources=resources, annotations=annotations,
                              template_annotations=template_annotations, extra_spec=extra)

    def add_pod(self, namespace: str, name: str, image: str = "vllm/vllm-openai:v0.9.2", *,
                labels: dict | None = None, args: list[str] | None = None, gpus: int = 0,
                node_name: str | None = None, container_name: str = "main", port: int | None = None) -> dict:
        """A bare pod (no controller); the scheduler binds it unless ``node_name`` is given."""
        self._ensure_namespace(namespace)
        spec: dict = {"containers": [self._container(container_name, image, args, None, gpus, port, None, None)]}
        if node_name:
            spec["nodeName"] = node_name
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}
        return self.api.create(R.BY_KIND["Pod"], namespace, pod)

    def add_configmap(self, namespace: str, name: str, data: dict | None = None,
                      labels: dict | None = None) -> dict:
        self._ensure_namespace(namespace)
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
              "data": {k: str(v) for k, v in (data or {}).items()}}
        return self.api.create(R.BY_KIND["ConfigMap"], namespace, cm)

    def add_service(self, namespace: str, name: str, selector: dict | None = None,
                    ports: Iterable[int | dict] = (8000,), *, type: str = "ClusterIP",  # noqa: A002
                    labels: dict | None = None) -> dict:
        self._ensure_namespace(namespace)
        port_list: list[dict[str, Any]] = []
        for p in ports:
            port_list.append(dict(p) if isinstance(p, dict) else {"name": f"port-{p}", "port": p, "targetPort": p})
        if len(port_list) == 1 and port_list[0].get("name", "").startswith("port-"):
            port_list[0]["name"] = "http"
        svc = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
               "spec": {"type": type, "selector": dict(selector if selector is not None else {"app": name}),
                        "ports": port_list}}
        return self.api.create(R.BY_KIND["Service"], namespace, svc)

    def add_pdb(self, namespace: str, name: str, selector: dict, *, min_available: int | str | None = None,
                max_unavailable: int | str | None = None) -> dict:
        """A policy/v1 PodDisruptionBudget over pods with the ``selector`` labels."""
        self._ensure_namespace(namespace)
        spec: dict = {"selector": {"matchLabels": dict(selector)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        obj = self.api.create(R.BY_KIND["PodDisruptionBudget"], namespace, pdb)
        with self.store.lock:  # compute the status right away
            live = self.store.get(R.BY_KIND["PodDisruptionBudget"], namespace, name)
            assert live is not None  # created just above
            live["status"] = self.controllers.pdb_status(live)
            obj = self.store.put(R.BY_KIND["PodDisruptionBudget"], live)
        return obj

    def add_inference_pool(self, namespace: str, name: str, selector: dict, target_ports: Iterable[int] = (8000,),
                           *, picker: str | None = None, picker_port: int = 9002) -> dict:
        """A Gateway API Inference Extension v1 InferencePool (``install("InferencePool")`` first): the pods
        with the ``selector`` labels on ``target_ports``, behind the endpoint picker Service ``picker``."""
        self._ensure_namespace(namespace)
        spec = {"selector": {"matchLabels": dict(selector)},
                "targetPorts": [{"number": int(p)} for p in target_ports],
                "endpointPickerRef": {"name": picker or f"{name}-epp", "port": {"number": picker_port}}}
        pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return self.api.create(R.BY_KIND["InferencePool"], namespace, pool)

    def add_inference_objective(self, namespace: str, name: str, pool: str, priority: int | None = None) -> dict:
        """An InferenceObjective (v1alpha2; ``install("InferenceObjective")`` first) of ``pool``."""
        self._ensure_namespace(namespace)
        spec: dict = {"poolRef": {"name": pool}}
        if priority is not None:
            spec["priority"] = priority
        obj = {"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferenceObjective",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return self.api.create(R.BY_KIND["InferenceObjective"], namespace, obj)
