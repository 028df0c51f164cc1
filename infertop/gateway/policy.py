"""The gateway's scheduling policy — pure: no I/O, no clock of its own (every call takes ``now``).

* A queue per class; inside a class, one FIFO per fairness id, served round-robin.
* Among backlogged classes, **stride scheduling**: each class has a pass value, the
  class with the lowest pass goes next and its pass grows by ``1 / weight`` — so while
  several classes are backlogged each gets ``weight / Σ weights`` of the dispatches.
  A class that was idle rejoins at the current virtual time (no saved-up credit).
  With ``strict_top`` the top class (highest priority) goes first whenever it can.
* **Promotion**: a request that has waited ``max_wait_s`` in its class moves to the
  tail of the next higher class (counted per class it left); the top class has none.
* **Reserved slots**: ``reserved_slots`` of the engines' free slots are held for a class
  (less what it already has in flight); other classes cannot take them.
* **Batching wait** (``batch_wait_s``): a class's next request is held until it has
  waited this long since arrival; then everything the class holds may leave together
  (one batch for the engines' continuous batching). 0, the default, dispatches as soon
  as a slot is free. Adaptive rule: while the top class has more than ``top_backlog``
  requests queued, its batching wait is halved.
* **Engine choice**: among engines up, not draining, under their cap, whose KV cache is
  below ``kv_cache_max_pct`` and whose own (vLLM) waiting queue is at most
  ``vllm_waiting_max`` — those two only count while the gateway has a request in flight
  there, since the engine's metrics lag — the one with the fewest requests in flight.
* vLLM's ``priority`` field is "lower value = served first": a class of priority P
  sends ``-P`` (:func:`vllm_priority`), so higher class priority = more urgent in vLLM too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable


def vllm_priority(class_priority: int) -> int:
    """vLLM's request ``priority`` for a class (vLLM serves LOWER values first)."""
    return -int(class_priority)


@dataclass(eq=False, slots=True)
class Pending:
    """One request while the gateway holds it. ``token`` is the server's handle (opaque here)."""

    origin: str  # the class it arrived in
    fairness_id: str
    arrived_at: float
    token: Any = None
    cls: str = ""  # its class now (differs from origin once promoted)
    entered_at: float = 0.0  # when it entered its current class
    excluded: set[str] = field(default_factory=set)  # engines that failed it before it started
    resets: set[str] = field(default_factory=set)  # engines whose connection dropped it once (retried there)
    attempts: int = 0  # failed tries before it started
    cancelled: bool = False
    queued: bool = False
    dispatched_cls: str | None = None  # the class it was dispatched from (for reserved-slot accounting)


@dataclass(eq=False)
class ClassState:
    name: str
    priority: int
    weight: float
    max_wait_s: float
    reserved_slots: int = 0
    batch_wait_s: float = 0.0
    flows: dict[str, deque[Pending]] = field(default_factory=dict)
    queued: int = 0
    in_flight: int = 0
    pass_: float = 0.0
    promotions: int = 0
    dispatches: int = 0

    def as_dict(self, now: float) -> dict:
        return {"name": self.name, "priority": self.priority, "weight": self.weight, "max_wait_s": self.max_wait_s,
                "reserved_slots": self.reserved_slots, "queued": self.queued,
                "oldest_wait_s": round(self.oldest_wait_s(now), 6)}

    def oldest_wait_s(self, now: float) -> float:
        """Longest time a queued request of this class has been in the gateway (0 when none)."""
        oldest = min((p.arrived_at for q in self.flows.values() for p in q if not p.cancelled), default=None)
        return 0.0 if oldest is None else max(0.0, now - oldest)

    def head(self) -> Pending | None:
        """The next request of the round-robin (cancelled ones are dropped on the way)."""
        flows = self.flows
        while flows:
            fid = next(iter(flows))
            q = flows[fid]
            while q and q[0].cancelled:
                q.popleft()
            if q:
                return q[0]
            del flows[fid]
        return None

    def pop(self) -> Pending:
        """Take the head returned by :meth:`head` and move its flow to the back of the round."""
        fid = next(iter(self.flows))
        q = self.flows.pop(fid)
        p = q.popleft()
        if q:
            self.flows[fid] = q
        self.queued -= 1
        p.queued = False
        return p


