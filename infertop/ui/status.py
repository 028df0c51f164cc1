"""Text of the status bar and of the Log pane's alert lines, from the fleet state."""

from __future__ import annotations

import time
from collections import Counter

from rich.text import Text

from ..analysis.alerts import alert_kind
from ..analysis.triage import Debouncer
from ..domain.engine import DEGRADED, DOWN
from ..format import age_human
from ..sources.prometheus.fleet import ENGINES_SUFFIX
from ..state.fleet_types import FleetState
from ..text import plain

MAX_NAMED = 2  # failing sources named one by one; the rest are counted


def _clock(ts: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts else "?"


def _word(state: FleetState, source) -> str:
    """The failing engine source's state as the tables show it: "degraded" where each of its engines is
    degraded (it answers, with something unusable), else "down"."""
    states = {e.stats.state for e in state.engines
              if e.stats.name == source.name or e.stats.name.startswith(source.name + "/")}
    return DEGRADED if states == {DEGRADED} else DOWN


def status_line(state: FleetState, gpu_parts: list[str] | None = None) -> Text:
    """One line: ✓ when every engine answers, else ✗ with the failures, compactly
    (``✗ 6/6 engines down: timeout, since 10:42:07``); then the GPU sources
    (``gpu_parts``, markup from the GPUs pane), the cluster and stale sources."""
    out = Text()

    def sep() -> None:
        if out:
            out.append("  ")

    feeds = [s for s in state.sources if s.kind == "prometheus" and not s.ok and not s.absent
             and s.name.endswith(ENGINES_SUFFIX) and s.error != "no data yet"]  # the engines' Prometheus fails
    stale = {e.name for e in state.engines if not e.fresh and e.freshness.source in {f.name for f in feeds}}
    for f in feeds[:MAX_NAMED]:  # one source failing, not N engines down
        sep()
        out.append("✗ metrics stale", style="bold yellow")
        out.append(f": Prometheus unreachable since {_clock(f.since)} ({plain(f.error or 'no data', 60)})")
    engines = [s for s in state.sources if s.kind == "vllm" and s.name not in stale]
    connecting = [s for s in engines if not s.ok and s.connecting]  # start-up: no answer yet, not an outage
    down = [s for s in engines if not s.ok and not s.connecting]
    if connecting:
        out.append(f"… {len(connecting)}/{len(engines)} engines connecting", style="yellow")
    if not engines and feeds:
        pass  # the line above says it
    elif not engines:
        out.append("no engines configured", style="yellow")
        out.append(" — add one with --engine URL or in the config file")
    elif not down and len(connecting) == len(engines):
        pass  # all connecting: the line above says it
    elif not down:
        sep()
        out.append("✓", style="green")
        out.append(f" {len(engines) - len(connecting)}/{len(engines)} engines ok")
    elif len(down) > MAX_NAMED or len(down) == len(engines):
        reasons = Counter(plain(s.error or "no data", 60) for s in down)
        reason = reasons.most_common(1)[0][0] if len(reasons) == 1 else f"{len(reasons)} kinds of failure"
        words = {_word(state, s) for s in down}
        sep()
        out.append("✗", style="bold red")
        out.append(f" {len(down)}/{len(engines)} engines {words.pop() if len(words) == 1 else 'failing'}: {reason}",
                   style="red")
        since = min((s.since for s in down if s.since), default=None)
        out.append(f", since {_clock(since)}")
    else:
        for s in down:
            sep()
            out.append(f"✗ {plain(s.name, 30)}", style="bold red")
            out.append(f" {_word(state, s)}: {plain(s.error or 'no data', 60)}, since {_clock(s.since)}")
    for part in gpu_parts or ():
        sep()
        out.append(Text.from_markup(part))
    c = state.cluster
    if c is not None and c.freshness.status != "fresh":
        sep()
        kube = c.freshness
        out.append(f"✗ kube {plain(kube.source, 30)}", style="bold red" if kube.status == "missing" else "yellow")
        out.append(f": {plain(kube.reason or 'unavailable', 60)}")
        if kube.since:
            out.append(f", since {_clock(kube.since)}")
    for s in [s for s in state.sources if s.kind in ("gateway", "epp") and not s.ok][:MAX_NAMED]:
        sep()
        out.append(f"✗ {s.kind} {plain(s.name, 30)}", style="bold red")
        out.append(f": {plain(s.error or 'no data', 60)}, since {_clock(s.since)}")
    for s in [s for s in state.sources if s.ok and s.stale][:MAX_NAMED]:
        sep()
        out.append(f"{plain(s.name, 30)} stale", style="yellow")
        out.append(f" {age_human(s.age_s)}")
    return out


# The console's alert list is already held (analysis.alerts.AlertHold: 5 s before shown, 10 s after):
# the Log follows it as it is.
ALERT_LOG_FOR_S = 0.0
ALERT_LOG_CLEAR_S = 0.0


def _alert_kinds(st: FleetState) -> dict[tuple[str, str], str]:
    # engine down/degraded is logged as a state change; here the SLO and pressure alerts
    return {(a.target, alert_kind(a)): a.text for a in st.alerts if a.severity != "critical"}


class AlertLog:
    """Log lines for SLO and pressure alerts (by engine and kind) as the held alert list raises and
    clears them (tick by tick, an ITL at 41 ms against 40 ms filled the Log with alert/cleared
    pairs: 160 of 212 lines in 12 minutes of the demo)."""

    def __init__(self) -> None:
        self._debounce: Debouncer[tuple[str, str]] = Debouncer(ALERT_LOG_FOR_S, ALERT_LOG_CLEAR_S)
        self._text: dict[tuple[str, str], str] = {}

    def changes(self, state: FleetState) -> list[Text]:
        now = _alert_kinds(state)
        self._text.update(now)
        raised, cleared = self._debounce.update(now, state.taken_at)
        lines: list[Text] = []
        for key in sorted(raised):
            line = Text("alert ", style="bold yellow")
            line.append(f"{plain(key[0])}: {plain(self._text[key])}")
            lines.append(line)
        for key in sorted(cleared):
            line = Text("cleared ", style="green")
            line.append(f"{plain(key[0])}: {plain(key[1])} (was {plain(self._text.pop(key, key[1]))})")
            lines.append(line)
        for key in [k for k in self._text if k not in now and not self._debounce.is_active(k)]:
            self._text.pop(key, None)  # gone before it was logged
        return lines
