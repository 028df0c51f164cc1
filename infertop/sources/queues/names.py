"""Queue metric names and their extraction from one parsed exposition.

Two kinds of source speak these names:

* the infertop gateway (``infertop_gateway_*``, see the gateway contract):
  queues per named class, weights, dispatches per class and engine,
  in-flight / cap / drain state per engine;
* a Gateway API Inference Extension / llm-d endpoint picker's flow control,
  in either generation of names (``llm_d_epp_flow_control_*`` and the older
  ``inference_extension_flow_control_*``): queues per priority band (summed
  over fairness ids), the queue-time histogram, pool saturation, and the
  pool's per-pod queue gauge.

What comes out is raw: gauges per class and engine, and the cumulative
counters (dispatches, promotions, histogram buckets) flattened into string
keys for a :class:`~infertop.domain.window.CounterWindow`. Numbers are not
judged here; :mod:`.queues` cleans them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..sanitize import non_negative, plain_text

GATEWAY, EPP = "gateway", "epp"
MAX_CLASSES = 64  # classes / bands per source; more is a broken or hostile exporter
MAX_ENGINES = 256
MAX_COUNTED_CLASSES = 1_000_000  # classes counted beyond the cap (an 8 MiB document holds fewer series)
SEP = "\x1f"  # joins the parts of a counter key (never in a cleaned label)

GW = "infertop_gateway_"
GW_CLASS_GAUGES = {
    "depth": GW + "queue_size",
    "oldest_wait_s": GW + "queue_oldest_wait_seconds",
    "weight": GW + "class_weight",
    "priority": GW + "class_priority",
    "max_wait_s": GW + "class_max_wait_seconds",
}
GW_ENGINE_GAUGES = {
    "in_flight": GW + "engine_in_flight",
    "cap": GW + "engine_cap",
    "draining": GW + "engine_draining",
    "up": GW + "engine_up",
}
GW_WAIT = GW + "queue_wait_seconds"
GW_DISPATCHES = GW + "dispatches_total"
GW_PROMOTIONS = GW + "promotions_total"

# current (llm-d) first, then the older GIE generation
EPP_PREFIXES = ("llm_d_epp_flow_control_", "inference_extension_flow_control_")
EPP_GENERATIONS = {EPP_PREFIXES[0]: "llm-d", EPP_PREFIXES[1]: "gie"}
EPP_QUEUE_SIZE = "queue_size"
EPP_QUEUE_BYTES = "queue_bytes"
EPP_WAIT = "request_queue_duration_seconds"
EPP_SATURATION = "pool_saturation"
EPP_PER_POD_QUEUE = ("inference_pool_per_pod_queue_size", "llm_d_epp_pool_per_pod_queue_size")
EPP_KV = ("inference_pool_average_kv_cache_utilization", "llm_d_epp_pool_average_kv_cache_utilization")

# every name a source of each kind may export (what a Prometheus query selects)
GATEWAY_NAMES = (tuple(GW_CLASS_GAUGES.values()) + tuple(GW_ENGINE_GAUGES.values())
                 + (GW_WAIT + "_bucket", GW_WAIT + "_count", GW_DISPATCHES, GW_PROMOTIONS))
EPP_NAMES = tuple(p + n for p in EPP_PREFIXES for n in (EPP_QUEUE_SIZE, EPP_QUEUE_BYTES, EPP_WAIT + "_bucket",
                                                      EPP_WAIT + "_count", EPP_SATURATION)) + EPP_PER_POD_QUEUE + EPP_KV


def counter_key(*parts: str) -> str:
    return SEP.join(parts)


@dataclass(slots=True)
class QueueSample:
    """Raw values of one scrape of one queue source."""

    kind: str
    generation: str = ""  # "infertop", "llm-d", "gie"
    classes: dict[str, dict[str, float]] = field(default_factory=dict)  # class → gauge → value
    engines: dict[str, dict[str, float]] = field(default_factory=dict)  # engine → gauge → value
    counters: dict[str, float] = field(default_factory=dict)  # "d␟class", "p␟class", "h␟class␟le", "n␟class"
    pool: dict[str, float] = field(default_factory=dict)  # saturation, kv_cache_pct
    dropped: int = 0  # label sets left out (over the caps)
    # classes beyond MAX_CLASSES: not kept, but counted, their depths summed and oldest wait taken,
    # so the source's totals are over all its classes (20 000 classes are not "queued 1830")
    beyond: set[str] = field(default_factory=set)
    depth_beyond: float = 0.0
    oldest_beyond_s: float | None = None

    def empty(self) -> bool:
        return not (self.classes or self.engines or self.pool or self.counters)


class _Acc:
    """Sums into per-class / per-engine maps, with caps on how many distinct names are kept."""

    def __init__(self, sample: QueueSample) -> None:
        self.s = sample

    def _slot(self, table: dict[str, dict[str, float]], name: str, cap: int) -> dict[str, float] | None:
        slot = table.get(name)
        if slot is None:
            if len(table) >= cap:
                self.s.dropped += 1
                return None
            slot = table[name] = {}
        return slot

    def class_slot(self, name: str) -> dict[str, float] | None:
        """The class's slot; None (the class counted in ``beyond``) past MAX_CLASSES."""
        slot = self._slot(self.s.classes, name, MAX_CLASSES)
        if slot is None and len(self.s.beyond) < MAX_COUNTED_CLASSES:
            self.s.beyond.add(name)
        return slot

    def cls(self, name: str, gauge: str, v: float, *, last: bool = False) -> None:
        slot = self.class_slot(name)
        if slot is not None:
            slot[gauge] = v if last or gauge not in slot else slot[gauge] + v
        elif (n := non_negative(v)) is None:
            return  # a broken value of a class not shown: it must not spoil the totals
        elif gauge == "depth":
            self.s.depth_beyond += n
        elif gauge == "oldest_wait_s":
            s = self.s
            s.oldest_beyond_s = n if s.oldest_beyond_s is None else max(s.oldest_beyond_s, n)

    def engine(self, name: str, gauge: str, v: float) -> None:
        slot = self._slot(self.s.engines, name, MAX_ENGINES)
        if slot is not None:
            slot[gauge] = slot.get(gauge, 0.0) + v

    def counter(self, key: str, v: float) -> None:
        c = self.s.counters
        c[key] = c.get(key, 0.0) + v


