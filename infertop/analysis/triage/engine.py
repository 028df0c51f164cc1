"""The triage engine: rules → debounced verdicts, plus the verdicts that need memory (crash loops)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ...domain.engine import DOWN, UP
from .autoscaler_rules import autoscaler_verdicts
from .baseline import Baselines
from .changes import changes_before
from .context import RuleContext
from .debounce import Debouncer
from .gateway_rules import priority_inversion
from .peer_rules import join_throttled, slower_than_peers
from .prompt_rules import long_prompts, prefix_collapse
from .pod_rules import pod_crash_loops
from .rules import RULES
from .signals import ShortWindow, with_short_rates
from .types import CRITICAL, Evidence, Finding, Remedy, Verdict

# kind → (seconds the condition must hold before the verdict, seconds quiet before it clears).
# Seconds, not minutes: the point is to say it while it happens (alert rules use for: 5m–15m).
TIMING = {
    "engine-down": (3.0, 10.0),
    "crash-loop": (0.0, 120.0),
    "hung": (0.0, 5.0),  # the rule itself waits HUNG_AFTER_S of no progress
    "metrics-stale": (5.0, 10.0),
    "kv-bound": (5.0, 15.0),
    "queue-bound": (5.0, 15.0),
    "gpu-fault": (0.0, 60.0),
    "gpu-throttled": (10.0, 30.0),
    "prefix-cache-collapse": (5.0, 30.0),
    "long-prompts": (5.0, 30.0),
    "slower-than-peers": (15.0, 30.0),
    # Kubernetes objects change on the controllers' clocks (15 s HPA sync): a verdict waits for two reads
    "autoscaler-paused": (15.0, 30.0),
    "autoscaler-blind": (30.0, 30.0),
    "autoscaler-blocked": (15.0, 30.0),
    "autoscaler-at-max": (15.0, 30.0),
    "priority-inversion": (10.0, 30.0),
    # the burn windows already span minutes: raised when they say so, cleared once quiet for a minute
    "slo-fast-burn": (0.0, 60.0),
    "slo-budget-spent": (0.0, 300.0),
}
HUNG_AFTER_S = 15.0  # no token counted this long while requests run: a hung engine (a long prefill is seconds)
CRASH_WINDOW_S = 600.0
CRASH_LOOP_DOWNS = 3  # up → down this many times within the window
_SEVERITY = {CRITICAL: 0}
CLEARED_MEMORY_S = 120.0  # how long a cleared verdict is remembered for the rules (RuleContext.cleared_within)
# rules that compare with a baseline or with peers, in order: each sees the findings before it
CONTEXT_RULES = (prefix_collapse, long_prompts, slower_than_peers, autoscaler_verdicts, priority_inversion)


class Triage:
    """Feed it every tick's fleet state; it answers the verdicts active now, worst first."""

    def __init__(self, timing: dict[str, tuple[float, float]] | None = None, *,
                 crash_window_s: float = CRASH_WINDOW_S, crash_loop_downs: int = CRASH_LOOP_DOWNS) -> None:
        self.timing = {**TIMING, **(timing or {})}
        self._debounce: dict[str, Debouncer[tuple[str, str]]] = {  # kind → its (kind, subject) keys
            kind: Debouncer(*t) for kind, t in self.timing.items()}
        self._latest: dict[tuple[str, str], Finding] = {}
        self.crash_window_s, self.crash_loop_downs = crash_window_s, crash_loop_downs
        self._last_state: dict[str, str] = {}
        self._downs: dict[str, deque[float]] = {}
        self._progress: dict[str, tuple[float, float]] = {}  # engine → (tokens_total, when it last moved)
        self.hung_after_s = HUNG_AFTER_S
        self._short = ShortWindow()
        self.baselines = Baselines()
        self._memo: dict = {}
        self._changes: dict[tuple[str, str], tuple[str, ...]] = {}  # verdict → what changed before its onset
        self._cleared_at: dict[tuple[str, str], float] = {}  # verdict → when it last cleared (CLEARED_MEMORY_S)

    def active(self, kind: str, subject: str) -> bool:
        d = self._debounce.get(kind)
        return d is not None and d.is_active((kind, subject))

    def evaluate(self, state, now: float, *, changes: Iterable[tuple[float, str]] | None = None) -> tuple[Verdict, ...]:
        """The verdicts active at ``now`` (wall clock of the tick) after seeing ``state``.

        ``changes``: ``(time, text)`` records — audited actions, rollouts, Kubernetes events — of which
        each verdict carries those of the minutes before its onset; a verdict keeps what it was last
        given when a later tick passes none."""
        records = None if changes is None else list(changes)
        fresh_up = [e for e in state.engines if e.fresh and e.stats.state == UP]
        ctx = RuleContext(self._short.update(fresh_up, now), {e.name: e.stats.model or "?" for e in fresh_up},
                          self.baselines, memo=self._memo, now=now, cleared_at=self._cleared_at)
        findings = ctx.findings
        short = with_short_rates(state, ctx.signals)  # preempting and arriving now, not over the last minute
        findings += [f for rule in RULES for f in rule(short, self.active)]
        findings += self._crash_loops(state, now)
        findings += pod_crash_loops(state, self.active)  # after: the pod's evidence (OOMKilled) wins the key
        findings += self._hung(state, now)
        for rule in CONTEXT_RULES:
            findings += rule(short, self.active, ctx)
        findings[:] = join_throttled(findings, state, ctx)
        self._learn(state, ctx, now)
        looping = {f.subject for f in findings if f.kind == "crash-loop"}
        findings = [f for f in findings if not (f.kind == "engine-down" and f.subject in looping)]
        holding: dict[str, list[tuple[str, str]]] = {kind: [] for kind in self._debounce}
        for f in findings:
            self._latest[(f.kind, f.subject)] = f
            holding.setdefault(f.kind, []).append((f.kind, f.subject))
            if f.kind not in self._debounce:
                self._debounce[f.kind] = Debouncer(5.0, 15.0)
        out = []
        for kind, d in self._debounce.items():
            _, cleared = d.update(holding.get(kind, ()), now)
            for key in cleared:
                self._latest.pop(key, None)
                self._changes.pop(key, None)
                self._cleared_at[key] = now
            for key, since in d.active().items():
                latest = self._latest.get(key)
                if latest is not None and not (kind == "engine-down" and key[1] in looping):  # the loop says more
                    if records is not None:
                        self._changes[key] = changes_before(since, records, subject=latest.subject)
                    out.append(Verdict(latest.kind, latest.subject, latest.severity, since, latest.explanation,
                                       latest.evidence, latest.remedies, self._changes.get(key, ())))
        for key in [k for k, t in self._cleared_at.items() if now - t > CLEARED_MEMORY_S]:
            del self._cleared_at[key]
        out.sort(key=lambda v: (_SEVERITY.get(v.severity, 1), v.since, v.kind, v.subject))
        return tuple(out)

    def _learn(self, state, ctx: RuleContext, now: float) -> None:
        """The baselines learn from the engines nothing is wrong with (nothing found, nothing active)."""
        engine_of_gpu = {(f"{g.host}:{g.label}" if g.host else g.label): g.engine for g in state.gpus if g.engine}
        troubled = {f.subject for f in ctx.findings} | {subject for d in self._debounce.values()
                                                        for (_, subject) in d.active()}
        troubled |= {engine_of_gpu[s] for s in list(troubled) if s in engine_of_gpu}
        for name, sig in ctx.signals.items():
            self.baselines.update(name, sig, now, healthy=name not in troubled)
        self.baselines.forget_except({e.name for e in state.engines})

    def _hung(self, state, now: float) -> list[Finding]:
        """Answers /metrics (and /health), requests running or waiting, and not one token counted for
        :data:`HUNG_AFTER_S`: a stuck engine core. Its 60 s rates only fade, and its state reads up."""
        gpu_util = {g.engine: g.util_pct for g in state.gpus if g.engine and g.util_pct is not None}
        out = []
        seen = set()
        for e in state.engines:
            s = e.stats
            if not e.fresh or s.state != UP or s.tokens_total is None:
                continue
            seen.add(s.name)
            last = self._progress.get(s.name)
            if last is None or s.tokens_total != last[0]:
                self._progress[s.name] = (s.tokens_total, now)
                continue
            busy = (s.running or 0.0) + (s.waiting or 0.0)
            stalled_s = now - last[1]
            if busy <= 0:
                self._progress[s.name] = (s.tokens_total, now)  # idle: nothing to count, nothing stuck
                continue
            if stalled_s < self.hung_after_s:
                continue
            ev = [Evidence("tokens counted", "0", "> 0 while requests run", f"last {stalled_s:.0f} s"),
                  Evidence("running / waiting", f"{s.running or 0:.0f} / {s.waiting or 0:.0f}", "—")]
            if s.name in gpu_util:
                ev.append(Evidence("GPU utilisation", f"{gpu_util[s.name]:.0f} %", "busy while serving"))
            out.append(Finding(
                "hung", s.name, CRITICAL,
                f"{s.name} is hung: it answers, but has counted no token for {stalled_s:.0f} s while "
                f"{s.running or 0:.0f} requests run and {s.waiting or 0:.0f} wait.", tuple(ev),
                (Remedy("restart it (an engine infertop started); else restart its pod (Cluster pane, R)", "r", s.name),
                 Remedy("its log — a stuck engine core often logs nothing more", "enter", s.name))))
        for gone in [n for n in self._progress if n not in seen]:
            del self._progress[gone]  # down, stale or gone: a fresh start when it answers again
        return out

    def _crash_loops(self, state, now: float) -> list[Finding]:
        out = []
        for e in state.engines:
            name, st = e.name, e.stats.state
            before = self._last_state.get(name)
            self._last_state[name] = st
            downs = self._downs.setdefault(name, deque())
            if before == UP and st == DOWN:
                downs.append(now)
            while downs and now - downs[0] > self.crash_window_s:
                downs.popleft()
            if len(downs) >= self.crash_loop_downs:
                minutes = self.crash_window_s / 60
                out.append(Finding(
                    "crash-loop", name, CRITICAL,
                    f"{name} is crash-looping: down {len(downs)} times in {minutes:.0f} min"
                    + (f", now {st}" if st != UP else ", up again for now") + ".",
                    (Evidence("up → down", str(len(downs)), f"< {self.crash_loop_downs}", f"last {minutes:.0f} min"),),
                    (Remedy("read the engine's log (detail) or the previous container's (Cluster pane)", "enter", name),
                     Remedy("lower gpu_memory_utilization or max_num_seqs if it ran out of memory"))))
        return out