@dataclass(eq=False)
class EngineState:
    name: str
    url: str
    cap: int
    in_flight: int = 0
    draining: bool = False
    up: bool = True
    kv_cache_pct: float | None = None
    vllm_waiting: float | None = None
    priority_scheduling: bool | None = None
    dispatches: int = 0
    answered_at: float = float("-inf")  # when it last answered a proxied request (headers, status < 500)

    def as_dict(self) -> dict:
        return {"name": self.name, "url": self.url, "cap": self.cap, "in_flight": self.in_flight,
                "draining": self.draining, "up": self.up}

    @property
    def routable(self) -> bool:
        """Could take requests at all (is up and not draining)."""
        return self.up and not self.draining

    @property
    def awaited(self) -> bool:
        """Routable, or draining: a drained engine comes back with its undrain (an engine action drains it
        while it restarts), so requests wait in the queue for it instead of getting 502."""
        return self.routable or self.draining


class PolicyError(ValueError):
    """A bad value for a class or engine setting (the admin API answers 400 with it)."""


class Policy:
    def __init__(self, classes: Iterable[ClassState], engines: Iterable[EngineState], *, default_class: str,
                 strict_top: bool = False, top_backlog: int = 10, kv_cache_max_pct: float = 95.0,
                 vllm_waiting_max: float = 4, max_queue: int = 10_000) -> None:
        self.classes: dict[str, ClassState] = {c.name: c for c in classes}
        self.engines: dict[str, EngineState] = {e.name: e for e in engines}
        if default_class not in self.classes:
            raise PolicyError(f"default class {default_class!r} is not a class")
        self.default_class = default_class
        self.strict_top = strict_top
        self.top_backlog = top_backlog
        self.kv_cache_max_pct = kv_cache_max_pct
        self.vllm_waiting_max = vllm_waiting_max
        self.max_queue = max_queue
        self.queued = 0
        self._vtime = 0.0
        self.dispatch_counts: dict[tuple[str, str], int] = {}  # (class dispatched from, engine) -> n
        self._order()

    def _order(self) -> None:
        self.by_priority = sorted(self.classes.values(), key=lambda c: -c.priority)
        self.top = self.by_priority[0]
        self._higher = {lo.name: hi for hi, lo in zip(self.by_priority, self.by_priority[1:])}

    # -- requests ---------------------------------------------------------------------------------

    def class_of(self, name: str | None) -> str:
        """A class name as given by a client, or the default class when absent or unknown."""
        return name if name in self.classes else self.default_class

    def enqueue(self, p: Pending, now: float) -> bool:
        """Queue ``p`` in its class (``p.origin``, already resolved); False when the gateway is full."""
        if self.queued >= self.max_queue:
            return False
        p.cls = p.cls or p.origin
        p.entered_at = now
        self._append(self.classes[p.cls], p)
        return True

    def _append(self, c: ClassState, p: Pending) -> None:
        if c.queued == 0:
            c.pass_ = max(c.pass_, self._vtime)  # an idle class rejoins without saved-up credit
        c.flows.setdefault(p.fairness_id, deque()).append(p)
        c.queued += 1
        self.queued += 1
        p.queued = True

    def cancel(self, p: Pending) -> None:
        """The client went away while ``p`` was queued (dropped lazily from its deque)."""
        if p.queued and not p.cancelled:
            p.cancelled = True
            p.queued = False
            self.classes[p.cls].queued -= 1
            self.queued -= 1

    def requeue(self, p: Pending, failed_engine: str, now: float, *, exclude: bool = True) -> bool:
        """``p`` failed on ``failed_engine`` before anything reached its client (its slot already
        freed with :meth:`finish`): queue it again, for another engine unless ``exclude`` is
        False. False when no engine could ever take it."""
        if exclude:
            p.excluded.add(failed_engine)
        if not self.can_route(p):
            return False
        p.entered_at = now
        self._append(self.classes[p.cls], p)
        return True

    def can_route(self, p: Pending) -> bool:
        return any(e.awaited and e.name not in p.excluded for e in self.engines.values())

    def unroutable(self) -> list[Pending]:
        """Take out of the queues every request no engine could take (all down, or failed it; a
        draining one is awaited); the server answers them 502."""
        out: list[Pending] = []
        if self.queued == 0:
            return out
        routable = {e.name for e in self.engines.values() if e.awaited}
        for c in self.classes.values():
            for fid, q in list(c.flows.items()):
                keep: deque[Pending] = deque()
                for p in q:
                    if p.cancelled:
                        continue
                    if routable - p.excluded:
                        keep.append(p)
                    else:
                        p.queued = False
                        c.queued -= 1
                        self.queued -= 1
                        out.append(p)
                if keep:
                    c.flows[fid] = keep
                else:
                    del c.flows[fid]
        return out

    def finish(self, p: Pending, engine: str) -> None:
        """``p`` is done with ``engine`` (answered, failed or cancelled): free its slot."""
        e = self.engines.get(engine)
        if e is not None:
            e.in_flight -= 1
        c = self.classes.get(p.dispatched_cls or "")
        if c is not None:
            c.in_flight -= 1
        p.dispatched_cls = None

    # -- promotion and timers ---------------------------------------------------------------------

    def promote_due(self, now: float) -> list[tuple[Pending, str, str]]:
        """Move every request past its class's max wait to the next higher class:
        [(request, from class, to class)]. Lower classes first, so a request moves one step."""
        moved: list[tuple[Pending, str, str]] = []
        for c in reversed(self.by_priority[1:]):
            if not c.queued:
                continue
            hi = self._higher[c.name]
            limit = now - c.max_wait_s
            for fid in list(c.flows):
                q = c.flows[fid]
                while q and (q[0].cancelled or q[0].entered_at <= limit):
                    p = q.popleft()
                    if p.cancelled:
                        continue
                    c.queued -= 1
                    self.queued -= 1
                    c.promotions += 1
                    p.cls = hi.name
                    p.entered_at = now
                    self._append(hi, p)
                    moved.append((p, c.name, hi.name))
                if not q:
                    del c.flows[fid]
        return moved

    def batch_wait_s(self, c: ClassState) -> float:
        """The class's batching wait now (halved for the top class while its backlog is long)."""
        if c is self.top and c.queued > self.top_backlog:
            return c.batch_wait_s / 2
        return c.batch_wait_s

    def next_wakeup(self, now: float) -> float | None:
        """The earliest time a promotion or a batching wait falls due (None: nothing pending)."""
        t: float | None = None
        for c in self.classes.values():
            if not c.queued:
                continue
            bw = self.batch_wait_s(c)
            for q in c.flows.values():
                for p in q:  # the first live request of each flow
                    if p.cancelled:
                        continue
                    if c is not self.top:
                        due = p.entered_at + c.max_wait_s
                        t = due if t is None or due < t else t
                    if bw > 0:
                        due = p.arrived_at + bw
                        if due > now:
                            t = due if t is None or due < t else t
                    break
        return t

    # -- dispatch ---------------------------------------------------------------------------------

    def _open(self, e: EngineState) -> bool:
        if not e.routable or e.in_flight >= e.cap:
            return False
        if e.in_flight > 0:  # an idle engine is tried whatever its lagging metrics say
            if e.kv_cache_pct is not None and e.kv_cache_pct >= self.kv_cache_max_pct:
                return False
            if e.vllm_waiting is not None and e.vllm_waiting > self.vllm_waiting_max:
                return False
        return True

    def _pick_engine(self, engines: list[EngineState], p: Pending) -> EngineState | None:
        best = None
        for e in engines:
            if e.name in p.excluded:
                continue
            if best is None or (e.in_flight, e.dispatches) < (best.in_flight, best.dispatches):
                best = e
        return best

    def dispatch(self, now: float) -> list[tuple[Pending, EngineState]]:
        """Every (request, engine) that can leave now; slots are taken before returning."""
        out: list[tuple[Pending, EngineState]] = []
        if self.queued == 0:
            return out
        # a class whose oldest request's batching wait is over releases all it holds (one batch);
        # the wait is fixed for the whole call, so the backlog shrinking here does not change it
        waits = {c.name: self.batch_wait_s(c) for c in self.classes.values() if c.batch_wait_s > 0}
        released: set[str] = set()
        while self.queued:
            open_engines = [e for e in self.engines.values() if self._open(e)]
            if not open_engines:
                break
            free = sum(e.cap - e.in_flight for e in open_engines)
            unmet = {c.name: max(0, c.reserved_slots - c.in_flight) for c in self.classes.values()
                     if c.reserved_slots}
            unmet_total = sum(unmet.values())
            best: tuple[ClassState, Pending, EngineState] | None = None
            for c in (self.by_priority if self.strict_top else self.classes.values()):
                if not c.queued:
                    continue
                if free <= unmet_total - unmet.get(c.name, 0):
                    continue  # the free slots are held for other classes
                p = c.head()
                if p is None:
                    continue
                if c.name in waits and c.name not in released:
                    if now - p.arrived_at < waits[c.name]:
                        continue
                    released.add(c.name)
                e = self._pick_engine(open_engines, p)
                if e is None:
                    continue
                if self.strict_top and c is self.top:
                    best = (c, p, e)
                    break
                if best is None or (c.pass_, -c.priority) < (best[0].pass_, -best[0].priority):
                    best = (c, p, e)
            if best is None:
                break
            c, p, e = best
            c.pop()
            self.queued -= 1
            self._vtime = c.pass_
            c.pass_ += 1.0 / c.weight
            c.dispatches += 1
            c.in_flight += 1
            e.in_flight += 1
            e.dispatches += 1
            p.dispatched_cls = c.name
            key = (c.name, e.name)
            self.dispatch_counts[key] = self.dispatch_counts.get(key, 0) + 1
            out.append((p, e))
        return out

    # -- live changes -----------------------------------------------------------------------------

    def check_class_change(self, name: str, changes: dict) -> ClassState:
        """Validate a change for class ``name``; returns the class (unchanged). Raises
        KeyError (unknown class) or PolicyError (bad value)."""
        c = self.classes[name]
        _check_keys(changes, {"weight", "max_wait_s", "reserved_slots"})
        for key in ("weight", "max_wait_s"):
            if key in changes and not _positive_number(changes[key]):
                raise PolicyError(f"{key} must be a number > 0, got {changes[key]!r}")
        if "reserved_slots" in changes:
            v = changes["reserved_slots"]
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise PolicyError(f"reserved_slots must be an integer >= 0, got {v!r}")
        return c

    def change_class(self, name: str, changes: dict) -> ClassState:
        c = self.check_class_change(name, changes)
        for key, v in changes.items():
            setattr(c, key, float(v) if key != "reserved_slots" else int(v))
        return c

    def check_engine_change(self, name: str, changes: dict) -> EngineState:
        e = self.engines[name]
        _check_keys(changes, {"draining", "cap"})
        if "draining" in changes and not isinstance(changes["draining"], bool):
            raise PolicyError(f"draining must be true or false, got {changes['draining']!r}")
        if "cap" in changes:
            v = changes["cap"]
            if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1_000_000):
                raise PolicyError(f"cap must be an integer >= 1, got {v!r}")
        return e

    def change_engine(self, name: str, changes: dict) -> EngineState:
        e = self.check_engine_change(name, changes)
        for key, v in changes.items():
            setattr(e, key, v)
        return e

    def state(self, now: float) -> dict:
        """The admin API's ``GET /admin/state`` document."""
        return {"classes": [c.as_dict(now) for c in self.by_priority],
                "engines": [e.as_dict() for e in self.engines.values()],
                "strict_top": self.strict_top, "default_class": self.default_class}


def _check_keys(changes: dict, allowed: set[str]) -> None:
    if not isinstance(changes, dict):
        raise PolicyError("the body must be a JSON object")
    unknown = sorted(set(changes) - allowed)
    if unknown:
        raise PolicyError(f"unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _positive_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and 0 < v < float("inf")
