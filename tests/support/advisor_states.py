"""Fleet states for the advisor's tests, built from domain values (no I/O; the clock is each
state's ``taken_at``, from ``T0``): ``engine``, ``pod``, ``state`` (two workloads, their pods, an
optional HPA and queues), ``advisor`` (no windows) and ``by_name``."""

from __future__ import annotations

from infertop.config import AdvisorConfig, SloConfig
from infertop.domain.engine import DOWN, UP, EngineStats
from infertop.domain.kube import ClusterSnapshot, PodView, WorkloadView
from infertop.state.advisor.core import Advisor
from infertop.state.fleet_types import FRESH, MISSING, ClusterState, EngineState, FleetState, Freshness, Slo


SLO = Slo(2.0, 0.04, 5.0, 1.0, 90.0)


T0 = 1_800_000_000.0


def engine(name: str, port: int, waiting: float | None, ttft_p99_s: float | None, status: str = FRESH, *,
           up: bool | None = None, age_s: float = 1.0) -> EngineState:
    up = status == FRESH if up is None else up
    stats = EngineStats(name, f"http://127.0.0.1:{port}", UP if up else DOWN, waiting=waiting, ttft_p99_s=ttft_p99_s)
    reason = None if status == FRESH else ("connection refused" if not up else f"no new sample for {age_s:.0f} s")
    return EngineState(stats, Freshness(status, stats.url, T0, age_s if status != MISSING else None, None, reason))


def pod(name: str, owner: str, port: int | None) -> PodView:
    return PodView("serving", name, phase="Running", ip="127.0.0.1" if port else None, port=port,
                   owner_kind="Deployment", owner_name=owner)


def state(t: float, engines, *, replicas=None, hpa=None, cluster_status=FRESH, queues=(), pods=None) -> FleetState:
    replicas = replicas or {"chat": 2, "batch": 1}
    workloads = tuple(WorkloadView("Deployment", "serving", n, desired=r, ready=r) for n, r in replicas.items())
    pods = pods if pods is not None else (pod("chat-a", "chat", 8001), pod("chat-b", "chat", 8002),
                                          pod("batch-a", "batch", None))
    snap = ClusterSnapshot("lab", ("serving",), t, workloads=workloads, pods=pods, hpas=tuple(hpa or ()))
    fr = Freshness(cluster_status, "lab", t, 0.0, None, None if cluster_status == FRESH else "connection refused")
    return FleetState(tick=1, taken_at=t, refresh_s=1.0, window_s=60.0, slo=SLO, engines=tuple(engines),
                      cluster=ClusterState(snap, fr), queues=tuple(queues))


def advisor(**cfg) -> Advisor:
    return Advisor(AdvisorConfig(**({"scale_up_window_s": 0.0, "scale_down_window_s": 0.0} | cfg)), SloConfig(),
                   engine_pods={"batch-a": "batch-engine"})


def by_name(views) -> dict:
    return {v["name"]: v for v in views}
