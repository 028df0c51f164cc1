"""A slow Kubernetes API server: `snapshot` keeps healthy engines fresh, access reviews go out together."""

from __future__ import annotations

import json
from urllib.parse import urlparse

from delay_proxy import DelayProxy
from infertop.config import Config, GpuConfig, KubeConfig
from infertop.sim import SimCluster
from infertop.snapshot import collect_state, exit_code
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_types import FRESH

TOKEN = "snap-cluster"


async def test_a_slow_cluster_read_leaves_every_engine_fresh(kube_emulator, tmp_path):
    emu = kube_emulator(TOKEN, reconcile_interval=0.1)
    emu.add_deployment("default", "vllm", replicas=1)
    up = urlparse(emu.url)
    proxy = DelayProxy((up.hostname, up.port), delay_s=0.4).start()  # ~a dozen requests: seconds
    doc = emu.kubeconfig(token=TOKEN)
    doc["clusters"][0]["cluster"]["server"] = proxy.url
    kc = tmp_path / "kc"
    kc.write_text(json.dumps(doc))
    sim = SimCluster(2, seed=3, load="steady", dcgm=False).start()
    try:
        cfg = Config(gpu=GpuConfig(nvml=False), kube=KubeConfig(kubeconfig=str(kc)))
        cfg.refresh_s = 0.25  # stale after 3 polls: 0.75 s, well under the cluster read
        cfg.advisor.mode = "off"
        eps = [EngineEndpoint(f"e{i}", e.url) for i, e in enumerate(sim.engines)]
        state = await collect_state(eps, cfg, 0.3)
    finally:
        sim.stop()
        proxy.stop()
    assert proxy.requests >= 3  # the read really went through the slow proxy (>= 1.2 s)
    assert state.cluster is not None and state.cluster.freshness.status == FRESH, state.cluster.freshness
    assert [(e.name, e.freshness.status) for e in state.engines] == [("e0", FRESH), ("e1", FRESH)]
    assert state.fleet.engines_up == 2
    assert exit_code(state) == 0


def test_access_reviews_go_out_together_on_a_slow_api_server(kube_emulator, tmp_path):
    """A reconnect asks ~10 SelfSubjectAccessReviews: one at a time, 3 s each kept every action
    unoffered for 43 s. Asked together, the same answers come back."""
    from infertop.control.kube.perms import check_permissions
    from infertop.sources.kube import KubeSession

    emu = kube_emulator(TOKEN)
    emu.set_rules([("patch", "apps", "deployments/scale", None, "default"), (["get", "list", "watch"], "*", "*")])
    up = urlparse(emu.url)
    proxy = DelayProxy((up.hostname, up.port), delay_s=0.3).start()
    doc = emu.kubeconfig(token=TOKEN)
    doc["clusters"][0]["cluster"]["server"] = proxy.url
    kc = tmp_path / "kc"
    kc.write_text(json.dumps(doc))
    session = KubeSession.connect(str(kc))
    try:
        perms = check_permissions(session)
    finally:
        session.close()
        proxy.stop()
    assert emu.count_requests("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews") == 10
    assert proxy.peak_in_flight >= 4, proxy.peak_in_flight  # 1 when they went out one at a time
    assert perms.allows("scale", "default", "Deployment") is True
    assert perms.allows("scale", "default", "StatefulSet") is False and perms.allows("configmap") is False