def _label(labels: dict[str, str], name: str) -> str:
    return plain_text(labels.get(name, ""), 80)


# Gauges that describe a class rather than add up over its series (one value per class).
_LAST = {"weight", "priority", "max_wait_s", "oldest_wait_s"}


def extract(series: "SeriesSource", kind: str) -> QueueSample:
    """The raw queue values in one document (or one Prometheus answer)."""
    return extract_gateway(series) if kind == GATEWAY else extract_epp(series)


class SeriesSource(Protocol):
    """Anything with ``series(name) -> [(labels, value)]`` (an :class:`~.expfmt.Exposition`)."""

    def series(self, name: str) -> list[tuple[dict[str, str], float]]: ...


def extract_gateway(exp: SeriesSource) -> QueueSample:
    s = QueueSample(GATEWAY, "infertop")
    acc = _Acc(s)
    for gauge, name in GW_CLASS_GAUGES.items():
        for labels, v in exp.series(name):
            cls = _label(labels, "class")
            if not cls:
                continue
            if gauge == "oldest_wait_s":  # the oldest over the class's fairness ids
                prev = s.classes.get(cls, {}).get(gauge)
                v = v if prev is None else max(prev, v)
            acc.cls(cls, gauge, v, last=gauge in _LAST)
            if gauge == "depth":
                _band_priority(acc, cls, labels)  # class_priority, read later, overrides it
    for gauge, name in GW_ENGINE_GAUGES.items():
        for labels, v in exp.series(name):
            eng = _label(labels, "engine")
            if eng:
                acc.engine(eng, gauge, v)
    for labels, v in exp.series(GW_DISPATCHES):
        cls = _label(labels, "class")
        if cls and (cls in s.classes or acc.class_slot(cls) is not None):
            acc.counter(counter_key("d", cls), v)
    for labels, v in exp.series(GW_PROMOTIONS):
        cls = _label(labels, "class")
        if cls in s.classes:
            acc.counter(counter_key("p", cls), v)
    _histogram(acc, exp, GW_WAIT, lambda labels: _label(labels, "class"))
    return s


def _band(labels: dict[str, str]) -> str:
    p = _label(labels, "priority")
    return f"priority {p}" if p else "default"


def extract_epp(exp: SeriesSource) -> QueueSample:
    s = QueueSample(EPP)
    acc = _Acc(s)
    for prefix in EPP_PREFIXES:
        size = exp.series(prefix + EPP_QUEUE_SIZE)
        wait = exp.series(prefix + EPP_WAIT + "_count")
        sat = exp.series(prefix + EPP_SATURATION)
        if not (size or wait or sat):
            continue
        s.generation = EPP_GENERATIONS[prefix]
        for labels, v in size:
            band = _band(labels)
            acc.cls(band, "depth", v)
            _band_priority(acc, band, labels)
        for labels, v in exp.series(prefix + EPP_QUEUE_BYTES):
            acc.cls(_band(labels), "bytes", v)
        for labels, v in wait:
            band = _band(labels)
            _band_priority(acc, band, labels)
            outcome = labels.get("outcome", "").lower()
            if not outcome or outcome.startswith("dispatch"):
                acc.counter(counter_key("d", band), v)
        _histogram(acc, exp, prefix + EPP_WAIT, _band)
        if sat:
            s.pool["saturation"] = max(v for _, v in sat)
        break  # one generation per document: the newer wins when both are there
    for name in EPP_PER_POD_QUEUE:
        for labels, v in exp.series(name):
            pod = _label(labels, "model_server_pod") or _label(labels, "pod")
            if pod:
                acc.engine(pod, "waiting", v)
    for name in EPP_KV:
        got = exp.series(name)
        if got:
            s.pool["kv_cache_pct"] = 100.0 * max(v for _, v in got)
            break
    return s


def _band_priority(acc: _Acc, band: str, labels: dict[str, str]) -> None:
    slot = acc.s.classes.get(band)
    if slot is None or "priority" in slot:
        return
    try:
        slot["priority"] = float(labels.get("priority", ""))
    except ValueError:
        pass


def _histogram(acc: _Acc, exp: SeriesSource, base: str, key_of) -> None:
    """Cumulative buckets and count of a histogram, summed per class over its other labels."""
    classes = acc.s.classes
    for labels, v in exp.series(base + "_bucket"):
        cls, le = key_of(labels), labels.get("le")
        if not cls or le is None:
            continue
        if cls not in classes and acc.class_slot(cls) is None:
            continue
        try:
            bound = float(le)
        except ValueError:
            continue
        acc.counter(counter_key("h", cls, repr(bound)), v)
    for labels, v in exp.series(base + "_count"):
        cls = key_of(labels)
        if cls in classes:
            acc.counter(counter_key("n", cls), v)
