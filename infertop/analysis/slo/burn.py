"""Error budget and multi-window burn rates (the SRE practice: page at 14.4× over 1 h and 5 min).

A request is bad when its objective stage (E2E, TTFT or queue) is over the class's target, counted from
cumulative histogram buckets (:func:`.budget.count_within`). Counts go into time slots (10 s for the last
6 h, 5 min for a week), cumulatively, so a window's sum is two bisections. The burn rate over a window is
(bad ÷ requests) ÷ (1 − objective): 1× spends the budget exactly over the objective's period.

Windows are scaled to the history there is: with 20 min of history the fast pair is 20 min and 100 s
(long ÷ 12, as 1 h ÷ 5 min), and each result names the window actually used.

Where the engines come from Prometheus, each window of each pair is also read from it (the practice's
windows, unscaled: :class:`WindowCount`); :func:`with_prometheus` takes a window from Prometheus where it
holds all of it, and keeps the local one otherwise, each window naming its source.

A week's budget used is bad ÷ ((1 − objective) × the week's requests), the week's requests projected
from the rate over the history there is (up to a week): 14.4× for one hour spends 8.6 % of a week.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .targets import WEEK_S

# (name, long window s, short window s, burn rate that fires): Google SRE workbook, multiwindow alerts
PAIRS = (("fast", 3600.0, 300.0), ("slow", 6 * 3600.0, 1800.0))
SLOW_BURN = 6.0
MIN_LONG_REQUESTS = 100  # fewer requests in the long window: no burn verdict (1 bad of 10 reads 100×)
MIN_SHORT_REQUESTS = 20


class SlotRing:
    """Cumulative (requests, bad) at the end of each ``slot_s`` slot, kept ``keep_s``."""

    __slots__ = ("slot_s", "keep_s", "_t", "_tot", "_bad", "_base", "first_t")

    def __init__(self, slot_s: float, keep_s: float) -> None:
        self.slot_s, self.keep_s = slot_s, keep_s
        self._t: list[float] = []  # slot start
        self._tot: list[float] = []  # cumulative requests up to the end of the slot
        self._bad: list[float] = []
        self._base = (0.0, 0.0)  # cumulative (requests, bad) of the slots trimmed away
        self.first_t: float | None = None

    def add(self, now: float, total: float, bad: float) -> None:
        """``total`` requests (``bad`` of them) finished since the last add; the first add starts the history."""
        if self.first_t is None:
            self.first_t = now
        start = now - now % self.slot_s
        tot0 = self._tot[-1] if self._tot else 0.0
        bad0 = self._bad[-1] if self._bad else 0.0
        if self._t and self._t[-1] == start:
            self._tot[-1] += total
            self._bad[-1] += bad
        else:
            self._t.append(start)
            self._tot.append(tot0 + total)
            self._bad.append(bad0 + bad)
        if len(self._t) > 2 * self.keep_s / self.slot_s + 4:  # trim in steps: amortised O(1)
            cut = bisect_left(self._t, now - self.keep_s - self.slot_s)
            if cut:
                self._base = (self._tot[cut - 1], self._bad[cut - 1])
            del self._t[:cut], self._tot[:cut], self._bad[:cut]
            self.first_t = max(self.first_t, self._t[0]) if self._t else now

    def span_s(self, now: float) -> float:
        return 0.0 if self.first_t is None else max(0.0, now - self.first_t)

    def over(self, now: float, window_s: float) -> tuple[float, float]:
        """(requests, bad) over the last ``window_s`` (whole slots: the window's start rounds down)."""
        if not self._t:
            return 0.0, 0.0
        i = bisect_right(self._t, now - window_s - self.slot_s) - 1  # the last slot ending before the window
        if i < 0:
            return self._tot[-1] - self._base[0], self._bad[-1] - self._base[1]
        return self._tot[-1] - self._tot[i], self._bad[-1] - self._bad[i]


@dataclass(frozen=True, slots=True)
class BurnWindow:
    pair: str  # fast, slow
    long_s: float  # the windows actually used (scaled to the history there is)
    short_s: float
    long_burn: float | None
    short_burn: float | None
    threshold: float
    long_requests: float
    short_requests: float
    scaled: bool  # shorter than the practice's windows: less history
    asked_long_s: float = 0.0  # the practice's windows (1 h and 5 min for the fast pair)
    asked_short_s: float = 0.0
    history_s: float = 0.0  # the local history held
    long_source: str = "local"  # local, Prometheus
    short_source: str = "local"
    prometheus: str | None = None  # None: not asked; "": used; else why a window of it was not used

    @property
    def firing(self) -> bool:
        return (self.long_burn is not None and self.short_burn is not None
                and self.long_burn >= self.threshold and self.short_burn >= self.threshold
                and self.long_requests >= MIN_LONG_REQUESTS and self.short_requests >= MIN_SHORT_REQUESTS)


class BurnTracker:
    """One error budget (a class, or an engine): feed it counts per tick; ask for burn windows."""

    def __init__(self, allowed_bad: float, *, fine_s: float = 10.0, fine_keep_s: float = 6 * 3600.0,
                 coarse_s: float = 300.0, coarse_keep_s: float = WEEK_S) -> None:
        self.allowed_bad = allowed_bad
        self.fine = SlotRing(fine_s, fine_keep_s)
        self.coarse = SlotRing(coarse_s, coarse_keep_s) if coarse_keep_s > fine_keep_s else None

    def add(self, now: float, total: float, bad: float) -> None:
        self.fine.add(now, total, bad)
        if self.coarse is not None:
            self.coarse.add(now, total, bad)

    def history_s(self, now: float) -> float:
        ring = self.coarse if self.coarse is not None else self.fine
        return ring.span_s(now)

    def over(self, now: float, window_s: float) -> tuple[float, float]:
        ring = self.fine if window_s <= self.fine.keep_s or self.coarse is None else self.coarse
        return ring.over(now, window_s)

    def burn(self, now: float, window_s: float) -> tuple[float | None, float]:
        """(burn rate over the window, requests in it); None without requests."""
        total, bad = self.over(now, window_s)
        if total <= 0 or self.allowed_bad <= 0:
            return None, total
        return (bad / total) / self.allowed_bad, total

    def windows(self, now: float, fast_burn: float = 14.4, *, pairs=PAIRS) -> tuple[BurnWindow, ...]:
        history = self.history_s(now)
        out = []
        for name, long_s, short_s in pairs:
            scaled = history < long_s
            lw = min(long_s, history)
            sw = min(short_s, lw * short_s / long_s) if scaled else short_s
            if lw <= 0:
                out.append(BurnWindow(name, 0.0, 0.0, None, None, fast_burn if name == "fast" else SLOW_BURN,
                                      0.0, 0.0, True, long_s, short_s, history))
                continue
            lb, ln = self.burn(now, lw)
            sb, sn = self.burn(now, max(sw, self.fine.slot_s))
            out.append(BurnWindow(name, lw, max(sw, self.fine.slot_s), lb, sb,
                                  fast_burn if name == "fast" else SLOW_BURN, ln, sn, scaled, long_s, short_s,
                                  history))
        return tuple(out)

    def week_budget_used_pct(self, now: float) -> tuple[float | None, float]:
        """(% of a week's error budget spent over the history there is, up to a week; that span)."""
        span = min(self.history_s(now), WEEK_S)
        if span <= 0:
            return None, 0.0
        total, bad = self.over(now, span)
        if total <= 0 or self.allowed_bad <= 0:
            return None, span
        week_requests = total / span * WEEK_S
        return 100.0 * bad / (self.allowed_bad * week_requests), span


@dataclass(frozen=True, slots=True)
class WindowCount:
    """Requests and over-target requests of one class over one window, read from Prometheus."""

    window_s: float  # asked
    requests: float
    bad: float
    held_s: float  # of the window, what Prometheus holds
    step_s: float = 0.0  # of its range query: the first point is on the window's start when it holds it all
    error: str | None = None  # the read failed (or is too old): not used

    @property
    def usable(self) -> bool:
        """Read, all of the window held, and requests of the class in it (none: the engines may not have
        joined the class — the local count says as much for an idle class)."""
        return (self.error is None and self.held_s >= self.window_s - max(0.5 * self.step_s, 1e-6)
                and self.requests > 0)

    def why_not(self) -> str:
        if self.error:
            return self.error
        if self.held_s < self.window_s - max(0.5 * self.step_s, 1e-6):
            return f"it holds {window_text(self.held_s)} of {window_text(self.window_s)}"
        return f"no request of this class over {window_text(self.window_s)}"


def window_text(s: float) -> str:
    """A window in its own unit: 1 h, 5 min, 20 s."""
    if s >= 3600:
        return f"{s / 3600:.1f}".removesuffix(".0") + " h"
    if s >= 60:
        return f"{s / 60:.0f} min"
    return f"{s:.0f} s"


def with_prometheus(w: BurnWindow, counts: Mapping[float, WindowCount] | None, allowed_bad: float) -> BurnWindow:
    """``w`` (the local pair) with each of its windows taken from Prometheus' count of the practice's window
    where Prometheus holds all of it; a window it does not hold (or a failed read) stays local, and says
    why. ``counts``: window (s) → its count; None or empty: Prometheus not read yet."""
    counts = counts or {}
    got, why = {}, []
    for side, asked in (("long", w.asked_long_s), ("short", w.asked_short_s)):
        c = counts.get(asked)
        if c is None:
            why.append(f"{window_text(asked)} not read yet")
        elif not c.usable:
            why.append(c.why_not())
        else:
            burn = (c.bad / c.requests) / allowed_bad if c.requests > 0 and allowed_bad > 0 else None
            got[side] = (asked, burn, c.requests)
    out = replace(w, prometheus="; ".join(dict.fromkeys(why)))
    if "long" in got:
        s, b, n = got["long"]
        out = replace(out, long_s=s, long_burn=b, long_requests=n, long_source="Prometheus")
    if "short" in got:
        s, b, n = got["short"]
        out = replace(out, short_s=s, short_burn=b, short_requests=n, short_source="Prometheus")
    return replace(out, scaled=out.long_s < w.asked_long_s or out.short_s < w.asked_short_s)
