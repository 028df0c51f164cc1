"""The SLO report of one tick: :class:`SloWatch` keeps the burn history and the class fits across ticks
and answers a plain document (JSON-able) that the fleet state carries, so the SLO pane, ``snapshot``, the
recorder, replay and the triage rules read the same numbers.

Inputs per tick: the fleet state (EngineStats percentiles and rates, GPUs) and, per engine, its latest
cumulative histogram buckets (:func:`cumulative_buckets` of its counter window) — the counts of requests
within each target come from those, not from the percentiles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Protocol

from ...domain.window import CounterWindow
from ...format import seconds_human
from .assign import Assigner, engine_context
from .budget import Bucket, class_counts, count_within, stage_lines, worst
from .burn import PAIRS, BurnTracker, WindowCount, with_prometheus
from .capacity import RunningMean, answer, inputs_of
from .cost import IdleMeter, model_costs
from .targets import STAGE_LABEL, SloClass, classes_from

COUNT_HOW = ("requests over target counted from the objective stage's histogram buckets; a target between two "
             "bounds is interpolated linearly inside its bucket (as histogram_quantile), requests past the "
             "largest finite bound count as over it")
ENGINE_BURN_KEEP_S = 3600.0  # an engine's own burn: the fast pair only (memory at 500 engines)
CAPACITY_EVERY_S = 10.0  # a class's capacity answer is recomputed this often (its inputs are window rates)
BURN_READ_MAX_AGE_S = 180.0  # a Prometheus read of a burn window older than this (3 missed reads): local again


class RangeRead(Protocol):
    """What the report reads of one Prometheus read over a window (sources' ``RangeCounts``)."""

    @property
    def asked_s(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def step_s(self) -> float: ...
    @property
    def used_s(self) -> float: ...
    @property
    def buckets(self) -> Mapping[str, Mapping[str, Sequence[Bucket]]]: ...
    @property
    def errors(self) -> tuple[str, ...]: ...


def flat(obj) -> dict:
    """A flat frozen dataclass as a dict: dataclasses.asdict deep-copies, 0.3 ms a stage line at 500 engines."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


_SPLIT: dict[str, tuple[str, float] | None] = {}  # "e2e@0.5" → ("e2e", 0.5): the same keys every poll
_SPLIT_MAX = 4096


def _split(key: str) -> tuple[str, float] | None:
    try:
        return _SPLIT[key]
    except KeyError:
        pass
    hist, sep, le = key.partition("@")
    got: tuple[str, float] | None
    try:
        got = (hist, float(le)) if sep else None
    except ValueError:
        got = None
    if len(_SPLIT) >= _SPLIT_MAX:
        _SPLIT.clear()
    _SPLIT[key] = got
    return got


def cumulative_buckets(window, which: int = -1, wanted=None) -> dict[str, list[tuple[float, float]]]:
    """hist → [(le, cumulative count)] of a counter window's latest (``which=-1``) or first (0) point;
    only the histograms in ``wanted`` when given."""
    edges = window.edges() if window is not None else None
    if edges is None:
        return {}
    out: dict[str, list[tuple[float, float]]] = {}
    for key, v in edges[which][1].items():
        split = _split(key)
        if split is not None and (wanted is None or split[0] in wanted):
            got = out.get(split[0])
            if got is None:
                got = out[split[0]] = []
            got.append((split[1], v))
    return out


def engine_windows(collectors) -> dict[str, CounterWindow]:
    """Engine name → its counter window, over the collectors that answered their last poll (duck-typed:
    ``health.ok``, ``stats``, ``windows``; an endpoint with several label sets names them in ``_names``)."""
    out: dict[str, CounterWindow] = {}
    for c in collectors:
        health, windows, stats = getattr(c, "health", None), getattr(c, "windows", None) or {}, getattr(c, "stats", ())
        if health is None or not health.ok or not windows or not stats:
            continue
        if len(windows) == 1 and len(stats) == 1:
            out[stats[0].name] = next(iter(windows.values()))
            continue
        names = getattr(c, "_names", {}) or {}
        for ident, w in windows.items():
            name = names.get(ident)
            if name is not None:
                out[name] = w
    return out


def buckets_of(windows: Mapping[str, CounterWindow], which: int = -1, wanted=("queue", "ttft", "e2e")) -> dict[str, dict[str, list]]:
    """Engine → its cumulative buckets of the histograms an objective can count by."""
    wanted = frozenset(wanted) if wanted is not None else None
    return {name: cumulative_buckets(w, which, wanted) for name, w in windows.items()}


class SloWatch:
    """Feed every tick; :meth:`update` answers the tick's SLO document."""

    def __init__(self, section, *, pairs=PAIRS) -> None:
        """``section``: the config's ``slo_classes`` (SloClassesConfig); ``pairs``: the burn windows
        ((name, long s, short s), the practice's by default)."""
        self.section = section
        self.pairs = pairs
        self.classes = classes_from(section.classes)
        self.assigner = Assigner(self.classes)
        self._last: dict[str, tuple[str, float, float]] = {}  # engine → (class, within, total) cumulative
        self._class_burn = {c.name: BurnTracker(c.allowed_bad) for c in self.classes}
        self._engine_burn: dict[str, BurnTracker] = {}
        self.idle = IdleMeter()
        self._cap: dict[str, tuple] = {}  # class → (computed at, its engines, answer)
        self._running: dict[str, RunningMean] = {}  # class → its running requests over the rates' window
        self._class_of: dict[str, SloClass] = {}  # engine → its class at the last tick (joins Prometheus counts)
        self._range_counts: dict[float, RangeRead] = {}  # objective window (s) → the last Prometheus read of it
        self._range_cache: tuple | None = None
        self.prometheus_burn = False  # the burn windows are read from Prometheus too (set by the Fleet)
        self._burn_counts: dict[float, RangeRead] = {}  # burn window (s) → the last Prometheus read of it
        self._burn_cache: tuple | None = None

    def update(self, state, buckets: Mapping[str, Mapping[str, list]], *, troubled=frozenset(),
               now: float | None = None) -> dict:
        """``buckets``: engine → hist → cumulative buckets (latest scrape); ``troubled``: engines under a
        verdict (the last tick's): their ticks are no healthy history for a class fit."""
        now = state.taken_at if now is None else now
        sec = self.section
        live = [e for e in state.engines if e.fresh and e.stats.state == "up"]
        members: dict[str, list] = {c.name: [] for c in self.classes}
        lines_of: dict[str, dict] = {c.name: {} for c in self.classes}
        engines_doc = []
        deployment_of, gateway_of = engine_context(state) if self.assigner.by_cluster else ({}, {})
        for e in live:
            s = e.stats
            cls, how = self.assigner.assign(s, healthy=s.name not in troubled, deployment=deployment_of.get(s.name),
                                            gateway_classes=gateway_of.get(s.name, ()))
            self._class_of[s.name] = cls
            members[cls.name].append(s)
            lines = lines_of[cls.name][s.name] = stage_lines(s, cls)
            total, bad = self._count(s.name, cls, buckets.get(s.name) or {}, now)
            eb = self._engine_burn.get(s.name)
            if eb is None or eb.allowed_bad != cls.allowed_bad:
                eb = self._engine_burn[s.name] = BurnTracker(cls.allowed_bad, fine_keep_s=ENGINE_BURN_KEEP_S,
                                                             coarse_keep_s=0)
                eb.add(now, 0.0, 0.0)
            if total is not None:
                eb.add(now, total, bad)
            fast = eb.windows(now, sec.fast_burn)[0]
            engines_doc.append({"name": s.name, "model": s.model, "class": cls.name, "how": how,
                                "stages": [flat(x) for x in lines], "burn": flat(fast) | {"firing": fast.firing},
                                "counted": total is not None})
        names = {e.name for e in state.engines}
        self.assigner.forget_except(names)
        for gone in [n for n in self._class_of if n not in names]:
            del self._class_of[gone]
        for gone in [n for n in self._engine_burn if n not in names]:
            del self._engine_burn[gone]
            self._last.pop(gone, None)
        classes_doc = [self._class_doc(c, members[c.name], lines_of[c.name], now) for c in self.classes]
        return {"classes": classes_doc, "engines": engines_doc, "cost": self._cost(state, live, now),
                "fast_burn": sec.fast_burn, "week_budget_pct": sec.week_budget_pct, "count_how": COUNT_HOW,
                "headroom_pct": sec.headroom_pct}

    def _count(self, name: str, cls, hists: Mapping[str, list], now: float) -> tuple[float | None, float]:
        """(requests, bad) finished since the last tick on ``name`` by its class's objective stage."""
        b = hists.get(cls.objective_stage)
        got = count_within(b, cls.target_s(cls.objective_stage)) if b else None
        if got is None:
            return None, 0.0
        within, total = got
        prev = self._last.get(name)
        self._last[name] = (cls.name, within, total)
        if prev is None or prev[0] != cls.name:
            self._class_burn[cls.name].add(now, 0.0, 0.0)  # starts the class's history, counts nothing yet
            return 0.0, 0.0
        d_total, d_within = total - prev[2], within - prev[1]
        if d_total < 0:  # the engine restarted: its counters began again
            d_total, d_within = total, within
        bad = min(d_total, max(0.0, d_total - d_within))
        self._class_burn[cls.name].add(now, d_total, bad)
        return d_total, bad

    def _class_doc(self, c, stats, lines, now: float) -> dict:
        sec = self.section
        tracker = self._class_burn[c.name]
        windows = tracker.windows(now, sec.fast_burn, pairs=self.pairs)
        if self.prometheus_burn:
            prom = self._burn_windows(now).get(c.name, {})
            windows = tuple(with_prometheus(w, prom, c.allowed_bad) for w in windows)
        used, span = tracker.week_budget_used_pct(now)
        total, bad = tracker.over(now, span) if span else (0.0, 0.0)
        worst_doc = {stage: {"engine": name, **flat(line)} for stage, (name, line) in worst(lines).items()}
        cap = self._capacity(c, stats, now)
        fast = next(w for w in windows if w.pair == "fast")
        # a verdict needs history: seconds of a start-up (or a short snapshot) are shown, never paged on;
        # Prometheus' hour is history enough
        long_enough = fast.long_source == "Prometheus" or tracker.history_s(now) >= sec.min_burn_history_s
        return {
            "name": c.name, "objective": c.objective_text, "objective_stage": c.objective_stage,
            "objective_pct": c.objective_pct,
            "targets": {s: c.target_s(s) for s in STAGE_LABEL}, "engines": [s.name for s in stats],
            "worst": worst_doc, "burn": [flat(w) | {"firing": w.firing} for w in windows],
            "history_s": tracker.history_s(now), "requests": total, "bad": bad,
            "week_budget_used_pct": used, "week_span_s": span,
            "fast_burn_firing": fast.firing and long_enough,
            "week_budget_spent": (used is not None and used >= sec.week_budget_pct and total >= 100
                                  and (span or 0.0) >= max(sec.min_burn_history_s, 3600.0)),
            "capacity": cap,
            "budget": self._budget(c, tracker, now),
        }

    def range_plan(self) -> dict[float, dict[str, list[float]]]:
        """Objective window (s) → histogram → the targets counted by it: what a Prometheus read asks."""
        plan: dict[float, dict[str, list[float]]] = {}
        for c in self.classes:
            hists = plan.setdefault(c.objective_days * 86400.0, {})
            hists.setdefault(c.objective_stage, []).append(c.target_s(c.objective_stage))
        return plan

    def set_range(self, counts: RangeRead) -> None:
        """A Prometheus read over an objective window (``RangeCounts``, duck-typed), kept for the ticks
        after it: each tick joins its counts to the engines' classes of that tick."""
        self._range_counts[counts.asked_s] = counts
        self._range_cache = None

    def burn_plan(self) -> dict[float, dict[str, list[float]]]:
        """Burn window (s: each pair's long and short) → histogram → the targets counted by it."""
        hists: dict[str, list[float]] = {}
        for c in self.classes:
            got = hists.setdefault(c.objective_stage, [])
            if c.target_s(c.objective_stage) not in got:
                got.append(c.target_s(c.objective_stage))
        return {w: {h: list(t) for h, t in hists.items()} for _, long_s, short_s in self.pairs
                for w in (long_s, short_s)}

    def set_burn(self, counts: RangeRead) -> None:
        """A Prometheus read over a burn window (``RangeCounts``, duck-typed), kept for the ticks after it."""
        self._burn_counts[counts.asked_s] = counts
        self._burn_cache = None

    def _burn_windows(self, now: float) -> dict[str, dict[float, WindowCount]]:
        """class → burn window (s) → its Prometheus count; a read older than :data:`BURN_READ_MAX_AGE_S`
        (a Prometheus that stopped answering in time) is an error, so the local window is used."""
        if self._burn_cache is not None and self._burn_cache[3] == now:  # once a tick, not once a class
            return self._burn_cache[4]
        key = tuple((n, c.name) for n, c in self._class_of.items())
        if self._burn_cache is None or self._burn_cache[0] != key:
            docs: dict[str, dict[float, WindowCount]] = {}
            for asked_s, counts in self._burn_counts.items():
                got = class_counts(counts.buckets, self._joined(counts))
                error = "; ".join(counts.errors) or None
                for c in self.classes:
                    req, bad, _ = got.get(c.name, (0.0, 0.0, 0))
                    docs.setdefault(c.name, {})[asked_s] = WindowCount(asked_s, req, bad, counts.used_s,
                                                                       counts.step_s, error)
            self._burn_cache = (key, docs, {w: counts.end for w, counts in self._burn_counts.items()}, None, None)
        docs, ends = self._burn_cache[1], self._burn_cache[2]
        stale = {w for w, end in ends.items() if now - end > BURN_READ_MAX_AGE_S}
        if stale:
            docs = {name: {w: (WindowCount(w, 0.0, 0.0, 0.0, 0.0, f"its last read is {now - ends[w]:.0f} s old")
                               if w in stale else wc) for w, wc in wins.items()} for name, wins in docs.items()}
        self._burn_cache = (*self._burn_cache[:3], now, docs)
        return docs

    def _joined(self, counts: RangeRead) -> dict:
        """Engine → class for a read's engines: the classes of this tick, else by the name's match."""
        class_of = dict(self._class_of)
        for name in counts.buckets:
            if name not in class_of and (m := self.assigner.matched(name, None)) is not None:
                class_of[name] = m[0]
        return class_of

    def _range_docs(self) -> dict[str, dict]:
        """class → its requests, over target and budget used over its objective window from Prometheus;
        an engine not live now is counted by its name's match, else not at all."""
        key = tuple((n, c.name) for n, c in self._class_of.items())
        if self._range_cache is not None and self._range_cache[0] == key:
            return self._range_cache[1]
        docs: dict[str, dict] = {}
        for asked_s, counts in self._range_counts.items():
            got = class_counts(counts.buckets, self._joined(counts))
            error = "; ".join(counts.errors) or None
            for c in self.classes:
                if abs(c.objective_days * 86400.0 - asked_s) > 1e-6:
                    continue
                req, bad, n = got.get(c.name, (0.0, 0.0, 0))
                docs[c.name] = {"source": "Prometheus", "window_s": counts.used_s, "asked_s": asked_s,
                                "requests": req, "bad": bad, "engines_counted": n, "read_at": counts.end,
                                "used_pct": _used_pct(bad, req, c.allowed_bad), "error": error}
        self._range_cache = (key, docs)
        return docs

    def _budget(self, c, tracker, now: float) -> dict:
        """The error budget over the longest window there is: Prometheus' (up to the objective's days)
        when it holds more than the local history, else the local history's."""
        history = tracker.history_s(now)
        local_total, local_bad = tracker.over(now, history) if history else (0.0, 0.0)
        local = {"source": "local", "window_s": history, "asked_s": c.objective_days * 86400.0,
                 "requests": local_total, "bad": local_bad, "used_pct": _used_pct(local_bad, local_total, c.allowed_bad),
                 "error": None}
        prom = self._range_docs().get(c.name)
        if prom is None:
            return local
        if prom["window_s"] > history and prom["requests"] > 0:
            return prom
        # Prometheus holds no more than the local history (or failed): the local count, its error said
        if prom["error"]:
            why = prom["error"]
        elif prom["requests"] <= 0:
            why = f"no request of this class over its {prom['window_s']:.0f} s"
        else:
            why = f"it holds {prom['window_s']:.0f} s, no more than the local history"
        return local | {"error": why}

    def _capacity(self, c, stats, now: float) -> dict | None:
        """The class's capacity answer, recomputed every :data:`CAPACITY_EVERY_S` or when its engines change."""
        key = (tuple(s.name for s in stats),)
        running = [s.running for s in stats if s.running is not None]
        mean = self._running.setdefault(c.name, RunningMean())
        mean.add(now, key, sum(running) if stats and len(running) == len(stats) else None)
        got = self._cap.get(c.name)
        if got is not None and got[1] == key and now - got[0] < CAPACITY_EVERY_S:
            return got[2]
        inp = inputs_of(stats, running_mean=mean.mean())
        cap = None
        if inp is not None:
            a = answer(inp, c.queue_p99_s, c.ttft_p99_s, self.section.headroom_pct)
            cap = asdict(a)
            cap["text"] = capacity_text(a, c)
            cap["computed_at"] = now
        self._cap[c.name] = (now, key, cap)
        return cap

    def _cost(self, state, live, now: float) -> dict:
        sec = self.section
        gpus_of = {e.name: len(e.gpus) for e in state.engines}
        models = model_costs([e.stats for e in live], lambda n: gpus_of.get(n, 0), sec.gpu_hour_price)
        read = [g for g in state.gpus if g.util_pct is not None]
        if read:
            idle = sum(1 for g in read if g.util_pct < sec.idle_util_pct)
            total, how = len(read), f"GPUs under {sec.idle_util_pct:g} % utilisation"
        else:
            idle = sum(max(1, gpus_of.get(e.name, 0)) for e in live
                       if not (e.stats.requests_per_s or 0) and not (e.stats.running or 0))
            total = sum(max(1, gpus_of.get(e.name, 0)) for e in live)
            how = "engines serving nothing (no GPU utilisation read; one GPU each where none is mapped)"
        self.idle.add(now, idle, total)
        return {"price_per_gpu_hour": sec.gpu_hour_price, "currency": sec.currency,
                "models": [asdict(m) for m in models], "idle_gpus": idle, "gpus": total, "idle_how": how,
                "idle_gpu_hours": self.idle.idle_gpu_hours, "gpu_hours": self.idle.gpu_hours}


def _used_pct(bad: float, requests: float, allowed_bad: float) -> float | None:
    """% of the window's error budget ((1 − objective) × its requests) spent."""
    return 100.0 * bad / (allowed_bad * requests) if requests > 0 and allowed_bad > 0 else None


def capacity_text(a, c) -> str:
    """One line: "needs 42 slots (λ 3.1/s × 10.2 s + 30 %): 3 replicas of 16; holds TTFT p99 2 s at 2"."""
    inp = a.inputs
    head = (f"needs {a.concurrency_needed:.0f} slots (λ {inp.arrival_per_s:.2f}/s × {seconds_human(inp.residence_s)}"
            f" + {a.headroom_pct:g} %)")
    if a.note:
        return f"{head}; {a.note}"
    hold = (f"holds queue p99 {seconds_human(c.queue_p99_s)} and TTFT p99 {seconds_human(c.ttft_p99_s)} at "
            f"{_replicas(a.replicas_to_hold)}" if a.replicas_to_hold else "no replica count holds the TTFT target "
            "(prefill alone is over it)")
    seqs = (f", or max_num_seqs {a.max_num_seqs_to_hold} at {inp.replicas}" if a.max_num_seqs_to_hold else "")
    return f"{head}: {_replicas(a.replicas_for_concurrency)} of {inp.max_num_seqs} for the slots; {hold}{seqs}"


def _replicas(n: int) -> str:
    return f"{n} replica{'' if n == 1 else 's'}"


def stage_text(stage: str) -> str:
    return STAGE_LABEL.get(stage, stage)
