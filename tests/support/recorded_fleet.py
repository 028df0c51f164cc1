"""Recorded fleet states for replay tests: ``recorded_states`` (two engines through the real joiner,
the second down from tick 20), starting at wall time ``T0``."""

from __future__ import annotations

from infertop.config import Config
from infertop.domain.engine import DOWN, UP, EngineStats
from infertop.domain.source import SourceHealth
from infertop.sources.vllm import EngineEndpoint
from infertop.state.fleet_join import FleetJoiner
from infertop.state.fleet_types import FleetState


T0 = 1_796_025_600.0


def recorded_states(n: int = 30) -> list[FleetState]:
    """States of two engines; the second one goes down at tick 20."""
    clock = {"mono": 100.0, "wall": T0}

    class Col:
        def __init__(self, name: str) -> None:
            self.endpoint = EngineEndpoint(name, f"http://127.0.0.1:80{len(name)}", max_num_seqs=8)
            self.windows: dict = {}
            self.stats: list = []
            self.health = SourceHealth(name, "vllm", False)

    a, b = Col("alpha"), Col("beta")

    class Fleet:
        collectors = [a, b]

    joiner = FleetJoiner(Fleet(), slo=Config().slo, refresh_s=1.0, window_s=60.0,
                         wall=lambda: clock["wall"], mono=lambda: clock["mono"])
    out = []
    for i in range(n):
        for c, base in ((a, 3), (b, 5)):
            if c is b and i >= 20:
                c.stats = [EngineStats(name=c.endpoint.name, url=c.endpoint.url, state=DOWN, error="connection refused")]
                c.health = SourceHealth(c.endpoint.name, "vllm", False, last_error="connection refused",
                                        last_error_at=clock["mono"], consecutive_failures=i - 19)
            else:
                c.stats = [EngineStats(name=c.endpoint.name, url=c.endpoint.url, state=UP, running=base + i % 4,
                                       waiting=float(i % 3), kv_cache_pct=10.0 + i, max_num_seqs=8,
                                       scraped_at=clock["wall"])]
                c.health = SourceHealth(c.endpoint.name, "vllm", True, last_ok_at=clock["mono"])
        out.append(joiner.build())
        clock["mono"] += 1.0
        clock["wall"] += 1.0
    return out
