"""A workload class's targets and objective, read from the config's ``slo_classes`` (duck-typed: analysis
does not import the config)."""

from __future__ import annotations

from dataclasses import dataclass

# stage → (the class attribute of its target, the percentile read, the EngineStats field of that percentile)
STAGES = {
    "queue": ("queue_p99_s", "p99", "queue_p99_s"),
    "ttft": ("ttft_p99_s", "p99", "ttft_p99_s"),
    "tpot": ("tpot_p95_s", "p95", "itl_p95_s"),
    "e2e": ("e2e_p99_s", "p99", "e2e_p99_s"),
}
STAGE_LABEL = {"queue": "queue", "ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}
WEEK_S = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class SloClass:
    name: str
    queue_p99_s: float
    ttft_p99_s: float
    tpot_p95_s: float
    e2e_p99_s: float
    objective_pct: float = 99.9
    objective_stage: str = "e2e"
    objective_days: float = 30.0
    match: tuple[str, ...] = ()  # engine name or model (at the precedence of each)
    engines: tuple[str, ...] = ()  # the patterns of each assignment rule (assign.py: engine > Deployment >
    deployments: tuple[str, ...] = ()  # model > gateway class > fitted from history)
    models: tuple[str, ...] = ()
    gateway_classes: tuple[str, ...] = ()

    def target_s(self, stage: str) -> float:
        return getattr(self, STAGES[stage][0])

    @property
    def allowed_bad(self) -> float:
        """The error budget as a fraction of requests: 1 − objective."""
        return 1.0 - self.objective_pct / 100.0

    @property
    def objective_text(self) -> str:
        return (f"{self.objective_pct:g} % of requests within {STAGE_LABEL[self.objective_stage]} "
                f"{self.target_s(self.objective_stage):g} s over {self.objective_days:g} days")


def classes_from(config_classes) -> tuple[SloClass, ...]:
    """The config's ``slo_classes.classes`` (name → SloClassConfig), in its order."""
    return tuple(SloClass(name, c.queue_p99_s, c.ttft_p99_s, c.tpot_p95_s, c.e2e_p99_s, c.objective_pct,
                          c.objective_stage, c.objective_days, tuple(c.match),
                          *(tuple(getattr(c, k, ()) or ()) for k in ("engines", "deployments", "models",
                                                                     "gateway_classes")))
                 for name, c in config_classes.items())


def tightness(c: SloClass) -> tuple[float, float]:
    """Order of strictness: the tighter E2E, then TTFT, first."""
    return (c.e2e_p99_s, c.ttft_p99_s)
