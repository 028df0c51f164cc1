"""An engine whose SLO burns as a test says: ``growing_engine`` answers /metrics with 50 more finished
requests each scrape, a given share of them over the TTFT target."""

from __future__ import annotations

from vllm_text import v1_doc


def growing_engine(scripted, slow_share: float):
    """Each scrape: 50 more finished requests, ``slow_share`` of them at 3 s TTFT (over 1 s), the rest 0.2 s."""
    srv = scripted()
    obs: list[float] = []

    def metrics() -> str:
        slow = round(50 * slow_share)
        obs.extend([3.0] * slow + [0.2] * (50 - slow))
        return v1_doc(engines={"0": {"running": 4, "success": len(obs), "gen": 100.0 * len(obs), "ttft": obs}})

    srv.routes["/metrics"] = (200, metrics)
    srv.routes["/health"] = (200, "")
    return srv
