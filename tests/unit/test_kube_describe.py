"""kube_describe: QoS, requests, and YAML with managedFields folded (pure)."""

from infertop.sources.kube.describe import node_requests, pod_requests, qos_class, to_yaml


def pod(requests=None, limits=None, node="n1", phase="Running"):
    res = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": res}]},
            "status": {"phase": phase}}


def test_qos_class_follows_requests_and_limits():
    assert qos_class(pod()) == "BestEffort"
    assert qos_class(pod(limits={"cpu": "1", "memory": "1Gi"})) == "Guaranteed"  # requests default to limits
    assert qos_class(pod(requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"})) == "Burstable"


def test_node_requests_count_live_pods_only():
    pods = [pod(requests={"cpu": "500m", "memory": "1Gi"}), pod(requests={"cpu": "2"}, phase="Succeeded"),
            pod(limits={"nvidia.com/gpu": "2"}), pod(requests={"cpu": "8"}, node="n2")]
    assert pod_requests(pods[0]) == {"cpu": 0.5, "memory": 2 ** 30}
    assert node_requests("n1", pods) == {"cpu": 0.5, "memory": 2 ** 30, "nvidia.com/gpu": 2.0}


def test_yaml_folds_managed_fields():
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "managedFields": [
        {"manager": "kubectl", "fieldsV1": {"f:spec": {}}}, {"manager": "kube-scheduler", "fieldsV1": {}}]}}
    text = to_yaml(obj)
    assert "managedFields: '<2 entries folded: kube-scheduler, kubectl>'" in text and "fieldsV1" not in text
    assert text.startswith("apiVersion: v1\nkind: Pod\n")
    assert obj["metadata"]["managedFields"][0]["manager"] == "kubectl"  # the object itself is left alone
