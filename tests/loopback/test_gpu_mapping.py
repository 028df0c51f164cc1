"""GPU → pod → engine, from dcgm-exporter's Kubernetes labels (simulator over HTTP)."""

from __future__ import annotations

from infertop.sim import SimCluster
from infertop.sources.gpu import GpuCollector, assign_pod_engines


async def test_gpus_map_to_engines_through_their_pods():
    with SimCluster(3, seed=5, load="none", realtime=False, kubernetes_labels=True) as sim:
        pods = {e.gpu.pod: f"engine-{i}" for i, e in enumerate(sim.engines)}
        gc = GpuCollector(dcgm_urls=[sim.dcgm_url], nvml_module=None)
        try:
            rows, _ = await gc.poll()
        finally:
            await gc.aclose()
    assert {r.pod for r in rows} == set(pods)
    mapped = assign_pod_engines(rows, pods)
    assert sorted(r.engine for r in mapped) == ["engine-0", "engine-1", "engine-2"]
    for r in mapped:
        assert r.engine == pods[r.pod]
    # an engine named after its pod maps without a table; unknown pods stay unmapped
    first = rows[0]
    assert assign_pod_engines([first], {}, {first.pod})[0].engine == first.pod
    assert assign_pod_engines([first], {}, set())[0].engine is None
