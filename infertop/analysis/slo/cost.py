"""Cost: tokens per GPU-hour, cost per million tokens per model, idle GPU-hours.

An engine's GPUs are those the fleet state maps to it; an engine with none mapped counts as one GPU (and
the answer says it assumed so). A GPU is idle under the utilisation floor; without GPU readings an engine
that serves nothing (no request finished, none running) counts its GPUs as idle.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelCost:
    model: str
    engines: int
    gpus: int
    gpus_assumed: int  # engines without a GPU mapped, counted as one each
    tokens_per_s: float  # prompt + generated
    generated_per_s: float
    tokens_per_gpu_hour: float
    cost_per_hour: float | None
    cost_per_million_tokens: float | None  # per million tokens (prompt + generated)
    cost_per_million_generated: float | None


def model_costs(engines, gpu_count, price_per_gpu_hour: float | None) -> tuple[ModelCost, ...]:
    """Per model over ``engines`` (fresh, up EngineStats); ``gpu_count(name)`` → GPUs mapped (0: none)."""
    groups: dict[str, list] = {}
    for s in engines:
        groups.setdefault(s.model or "?", []).append(s)
    out = []
    for model, group in sorted(groups.items()):
        mapped = [gpu_count(s.name) for s in group]
        assumed = sum(1 for g in mapped if not g)
        gpus = sum(g or 1 for g in mapped)
        gen = sum(s.generation_tokens_per_s or 0.0 for s in group)
        tok = gen + sum(s.prompt_tokens_per_s or 0.0 for s in group)
        per_hour = price_per_gpu_hour * gpus if price_per_gpu_hour is not None else None

        def per_million(rate: float) -> float | None:
            return per_hour / (rate * 3600.0) * 1e6 if per_hour is not None and rate > 0 else None

        out.append(ModelCost(model, len(group), gpus, assumed, tok, gen, tok * 3600.0 / gpus, per_hour,
                             per_million(tok), per_million(gen)))
    return tuple(out)


class IdleMeter:
    """Idle GPU-hours over what was watched: each tick's idle GPUs × the time since the last tick."""

    MAX_STEP_S = 60.0  # a gap in the ticks (a suspended laptop) is not idle time

    def __init__(self) -> None:
        self.idle_gpu_hours = 0.0
        self.gpu_hours = 0.0
        self._last: float | None = None

    def add(self, now: float, idle_gpus: int, gpus: int) -> None:
        if self._last is not None:
            dt = min(max(0.0, now - self._last), self.MAX_STEP_S) / 3600.0
            self.idle_gpu_hours += idle_gpus * dt
            self.gpu_hours += gpus * dt
        self._last = now
