"""The gateway's ``/metrics``: Prometheus text written directly (counters kept in plain dicts).

Written by hand rather than through prometheus_client: an observation is a dict
update and a bisect, and rendering walks a few dozen series (see
benchmarks/bench_gateway.md for the measured cost of both).
"""

from __future__ import annotations

from bisect import bisect_left

from .policy import Policy

WAIT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                  120.0, 300.0)
FAIRNESS_SERIES_MAX = 20  # fairness ids come from clients: bound the series
_LE = tuple(repr(b) for b in WAIT_BUCKETS_S) + ("+Inf",)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class WaitHistogram:
    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(WAIT_BUCKETS_S) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(WAIT_BUCKETS_S, v)] += 1
        self.sum += v
        self.count += 1

    def quantile(self, q: float) -> float | None:
        """Upper bound of the bucket holding quantile ``q`` (None when empty)."""
        if not self.count:
            return None
        rank, acc = q * self.count, 0
        for i, n in enumerate(self.counts):
            acc += n
            if acc >= rank:
                return WAIT_BUCKETS_S[i] if i < len(WAIT_BUCKETS_S) else float("inf")
        return float("inf")


class GatewayMetrics:
    """Counters the server updates; gauges are read from the :class:`Policy` when rendered."""

    def __init__(self) -> None:
        self.waits: dict[str, WaitHistogram] = {}
        self.requests: dict[tuple[str, str], int] = {}  # (class, code)
        self.upstream_errors: dict[tuple[str, str], int] = {}  # (engine, code)

    def observe_wait(self, cls: str, wait_s: float) -> None:
        h = self.waits.get(cls)
        if h is None:
            h = self.waits[cls] = WaitHistogram()
        h.observe(wait_s)

    def answered(self, cls: str, code: int | str) -> None:
        key = (cls, str(code))
        self.requests[key] = self.requests.get(key, 0) + 1

    def upstream_error(self, engine: str, code: int | str) -> None:
        key = (engine, str(code))
        self.upstream_errors[key] = self.upstream_errors.get(key, 0) + 1

    def render(self, policy: Policy, now: float) -> str:
        out: list[str] = []
        add = out.append
        classes = policy.by_priority

        def family(name: str, typ: str, help_: str) -> None:
            add(f"# HELP {name} {help_}\n# TYPE {name} {typ}\n")

        family("infertop_gateway_queue_size", "gauge", "Requests waiting in the gateway")
        for c in classes:
            add(f'infertop_gateway_queue_size{{class="{_esc(c.name)}",priority="{c.priority}"}} {c.queued}\n')
        family("infertop_gateway_fairness_queue_size", "gauge",
               f"Requests waiting per fairness id (the {FAIRNESS_SERIES_MAX} longest queues of each class)")
        for c in classes:
            flows = sorted(((len(q), fid) for fid, q in c.flows.items() if fid), reverse=True)
            for n, fid in flows[:FAIRNESS_SERIES_MAX]:
                add(f'infertop_gateway_fairness_queue_size{{class="{_esc(c.name)}",fairness_id="{_esc(fid)}"}} {n}\n')
        family("infertop_gateway_queue_oldest_wait_seconds", "gauge", "Wait of the oldest queued request (0 when empty)")
        for c in classes:
            add(f'infertop_gateway_queue_oldest_wait_seconds{{class="{_esc(c.name)}"}} {c.oldest_wait_s(now):.6f}\n')
        family("infertop_gateway_queue_wait_seconds", "histogram", "Time from arrival to dispatch, by arrival class")
        for c in classes:
            h = self.waits.get(c.name) or WaitHistogram()
            lab = _esc(c.name)
            acc = 0
            for le, n in zip(_LE, h.counts):
                acc += n
                add(f'infertop_gateway_queue_wait_seconds_bucket{{class="{lab}",le="{le}"}} {acc}\n')
            add(f'infertop_gateway_queue_wait_seconds_sum{{class="{lab}"}} {h.sum!r}\n')
            add(f'infertop_gateway_queue_wait_seconds_count{{class="{lab}"}} {h.count}\n')
        family("infertop_gateway_dispatches_total", "counter", "Requests sent to an engine, by the class they left")
        for (cls, eng), n in sorted(policy.dispatch_counts.items()):
            add(f'infertop_gateway_dispatches_total{{class="{_esc(cls)}",engine="{_esc(eng)}"}} {n}\n')
        family("infertop_gateway_promotions_total", "counter", "Requests promoted after their class's max wait")
        for c in classes:
            add(f'infertop_gateway_promotions_total{{class="{_esc(c.name)}"}} {c.promotions}\n')
        for name, attr, help_ in (("class_weight", "weight", "Dispatch weight"),
                                  ("class_priority", "priority", "Priority (higher = more urgent)"),
                                  ("class_max_wait_seconds", "max_wait_s", "Wait before promotion")):
            family(f"infertop_gateway_{name}", "gauge", help_)
            for c in classes:
                add(f'infertop_gateway_{name}{{class="{_esc(c.name)}"}} {getattr(c, attr)!r}\n')
        engines = list(policy.engines.values())
        for name, help_, get in (("engine_in_flight", "Requests in flight", lambda e: e.in_flight),
                                 ("engine_cap", "Concurrency cap", lambda e: e.cap),
                                 ("engine_draining", "1 while draining", lambda e: int(e.draining)),
                                 ("engine_up", "1 while the engine answers", lambda e: int(e.up))):
            family(f"infertop_gateway_{name}", "gauge", help_)
            for e in engines:
                add(f'infertop_gateway_{name}{{engine="{_esc(e.name)}"}} {get(e)}\n')
        family("infertop_gateway_upstream_errors_total", "counter", "Failed upstream requests by HTTP status or kind")
        for (eng, code), n in sorted(self.upstream_errors.items()):
            add(f'infertop_gateway_upstream_errors_total{{engine="{_esc(eng)}",code="{_esc(code)}"}} {n}\n')
        family("infertop_gateway_requests_total", "counter", "Answers to clients, by arrival class and status")
        for (cls, code), n in sorted(self.requests.items()):
            add(f'infertop_gateway_requests_total{{class="{_esc(cls)}",code="{_esc(code)}"}} {n}\n')
        return "".join(out)
