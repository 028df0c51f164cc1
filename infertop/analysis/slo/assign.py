"""Which class holds an engine: the first class with a pattern matching its name or model (config order);
else the tightest class its own healthy history fits — the median, over the ticks it was healthy (up,
fresh, serving, no verdict on it), of each percentile within that class's target — and it says so."""

from __future__ import annotations

import statistics
from collections import deque
from fnmatch import fnmatchcase

from ...format import seconds_human
from .targets import STAGE_LABEL, STAGES, SloClass, tightness

MIN_HEALTHY_TICKS = 10  # ticks of healthy history before a fit is trusted
KEEP_TICKS = 600
REFIT_EVERY = 30  # a fit is recomputed every this many healthy ticks (medians of 600 values, 500 engines)


class Assigner:
    def __init__(self, classes: tuple[SloClass, ...]) -> None:
        self.classes = classes
        self.by_fit = tuple(sorted(classes, key=tightness))
        self._history: dict[str, deque] = {}
        self._fit: dict[str, tuple[SloClass, str, int]] = {}  # engine → (class, why, healthy ticks when fitted)
        self._seen: dict[str, int] = {}  # engine → healthy ticks seen

    def matched(self, name: str, model: str | None) -> tuple[SloClass, str] | None:
        for c in self.classes:
            for pat in c.match:
                p = pat.lower()
                if fnmatchcase(name.lower(), p):
                    return c, f"matches {pat!r} (engine name)"
                if model and fnmatchcase(model.lower(), p):
                    return c, f"matches {pat!r} (model)"
        return None

    def assign(self, stats, healthy: bool) -> tuple[SloClass, str]:
        got = self.matched(stats.name, stats.model)
        if got is not None:
            return got
        hist = self._history.get(stats.name)
        if hist is None:
            hist = self._history[stats.name] = deque(maxlen=KEEP_TICKS)
            self._seen[stats.name] = 0
        if healthy and (stats.requests_per_s or 0) > 0:
            hist.append(tuple(getattr(stats, attr) for _, _, attr in STAGES.values()))
            self._seen[stats.name] += 1
        seen = self._seen[stats.name]
        fit = self._fit.get(stats.name)
        if len(hist) >= MIN_HEALTHY_TICKS and (fit is None or seen - fit[2] >= REFIT_EVERY):
            fit = self._fit[stats.name] = (*self._fitted(hist), seen)
        if fit is not None:
            return fit[0], fit[1]
        n = len(hist)
        loosest = self.by_fit[-1]
        return loosest, (f"no class matches it and it has {n} of {MIN_HEALTHY_TICKS} healthy ticks: "
                         f"{loosest.name} (the loosest) until its history says which it fits")

    def _fitted(self, hist) -> tuple[SloClass, str]:
        medians = {}
        for i, stage in enumerate(STAGES):
            vals = [h[i] for h in hist if h[i] is not None]
            medians[stage] = statistics.median(vals) if vals else None
        known = {s: v for s, v in medians.items() if v is not None}
        for c in self.by_fit:
            if known and all(v <= c.target_s(s) for s, v in known.items()):
                said = ", ".join(f"{STAGE_LABEL[s]} {seconds_human(v)} ≤ {seconds_human(c.target_s(s))}"
                                 for s, v in known.items())
                return c, f"no class matches it; its healthy history fits {c.name} ({said}; medians of {len(hist)} ticks)"
        loosest = self.by_fit[-1]
        worst = max(known, key=lambda s: known[s] / loosest.target_s(s)) if known else "e2e"
        return loosest, (f"no class matches it and its healthy history fits none ({STAGE_LABEL[worst]} median "
                         f"{seconds_human(known.get(worst))}): {loosest.name}, the loosest")

    def forget_except(self, names: set[str]) -> None:
        for gone in [n for n in self._history if n not in names]:
            del self._history[gone]
            self._fit.pop(gone, None)
            self._seen.pop(gone, None)
